//! Persistent kernels (`Backend::launch_persistent`): a kernel that runs beside everything else
//! the worker does, for as long as its lease, exchanging messages with the host through mapped
//! memory (`device_map`, `crate::contract::actor`).
//!
//! - It is a cooperative launch (`cuLaunchCooperativeKernel`), so its blocks may synchronise
//!   grid-wide (cooperative groups' `this_grid().sync()`). Checked before it is launched: its
//!   whole grid fits on the device at once (`occupancy`, naming both numbers), and the device
//!   launches cooperative kernels at all (`CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH`).
//! - It runs on a stream of its own, the *actor stream* (non-blocking, created at the first such
//!   launch and kept), never on the worker's stream: `sync`, the launch queue's waits, its
//!   completion events, its cached graphs and its GPU-time segments (`launch`) never include it or
//!   wait for it, and the watchdog never sees it, so it has no deadline. The host stops it through
//!   its control block and, past a grace period, by ending the worker.
//! - Its end is learnt without blocking the serving thread: an event recorded on the actor stream
//!   behind the kernel is polled every [`POLL`] by a thread of this module, the *actor watcher*
//!   (started with the first launch, made current on the context). Done: the kernel returned; an
//!   error: the context faulted (a sticky error, the kernel's or another of the lease's), which the
//!   watcher writes to the control block and keeps for the serving thread, whose next operation
//!   reports it (the worker is then poisoned). The watcher makes no other driver call. (A host
//!   function on the stream, `cuLaunchHostFunc`, would see a return sooner but is never called
//!   after a fault, so the event would be needed anyway.)
//! - One at a time per worker: a second would queue behind the first on the actor stream, and two
//!   grids that each fit the device at once may not fit together (`occupancy`).
//! - GPU time: the wall time from the launch to the moment the watcher saw the end, counted as it
//!   goes (a running kernel's time so far is included in every answer), added to the launches'
//!   device time. The kernel holds its multiprocessors the whole time, busy or not, so that is what
//!   it costs the device; the emulator charges the same, wall time from start to end.

use std::ffi::c_void;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::driver::*;
use super::errors;
use super::launch::ReadyLaunch;
use crate::contract::actor::{ControlBlock, Exit};
use crate::contract::{quote, ErrorKind};
use crate::worker::backend::BackendError;

/// How often the actor watcher looks at a running persistent kernel's end event: how late, at
/// most, its end shows in the control block.
pub const POLL: Duration = Duration::from_millis(1);
/// How long the watcher sleeps when no persistent kernel runs before it looks again (a launch
/// wakes it at once).
const IDLE_WAIT: Duration = Duration::from_millis(500);
/// `cuEventCreate` flags of the end event: no timing (it is only queried).
const CU_EVENT_DISABLE_TIMING: std::ffi::c_uint = 2;

/// The running persistent kernel.
struct Running {
    control: ControlBlock,
    kernel: Arc<str>,
    module: u32,
    /// Its end event, or none where it could not be recorded (the worker is then poisoned and
    /// the kernel is never seen to end: the host ends the worker).
    done: Option<CuEvent>,
    started: Instant,
}

#[derive(Default)]
struct State {
    running: Option<Running>,
    /// Wall time of the persistent kernels that ended, in nanoseconds.
    ended_nanos: u64,
    /// The fault the watcher saw, as the serving thread reports it.
    fault: Option<BackendError>,
    /// The backend is going away: the watcher returns.
    stop: bool,
}

// SAFETY: the event is a plain handle the driver accepts from any thread of the process; the
// control block is accessed through atomics only.
unsafe impl Send for State {}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing under the lock leaves the state inconsistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The worker's persistent kernel, its stream and its watcher.
pub struct Persistent {
    drv: &'static Driver,
    ctx: CuContext,
    stream: Option<WorkStream>,
    /// The end event, reused from one persistent kernel to the next.
    done: Option<CuEvent>,
    shared: Arc<Shared>,
    watcher: bool,
}

impl Persistent {
    pub fn new(drv: &'static Driver, ctx: CuContext) -> Persistent {
        Persistent {
            drv,
            ctx,
            stream: None,
            done: None,
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                wake: Condvar::new(),
            }),
            watcher: false,
        }
    }

    /// Whether a persistent kernel started here has not yet been seen to end.
    pub fn running(&self) -> bool {
        self.shared.lock().running.is_some()
    }

    /// The running persistent kernel's name, if it is a kernel of module `module`.
    pub fn kernel_of(&self, module: u32) -> Option<Arc<str>> {
        let s = self.shared.lock();
        s.running
            .as_ref()
            .filter(|r| r.module == module)
            .map(|r| Arc::clone(&r.kernel))
    }

    /// The running persistent kernel's name, if one runs.
    pub fn running_kernel(&self) -> Option<Arc<str>> {
        self.shared
            .lock()
            .running
            .as_ref()
            .map(|r| Arc::clone(&r.kernel))
    }

    /// The fault the watcher saw at a persistent kernel's end, if any (the context is lost).
    pub fn fault(&self) -> Option<BackendError> {
        self.shared.lock().fault.clone()
    }

    /// The persistent kernels' GPU time so far (see the module's docs): never goes back.
    pub fn gpu_time(&self) -> Duration {
        let s = self.shared.lock();
        let running = s
            .running
            .as_ref()
            .map_or(Duration::ZERO, |r| r.started.elapsed());
        Duration::from_nanos(s.ended_nanos).saturating_add(running)
    }

    /// The actor stream and the end event, made once; the watcher, started once.
    pub fn prepare(&mut self) -> Result<(), CallError> {
        if self.stream.is_none() {
            let mut s: CuStream = std::ptr::null_mut();
            // SAFETY: valid out-pointer; the context is current on this (the serving) thread.
            check("cuStreamCreate", unsafe {
                (self.drv.stream_create)(&mut s, CU_STREAM_NON_BLOCKING)
            })?;
            self.stream = Some(WorkStream(s));
        }
        if self.done.is_none() {
            let mut e: CuEvent = std::ptr::null_mut();
            // SAFETY: valid out-pointer; context current.
            check("cuEventCreate", unsafe {
                (self.drv.event_create)(&mut e, CU_EVENT_DISABLE_TIMING)
            })?;
            self.done = Some(e);
        }
        if !self.watcher {
            let (shared, drv, ctx) = (Arc::clone(&self.shared), self.drv, self.ctx as usize);
            std::thread::Builder::new()
                .name("tasklet-cuda-actors".into())
                .spawn(move || watch(&shared, drv, ctx as CuContext))
                .map_err(|_| CallError {
                    call: "starting the persistent kernel watcher thread",
                    code: CUDA_ERROR_UNKNOWN,
                })?;
            self.watcher = true;
        }
        Ok(())
    }

    /// `cuLaunchCooperativeKernel` of `l` on the actor stream ([`Persistent::prepare`] made it),
    /// `params` pointing at each of its parameters in its argument block.
    pub fn launch(&self, l: &ReadyLaunch, params: &mut [*mut c_void]) -> Result<(), CuResult> {
        let Some(stream) = self.stream else {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        };
        let params = if params.is_empty() {
            std::ptr::null_mut()
        } else {
            params.as_mut_ptr()
        };
        // SAFETY: a resolved function; `params` and the argument block they point into live
        // across the call, which copies the parameters before returning.
        let r = unsafe {
            (self.drv.launch_cooperative_kernel)(
                l.function,
                l.grid[0],
                l.grid[1],
                l.grid[2],
                l.block[0],
                l.block[1],
                l.block[2],
                l.shared_mem_bytes,
                stream.0,
                params,
            )
        };
        if r == CUDA_SUCCESS {
            Ok(())
        } else {
            Err(r)
        }
    }

    /// The kernel just launched (kernel `kernel` of module `module`, with control block
    /// `control`, already marked started) runs: records its end event behind it and hands it to
    /// the watcher. Where the event cannot be recorded its end can never be seen: the error
    /// (a fault: the worker cannot be reused) says so, and the kernel counts as running.
    pub fn track(
        &mut self,
        control: ControlBlock,
        kernel: Arc<str>,
        module: u32,
    ) -> Result<(), BackendError> {
        let recorded = match (self.done, self.stream) {
            // SAFETY: a live event and stream of ours.
            (Some(e), Some(s)) => match unsafe { (self.drv.event_record)(e, s.0) } {
                CUDA_SUCCESS => Ok(e),
                r => Err(r),
            },
            _ => Err(CUDA_ERROR_INVALID_HANDLE),
        };
        let mut s = self.shared.lock();
        s.running = Some(Running {
            control,
            kernel: Arc::clone(&kernel),
            module,
            done: recorded.ok(),
            started: Instant::now(),
        });
        drop(s);
        self.shared.wake.notify_all();
        match recorded {
            Ok(_) => Ok(()),
            Err(r) => Err(BackendError::new(
                ErrorKind::KernelFault,
                format!(
                    "persistent kernel {} was launched but its end cannot be tracked (cuEventRecord: {}); \
                     this lease's worker cannot be reused",
                    quote::name(&kernel),
                    self.drv.describe(r)
                ),
            )),
        }
    }
}

impl Drop for Persistent {
    fn drop(&mut self) {
        // The stream and event are left to the process's end: a persistent kernel may still run.
        self.shared.lock().stop = true;
        self.shared.wake.notify_all();
    }
}

/// The actor watcher (see the module's docs). Runs until the backend goes away; while a
/// persistent kernel runs it looks every [`POLL`], which the lease bounds (the host ends the
/// worker when the lease ends).
fn watch(shared: &Shared, drv: &'static Driver, ctx: CuContext) {
    // SAFETY: making this process's context current on this thread.
    if unsafe { (drv.ctx_set_current)(ctx) } != CUDA_SUCCESS {
        eprintln!(
            "tasklet worker {}: the persistent kernel watcher could not use the CUDA context; a persistent \
             kernel's end will not show in its control block",
            std::process::id()
        );
        return;
    }
    let mut s = shared.lock();
    loop {
        if s.stop {
            return;
        }
        let Some(done) = s.running.as_ref().map(|r| r.done) else {
            s = shared
                .wake
                .wait_timeout(s, IDLE_WAIT)
                .map_or_else(|p| p.into_inner().0, |(g, _)| g);
            continue;
        };
        let Some(done) = done else {
            // Untracked (see `Persistent::track`): nothing to look at.
            s = shared
                .wake
                .wait_timeout(s, IDLE_WAIT)
                .map_or_else(|p| p.into_inner().0, |(g, _)| g);
            continue;
        };
        drop(s);
        // SAFETY: a live event of ours; no lock held across the driver call.
        let r = unsafe { (drv.event_query)(done) };
        if r == CUDA_ERROR_NOT_READY {
            std::thread::sleep(POLL);
            s = shared.lock();
            continue;
        }
        s = shared.lock();
        // Only this thread ends a running kernel, and no other starts while one runs: it is the
        // one whose event was just queried.
        let Some(ended) = s.running.take() else {
            continue;
        };
        let exit = if r == CUDA_SUCCESS {
            Exit::Returned
        } else {
            let e = errors::async_error(
                drv,
                r,
                &format!(
                    "persistent kernel {} (or a kernel of this lease running beside it)",
                    quote::name(&ended.kernel)
                ),
            );
            let message = e.message.clone();
            s.fault.get_or_insert(e);
            Exit::Faulted(message)
        };
        let nanos = u64::try_from(ended.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        s.ended_nanos = s.ended_nanos.saturating_add(nanos);
        // Under the lock, after `running` was cleared: once the host sees the end, the worker
        // no longer counts the kernel as running (it may unmap, detach and reset).
        ended.control.finish(&exit);
    }
}
