//! The worker process: map the channel the host made, open the backend, serve until the host goes.
//!
//! Any binary can become a worker by calling [`serve_main`] with the arguments the pool appended
//! (the CLI runs itself as `tasklet worker …`; this crate ships `tasklet-worker`).

use std::panic::{catch_unwind, AssertUnwindSafe};

use std::os::fd::{FromRawFd, OwnedFd};

use crate::attach::Attachments;
use crate::backend::{self, Backend, BackendError, BackendKind, BackendOptions, LaunchRequest};
use crate::error::ErrorKind;
use crate::protocol::{decode_request, encode_response, Request, Response};
use crate::transport::{Incoming, SharedRegion, WorkerEnd};

const USAGE: &str = "usage: <worker> --shm-fd N [--ctl-fd N] [--backend emu|cuda] [--device-memory BYTES] [--host-pid PID] [--emu-threads N] [--null-backend]\n       <worker> --inventory   (print the NVML GPU inventory and exit)";

/// Exit codes of a worker process.
pub const EXIT_OK: i32 = 0;
/// The channel or the backend could not be opened (the host is told why through the channel
/// when it can be).
pub const EXIT_START_FAILED: i32 = 1;
pub const EXIT_USAGE: i32 = 2;
/// The cuda backend's watchdog ended the process because a kernel ran past its deadline with no
/// `sync` waiting for it (the host reports `DeadlineExceeded`).
pub const EXIT_DEADLINE: i32 = 3;

/// What the pool passes a worker. [`WorkerArgs::to_args`] and [`WorkerArgs::parse`] are inverses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerArgs {
    pub shm_fd: i32,
    /// The worker's end of the control socket that carries guest memories' fds
    /// (`crate::fdpass`); without one, the worker refuses to attach guest memory.
    pub ctl_fd: Option<i32>,
    pub backend: BackendKind,
    pub device_memory: u64,
    /// The host's pid: a worker whose parent is no longer this exits (the parent died before the
    /// worker could arm its parent-death signal).
    pub host_pid: Option<i32>,
    pub emu_threads: usize,
    /// Serve with the device-less null backend (see `backend::NullBackend`); for tests and IPC
    /// benchmarks, passed through `WorkerCommand::args`.
    pub null_backend: bool,
}

impl WorkerArgs {
    pub fn to_args(&self) -> Vec<String> {
        let mut v = vec![
            "--shm-fd".into(),
            self.shm_fd.to_string(),
            "--backend".into(),
            self.backend.as_str().into(),
            "--device-memory".into(),
            self.device_memory.to_string(),
            "--emu-threads".into(),
            self.emu_threads.to_string(),
        ];
        if let Some(p) = self.host_pid {
            v.push("--host-pid".into());
            v.push(p.to_string());
        }
        if self.null_backend {
            v.push("--null-backend".into());
        }
        if let Some(fd) = self.ctl_fd {
            v.push("--ctl-fd".into());
            v.push(fd.to_string());
        }
        v
    }

    pub fn parse(args: impl Iterator<Item = String>) -> Result<WorkerArgs, String> {
        let mut shm_fd = None;
        let mut out = WorkerArgs {
            shm_fd: -1,
            ctl_fd: None,
            backend: BackendKind::Emu,
            device_memory: 1 << 30,
            host_pid: None,
            emu_threads: 0,
            null_backend: false,
        };
        let mut args = args;
        while let Some(flag) = args.next() {
            let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
            fn num<T: std::str::FromStr>(name: &str, v: String) -> Result<T, String> {
                v.parse()
                    .map_err(|_| format!("{name}: `{v}` is not a valid number"))
            }
            match flag.as_str() {
                "--shm-fd" => shm_fd = Some(num::<i32>("--shm-fd", value("--shm-fd")?)?),
                "--backend" => {
                    let v = value("--backend")?;
                    out.backend =
                        BackendKind::parse(&v).ok_or_else(|| format!("unknown backend `{v}`"))?;
                }
                "--device-memory" => {
                    out.device_memory = num("--device-memory", value("--device-memory")?)?
                }
                "--host-pid" => out.host_pid = Some(num("--host-pid", value("--host-pid")?)?),
                "--emu-threads" => out.emu_threads = num("--emu-threads", value("--emu-threads")?)?,
                "--null-backend" => out.null_backend = true,
                "--ctl-fd" => out.ctl_fd = Some(num::<i32>("--ctl-fd", value("--ctl-fd")?)?),
                other => return Err(format!("unexpected argument `{other}`")),
            }
        }
        out.shm_fd = shm_fd.ok_or("--shm-fd is required")?;
        Ok(out)
    }
}

/// Runs a worker process: parses `args` (the flags only: strip the program name and any
/// subcommand first), serves requests until the host closes the channel or dies, and returns
/// the process exit code.
pub fn serve_main(args: impl Iterator<Item = String>) -> i32 {
    let mut args = args.peekable();
    if args.peek().is_some_and(|a| a == "--inventory") {
        return crate::nvml::inventory_main();
    }
    let a = match WorkerArgs::parse(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("tasklet worker: {e}\n{USAGE}");
            return EXIT_USAGE;
        }
    };
    // The pool also arms this between fork and exec; arming it again covers workers started
    // some other way. Either way a host that dies takes its workers with it.
    // SAFETY: plain prctl.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    let host_alive = move || a.host_pid.is_none_or(|p| unsafe { libc::getppid() } == p);
    if !host_alive() {
        return EXIT_OK;
    }
    let region = match SharedRegion::from_fd(a.shm_fd) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tasklet worker: {e}");
            return EXIT_START_FAILED;
        }
    };
    let ctl = match a.ctl_fd.map(owned_socket).transpose() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tasklet worker: --ctl-fd: {e}");
            return EXIT_START_FAILED;
        }
    };
    let mut end = WorkerEnd::new(region);
    let cpu = match crate::cpus::from_env(std::process::id()) {
        Ok(cpu) => cpu,
        Err(msg) => {
            end.fail(&msg);
            return EXIT_START_FAILED;
        }
    };
    let (data_ptr, data_len) = end.data_region();
    let opts = BackendOptions {
        device_memory: a.device_memory,
        emu_threads: a.emu_threads,
        null: a.null_backend,
        data_region: Some((data_ptr as usize, data_len)),
        completion_word: Some(end.completion_word()),
    };
    let mut backend = match catch_unwind(|| backend::open(a.backend, &opts)) {
        Ok(Ok(b)) => b,
        Ok(Err(msg)) => {
            end.fail(&msg);
            return EXIT_START_FAILED;
        }
        Err(p) => {
            end.fail(&format!(
                "{} backend panicked while starting: {}",
                a.backend.as_str(),
                panic_message(&*p)
            ));
            return EXIT_START_FAILED;
        }
    };
    // Only the serving thread: the driver's threads and the watchdog, started by now, stay free.
    if let Some(cpu) = cpu {
        if let Err(e) = crate::cpus::pin_current_thread(cpu) {
            end.fail(&format!(
                "{}: cannot pin the worker to CPU {cpu}: {e}",
                crate::cpus::ENV
            ));
            return EXIT_START_FAILED;
        }
    }
    end.ready();
    let mut guests = Attachments::new(ctl);
    serve_guests(&mut end, backend.as_mut(), &mut guests, &mut { host_alive });
    // Before the backend goes: it is told to forget each mapping before it is unmapped.
    guests.detach_all(backend.as_mut());
    EXIT_OK
}

/// Serves requests on `end` until the host closes it or `host_alive` says it is gone.
///
/// Launches the host posted ahead of the worker are taken from the ring together and handed to
/// the backend in one [`Backend::launch_batch`] (see `serve_posted`). Posted frames (launches)
/// get no response: the first one that fails is kept as the *deferred*
/// error and later posted launches are dropped until it is reported. A call arriving while one is
/// held is not performed: it is answered with that error instead — except `free`, which is
/// performed and leaves the error for the next call, and `reset`, which is performed and drops it
/// (it belongs to the lease that just ended). An error that poisons the worker (a fault, a missed
/// deadline) is never dropped: every later call, `reset` included, is answered with it.
///
/// Refuses to attach guest memory (no control socket): see [`serve_guests`].
pub fn serve(end: &mut WorkerEnd, backend: &mut dyn Backend, host_alive: &mut dyn FnMut() -> bool) {
    serve_guests(end, backend, &mut Attachments::new(None), host_alive)
}

/// [`serve`] with the guest memories attached through `guests`' control socket.
pub fn serve_guests(
    end: &mut WorkerEnd,
    backend: &mut dyn Backend,
    guests: &mut Attachments,
    host_alive: &mut dyn FnMut() -> bool,
) {
    // frames[0] takes every request; the rest, the launches taken with a first one.
    let mut frames: Vec<Vec<u8>> = (0..POSTED_BATCH).map(|_| Vec::with_capacity(256)).collect();
    let mut out = Vec::with_capacity(4096);
    let mut deferred: Option<Response> = None;
    loop {
        let posted = match end.wait_request(&mut frames[0], host_alive, &mut || backend.flush()) {
            Incoming::Posted => true,
            Incoming::Call => false,
            Incoming::Closed | Incoming::HostGone => return,
            Incoming::Corrupt(why) => {
                // Nothing after this can be found; the host sees the worker gone (`Lost`).
                eprintln!(
                    "tasklet worker {}: request ring corrupt: {why}",
                    std::process::id()
                );
                return;
            }
        };
        if posted {
            if deferred.is_none() {
                deferred = serve_posted(end, backend, &mut frames);
            }
            continue;
        }
        let (id, resp) = serve_call(end, backend, guests, &frames[0], &mut deferred);
        out.clear();
        encode_response(id, &resp, &mut out);
        if end.respond(&out).is_err() {
            out.clear();
            encode_response(
                id,
                &error(
                    ErrorKind::InvalidArgument,
                    "response too large for the channel".into(),
                ),
                &mut out,
            );
            // A short error frame always fits the message area.
            let _ = end.respond(&out);
        }
    }
}

/// Most posted launches served together (see [`serve_posted`]).
const POSTED_BATCH: usize = 16;

/// What unused slots of a batch hold.
const NO_LAUNCH: LaunchRequest<'static> = LaunchRequest {
    module: 0,
    kernel: "",
    grid: [0; 3],
    block: [0; 3],
    shared_mem_bytes: 0,
    args: &[],
    step_limit: 0,
    deadline_ns: 0,
};

/// Runs the posted launch in `frames[0]` together with the ones the host has already posted
/// behind it (up to [`POSTED_BATCH`], when the worker is behind: [`WorkerEnd::behind`]), through
/// [`Backend::launch_batch`]; the first error, if any, to hold until the next call. Launches
/// behind a failed or malformed one are dropped, as they would be one by one.
fn serve_posted(
    end: &mut WorkerEnd,
    backend: &mut dyn Backend,
    frames: &mut [Vec<u8>],
) -> Option<Response> {
    let mut taken = 1;
    while end.behind() && taken < frames.len() && end.take_ready_posted(&mut frames[taken]) {
        taken += 1;
    }
    if taken == 1 {
        // The hot path of a launch followed by its sync: no batch to fill.
        return match decode_launch(&frames[0]) {
            Ok(l) => launch_batch(backend, &[l]),
            Err(why) => Some(error(ErrorKind::InvalidArgument, why)),
        };
    }
    let mut launches = [NO_LAUNCH; POSTED_BATCH];
    let mut n = 0;
    let mut refused = None;
    for frame in &frames[..taken] {
        match decode_launch(frame) {
            Ok(l) => {
                launches[n] = l;
                n += 1;
            }
            Err(why) => {
                refused = Some(error(ErrorKind::InvalidArgument, why));
                break;
            }
        }
    }
    launch_batch(backend, &launches[..n]).or(refused)
}

/// A posted frame's launch, or why it is refused (an invalid argument).
fn decode_launch(frame: &[u8]) -> Result<LaunchRequest<'_>, String> {
    match decode_request(frame) {
        Ok((_, Request::Launch(l))) => Ok(l),
        Ok((_, req)) => Err(format!(
            "a {} request was posted; only launches may be",
            req.name()
        )),
        Err(e) => Err(format!("malformed posted request: {e}")),
    }
}

/// [`Backend::launch_batch`] with its panics caught (a fault, as in [`guarded`]); the error to
/// defer, naming the launch that failed.
fn launch_batch(backend: &mut dyn Backend, launches: &[LaunchRequest<'_>]) -> Option<Response> {
    if launches.is_empty() {
        return None;
    }
    let launched = catch_unwind(AssertUnwindSafe(|| backend.launch_batch(launches)))
        .unwrap_or_else(|p| {
            Err((
                0,
                BackendError::new(ErrorKind::KernelFault, internal_error(&*p)),
            ))
        });
    launched.err().map(|(i, e)| {
        let kernel = launches.get(i).map_or("?", |l| l.kernel);
        error(
            e.kind,
            format!(
                "an earlier launch of kernel `{kernel}` failed: {}",
                e.message
            ),
        )
    })
}

/// Performs a call, or answers it with the deferred error (see [`serve`]).
fn serve_call(
    end: &mut WorkerEnd,
    backend: &mut dyn Backend,
    guests: &mut Attachments,
    frame: &[u8],
    deferred: &mut Option<Response>,
) -> (u64, Response) {
    let (id, req) = match decode_request(frame) {
        Ok(r) => r,
        Err(e) => {
            return (
                0,
                error(
                    ErrorKind::InvalidArgument,
                    format!("malformed request: {e}"),
                ),
            )
        }
    };
    let poisoned = matches!(deferred, Some(Response::Error { kind, .. }) if kind.poisons_worker());
    match (&req, deferred.is_some()) {
        (_, false) => (id, guarded(end, backend, guests, &req)),
        (_, true) if poisoned => (id, deferred.clone().unwrap_or(Response::Ok)),
        (Request::Free { .. }, true) => (id, guarded(end, backend, guests, &req)),
        (Request::Reset, true) => {
            *deferred = None;
            (id, guarded(end, backend, guests, &req))
        }
        (_, true) => (id, deferred.take().unwrap_or(Response::Ok)),
    }
}

/// Dispatches with the backend's panics caught: a panic leaves its state unknown, so it is
/// reported as a fault, which poisons this worker so the host never reuses it.
fn guarded(
    end: &mut WorkerEnd,
    backend: &mut dyn Backend,
    guests: &mut Attachments,
    req: &Request<'_>,
) -> Response {
    catch_unwind(AssertUnwindSafe(|| dispatch(end, backend, guests, req)))
        .unwrap_or_else(|p| error(ErrorKind::KernelFault, internal_error(&*p)))
}

fn error(kind: ErrorKind, message: String) -> Response {
    Response::Error { kind, message }
}

fn dispatch(
    end: &mut WorkerEnd,
    b: &mut dyn Backend,
    guests: &mut Attachments,
    req: &Request<'_>,
) -> Response {
    let done = |r: Result<(), backend::BackendError>| match r {
        Ok(()) => Response::Ok,
        Err(e) => Response::Error {
            kind: e.kind,
            message: e.message,
        },
    };
    let too_big = |what: &str, len: u64, cap: usize| {
        error(
            ErrorKind::InvalidArgument,
            format!("{what} of {len} bytes exceeds the {cap}-byte data region"),
        )
    };
    match req {
        Request::Ping => Response::Ok,
        Request::Alloc { bytes } => match b.alloc(*bytes) {
            Ok(addr) => Response::Allocated { addr },
            Err(e) => Response::Error {
                kind: e.kind,
                message: e.message,
            },
        },
        Request::Free { addr } => done(b.free(*addr)),
        Request::Write { addr, len } => {
            let cap = end.data_size();
            match usize::try_from(*len).ok().and_then(|n| end.data(n)) {
                Some(data) => done(b.write(*addr, data)),
                None => too_big("write", *len, cap),
            }
        }
        Request::Read { addr, len } => {
            let cap = end.data_size();
            match usize::try_from(*len).ok().and_then(|n| end.data_mut(n)) {
                Some(data) => done(b.read(*addr, data)),
                None => too_big("read", *len, cap),
            }
        }
        Request::Copy { dst, src, len } => done(b.copy(*dst, *src, *len)),
        Request::LoadModule { ptx } => match b.load_module(ptx) {
            Ok(m) => Response::Module {
                id: m.id,
                kernels: m.kernels,
            },
            Err(e) => Response::Error {
                kind: e.kind,
                message: e.message,
            },
        },
        Request::LoadSource { source, options } => match b.load_source(source, options) {
            Ok(m) => Response::Module {
                id: m.id,
                kernels: m.kernels,
            },
            Err(e) => Response::Error {
                kind: e.kind,
                message: e.message,
            },
        },
        Request::UnloadModule { id } => done(b.unload_module(*id)),
        Request::Launch(l) => done(b.launch(l)),
        Request::Sync => done(match end.call_seq() {
            Some(seq) => b.sync_signalling(seq),
            None => b.sync(),
        }),
        Request::Reset => {
            guests.detach_all(b);
            done(b.reset())
        }
        Request::Info => Response::Info(b.info()),
        Request::AttachMemory { id, capacity } => done(guests.attach(b, *id, *capacity)),
        Request::DetachMemory { id } => done(guests.detach(b, *id)),
        Request::WriteFrom {
            addr,
            memory,
            offset,
            len,
        } => match guest_range(b, guests, *memory, *offset, *len) {
            // SAFETY: `range` checked that `len` bytes at `p` lie in the mapping and in the
            // memfd's size; the slice lives only for this copy. The host (guest) may change the
            // bytes meanwhile, which can only change what is copied.
            Ok((p, n)) => done(b.write(*addr, unsafe { std::slice::from_raw_parts(p, n) })),
            Err(e) => done(Err(e)),
        },
        Request::ReadInto {
            addr,
            memory,
            offset,
            len,
        } => match guest_range(b, guests, *memory, *offset, *len) {
            // SAFETY: as for `WriteFrom`; nothing else in this process refers to these bytes.
            Ok((p, n)) => done(b.read(*addr, unsafe { std::slice::from_raw_parts_mut(p, n) })),
            Err(e) => done(Err(e)),
        },
    }
}

/// The checked range of an attached guest memory, as a pointer and a length.
fn guest_range(
    b: &mut dyn Backend,
    guests: &mut Attachments,
    memory: u64,
    offset: u64,
    len: u64,
) -> Result<(*mut u8, usize), backend::BackendError> {
    let p = guests.range(b, memory, offset, len)?;
    // `range` bounded offset + len by a mapping in this address space: it fits a usize.
    Ok((p, len as usize))
}

/// Takes ownership of the inherited control socket `fd`, checking it is an open socket.
fn owned_socket(fd: i32) -> Result<OwnedFd, String> {
    // SAFETY: fstat on an arbitrary number is harmless; ownership is taken only once it is known
    // to be an open socket.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if fd < 0 || unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(format!("fd {fd} is not open"));
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(format!("fd {fd} is not a socket"));
    }
    // SAFETY: open, and handed to this process for good.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// What a panic while serving reports (as a fault: the worker's state is suspect).
fn internal_error(p: &(dyn std::any::Any + Send)) -> String {
    format!("worker internal error: {}", panic_message(p))
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_round_trip() {
        let a = WorkerArgs {
            shm_fd: 5,
            ctl_fd: Some(6),
            backend: BackendKind::Emu,
            device_memory: 123,
            host_pid: Some(42),
            emu_threads: 3,
            null_backend: true,
        };
        assert_eq!(WorkerArgs::parse(a.to_args().into_iter()), Ok(a));
    }

    #[test]
    fn bad_args_are_errors() {
        let p = |v: &[&str]| WorkerArgs::parse(v.iter().map(|s| s.to_string()));
        assert!(p(&[]).is_err());
        assert!(p(&["--shm-fd"]).is_err());
        assert!(p(&["--shm-fd", "x"]).is_err());
        assert!(p(&["--shm-fd", "3", "--backend", "tpu"]).is_err());
        assert!(p(&["--shm-fd", "3", "extra"]).is_err());
        assert_eq!(p(&["--shm-fd", "3"]).unwrap().backend, BackendKind::Emu);
    }

    #[test]
    fn serve_main_refuses_bad_usage() {
        assert_eq!(serve_main(["--nope".to_string()].into_iter()), EXIT_USAGE);
    }
}

#[cfg(test)]
mod deferred_tests {
    use super::*;
    use crate::backend::{LoadedModule, WorkerInfo};
    use crate::protocol::{decode_response, encode_request};
    use crate::transport::{HostEnd, DEFAULT_DATA_SIZE};
    use std::time::{Duration, Instant};

    /// Launches of kernel "bad" fail with `fail_kind`; every op is counted.
    struct Scripted {
        fail_kind: ErrorKind,
        launched: Vec<String>,
        /// The length of each slice `launch_batch` was given.
        batches: Vec<usize>,
        frees: u32,
        resets: u32,
        allocs: u32,
    }

    impl Backend for Scripted {
        fn info(&self) -> WorkerInfo {
            WorkerInfo::default()
        }
        fn alloc(&mut self, _bytes: u64) -> Result<u64, BackendError> {
            self.allocs += 1;
            Ok(0x1000)
        }
        fn free(&mut self, _addr: u64) -> Result<(), BackendError> {
            self.frees += 1;
            Ok(())
        }
        fn write(&mut self, _: u64, _: &[u8]) -> Result<(), BackendError> {
            Ok(())
        }
        fn read(&mut self, _: u64, _: &mut [u8]) -> Result<(), BackendError> {
            Ok(())
        }
        fn copy(&mut self, _: u64, _: u64, _: u64) -> Result<(), BackendError> {
            Ok(())
        }
        fn load_module(&mut self, _: &str) -> Result<LoadedModule, BackendError> {
            Err(BackendError::new(ErrorKind::Unsupported, "no"))
        }
        fn load_source(&mut self, _: &str, _: &[&str]) -> Result<LoadedModule, BackendError> {
            Err(BackendError::new(ErrorKind::Unsupported, "no"))
        }
        fn unload_module(&mut self, _: u32) -> Result<(), BackendError> {
            Ok(())
        }
        fn launch(&mut self, l: &LaunchRequest<'_>) -> Result<(), BackendError> {
            self.launched.push(l.kernel.to_owned());
            if l.kernel == "bad" {
                return Err(BackendError::new(self.fail_kind, "refused"));
            }
            Ok(())
        }
        fn launch_batch(
            &mut self,
            launches: &[LaunchRequest<'_>],
        ) -> Result<(), (usize, BackendError)> {
            self.batches.push(launches.len());
            for (i, l) in launches.iter().enumerate() {
                self.launch(l).map_err(|e| (i, e))?;
            }
            Ok(())
        }
        fn sync(&mut self) -> Result<(), BackendError> {
            Ok(())
        }
        fn reset(&mut self) -> Result<(), BackendError> {
            self.resets += 1;
            Ok(())
        }
    }

    /// Runs `script` as the host against `serve` on a thread; returns the backend afterwards.
    fn run(fail_kind: ErrorKind, script: impl FnOnce(&mut Host)) -> Scripted {
        run_after(fail_kind, |_| {}, script)
    }

    /// [`run`] with `before` run as the host before the worker starts serving.
    fn run_after(
        fail_kind: ErrorKind,
        before: impl FnOnce(&mut Host),
        script: impl FnOnce(&mut Host),
    ) -> Scripted {
        let region = SharedRegion::create(DEFAULT_DATA_SIZE).unwrap();
        // SAFETY: dup of an fd we own, mapped independently as a child would.
        let worker = SharedRegion::from_fd(unsafe { libc::dup(region.fd()) }).unwrap();
        let mut h = Host {
            end: HostEnd::new(region),
            id: 0,
        };
        before(&mut h);
        let t = std::thread::spawn(move || {
            let mut b = Scripted {
                fail_kind,
                launched: vec![],
                batches: vec![],
                frees: 0,
                resets: 0,
                allocs: 0,
            };
            serve(&mut WorkerEnd::new(worker), &mut b, &mut || true);
            b
        });
        script(&mut h);
        h.end.close();
        t.join().unwrap()
    }

    struct Host {
        end: HostEnd,
        id: u64,
    }

    impl Host {
        fn launch(&mut self, kernel: &str) {
            let mut f = Vec::new();
            let l = LaunchRequest {
                module: 1,
                kernel,
                grid: [1; 3],
                block: [1; 3],
                shared_mem_bytes: 0,
                args: &[],
                step_limit: 1,
                deadline_ns: 1,
            };
            encode_request(0, &Request::Launch(l), &mut f);
            self.end
                .post(&f, Instant::now() + Duration::from_secs(5), &mut || None)
                .unwrap();
        }

        fn call(&mut self, req: &Request<'_>) -> Response {
            self.id += 1;
            let mut f = Vec::new();
            encode_request(self.id, req, &mut f);
            let deadline = Instant::now() + Duration::from_secs(5);
            let seq = self.end.send(&f, deadline, &mut || None).unwrap();
            let mut out = Vec::new();
            self.end
                .wait(seq, deadline, &mut || None, &mut out)
                .unwrap();
            let (id, resp) = decode_response(&out).unwrap();
            assert_eq!(id, self.id);
            resp
        }
    }

    fn is_error(r: &Response, kind: ErrorKind, kernel: &str) -> bool {
        matches!(r, Response::Error { kind: k, message } if *k == kind
            && message.starts_with(&format!("an earlier launch of kernel `{kernel}` failed: ")))
    }

    #[test]
    fn a_failed_launch_is_answered_to_the_next_call_instead_of_performing_it() {
        let b = run(ErrorKind::LaunchFailed, |h| {
            h.launch("a");
            h.launch("bad");
            h.launch("c");
            let r = h.call(&Request::Alloc { bytes: 16 });
            assert!(is_error(&r, ErrorKind::LaunchFailed, "bad"), "{r:?}");
            // Reported once.
            assert!(matches!(
                h.call(&Request::Alloc { bytes: 16 }),
                Response::Allocated { .. }
            ));
            // `free` is performed and leaves the error to the next call.
            h.launch("bad");
            assert_eq!(h.call(&Request::Free { addr: 1 }), Response::Ok);
            assert!(is_error(
                &h.call(&Request::Ping),
                ErrorKind::LaunchFailed,
                "bad"
            ));
            // `reset` is performed and drops it.
            h.launch("bad");
            assert_eq!(h.call(&Request::Reset), Response::Ok);
            assert_eq!(h.call(&Request::Ping), Response::Ok);
            h.launch("d");
            assert_eq!(h.call(&Request::Sync), Response::Ok);
        });
        // "c" was dropped behind the failure; the first alloc was not performed.
        assert_eq!(b.launched, ["a", "bad", "bad", "bad", "d"]);
        assert_eq!((b.allocs, b.frees, b.resets), (1, 1, 1));
    }

    #[test]
    fn launches_the_host_got_ahead_with_are_handed_to_the_backend_together() {
        let names: Vec<String> = (0..20)
            .map(|i| {
                if i == 18 {
                    "bad".into()
                } else {
                    format!("k{i}")
                }
            })
            .collect();
        let b = run_after(
            ErrorKind::LaunchFailed,
            |h| {
                // All posted before the worker looks: it takes them POSTED_BATCH at a time.
                for name in &names {
                    h.launch(name);
                }
            },
            |h| {
                assert!(is_error(
                    &h.call(&Request::Ping),
                    ErrorKind::LaunchFailed,
                    "bad"
                ));
                assert_eq!(h.call(&Request::Ping), Response::Ok);
            },
        );
        assert_eq!(b.batches, [POSTED_BATCH, 20 - POSTED_BATCH]);
        // In order, up to and including the failed one; the one behind it dropped.
        assert_eq!(b.launched, names[..19]);
    }

    #[test]
    fn a_malformed_launch_inside_a_batch_ends_it_after_the_launches_before_it() {
        let b = run_after(
            ErrorKind::LaunchFailed,
            |h| {
                h.launch("a");
                h.launch("b");
                h.end
                    .post(
                        &[9, 9, 9],
                        Instant::now() + Duration::from_secs(5),
                        &mut || None,
                    )
                    .unwrap();
                h.launch("c");
            },
            |h| match h.call(&Request::Ping) {
                Response::Error {
                    kind: ErrorKind::InvalidArgument,
                    message,
                } => assert!(message.contains("malformed"), "{message}"),
                other => panic!("{other:?}"),
            },
        );
        assert_eq!(b.batches, [2]);
        assert_eq!(b.launched, ["a", "b"]);
    }

    #[test]
    fn a_poisoning_launch_error_answers_every_later_call_reset_included() {
        let b = run(ErrorKind::KernelFault, |h| {
            h.launch("bad");
            for req in [
                Request::Free { addr: 1 },
                Request::Reset,
                Request::Ping,
                Request::Reset,
            ] {
                let r = h.call(&req);
                assert!(
                    is_error(&r, ErrorKind::KernelFault, "bad"),
                    "{req:?}: {r:?}"
                );
            }
        });
        assert_eq!((b.frees, b.resets), (0, 0));
    }

    #[test]
    fn a_posted_frame_that_is_not_a_launch_is_refused_at_the_next_call() {
        run(ErrorKind::LaunchFailed, |h| {
            let mut f = Vec::new();
            encode_request(0, &Request::Reset, &mut f);
            h.end
                .post(&f, Instant::now() + Duration::from_secs(5), &mut || None)
                .unwrap();
            h.end
                .post(
                    &[1, 2, 3],
                    Instant::now() + Duration::from_secs(5),
                    &mut || None,
                )
                .unwrap();
            match h.call(&Request::Ping) {
                Response::Error {
                    kind: ErrorKind::InvalidArgument,
                    message,
                } => assert!(message.contains("posted"), "{message}"),
                other => panic!("{other:?}"),
            }
            assert_eq!(h.call(&Request::Ping), Response::Ok);
        });
    }
}
