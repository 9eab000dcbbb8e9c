//! One worker process, seen from the host: start it, talk to it, notice when it dies, kill it.
//!
//! A [`Worker`] is an RPC client over the shared-memory channel. Everything the process says is
//! untrusted: responses are bounds-checked and decoded with typed errors, every wait has a
//! deadline and a liveness check, and any violation makes the worker `Lost` (killed and reaped).
//! A caller that must itself return by some time bounds every wait by it (see
//! [`Worker::set_wait_limit`]): a wait that reaches it gives the worker up rather than go on.
//!
//! This file holds the worker's state and its life (start, health, end); `ops` the operations a
//! lease performs, one method each; `calls` how one request goes out and its answer comes back,
//! within the deadlines that queued kernels stretch.

mod calls;
mod marks;
mod ops;

use std::collections::HashMap;
use std::fmt;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::error::WorkerError;
use super::guest_memory::Shared;
use super::mapped::{MappedArea, Piece};
use super::module_aliases::ModuleAliases;
use super::process::Proc;
use super::slot::LeaseToken;
use crate::contract::channel::{HostEnd, SharedRegion, WaitError, DEFAULT_DATA_SIZE};
use crate::contract::{
    BackendKind, DeviceBinding, ErrorKind, KernelTable, WorkerArgs, WorkerCommand,
};

/// How long a worker process may take from spawn to ready (a CUDA context takes a while).
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A worker process and the channel to it. Owned by one lease at a time; `Send`, holds nothing
/// tied to the thread that made it, so it may move between threads.
pub struct Worker {
    pub(crate) proc: Arc<Proc>,
    chan: HostEnd,
    backend: BackendKind,
    op_timeout: Duration,
    next_id: u64,
    frame: Vec<u8>,
    resp: Vec<u8>,
    lost: Option<String>,
    poisoned: Option<(ErrorKind, String)>,
    /// No wait goes past this (see [`Worker::set_wait_limit`]).
    wait_limit: Option<Instant>,
    /// A wait reached `wait_limit`, and the worker was given up for it.
    gave_up: bool,
    /// Set by another thread once no one waits for this worker's answers any more (see
    /// [`Worker::set_holder_gone`]).
    holder_gone: Option<Arc<AtomicBool>>,
    /// Launches posted and not yet known finished: by when they may all legitimately have ended,
    /// each kernel getting its whole deadline (plus the emulator's slack) from when the previous
    /// one could have ended (see [`Worker::launch`]). Every op may take this much longer than
    /// `op_timeout`: its request waits in the ring behind them.
    pending_until: Option<Instant>,
    /// When the launches pending now began to be posted (set with `pending_until` from none):
    /// on the emulator, which runs them one after another and reports their time only with its
    /// next answer, since when it has been busy with them; on cuda, the earliest their time can
    /// be charged from (see [`Worker::unreported_run`]).
    busy_since: Option<Instant>,
    /// When the host gave the worker up with SIGKILL, not waiting for it (see `abandon`): where
    /// anything it still ran stopped.
    abandoned_at: Option<Instant>,
    /// The kernels of every module loaded and not unloaded, by module id, in the order launches
    /// index them: only to name kernels in messages. The module's own table, shared.
    kernel_names: HashMap<u32, KernelTable>,
    /// The text each module the worker holds loaded was made of, by module id, in bytes, and
    /// their sum: held within [`MAX_MODULE_TEXT_BYTES`](crate::contract::modules::MAX_MODULE_TEXT_BYTES)
    /// (a module unloaded while a persistent kernel runs counts until the worker unloads it).
    module_text: HashMap<u32, usize>,
    module_text_bytes: usize,
    /// Shareable modules loaded, by text: a repeated load is answered here (see
    /// [`Worker::load_module`]).
    aliases: ModuleAliases,
    /// The module and kernel index of the latest launch, for messages about queued kernels.
    last_launch: (u32, u32),
    /// Launches posted since the worker started or was last reset: the latest one's ordinal, as
    /// the worker numbers them too (its messages say "launch #N of kernel `k`").
    launches: u64,
    /// `sync`s answered through the completion word (see [`Worker::sync`]).
    signalled_syncs: u64,
    /// Nothing was sent since an answer that waited for everything before it
    /// (`Worker::settles`): a `sync` now is answered here, without a round trip.
    settled: bool,
    /// Nothing was posted since the worker's last answer, which reported any failure held for
    /// the next call: a load answered by the host hides none (see [`Worker::load_again`]).
    nothing_posted: bool,
    /// Set while leased from a pool; tells the pool when the worker is dropped unreleased.
    pub(crate) lease: Option<LeaseToken>,
    /// The host's end of the control socket, which carries guest memories' fds.
    ctl: OwnedFd,
    /// Guest memories the worker has mapped (by memory id): weak, so that a memory the host
    /// dropped is noticed and detached from the worker at the next attach.
    attached: HashMap<u64, Weak<Shared>>,
    /// The linger last written to the channel (see [`super::linger`]).
    linger: u32,
    /// Persistent kernels started and not yet seen ended (see [`Worker::stop_persistent`]).
    persistent: Vec<Persistent>,
    /// Modules unloaded while a persistent kernel ran, still loaded in the worker: the driver
    /// waits for every running kernel to unload code, so they go once none runs (see
    /// [`Worker::unload_module`]).
    deferred_unloads: Vec<u32>,
    /// The mark slots (stream events) handed out (see `marks`).
    marks: marks::MarkSlots,
    /// Where the worker writes the status of persistent kernels: attached to the worker, never
    /// mapped for the device, so no kernel can write it (made at the first persistent launch).
    status_area: Option<Arc<MappedArea>>,
}

/// A persistent kernel the worker started: its control block (at `control` of `area`) and its
/// status block (at `status` of the worker's status area).
pub(crate) struct Persistent {
    pub(crate) area: Arc<MappedArea>,
    pub(crate) control: usize,
    /// Given back to the status area once neither this entry nor a view holds it.
    pub(crate) status: Arc<Piece>,
}

/// A process that was spawned and has not said it is ready yet.
pub(crate) struct Starting(Worker);

/// Why a started worker did not become ready.
pub(crate) struct StartFailure {
    pub(crate) error: WorkerError,
    /// It was killed from outside (SIGKILL or SIGTERM: an operator, the OOM killer) before it
    /// was ready: no failure of its own, so another start may well succeed.
    pub(crate) killed: bool,
}

impl Worker {
    /// Starts a worker process and waits until it is ready.
    ///
    /// The worker arms `PR_SET_PDEATHSIG`, which fires when the *thread* that spawned it exits:
    /// spawn from a thread that lives as long as the worker should (the pool has one for this).
    pub fn spawn(
        command: &WorkerCommand,
        backend: BackendKind,
        device_memory: u64,
        op_timeout: Duration,
    ) -> Result<Worker, WorkerError> {
        Self::start(
            command,
            backend,
            device_memory,
            op_timeout,
            &DeviceBinding::default(),
        )?
        .wait_ready(START_TIMEOUT)
        .map_err(|f| f.error)
    }

    /// Starts a worker process on the device `binding` names; [`Starting::wait_ready`] waits for it.
    pub(crate) fn start(
        command: &WorkerCommand,
        backend: BackendKind,
        device_memory: u64,
        op_timeout: Duration,
        binding: &DeviceBinding,
    ) -> Result<Starting, WorkerError> {
        let region = SharedRegion::create(DEFAULT_DATA_SIZE)
            .map_err(|e| WorkerError::Spawn(format!("cannot create the shared channel: {e}")))?;
        let fd = region.fd();
        let (ctl, child_ctl) = crate::contract::control_socket::socket_pair()
            .map_err(|e| WorkerError::Spawn(format!("cannot create the control socket: {e}")))?;
        let ctl_fd = child_ctl.as_raw_fd();
        let args = WorkerArgs {
            shm_fd: fd,
            ctl_fd: Some(ctl_fd),
            backend,
            device_memory,
            host_pid: Some(std::process::id() as i32),
            emu_threads: 0,
            null_backend: false,
        };
        let proc = Proc::spawn(command, &args, [fd, ctl_fd], binding)?;
        // The child has its copy; ours would keep the socket open after the worker dies.
        drop(child_ctl);
        Ok(Starting(Worker {
            proc: Arc::new(proc),
            chan: HostEnd::new(region),
            backend,
            op_timeout,
            next_id: 0,
            frame: Vec::with_capacity(4096),
            resp: Vec::with_capacity(4096),
            lost: None,
            poisoned: None,
            wait_limit: None,
            gave_up: false,
            holder_gone: None,
            pending_until: None,
            busy_since: None,
            abandoned_at: None,
            kernel_names: HashMap::new(),
            module_text: HashMap::new(),
            module_text_bytes: 0,
            aliases: ModuleAliases::default(),
            last_launch: (0, 0),
            launches: 0,
            signalled_syncs: 0,
            settled: false,
            nothing_posted: false,
            lease: None,
            ctl,
            attached: HashMap::new(),
            linger: 0,
            persistent: Vec::new(),
            deferred_unloads: Vec::new(),
            marks: marks::MarkSlots::default(),
            status_area: None,
        }))
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid() as u32
    }

    pub fn backend(&self) -> BackendKind {
        self.backend
    }

    /// True once the worker died, was killed or broke the protocol: every op now fails `Lost`.
    pub fn is_lost(&self) -> bool {
        self.lost.is_some()
    }

    /// True while launched kernels may still be queued or running: no op that waits for them has
    /// succeeded since they were launched, and (emu, where the worker runs each launch before
    /// taking the next request) the worker has not yet served every request sent. Never waits.
    /// A launch's error stays with the worker for the next op either way.
    pub fn has_pending_launches(&mut self) -> bool {
        if self.pending_until.is_some()
            && self.backend == BackendKind::Emu
            && self.lost.is_none()
            && self.chan.all_served()
        {
            self.pending_until = None;
            self.busy_since = None;
        }
        self.pending_until.is_some()
    }

    /// How long launches that were still running, unreported, when the host gave the worker up
    /// (or now, while it runs them) had kept it busy: the time a lease that ends with them pays,
    /// none of it ever reported (the worker is killed for them). Never past their bound. On the
    /// emulator, counted from the first of them posted to an idle worker (it runs them back to
    /// back, and any answer in between would have reported them); on cuda, from where the worker
    /// says their device time is in no GPU time it reported (a launch not yet waited for may long
    /// have ended, its time reported), never before the first of them was posted. Never waits.
    pub fn unreported_run(&mut self) -> Option<Duration> {
        let due = self.pending_until?;
        if self.poisoned.is_some() {
            return None;
        }
        let since = match (self.backend, self.busy_since) {
            (BackendKind::Emu, Some(posted)) if !self.chan.all_served() => posted,
            (BackendKind::Cuda, posted) => {
                let since = self.chan.uncharged_since()?;
                posted.map_or(since, |p| since.max(p))
            }
            _ => return None,
        };
        let until = match (&self.lost, self.abandoned_at) {
            (Some(_), Some(at)) => at,
            (None, _) if self.proc.poll().is_none() => Instant::now(),
            // Died of something else, when is not known.
            _ => return None,
        };
        Some(until.min(due).saturating_duration_since(since))
    }

    /// Whether the worker's watchdog announced that it ends the process over a kernel past its
    /// deadline (the process may still be going away). Never waits.
    pub fn deadline_exit_announced(&self) -> bool {
        self.chan.deadline_exit_announced()
    }

    /// True when a launched kernel is known to have run past its deadline and no op has said so
    /// yet (an op that does fails `DeadlineExceeded`): the worker's watchdog ended the process
    /// (cuda), or (emu, which serves each launch before the next request) a launch is still
    /// unserved past every queued kernel's deadline. Never waits: for a lease that ends without
    /// asking its worker anything, to charge the kernel its deadline all the same.
    pub fn overran(&mut self) -> bool {
        let Some(due) = self.pending_until else {
            return false;
        };
        if self.lost.is_some() || self.poisoned.is_some() {
            return false;
        }
        if self.proc.poll().is_some() {
            return self.proc.ended_by_watchdog();
        }
        // cuda: the watchdog says so before its exit, which can take the driver a second or
        // more (it tears down a context whose kernel still runs).
        if self.deadline_exit_announced() {
            return true;
        }
        self.backend == BackendKind::Emu && Instant::now() >= due && !self.chan.all_served()
    }

    /// The device time this worker's launches have taken since it started, as it last reported
    /// (with each response; a sync the completion word answered reports at the next call).
    /// Never goes back; a lease is charged the difference over its time with the worker.
    pub fn gpu_time(&self) -> Duration {
        // Both only grow and neither exceeds what the worker measured: the larger is as much as
        // it has said so far (its counted word also covers work no answer reported).
        Duration::from_nanos(self.chan.gpu_time().max(self.chan.counted_gpu_time()))
    }

    /// True once a kernel faulted or ran past its deadline: every op now fails with that kind,
    /// and the pool kills the worker on release (on a GPU the context is unusable).
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.is_some()
    }

    /// Bounds every wait of the ops that follow by `limit` (`None`: by their own deadlines alone),
    /// for a caller that must return by then whatever the worker is doing: a run's wall-time, a
    /// release that must not wait for running kernels. An op whose answer has not come by
    /// `limit` fails with `DeadlineExceeded` and the worker is given up: sent SIGKILL and not
    /// waited for (it is reaped when dropped; a pool does that off the caller's path), every
    /// later op `Lost`, and [`Worker::gave_up`] true. Costs nothing per op: each op reads the
    /// clock for its own deadline anyway.
    pub fn set_wait_limit(&mut self, limit: Option<Instant>) {
        self.wait_limit = limit;
    }

    /// A flag another thread sets when this worker's holder is gone (a node's client that
    /// disconnected): a wait for an answer then gives the worker up within a few milliseconds,
    /// as if it had died, instead of waiting for a kernel that may run until its deadline. The
    /// flag is checked between the wait's sleeps; `None` clears it (a worker going back to the
    /// pool).
    pub fn set_holder_gone(&mut self, flag: Option<Arc<AtomicBool>>) {
        self.holder_gone = flag;
    }

    /// The bound set by [`Worker::set_wait_limit`].
    pub fn wait_limit(&self) -> Option<Instant> {
        self.wait_limit
    }

    /// True once an op reached the wait limit and the worker was given up for it.
    pub fn gave_up(&self) -> bool {
        self.gave_up
    }

    /// SIGKILL and reap. Afterwards every op is `Lost`.
    pub fn kill(&mut self) {
        if self.lost.is_none() {
            self.lost = Some("killed by the host".into());
        }
        self.chan.close();
        self.proc.kill();
    }

    /// Fails the way the next op would if the worker cannot take one.
    /// Tells the worker how long it may linger for its next request now (see
    /// [`super::linger`]): a leased worker, when the count of leased workers moved across the
    /// bound; one not leased (a pool's own calls) never lingers.
    fn update_linger(&mut self) {
        let linger = match self.lease {
            Some(_) => super::linger::linger_micros(),
            None => 0,
        };
        if linger != self.linger {
            self.linger = linger;
            self.chan.set_linger(linger);
        }
    }

    fn usable(&self) -> Result<(), WorkerError> {
        if let Some(why) = &self.lost {
            return Err(WorkerError::Lost(why.clone()));
        }
        if let Some((kind, msg)) = &self.poisoned {
            return Err(WorkerError::op(
                *kind,
                format!("worker unusable after an earlier error: {msg}"),
            ));
        }
        Ok(())
    }

    /// Whether the worker is still serving, as far as can be told without asking it: its life
    /// lock where it holds one (no system call), else whether its process has ended.
    pub fn still_serving(&self) -> bool {
        match self.chan.worker_ended() {
            Some(ended) => !ended,
            None => self.proc.poll().is_none(),
        }
    }

    /// Kernel `kernel` of module `module` as messages name it: "`name`", or by its number when
    /// this worker loaded no such kernel.
    fn kernel_named(&self, (module, kernel): (u32, u32)) -> String {
        match self
            .kernel_names
            .get(&module)
            .and_then(|kernels| kernels.get(kernel as usize))
        {
            Some(k) => format!("`{}`", k.name),
            None => format!("kernel {kernel} of module {module}"),
        }
    }

    /// Marks the worker lost, kills and reaps it.
    pub(crate) fn lose(&mut self, why: String) -> WorkerError {
        self.proc.kill();
        self.lost = Some(why.clone());
        WorkerError::Lost(why)
    }

    /// Sends the worker SIGKILL without waiting for it to end (a process with a device context
    /// can take a while to): it is reaped when dropped. Afterwards every op is `Lost`.
    pub(crate) fn abandon(&mut self, why: String) {
        self.chan.close();
        self.proc.signal(libc::SIGKILL);
        self.abandoned_at.get_or_insert_with(Instant::now);
        self.lost = Some(why);
    }

    /// For tests: send a signal to the worker process (e.g. SIGSTOP to make it hang).
    #[doc(hidden)]
    pub fn signal_for_test(&self, sig: i32) {
        self.proc.signal(sig);
    }
}

impl Starting {
    pub(crate) fn pid(&self) -> u32 {
        self.0.pid()
    }

    /// Waits for the worker's start handshake; kills it on failure or timeout.
    pub(crate) fn wait_ready(mut self, timeout: Duration) -> Result<Worker, StartFailure> {
        let proc = self.0.proc.clone();
        let r = self
            .0
            .chan
            .wait_ready(Instant::now() + timeout, &mut || proc.poll());
        let mut killed = false;
        let why = match r {
            Ok(()) => return Ok(self.0),
            Err(WaitError::Failed(m)) => m,
            Err(WaitError::Dead(how)) => {
                killed = matches!(proc.killed_by(), Some(libc::SIGKILL | libc::SIGTERM));
                format!("worker process {how} before it was ready")
            }
            Err(WaitError::Timeout) => format!("worker not ready within {timeout:?}"),
            Err(WaitError::Protocol(m)) => format!("protocol violation during start: {m}"),
        };
        self.0.lose(why.clone());
        Err(StartFailure {
            error: WorkerError::Spawn(why),
            killed,
        })
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.chan.close();
        self.proc.kill();
        // A leased worker dropped without `Pool::release`: its `LeaseToken` (dropped right after
        // this) gives its slot back to the pool.
    }
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("pid", &self.proc.pid())
            .field("backend", &self.backend)
            .field("lost", &self.lost)
            .field("poisoned", &self.poisoned)
            .finish()
    }
}
