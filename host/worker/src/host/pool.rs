//! The warm pool: worker processes started ahead of demand (creating a CUDA context takes long
//! beside any op), handed out one per lease, reset and reused when healthy, killed and replaced when not.
//!
//! One long-lived spawner thread starts every worker. That matters: `PR_SET_PDEATHSIG` fires when
//! the *thread* that started a process exits, so starting from whatever thread calls `acquire`
//! would kill workers when that thread ends. Start handshakes (which can take a while on a GPU)
//! run on short-lived threads so several workers start at once. A reaper thread of its own kills
//! the workers given up and reaps each as it ends, so that a spawn held up (a driver that stalls)
//! leaves no zombie behind.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::client::{Starting, Worker, START_TIMEOUT};
use super::error::WorkerError;
use super::process::Proc;
use super::slot::{LeaseToken, SlotOwner};
use crate::contract::{BackendKind, DeviceBinding, ErrorKind, WorkerCommand};

/// How a pool runs its workers.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    pub command: WorkerCommand,
    pub backend: BackendKind,
    /// Workers kept started and idle, ready for the next `acquire`.
    pub warm: usize,
    /// Most workers leased out at once.
    pub max_workers: usize,
    /// Device memory cap per worker (emu: the emulated device's size).
    pub device_memory: u64,
    /// A worker that does not answer a non-launch op within this (plus, on CUDA, the deadlines
    /// of the kernels it must wait for first) is lost.
    pub op_timeout: Duration,
    /// Reuse a worker whose lease ended cleanly (reset: every allocation freed, every module
    /// unloaded). `false` kills every worker at its lease's end: a fresh CUDA context per lease,
    /// so nothing a tenant left in context-wide state (device `malloc` heap, uninitialised local
    /// or shared memory) can be seen by the next, at the cost of a context start per lease.
    pub reuse: bool,
}

/// A pool of worker processes. Share it as `Arc<Pool>`; all methods take `&self`.
pub struct Pool {
    shared: Arc<Shared>,
    spawner: Mutex<Option<JoinHandle<()>>>,
    reaper: Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    cfg: PoolConfig,
    /// The device every worker of the pool serves.
    binding: DeviceBinding,
    /// `cfg.warm` and `cfg.max_workers` as in force now (see [`Pool::set_limits`]).
    warm: AtomicUsize,
    max_workers: AtomicUsize,
    st: Mutex<State>,
    /// Signalled on every state change; the spawner and waiting acquirers both wait on it.
    cv: Condvar,
}

#[derive(Default)]
struct State {
    idle: VecDeque<Worker>,
    busy: usize,
    /// Processes of leased workers, so that shutdown can kill them too.
    busy_procs: Vec<Weak<Proc>>,
    starting: usize,
    /// Acquirers waiting for a worker; each counts toward what the spawner starts.
    waiters: usize,
    /// Dead or surplus workers for the reaper to kill and reap off the callers' path.
    reap: Vec<Worker>,
    /// Of `busy`, the slots of leased workers given up and waiting in `reap`: they come back
    /// soon, so an acquire waits for them rather than failing.
    dying: usize,
    /// The processes the reaper has killed and waits to see end (its own list's pids, for
    /// [`Pool::census`]).
    ending: Vec<u32>,
    /// The processes of the starts counted in `starting` (for [`Pool::census`]).
    starting_pids: Vec<u32>,
    shutdown: bool,
    /// Consecutive failed starts, the last one's message, a counter that waiting acquirers
    /// watch, and when the spawner may try again (exponential backoff).
    failures: u32,
    /// Consecutive starts killed from outside before they were ready (not counted in
    /// `failures` up to [`MAX_KILLED_STARTS`]).
    killed_starts: u32,
    last_error: String,
    error_gen: u64,
    retry_at: Option<Instant>,
}

impl SlotOwner for Shared {
    fn give_back(&self, proc: &Weak<Proc>) {
        let mut g = self.lock();
        g.busy = g.busy.saturating_sub(1);
        g.busy_procs
            .retain(|p| !p.ptr_eq(proc) && p.strong_count() > 0);
        self.cv.notify_all();
    }
}

impl Shared {
    fn warm(&self) -> usize {
        self.warm.load(Ordering::Relaxed)
    }

    fn max_workers(&self) -> usize {
        self.max_workers.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing under this lock can leave the state half-updated, so a panic elsewhere while
        // holding it does not make the state unusable.
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Starts killed from outside in a row (SIGKILL or SIGTERM before the worker was ready) that
/// the pool replaces as if they had not happened: whoever waits for a worker waits for the next
/// start. One more is a failed start like any other, so that something killing every worker
/// (a memory limit's OOM killer) is reported rather than retried forever.
const MAX_KILLED_STARTS: u32 = 4;

fn backoff(failures: u32) -> Duration {
    Duration::from_millis(50u64.saturating_mul(1 << failures.min(16).saturating_sub(1)))
        .min(Duration::from_secs(5))
}

impl Pool {
    /// Starts the pool and, in the background, its `warm` workers, unbound (each serves device 0
    /// of what its environment shows it).
    pub fn start(cfg: PoolConfig) -> Result<Arc<Pool>, WorkerError> {
        Pool::start_bound(cfg, DeviceBinding::default())
    }

    /// [`Pool::start`] with every worker bound to one device: a node runs one pool per device
    /// it lends, so that a worker replaced after a fault starts on the same device as the one it
    /// replaces, and nothing of one device's pool touches another's.
    pub fn start_bound(cfg: PoolConfig, binding: DeviceBinding) -> Result<Arc<Pool>, WorkerError> {
        if cfg.max_workers == 0 {
            return Err(WorkerError::Spawn("max_workers must be at least 1".into()));
        }
        if cfg.op_timeout.is_zero() {
            return Err(WorkerError::Spawn("op_timeout must be above zero".into()));
        }
        let shared = Arc::new(Shared {
            warm: AtomicUsize::new(cfg.warm),
            max_workers: AtomicUsize::new(cfg.max_workers),
            cfg,
            binding,
            st: Mutex::new(State::default()),
            cv: Condvar::new(),
        });
        let s = shared.clone();
        let reaper = thread::Builder::new()
            .name("tasklet-worker-reaper".into())
            .spawn(move || reaper(s))
            .map_err(|e| WorkerError::Spawn(format!("cannot start the reaper thread: {e}")))?;
        let pool = Pool {
            shared: shared.clone(),
            spawner: Mutex::new(None),
            reaper: Mutex::new(Some(reaper)),
        };
        let s = shared;
        // On failure `pool` is dropped, which stops the reaper.
        let handle = thread::Builder::new()
            .name("tasklet-worker-spawner".into())
            .spawn(move || spawner(s))
            .map_err(|e| WorkerError::Spawn(format!("cannot start the spawner thread: {e}")))?;
        *pool.spawner.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
        Ok(Arc::new(pool))
    }

    /// The configuration the pool started with (see [`Pool::limits`] for the sizes in force).
    pub fn config(&self) -> &PoolConfig {
        &self.shared.cfg
    }

    /// The device the pool's workers serve.
    pub fn binding(&self) -> &DeviceBinding {
        &self.shared.binding
    }

    /// (warm, max_workers) in force now.
    pub fn limits(&self) -> (usize, usize) {
        (self.shared.warm(), self.shared.max_workers())
    }

    /// Changes how many workers are kept warm and how many may be leased at once, e.g. once the
    /// device's memory is known (each CUDA context costs device memory). Surplus idle workers are
    /// trimmed in the background; leased ones are not touched (they count against the new
    /// maximum as they are released).
    pub fn set_limits(&self, warm: usize, max_workers: usize) {
        let max_workers = max_workers.max(1);
        self.shared.warm.store(warm, Ordering::Relaxed);
        self.shared
            .max_workers
            .store(max_workers, Ordering::Relaxed);
        let s = &self.shared;
        let mut g = s.lock();
        while g.idle.len() > warm + g.waiters {
            match g.idle.pop_back() {
                Some(extra) => g.reap.push(extra),
                None => break,
            }
        }
        s.cv.notify_all();
    }

    /// Takes a ready worker, waiting for one being started if none is idle. Starts a
    /// replacement in the background so the next acquire does not wait for a process start.
    pub fn acquire(&self) -> Result<Worker, WorkerError> {
        self.acquire_by(None)
    }

    /// [`Pool::acquire`], waiting no later than `limit` (where given) for a worker to start: a
    /// caller that must return by then fails with `DeadlineExceeded` instead. The worker comes
    /// with `limit` as its wait limit ([`Worker::set_wait_limit`]).
    pub fn acquire_by(&self, limit: Option<Instant>) -> Result<Worker, WorkerError> {
        let s = &self.shared;
        let max = s.max_workers();
        let mut g = s.lock();
        let start_gen = g.error_gen;
        let started_by = Instant::now() + START_TIMEOUT + Duration::from_secs(1);
        let deadline = limit.map_or(started_by, |l| l.min(started_by));
        let mut waiting = false;
        let result = loop {
            if g.shutdown {
                break Err(WorkerError::NoCapacity(
                    "the worker pool is shut down".into(),
                ));
            }
            if g.busy < max {
                let mut found = None;
                while let Some(w) = g.idle.pop_front() {
                    // Killed from outside while idle: skip it (the sweep would catch it later).
                    // Its life lock tells at once; its process may take a second or more to end
                    // while the driver tears its device context down.
                    if !w.still_serving() {
                        g.reap.push(w);
                        continue;
                    }
                    found = Some(w);
                    break;
                }
                if let Some(w) = found {
                    break Ok(w);
                }
            } else if g.dying == 0 {
                break Err(WorkerError::NoCapacity(format!(
                    "all {max} workers are leased"
                )));
            }
            // Else a slot comes back once a worker given up is reaped: wait for it.
            if g.error_gen != start_gen {
                break Err(WorkerError::Spawn(g.last_error.clone()));
            }
            let now = Instant::now();
            // Starts keep failing and the next try is a while off: say so now.
            if !waiting && g.starting == 0 && g.retry_at.is_some_and(|t| now < t) {
                break Err(WorkerError::Spawn(g.last_error.clone()));
            }
            if now >= deadline {
                break Err(if deadline < started_by {
                    WorkerError::op(
                        ErrorKind::DeadlineExceeded,
                        "no worker became ready by the caller's time limit",
                    )
                } else {
                    WorkerError::Spawn(format!("no worker became ready within {:?}", START_TIMEOUT))
                });
            }
            if !waiting {
                waiting = true;
                g.waiters += 1;
                s.cv.notify_all();
            }
            g =
                s.cv.wait_timeout(g, deadline - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
        };
        if waiting {
            g.waiters -= 1;
        }
        let result = result.map(|mut w| {
            g.busy += 1;
            g.busy_procs.push(Arc::downgrade(&w.proc));
            let owner: Weak<Shared> = Arc::downgrade(s);
            w.lease = Some(LeaseToken::new(owner, &w.proc));
            w.set_wait_limit(limit);
            w
        });
        // Wake the spawner to top the warm set back up.
        s.cv.notify_all();
        result
    }

    /// Gives a worker back. A healthy one is reset and kept warm (up to `warm` idle); a lost,
    /// poisoned or unresettable one — or one that still holds anything after its reset, or any
    /// one when the pool does not reuse workers — is given up ([`Pool::discard`]), and a
    /// replacement starts in the background. So is one whose launched kernels may still run
    /// (launched and not waited for; on the emulator, not yet run), without being asked anything:
    /// their results can no longer be read, and waiting for them would hold up the caller (a
    /// lease's end, the expiry reaper) for as long as their deadlines.
    pub fn release(&self, mut w: Worker) {
        // The pool's own calls answer to no caller's limit.
        w.set_wait_limit(None);
        let ours = w.lease.as_ref().is_some_and(|t| t.is_from(&self.shared));
        let healthy = ours
            && self.shared.cfg.reuse
            && !w.is_lost()
            && !w.is_poisoned()
            && !w.has_pending_launches()
            && w.reset().is_ok()
            && back_at_baseline(&mut w);
        if !healthy {
            self.discard(w);
            return;
        }
        drop(w.lease.take());
        let s = &self.shared;
        let mut g = s.lock();
        if g.shutdown {
            drop(g);
            drop(w);
            return;
        }
        // The reused worker goes first; surplus (typically the replacement started when it was
        // acquired) is trimmed from the back.
        g.idle.push_front(w);
        while g.idle.len() > s.warm() + g.waiters {
            if let Some(extra) = g.idle.pop_back() {
                g.reap.push(extra);
            }
        }
        s.cv.notify_all();
    }

    /// Gives a worker up without waiting for it: SIGKILL now, so that whatever it runs stops
    /// (a kernel included) and its device memory goes with it, and the reaping — which can take a
    /// while for a process with a device context — off the caller's path, on the pool's thread.
    /// A leased worker keeps its slot until it is reaped, so busy + idle never undercounts live
    /// processes (each holds device memory); an acquire that finds every slot taken waits for
    /// such a slot instead of failing. A replacement starts in the background.
    pub fn discard(&self, w: Worker) {
        // Already ended and reaped (a lost worker): nothing to wait for.
        if w.proc.poll().is_some() {
            drop(w);
            return;
        }
        w.proc.signal(libc::SIGKILL);
        let s = &self.shared;
        let mut g = s.lock();
        if g.shutdown {
            // No pool thread to reap it: here, then.
            drop(g);
            drop(w);
            return;
        }
        if holds_slot(&w, s) {
            g.dying += 1;
        }
        g.reap.push(w);
        s.cv.notify_all();
    }

    /// Where the pool holds its workers' processes now: for tests and operators looking for a
    /// process nobody waits for (a zombie the pool lost track of would be in none of these).
    pub fn census(&self) -> Census {
        let g = self.shared.lock();
        let to_reap: Vec<u32> = g.reap.iter().map(Worker::pid).collect();
        // A leased worker given up keeps its slot until it is reaped: it is counted where it is.
        let leased = g
            .busy_procs
            .iter()
            .filter_map(|p| p.upgrade().map(|p| p.pid() as u32))
            .filter(|pid| !to_reap.contains(pid) && !g.ending.contains(pid))
            .collect();
        Census {
            idle: g.idle.iter().map(Worker::pid).collect(),
            leased,
            to_reap,
            ending: g.ending.clone(),
            starting: g.starting_pids.clone(),
        }
    }

    /// Workers leased out now.
    pub fn busy(&self) -> usize {
        self.shared.lock().busy
    }

    /// Workers started and idle now.
    pub fn idle(&self) -> usize {
        self.shared.lock().idle.len()
    }

    /// Kills every worker (idle and leased; leased ones then fail every op with `Lost`) and
    /// stops the spawner. Idempotent; also done on drop.
    pub fn shutdown(&self) {
        {
            let mut g = self.shared.lock();
            g.shutdown = true;
            self.shared.cv.notify_all();
        }
        // Each kills and waits for what it holds as it stops: the spawner the idle and leased
        // workers, the reaper those given up.
        for thread in [&self.spawner, &self.reaper] {
            let h = thread.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(h) = h {
                let _ = h.join();
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Whether a reset worker reports holding nothing (its own accounting, over the protocol): a
/// worker that says otherwise is not trusted with another lease.
fn back_at_baseline(w: &mut Worker) -> bool {
    match w.info() {
        Ok(i)
            if i.allocations == 0
                && i.memory_used == 0
                && i.memory_requested == 0
                && i.modules == 0 =>
        {
            true
        }
        Ok(i) => {
            eprintln!(
                "tasklet: worker {} still holds {} allocation(s) ({} bytes) and {} module(s) after its reset; replacing it",
                w.pid(),
                i.allocations,
                i.memory_used,
                i.modules
            );
            false
        }
        Err(_) => false,
    }
}

fn spawner(s: Arc<Shared>) {
    let cfg = &s.cfg;
    let sweep_every = Duration::from_secs(1);
    let mut last_sweep = Instant::now();
    let mut g = s.lock();
    loop {
        if g.shutdown {
            break;
        }
        let now = Instant::now();
        if now.duration_since(last_sweep) >= sweep_every {
            last_sweep = now;
            // Idle workers killed from outside are replaced without waiting for an acquire.
            let idle = std::mem::take(&mut g.idle);
            let (alive, dead): (VecDeque<Worker>, Vec<Worker>) =
                idle.into_iter()
                    .fold((VecDeque::new(), Vec::new()), |(mut a, mut d), w| {
                        if w.still_serving() {
                            a.push_back(w)
                        } else {
                            d.push(w)
                        }
                        (a, d)
                    });
            g.idle = alive;
            if !dead.is_empty() {
                g.reap.extend(dead);
                // The reaper takes them.
                s.cv.notify_all();
            }
            continue;
        }
        let have = g.idle.len() + g.starting;
        let total = g.busy + have;
        let may_retry = g.retry_at.is_none_or(|t| now >= t);
        let (warm, max_workers) = (s.warm(), s.max_workers());
        if have < warm + g.waiters && total < max_workers + warm && may_retry {
            g.starting += 1;
            drop(g);
            let started = Worker::start(
                &cfg.command,
                cfg.backend,
                cfg.device_memory,
                cfg.op_timeout,
                &s.binding,
            );
            let failed = match started {
                Ok(st) => {
                    let s2 = s.clone();
                    let pid = st.pid();
                    // Listed before its handshake can end (`finish_start` takes it off).
                    s.lock().starting_pids.push(pid);
                    match thread::Builder::new()
                        .name(format!("tasklet-worker-start-{pid}"))
                        .spawn(move || finish_start(s2, st))
                    {
                        Ok(_) => None,
                        Err(e) => {
                            s.lock().starting_pids.retain(|&p| p != pid);
                            Some(format!("cannot start a handshake thread: {e}"))
                        }
                    }
                }
                Err(WorkerError::Spawn(m)) => Some(m),
                Err(e) => Some(e.to_string()),
            };
            g = s.lock();
            if let Some(msg) = failed {
                g.starting -= 1;
                record_failure(&mut g, msg);
                s.cv.notify_all();
            }
            continue;
        }
        let mut wait = sweep_every.saturating_sub(now.duration_since(last_sweep));
        if let Some(t) = g.retry_at {
            if t > now {
                wait = wait.min(t - now);
            }
        }
        g =
            s.cv.wait_timeout(g, wait.max(Duration::from_millis(1)))
                .unwrap_or_else(|p| p.into_inner())
                .0;
    }
    let idle = std::mem::take(&mut g.idle);
    let busy = std::mem::take(&mut g.busy_procs);
    drop(g);
    drop(idle);
    for p in busy {
        if let Some(p) = p.upgrade() {
            p.kill();
        }
    }
}

/// Kills the workers given up (`State::reap`) and reaps each once it has ended, on a thread of
/// its own: the spawner may be held up starting a worker (the spawn, a driver that stalls), and
/// a killed worker must not stay a zombie holding its slot meanwhile. Each is reaped once it has
/// ended, not waited for in turn: a process with a device context can take seconds to end (a GPU
/// tearing down a context with a kernel running), and one such must not keep the others
/// unreaped. No process is polled under the pool's lock.
fn reaper(s: Arc<Shared>) {
    // Workers killed and not yet seen ended.
    let mut dying: Vec<Worker> = Vec::new();
    let mut g = s.lock();
    loop {
        let dead = std::mem::take(&mut g.reap);
        if g.shutdown {
            drop(g);
            // Dropping kills and waits for each.
            drop(dead);
            drop(dying);
            return;
        }
        drop(g);
        let mut changed = !dead.is_empty();
        for mut w in dead {
            w.abandon("given up by its pool".into());
            dying.push(w);
        }
        let (ended, still): (Vec<Worker>, Vec<Worker>) = std::mem::take(&mut dying)
            .into_iter()
            .partition(|w| w.proc.poll().is_some());
        dying = still;
        changed |= !ended.is_empty();
        let slots = ended.iter().filter(|w| holds_slot(w, &s)).count();
        // Reaped already: dropping waits for nothing; a leased one's token then gives its slot
        // back.
        drop(ended);
        g = s.lock();
        if changed {
            // Woken by every notice of the pool's condition, it rewrites the list only when it
            // changed.
            g.ending = dying.iter().map(Worker::pid).collect();
        }
        if slots > 0 {
            g.dying = g.dying.saturating_sub(slots);
            s.cv.notify_all();
        }
        if !g.reap.is_empty() || g.shutdown {
            continue;
        }
        // A process's end wakes no one: looked at again soon while any is ending; else woken
        // when one is given up.
        let wait = if dying.is_empty() {
            Duration::from_secs(1)
        } else {
            Duration::from_millis(5)
        };
        g =
            s.cv.wait_timeout(g, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
    }
}

/// Where a pool holds its workers' processes ([`Pool::census`]), by pid.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Census {
    /// Started and waiting to be leased.
    pub idle: Vec<u32>,
    /// Leased out (the lease's holder has them).
    pub leased: Vec<u32>,
    /// Given up, for the reaper to kill.
    pub to_reap: Vec<u32>,
    /// Killed; the reaper reaps each as it ends.
    pub ending: Vec<u32>,
    /// Spawned, not yet through their handshake.
    pub starting: Vec<u32>,
}

/// Whether `w` holds one of `s`'s slots (it is leased from that pool).
fn holds_slot(w: &Worker, s: &Arc<Shared>) -> bool {
    w.lease.as_ref().is_some_and(|t| t.is_from(s))
}

fn finish_start(s: Arc<Shared>, st: Starting) {
    let pid = st.pid();
    let r = st.wait_ready(START_TIMEOUT);
    let mut g = s.lock();
    g.starting -= 1;
    g.starting_pids.retain(|&p| p != pid);
    let surplus = match r {
        Ok(w) => {
            g.failures = 0;
            g.killed_starts = 0;
            g.retry_at = None;
            if g.shutdown {
                Some(w)
            } else if g.idle.len() >= s.warm() + g.waiters {
                // Released workers filled the warm set while this one started.
                g.reap.push(w);
                None
            } else {
                g.idle.push_back(w);
                None
            }
        }
        Err(f) if f.killed && g.killed_starts < MAX_KILLED_STARTS => {
            // Not the worker's failure: the spawner starts another for whoever waits.
            g.killed_starts += 1;
            None
        }
        Err(f) => {
            // The worker's own words (acquire wraps them in `WorkerError::Spawn` again).
            record_failure(
                &mut g,
                match f.error {
                    WorkerError::Spawn(m) => m,
                    other => other.to_string(),
                },
            );
            None
        }
    };
    s.cv.notify_all();
    drop(g);
    drop(surplus);
}

fn record_failure(g: &mut State, msg: String) {
    g.failures = g.failures.saturating_add(1);
    g.last_error = msg;
    g.error_gen += 1;
    g.retry_at = Some(Instant::now() + backoff(g.failures));
}
