//! Asynchronous launches with deadlines: the queue of launched-but-unfinished kernels, the
//! deadline-aware wait for it, and the watchdog thread that ends the process when a kernel runs
//! past its deadline with nobody waiting.
//!
//! Every launch is followed by an event on the same (legacy default) stream; the queue holds the
//! events in launch order. A kernel's deadline runs from when it could start: its launch, or the
//! moment its predecessor was *seen* finished, whichever is later (seen: by a wait or by the
//! watchdog, which looks every [`WATCHDOG_PERIOD`]). So a legitimate kernel always gets at least
//! its deadline, and a runaway is caught within deadline + one period of becoming the head.
//!
//! A wait (`sync`, and every op that must see the kernels finished first) polls the head event:
//! tightly for [`SPIN`], then with sleeps growing to [`MAX_NAP`]. Past the head's deadline it
//! fails with `DeadlineExceeded` — the kernel is still running, and only ending the process stops
//! it (DESIGN.md): the host kills the worker on that error. If nobody waits, the watchdog ends
//! the process itself [`WATCHDOG_GRACE`] after the deadline, with exit status
//! [`crate::serve::EXIT_DEADLINE`], which the host reports as `DeadlineExceeded`.

use std::collections::VecDeque;
use std::ffi::c_uint;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::driver::*;
use super::errors;
use crate::backend::BackendError;
use crate::error::ErrorKind;

/// Most launches in flight; a launch past it first waits for the oldest (deadline-aware), so
/// `cuLaunchKernel` never blocks on a full driver queue behind a runaway kernel.
pub const MAX_PENDING: usize = 512;
/// How often the watchdog looks at the queue.
pub const WATCHDOG_PERIOD: Duration = Duration::from_millis(20);
/// How long past a deadline the watchdog waits for a `sync` to report it before ending the process.
pub const WATCHDOG_GRACE: Duration = Duration::from_millis(250);
/// Tight polling at the start of a wait (a short kernel finishes within it).
const SPIN: Duration = Duration::from_micros(50);
const MAX_NAP: Duration = Duration::from_millis(1);

const CU_EVENT_DISABLE_TIMING: c_uint = 2;

struct Pending {
    event: CuEvent,
    enqueued: Instant,
    deadline: Duration,
    /// The kernel's name, shared with its module (no allocation per launch).
    kernel: Arc<str>,
}

/// The state of the head of the queue.
enum Head {
    Idle,
    /// Running (or waiting to), due by this instant.
    Busy(Instant),
    /// Its event reported this error: the work faulted.
    Fault(CuResult),
}

struct Queue {
    items: VecDeque<Pending>,
    free_events: Vec<CuEvent>,
    /// When the last completion was seen; the next kernel's clock starts no earlier.
    last_done: Instant,
}

// SAFETY: CUDA events are plain handles usable from any thread of the process.
unsafe impl Send for Queue {}

impl Queue {
    /// Pops every finished launch off the front and says what the head is doing.
    fn poll(&mut self, drv: &Driver, now: Instant) -> Head {
        while let Some(head) = self.items.front() {
            // SAFETY: a live event created by this queue.
            match unsafe { (drv.event_query)(head.event) } {
                CUDA_SUCCESS => {
                    if let Some(p) = self.items.pop_front() {
                        self.free_events.push(p.event);
                    }
                    self.last_done = now;
                }
                CUDA_ERROR_NOT_READY => {
                    let start = head.enqueued.max(self.last_done);
                    // (A deadline is at most u64::MAX ns, ~584 years: this does not overflow.)
                    let due = start.checked_add(head.deadline).unwrap_or(start + Duration::from_secs(1 << 34));
                    return Head::Busy(due);
                }
                err => return Head::Fault(err),
            }
        }
        Head::Idle
    }

    fn head_kernel(&self) -> Arc<str> {
        self.items.front().map(|p| p.kernel.clone()).unwrap_or_else(|| Arc::from("?"))
    }

    fn head_deadline(&self) -> Duration {
        self.items.front().map_or(Duration::ZERO, |p| p.deadline)
    }
}

/// The launch queue, shared by the serving thread and the watchdog.
pub struct Timeline {
    drv: &'static Driver,
    q: Mutex<Queue>,
}

impl Timeline {
    /// A timeline with its watchdog thread running (made current on `ctx`).
    pub fn start(drv: &'static Driver, ctx: CuContext) -> Result<Arc<Timeline>, String> {
        let t = Arc::new(Timeline {
            drv,
            q: Mutex::new(Queue {
                items: VecDeque::with_capacity(MAX_PENDING),
                free_events: Vec::with_capacity(64),
                last_done: Instant::now(),
            }),
        });
        // Events up front, so the first launches do not pay for them.
        {
            let mut q = t.lock();
            for _ in 0..16 {
                let e = t.new_event().map_err(|e| format!("cuEventCreate failed: {}", drv.describe(e.code)))?;
                q.free_events.push(e);
            }
        }
        let ctx_addr = ctx as usize;
        let w = Arc::clone(&t);
        std::thread::Builder::new()
            .name("tasklet-cuda-watchdog".into())
            .spawn(move || w.watchdog(ctx_addr as CuContext))
            .map_err(|e| format!("cannot start the kernel watchdog thread: {e}"))?;
        Ok(t)
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Nothing under the lock leaves the queue inconsistent; a panic elsewhere does not matter.
        self.q.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn new_event(&self) -> Result<CuEvent, CallError> {
        let mut e: CuEvent = std::ptr::null_mut();
        // SAFETY: valid out-pointer; context current on this thread.
        check("cuEventCreate", unsafe { (self.drv.event_create)(&mut e, CU_EVENT_DISABLE_TIMING) })?;
        Ok(e)
    }

    /// Launches in flight (not yet seen finished).
    pub fn pending(&self) -> usize {
        self.lock().items.len()
    }

    /// Runs `launch` (which enqueues one kernel on the default stream) and records its completion
    /// event. `launch`'s own error is returned as is; a failure to record the event after a
    /// successful launch is a fault (the kernel would run untracked, beyond any deadline).
    pub fn launch<E>(
        &self,
        kernel: &Arc<str>,
        deadline: Duration,
        launch: impl FnOnce() -> Result<(), E>,
    ) -> Result<Result<(), E>, BackendError> {
        let mut q = self.lock();
        if q.items.len() >= MAX_PENDING {
            drop(q);
            self.wait_for(|q| q.items.len() < MAX_PENDING)?;
            q = self.lock();
        }
        let event = match q.free_events.pop() {
            Some(e) => e,
            None => self.new_event().map_err(|e| errors::call_error(self.drv, e, "tracking a launch"))?,
        };
        if let Err(e) = launch() {
            q.free_events.push(event);
            return Ok(Err(e));
        }
        // SAFETY: a live event; the default stream.
        let r = unsafe { (self.drv.event_record)(event, std::ptr::null_mut()) };
        if r != CUDA_SUCCESS {
            q.free_events.push(event);
            let mut e = errors::kernel_error(self.drv, r, kernel);
            e.kind = ErrorKind::KernelFault;
            return Err(e);
        }
        q.items.push_back(Pending { event, enqueued: Instant::now(), deadline, kernel: Arc::clone(kernel) });
        Ok(Ok(()))
    }

    /// Waits until every launch has finished, each within its deadline.
    pub fn drain(&self) -> Result<(), BackendError> {
        self.wait_for(|q| q.items.is_empty())
    }

    /// Polls until `done(queue)`, failing at the first fault or missed deadline.
    fn wait_for(&self, done: impl Fn(&Queue) -> bool) -> Result<(), BackendError> {
        let started = Instant::now();
        let mut nap = Duration::from_micros(20);
        loop {
            let now = Instant::now();
            let (head, kernel, deadline) = {
                let mut q = self.lock();
                let head = q.poll(self.drv, now);
                if done(&q) {
                    return Ok(());
                }
                match head {
                    Head::Idle => return Ok(()),
                    Head::Busy(due) if now < due => (Some(due), None, Duration::ZERO),
                    Head::Busy(_) => (None, Some(q.head_kernel()), q.head_deadline()),
                    Head::Fault(code) => return Err(errors::kernel_error(self.drv, code, &q.head_kernel())),
                }
            };
            if let Some(kernel) = kernel {
                return Err(BackendError::new(
                    ErrorKind::DeadlineExceeded,
                    format!(
                        "kernel `{kernel}` ran past its deadline of {deadline:?}; a running kernel can only be stopped \
                         with its process, so this lease's worker is ended (raise `kernel-deadline` in the node policy \
                         if kernels legitimately run longer)"
                    ),
                ));
            }
            let due = head.unwrap_or(now);
            if now.duration_since(started) < SPIN {
                std::hint::spin_loop();
                continue;
            }
            std::thread::sleep(nap.min(due.saturating_duration_since(now)).max(Duration::from_micros(1)));
            nap = (nap * 2).min(MAX_NAP);
        }
    }

    fn watchdog(&self, ctx: CuContext) {
        // SAFETY: making this process's context current on this thread.
        if unsafe { (self.drv.ctx_set_current)(ctx) } != CUDA_SUCCESS {
            eprintln!("tasklet worker {}: the kernel watchdog could not use the CUDA context; deadlines are enforced at sync only", std::process::id());
            return;
        }
        loop {
            std::thread::sleep(WATCHDOG_PERIOD);
            let now = Instant::now();
            let mut q = self.lock();
            if q.items.is_empty() {
                continue;
            }
            match q.poll(self.drv, now) {
                Head::Busy(due) if now.checked_sub(WATCHDOG_GRACE).is_some_and(|t| t >= due) => {
                    let kernel = q.head_kernel();
                    let deadline = q.head_deadline();
                    eprintln!(
                        "tasklet worker {}: kernel `{kernel}` ran past its deadline of {deadline:?} with no sync waiting for it; \
                         ending this worker to stop it",
                        std::process::id()
                    );
                    // SAFETY: ends the process at once: no destructors or atexit handlers, which
                    // could block on the running kernel. The driver frees the context's memory.
                    unsafe { libc::_exit(crate::serve::EXIT_DEADLINE) };
                }
                // A fault is reported by the next wait on the serving thread; the process stays
                // until the host ends it.
                Head::Busy(_) | Head::Idle | Head::Fault(_) => {}
            }
        }
    }
}
