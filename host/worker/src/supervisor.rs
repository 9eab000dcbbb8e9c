//! One worker process, seen from the host: start it, talk to it, notice when it dies, kill it.
//!
//! A [`Worker`] is an RPC client over the shared-memory channel. Everything the process says is
//! untrusted: responses are bounds-checked and decoded with typed errors, every wait has a
//! deadline and a liveness check, and any violation makes the worker `Lost` (killed and reaped).

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::backend::{BackendKind, LoadedModule, WorkerInfo};
use crate::error::{ErrorKind, WorkerError};
use crate::guest_memory::{GuestSpan, Shared};
use crate::protocol::{decode_response, encode_request, LaunchRequest, Request, Response};
use crate::serve::{WorkerArgs, EXIT_DEADLINE};
use crate::transport::{Answer, HostEnd, SendError, SharedRegion, WaitError, DEFAULT_DATA_SIZE};

/// Emulator speed per core, in lane-instructions per second, that turns a launch deadline into the
/// emulator's step limit: `deadline × this × cores` (the emulator runs CTAs on every core).
///
/// Deliberately at or above the measured speed (release build, 2-core dev machine, spinning
/// kernel: ~200 M/s for one CTA on one core, ~236 M/s for 8 CTAs on 2 cores; re-measure with
/// `ROUNDTRIP_EMU_RATE=1 target/release/examples/roundtrip`): a legitimate kernel then always gets
/// at least its deadline, and a runaway is stopped by whichever comes first, the step limit
/// (≈ deadline × this/real speed) or the host's timer at deadline + slack, which kills the
/// worker. The lease sees `DeadlineExceeded` either way and the worker is never reused.
pub const EMU_LANE_INSTRUCTIONS_PER_SECOND: u64 = 250_000_000;

/// How long a worker process may take from spawn to ready (a CUDA context takes ~170 ms).
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How to run a worker: `program args… <pool's own flags>`. For the CLI: `(tasklet, ["worker"])`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
}

/// One kernel launch.
#[derive(Debug, Clone)]
pub struct Launch<'a> {
    pub module: u32,
    pub kernel: &'a str,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
    /// The argument block, laid out as `KernelInfo::param_layout` says.
    pub args: &'a [u8],
    /// How long the kernel may run. Past it the lease gets `DeadlineExceeded` and the worker is
    /// never reused; if the worker does not report by `deadline + slack` (counted from when the
    /// kernels queued before it could have ended), it is killed.
    pub deadline: Duration,
}

/// A worker's OS process: reaped by us (never by `std::process::Child`) so that a kill from the
/// pool's shutdown and the owner's liveness checks agree on whether the pid is still ours.
pub(crate) struct Proc {
    pid: i32,
    /// Set once reaped, with how it ended. Holding this lock across kill+waitpid means nobody
    /// signals a pid after it was reaped (and possibly reused).
    exited: Mutex<Option<Exit>>,
}

/// How a reaped process ended.
#[derive(Debug, Clone)]
struct Exit {
    how: String,
    /// It exited with [`EXIT_DEADLINE`]: its watchdog ended it over a runaway kernel.
    deadline: bool,
}

impl Proc {
    pub(crate) fn pid(&self) -> i32 {
        self.pid
    }

    /// None while running; how it ended once it has (reaping it).
    pub(crate) fn poll(&self) -> Option<String> {
        let mut g = self.exited.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            *g = reap(self.pid, libc::WNOHANG);
        }
        g.as_ref().map(|e| e.how.clone())
    }

    /// Whether it has ended by its watchdog over a kernel past its deadline.
    pub(crate) fn ended_by_watchdog(&self) -> bool {
        self.exited
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(|e| e.deadline)
    }

    /// SIGKILL (if still running) and reap. Returns how it ended.
    pub(crate) fn kill(&self) -> String {
        let mut g = self.exited.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            // SAFETY: the pid is our unreaped child (the lock guarantees it), so it is not reused.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            *g = reap(self.pid, 0);
        }
        g.as_ref()
            .map_or_else(|| "killed".into(), |e| e.how.clone())
    }

    /// Sends `sig` if the process has not been reaped (for tests: SIGSTOP).
    pub(crate) fn signal(&self, sig: i32) {
        let g = self.exited.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            // SAFETY: as in `kill`.
            unsafe { libc::kill(self.pid, sig) };
        }
    }
}

fn reap(pid: i32, flags: i32) -> Option<Exit> {
    loop {
        let mut status = 0;
        // SAFETY: plain waitpid on our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, flags) };
        if r == pid {
            let deadline = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == EXIT_DEADLINE;
            let how = if deadline {
                "ended itself: its watchdog stopped a kernel that ran past its deadline".to_string()
            } else if libc::WIFEXITED(status) {
                format!("exited with status {}", libc::WEXITSTATUS(status))
            } else if libc::WIFSIGNALED(status) {
                format!("was killed by signal {}", libc::WTERMSIG(status))
            } else {
                format!("ended with wait status {status:#x}")
            };
            return Some(Exit { how, deadline });
        }
        if r == 0 {
            return None;
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::EINTR) => continue,
            // Someone else reaped it (a waitpid(-1) elsewhere, or SIGCHLD ignored): it is gone.
            _ => {
                return Some(Exit {
                    how: "exited (reaped elsewhere)".into(),
                    deadline: false,
                })
            }
        }
    }
}

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
    /// Launches posted and not yet known finished: by when they may all legitimately have ended,
    /// each kernel getting its whole deadline (plus the emulator's slack) from when the previous
    /// one could have ended (see [`Worker::launch`]). Every op may take this much longer than
    /// `op_timeout`: its request waits in the ring behind them.
    pending_until: Option<Instant>,
    /// The kernel of the latest launch, for messages about queued kernels (kept to reuse its
    /// allocation).
    last_kernel: String,
    /// `sync`s answered through the completion word (see [`Worker::sync`]).
    signalled_syncs: u64,
    /// Set while leased from a pool; tells the pool when the worker is dropped unreleased.
    pub(crate) lease: Option<crate::pool::LeaseToken>,
    /// The host's end of the control socket, which carries guest memories' fds.
    ctl: OwnedFd,
    /// Guest memories the worker has mapped (by memory id): weak, so that a memory the host
    /// dropped is noticed and detached from the worker at the next attach.
    attached: HashMap<u64, Weak<Shared>>,
}

/// A process that was spawned and has not said it is ready yet.
pub(crate) struct Starting(Worker);

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
        Self::start(command, backend, device_memory, op_timeout)?.wait_ready(START_TIMEOUT)
    }

    pub(crate) fn start(
        command: &WorkerCommand,
        backend: BackendKind,
        device_memory: u64,
        op_timeout: Duration,
    ) -> Result<Starting, WorkerError> {
        let region = SharedRegion::create(DEFAULT_DATA_SIZE)
            .map_err(|e| WorkerError::Spawn(format!("cannot create the shared channel: {e}")))?;
        let fd = region.fd();
        let (ctl, child_ctl) = crate::fdpass::socket_pair()
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
        let mut cmd = Command::new(&command.program);
        cmd.args(&command.args)
            .args(args.to_args())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            // Its own process group: a terminal's Ctrl-C goes to the host, which decides.
            .process_group(0);
        // SAFETY: runs between fork and exec; only async-signal-safe syscalls, no allocation.
        // The memfd is close-on-exec so other children never inherit it; only this one does.
        unsafe {
            cmd.pre_exec(move || {
                if libc::fcntl(fd, libc::F_SETFD, 0) == -1
                    || libc::fcntl(ctl_fd, libc::F_SETFD, 0) == -1
                {
                    return Err(io::Error::last_os_error());
                }
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) == -1 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| {
            WorkerError::Spawn(format!("cannot run {}: {e}", command.program.display()))
        })?;
        let pid = child.id() as i32;
        // We reap it ourselves (see `Proc`); dropping a `Child` neither waits nor kills.
        drop(child);
        // The child has its copy; ours would keep the socket open after the worker dies.
        drop(child_ctl);
        Ok(Starting(Worker {
            proc: Arc::new(Proc {
                pid,
                exited: Mutex::new(None),
            }),
            chan: HostEnd::new(region),
            backend,
            op_timeout,
            next_id: 0,
            frame: Vec::with_capacity(4096),
            resp: Vec::with_capacity(4096),
            lost: None,
            poisoned: None,
            pending_until: None,
            last_kernel: String::new(),
            signalled_syncs: 0,
            lease: None,
            ctl,
            attached: HashMap::new(),
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
        }
        self.pending_until.is_some()
    }

    /// True once a kernel faulted or ran past its deadline: every op now fails with that kind,
    /// and the pool kills the worker on release (on a GPU the context is unusable).
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.is_some()
    }

    /// SIGKILL and reap. Afterwards every op is `Lost`.
    pub fn kill(&mut self) {
        if self.lost.is_none() {
            self.lost = Some("killed by the host".into());
        }
        self.chan.close();
        self.proc.kill();
    }

    pub fn ping(&mut self) -> Result<(), WorkerError> {
        self.call_ok(&Request::Ping)
    }

    pub fn info(&mut self) -> Result<WorkerInfo, WorkerError> {
        match self.call(&Request::Info, self.op_timeout)? {
            Response::Info(i) => Ok(i),
            other => Err(self.unexpected("info", &other)),
        }
    }

    pub fn alloc(&mut self, bytes: u64) -> Result<u64, WorkerError> {
        match self.call(&Request::Alloc { bytes }, self.op_timeout)? {
            Response::Allocated { addr } => Ok(addr),
            other => Err(self.unexpected("alloc", &other)),
        }
    }

    pub fn free(&mut self, addr: u64) -> Result<(), WorkerError> {
        self.call_ok(&Request::Free { addr })
    }

    /// Writes `data` at device address `addr`, through the data region in chunks of its size.
    pub fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), WorkerError> {
        // The data region is free: the last call was answered, and launches never use it.
        self.usable()?;
        let chunk = self.chan.data_size();
        if data.is_empty() {
            return self.call_ok(&Request::Write { addr, len: 0 });
        }
        for (i, part) in data.chunks(chunk).enumerate() {
            let at = offset(addr, i * chunk)?;
            self.chan
                .write_data(part)
                .map_err(|e| WorkerError::op(ErrorKind::InvalidArgument, e.to_string()))?;
            self.call_ok(&Request::Write {
                addr: at,
                len: part.len() as u64,
            })?;
        }
        Ok(())
    }

    /// Reads `out.len()` bytes at device address `addr`, in chunks of the data region's size.
    pub fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), WorkerError> {
        self.usable()?;
        let chunk = self.chan.data_size();
        if out.is_empty() {
            return self.call_ok(&Request::Read { addr, len: 0 });
        }
        for (i, part) in out.chunks_mut(chunk).enumerate() {
            let at = offset(addr, i * chunk)?;
            self.call_ok(&Request::Read {
                addr: at,
                len: part.len() as u64,
            })?;
            self.chan
                .read_data(part)
                .map_err(|e| WorkerError::op(ErrorKind::InvalidArgument, e.to_string()))?;
        }
        Ok(())
    }

    /// Writes the guest bytes `src` at device address `addr`: the worker copies straight from its
    /// own mapping of the memory (one pinned DMA on cuda). Attaches the memory to this worker on
    /// first use (and detaches memories the host has dropped since). Errors as [`Worker::write`].
    pub fn write_from(&mut self, addr: u64, src: &GuestSpan) -> Result<(), WorkerError> {
        self.usable()?;
        self.attach(src)?;
        let req = Request::WriteFrom {
            addr,
            memory: src.memory_id(),
            offset: src.offset() as u64,
            len: src.len() as u64,
        };
        self.transfer(&req, src.len())
    }

    /// Reads `dst.len()` bytes at device address `addr` into the guest memory span `dst`, in
    /// place. Attaches as [`Worker::write_from`]; errors as [`Worker::read`]. On an error the span
    /// may hold part of the data.
    pub fn read_into(&mut self, addr: u64, dst: &GuestSpan) -> Result<(), WorkerError> {
        self.usable()?;
        self.attach(dst)?;
        let req = Request::ReadInto {
            addr,
            memory: dst.memory_id(),
            offset: dst.offset() as u64,
            len: dst.len() as u64,
        };
        self.transfer(&req, dst.len())
    }

    /// One bulk copy of `len` bytes: its timeout grows with the size, at a rate far below any
    /// backend's (a copy in chunks gets `op_timeout` per 8 MiB chunk).
    fn transfer(&mut self, req: &Request<'_>, len: usize) -> Result<(), WorkerError> {
        const SLOWEST_BYTES_PER_SEC: u64 = 64 << 20;
        let extra = Duration::from_secs((len as u64).div_ceil(SLOWEST_BYTES_PER_SEC));
        match self.call(req, self.op_timeout.saturating_add(extra))? {
            Response::Ok => Ok(()),
            other => Err(self.unexpected(req.name(), &other)),
        }
    }

    /// Makes sure the worker has mapped `span`'s memory: passes the memfd on the control socket,
    /// then asks the worker to map it. First detaches memories the host has dropped, so a worker
    /// serving a long lease does not keep every dead instance's memory alive.
    fn attach(&mut self, span: &GuestSpan) -> Result<(), WorkerError> {
        let dead: Vec<u64> = self
            .attached
            .iter()
            .filter(|(_, w)| w.strong_count() == 0)
            .map(|(&id, _)| id)
            .collect();
        for id in dead {
            self.attached.remove(&id);
            self.call_ok(&Request::DetachMemory { id })?;
        }
        let id = span.memory_id();
        if self.attached.contains_key(&id) {
            return Ok(());
        }
        self.usable()?;
        if let Err(e) = crate::fdpass::send_fd(self.ctl.as_fd(), id, span.shared.fd.as_fd()) {
            // Nothing was queued; but a socket that refuses a packet means a dead or wedged peer.
            let how = self
                .proc
                .poll()
                .map_or_else(String::new, |h| format!(" (worker process {h})"));
            return Err(self.lose(format!("cannot pass guest memory to the worker: {e}{how}")));
        }
        self.call_ok(&Request::AttachMemory {
            id,
            capacity: span.shared.capacity as u64,
        })?;
        self.attached.insert(id, Arc::downgrade(&span.shared));
        Ok(())
    }

    /// Guest memories this worker has mapped now (for tests and accounting).
    pub fn attached_memories(&self) -> usize {
        self.attached.len()
    }

    pub fn copy(&mut self, dst: u64, src: u64, len: u64) -> Result<(), WorkerError> {
        self.call_ok(&Request::Copy { dst, src, len })
    }

    pub fn load_module(&mut self, ptx: &str) -> Result<LoadedModule, WorkerError> {
        match self.call(&Request::LoadModule { ptx }, self.op_timeout)? {
            Response::Module { id, kernels } => Ok(LoadedModule { id, kernels }),
            other => Err(self.unexpected("load-module", &other)),
        }
    }

    pub fn load_source(
        &mut self,
        source: &str,
        options: &[String],
    ) -> Result<LoadedModule, WorkerError> {
        let options = options.iter().map(String::as_str).collect();
        match self.call(&Request::LoadSource { source, options }, self.op_timeout)? {
            Response::Module { id, kernels } => Ok(LoadedModule { id, kernels }),
            other => Err(self.unexpected("load-source", &other)),
        }
    }

    pub fn unload_module(&mut self, id: u32) -> Result<(), WorkerError> {
        self.call_ok(&Request::UnloadModule { id })
    }

    /// Launches a kernel: posted, like a CUDA launch.
    ///
    /// The request is appended to the channel's ring and this returns without waiting for the
    /// worker (only, when the ring is full, for room in it). The worker serves requests in order.
    /// If the launch fails, the worker keeps the error and drops later launches; the next op that
    /// waits for an answer (every op but `launch`: `sync`, `read`, `alloc`, `info`, `ping` …) is
    /// then not performed and returns the launch's error instead, its message saying it came
    /// from an earlier launch of that kernel (`free` and `reset` are performed regardless; `free`
    /// leaves the error to the op after it, `reset` drops it with the rest of the lease's state).
    /// A fault or a missed deadline poisons the worker as always; a worker that dies is `Lost`.
    ///
    /// On the emulator the worker runs each kernel before taking the next request (or to its
    /// step limit, which stands in for the deadline); on CUDA it queues the kernel, and the
    /// kernel's fault or missed deadline is reported by `sync` or by the next op that waits for
    /// it (every op but `ping`, `info` and `launch`). Either way the host keeps a bound on how
    /// long the queued kernels may legitimately take — each its whole deadline (on the emulator
    /// plus a quarter and 100 ms of slack for the step limit) from when the one before it could
    /// have ended — and every op may take that much longer than `op_timeout`. An op with no
    /// answer by then is `DeadlineExceeded` while kernels are queued (a kernel ran past its
    /// deadline unreported) and the worker is killed; with nothing queued it is `Lost`.
    pub fn launch(&mut self, l: &Launch<'_>) -> Result<(), WorkerError> {
        if l.deadline.is_zero() {
            return Err(WorkerError::op(
                ErrorKind::InvalidArgument,
                "a launch needs a deadline above zero",
            ));
        }
        self.usable()?;
        let deadline_ns = u64::try_from(l.deadline.as_nanos()).unwrap_or(u64::MAX);
        let step_limit = match self.backend {
            BackendKind::Emu => emu_step_limit(l.deadline),
            // Ignored there (the deadline is a clock); 0 is the shortest on the wire.
            BackendKind::Cuda => 0,
        };
        let req = Request::Launch(LaunchRequest {
            module: l.module,
            kernel: l.kernel,
            grid: l.grid,
            block: l.block,
            shared_mem_bytes: l.shared_mem_bytes,
            args: l.args,
            step_limit,
            deadline_ns,
        });
        self.encode(&req);
        self.post_frame()?;
        // The clock is read after posting (a kernel starts no earlier than that anyway), not on the
        // way to the worker.
        let now = Instant::now();
        let from = self.pending_until.map_or(now, |p| p.max(now));
        self.pending_until = Some(later(from, self.launch_bound(l.deadline)));
        self.last_kernel.clear();
        self.last_kernel.push_str(l.kernel);
        Ok(())
    }

    /// Posts the encoded frame: at once where the ring has room, without reading the clock; only a
    /// full ring, which must be waited on, needs a deadline.
    fn post_frame(&mut self) -> Result<(), WorkerError> {
        let (posted, timeout) = match self.chan.try_post(&self.frame) {
            Ok(true) => return Ok(()),
            Ok(false) => {
                let now = Instant::now();
                let timeout = self.op_timeout.saturating_add(self.queued_for(now));
                // A full ring on the emulator past the queued kernels' bound: one of them overran.
                let (first, _) = self.first_deadline(later(now, timeout));
                let proc = &self.proc;
                (
                    self.chan.post(&self.frame, first, &mut || proc.poll()),
                    timeout,
                )
            }
            Err(e) => (Err(e), self.op_timeout),
        };
        match posted {
            Ok(()) => Ok(()),
            Err(SendError::TooLarge(e)) => Err(WorkerError::op(
                ErrorKind::InvalidArgument,
                format!("launch request too large: {e}"),
            )),
            Err(SendError::Wait(w)) => Err(self.wait_failed("launch", w, timeout)),
        }
    }

    /// How long one queued kernel may legitimately keep the worker busy.
    fn launch_bound(&self, deadline: Duration) -> Duration {
        match self.backend {
            // Room for the emulator to reach its step limit (≈ the deadline at the assumed
            // speed, see `EMU_LANE_INSTRUCTIONS_PER_SECOND`) and say so itself.
            BackendKind::Emu => deadline.saturating_add(Duration::from_millis(100) + deadline / 4),
            BackendKind::Cuda => deadline,
        }
    }

    /// How much longer than `op_timeout` an op sent at `now` may legitimately take.
    fn queued_for(&self, now: Instant) -> Duration {
        self.pending_until
            .map_or(Duration::ZERO, |t| t.saturating_duration_since(now))
    }

    /// Whether the worker's answer to `req` means every launch before it has finished.
    fn drains(&self, req: &Request<'_>) -> bool {
        match self.backend {
            BackendKind::Emu => true,
            BackendKind::Cuda => !matches!(req, Request::Ping | Request::Info),
        }
    }

    /// Waits for every launched kernel; reports the first fault or missed deadline.
    ///
    /// On a device that can signal (cuda), success may be seen in the channel's completion word,
    /// stored by the device itself once the kernels finished, before the worker's answer (see
    /// `transport`); a failure always comes as the worker's answer.
    pub fn sync(&mut self) -> Result<(), WorkerError> {
        match self.call_answered(&Request::Sync, self.op_timeout, true)? {
            (_, Answer::Signalled) => {
                self.signalled_syncs += 1;
                Ok(())
            }
            (Response::Ok, Answer::Response) => Ok(()),
            (other, Answer::Response) => Err(self.unexpected("sync", &other)),
        }
    }

    /// How many `sync`s so far were answered through the completion word.
    pub fn signalled_syncs(&self) -> u64 {
        self.signalled_syncs
    }

    /// Frees every allocation, unloads every module and detaches every guest memory (the pool
    /// does this on release).
    pub fn reset(&mut self) -> Result<(), WorkerError> {
        let r = self.call_ok(&Request::Reset);
        // Whatever the answer: the worker drops its attachments before resetting its backend, and
        // a lost worker has none. A memory used again is attached again.
        self.attached.clear();
        r
    }

    /// Fails the way the next op would if the worker cannot take one.
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

    fn call_ok(&mut self, req: &Request<'_>) -> Result<(), WorkerError> {
        match self.call(req, self.op_timeout)? {
            Response::Ok => Ok(()),
            other => Err(self.unexpected(req.name(), &other)),
        }
    }

    /// One call with `timeout`, extended by the time queued kernels may still legitimately take
    /// (the call waits behind them in the ring, and most calls wait for them on the device).
    fn call(&mut self, req: &Request<'_>, timeout: Duration) -> Result<Response, WorkerError> {
        self.call_answered(req, timeout, false)
            .map(|(resp, _)| resp)
    }

    /// [`Worker::call`], where `signalled` lets the completion word answer (then the response is
    /// `Ok`, not decoded from any frame).
    fn call_answered(
        &mut self,
        req: &Request<'_>,
        timeout: Duration,
        signalled: bool,
    ) -> Result<(Response, Answer), WorkerError> {
        self.usable()?;
        let now = Instant::now();
        let timeout = timeout.saturating_add(self.queued_for(now));
        let deadline = later(now, timeout);
        let id = self.encode(req);
        let (first, mark) = self.first_deadline(deadline);
        let proc = &self.proc;
        let seq = match self.chan.send(&self.frame, first, &mut || proc.poll()) {
            Ok(seq) => seq,
            Err(SendError::TooLarge(e)) => {
                return Err(WorkerError::op(
                    ErrorKind::InvalidArgument,
                    format!("{} request too large: {e}", req.name()),
                ))
            }
            Err(SendError::Wait(w)) => return Err(self.wait_failed(req.name(), w, timeout)),
        };
        let answered = self.receive(
            seq,
            id,
            (first, mark, deadline),
            req.name(),
            timeout,
            signalled,
        )?;
        if self.drains(req) {
            self.pending_until = None;
        }
        Ok(answered)
    }

    /// Encodes `req` with a fresh id into `self.frame`; returns the id.
    fn encode(&mut self, req: &Request<'_>) -> u64 {
        self.next_id += 1;
        self.frame.clear();
        encode_request(self.next_id, req, &mut self.frame);
        self.next_id
    }

    /// On the emulator with kernels queued, the worker runs them one by one before it takes the
    /// next request: silence past their bound while it is still on them means one ran past its
    /// deadline, however long `op_timeout` is. So a wait first ends when they are due; returns
    /// that (or `deadline` where it does not apply) and the ring position that tells whether the
    /// worker has got past them.
    fn first_deadline(&self, deadline: Instant) -> (Instant, Option<u32>) {
        match (self.backend, self.pending_until) {
            (BackendKind::Emu, Some(due)) if due < deadline => (due, Some(self.chan.mark())),
            _ => (deadline, None),
        }
    }

    /// Waits for the response to the call sent as (`seq`, `id`) and decodes it: until `first`,
    /// and on to `deadline` only if the worker has served everything before `mark` by then (see
    /// [`Worker::first_deadline`]).
    fn receive(
        &mut self,
        seq: u32,
        id: u64,
        (first, mark, deadline): (Instant, Option<u32>, Instant),
        op: &str,
        timeout: Duration,
        signalled: bool,
    ) -> Result<(Response, Answer), WorkerError> {
        let proc = &self.proc;
        let wait = |chan: &mut HostEnd, resp: &mut Vec<u8>, until: Instant| {
            if signalled {
                chan.wait_signalled(seq, until, &mut || proc.poll(), resp)
            } else {
                chan.wait(seq, until, &mut || proc.poll(), resp)
                    .map(|()| Answer::Response)
            }
        };
        let mut waited = wait(&mut self.chan, &mut self.resp, first);
        if waited == Err(WaitError::Timeout) && mark.is_some_and(|m| self.chan.served_past(m)) {
            waited = wait(&mut self.chan, &mut self.resp, deadline);
        }
        let answer = match waited {
            Ok(a) => a,
            Err(w) => return Err(self.wait_failed(op, w, timeout)),
        };
        if answer == Answer::Signalled {
            return Ok((Response::Ok, answer));
        }
        let (rid, resp) = match decode_response(&self.resp) {
            Ok(r) => r,
            Err(e) => {
                return Err(self.lose(format!("protocol violation: undecodable response: {e}")))
            }
        };
        if rid != id {
            return Err(self.lose(format!(
                "protocol violation: response to request {rid}, expected {id}"
            )));
        }
        if let Response::Error { kind, message } = resp {
            if kind.poisons_worker() {
                self.poisoned = Some((kind, message.clone()));
            }
            return Err(WorkerError::Op { kind, message });
        }
        Ok((resp, Answer::Response))
    }

    /// The error for a wait on the channel (for room, or for an answer) that ended badly; the
    /// worker is lost (killed and reaped) in every case.
    fn wait_failed(&mut self, op: &str, w: WaitError, timeout: Duration) -> WorkerError {
        match w {
            WaitError::Timeout if self.pending_until.is_some() => {
                let msg = format!(
                    "no answer to {op} within {timeout:?}, which covers every queued kernel's deadline: a kernel \
                     (the last one launched was `{}`) ran past its deadline and its worker did not report it; the \
                     worker was killed",
                    self.last_kernel
                );
                self.lose(msg.clone());
                WorkerError::op(ErrorKind::DeadlineExceeded, msg)
            }
            WaitError::Timeout => self.lose(format!("no answer to {op} within {timeout:?}")),
            WaitError::Dead(how) => {
                let lost = self.lose(format!("worker process {how}"));
                if self.proc.ended_by_watchdog() {
                    return WorkerError::op(
                        ErrorKind::DeadlineExceeded,
                        format!("a kernel ran past its deadline with no sync waiting, and its worker process {how}"),
                    );
                }
                lost
            }
            WaitError::Protocol(m) | WaitError::Failed(m) => {
                self.lose(format!("protocol violation: {m}"))
            }
        }
    }

    fn unexpected(&mut self, op: &str, resp: &Response) -> WorkerError {
        self.lose(format!("protocol violation: {op} answered with {resp:?}"))
    }

    /// Marks the worker lost, kills and reaps it.
    pub(crate) fn lose(&mut self, why: String) -> WorkerError {
        self.proc.kill();
        self.lost = Some(why.clone());
        WorkerError::Lost(why)
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
    pub(crate) fn wait_ready(mut self, timeout: Duration) -> Result<Worker, WorkerError> {
        let proc = self.0.proc.clone();
        let r = self
            .0
            .chan
            .wait_ready(Instant::now() + timeout, &mut || proc.poll());
        let why = match r {
            Ok(()) => return Ok(self.0),
            Err(WaitError::Failed(m)) => m,
            Err(WaitError::Dead(how)) => format!("worker process {how} before it was ready"),
            Err(WaitError::Timeout) => format!("worker not ready within {timeout:?}"),
            Err(WaitError::Protocol(m)) => format!("protocol violation during start: {m}"),
        };
        self.0.lose(why.clone());
        Err(WorkerError::Spawn(why))
    }
}

/// `t + d`, saturating at a century from `t` (an absurd configured deadline must not panic).
fn later(t: Instant, d: Duration) -> Instant {
    t.checked_add(d)
        .unwrap_or_else(|| t + Duration::from_secs(100 * 365 * 86_400))
}

fn offset(addr: u64, by: usize) -> Result<u64, WorkerError> {
    addr.checked_add(by as u64).ok_or_else(|| {
        WorkerError::op(
            ErrorKind::OutOfBounds,
            format!("{addr:#x}+{by} overflows the address space"),
        )
    })
}

/// Starts a short-lived worker on `backend`, asks it what it serves, and ends it: whether the
/// backend works on this machine, and its device. The error says why not, in the worker's words
/// (e.g. [`crate::backend::cuda::NO_DRIVER`]). Takes a CUDA context's start (~150 ms) on a GPU.
pub fn probe(command: &WorkerCommand, backend: BackendKind) -> Result<WorkerInfo, String> {
    let mut w = Worker::spawn(command, backend, u64::MAX, Duration::from_secs(10)).map_err(
        |e| match e {
            WorkerError::Spawn(m) => m,
            other => other.to_string(),
        },
    )?;
    let info = w.info().map_err(|e| e.to_string());
    w.kill();
    info
}

/// [`probe`] for the cuda backend.
pub fn probe_cuda(command: &WorkerCommand) -> Result<WorkerInfo, String> {
    probe(command, BackendKind::Cuda)
}

/// The emulator step limit that stands in for `deadline` (see [`EMU_LANE_INSTRUCTIONS_PER_SECOND`]).
pub fn emu_step_limit(deadline: Duration) -> u64 {
    static CORES: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let cores =
        *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u64));
    let steps = deadline.as_secs_f64() * (EMU_LANE_INSTRUCTIONS_PER_SECOND * cores) as f64;
    // `as` saturates; u64::MAX means "no limit" to the emulator, so stay below it.
    (steps as u64).clamp(1, u64::MAX - 1)
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
