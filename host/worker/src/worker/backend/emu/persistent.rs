//! The emulator's persistent kernels: each runs on threads of its own, one per CTA, from the
//! moment `launch_persistent` starts it until it returns or faults, beside everything else the
//! worker does. Each is a cooperative launch (`Module::launch_cooperative_by_index`): its blocks
//! may synchronise grid-wide (`grid.sync()`) through a workspace of device memory the launch
//! holds until it ends. What the backend keeps of each: whether it still runs, how long it has
//! run, and how many CTAs it holds (all persistent kernels of a worker together hold at most
//! [`EMU_MAX_RESIDENT_CTAS`]).
//!
//! A kernel that ignores its control block cannot be stopped from here: the host ends the worker
//! (and with it the threads) after its grace period.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tasklet_ptx::{DeviceMemory, LaunchParams, Module};

use crate::contract::actor::{ControlBlock, Exit};
use crate::contract::{quote, ErrorKind};
use crate::worker::backend::BackendError;

/// Most CTAs of persistent kernels that run at once on one emulated device: the emulator's
/// co-residency limit. Each CTA is an OS thread of the worker that polls or sleeps for as long as
/// its kernel runs; past a few dozen they would only take turns on the machine's cores (a CI
/// machine has 2), and a grid that large is a mistake more often than a design. A launch past it
/// is refused at once, as a GPU refuses a grid that cannot be resident all at once.
pub const EMU_MAX_RESIDENT_CTAS: u64 = 64;

/// How long the backend waits for the thread of a kernel that has returned to finish writing its
/// control block: the host may have seen the block's exit (written first) and then detach or
/// reset, which must then not be refused as "still running". Writing the block takes
/// microseconds; this bound only matters if the thread is not scheduled.
const SETTLE: Duration = Duration::from_secs(1);

/// Everything a persistent kernel's thread needs, owned: it outlives the request that started it.
pub(super) struct Start {
    pub module: Arc<Module>,
    pub kernel: usize,
    /// The kernel's name, for messages.
    pub name: String,
    pub ctas: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
    pub args: Vec<u8>,
    pub memory: Arc<DeviceMemory>,
}

struct Running {
    ctas: u64,
    started: Instant,
    /// Set by the kernel's thread once the launch has returned, before it writes the control
    /// block.
    returned: Arc<AtomicBool>,
    /// Answers when the launch returned.
    thread: JoinHandle<Instant>,
}

impl Running {
    /// Whether the kernel has ended and its thread has written the control block.
    fn ended(&self) -> bool {
        if self.thread.is_finished() {
            return true;
        }
        if !self.returned.load(Ordering::Acquire) {
            return false;
        }
        let began = Instant::now();
        while !self.thread.is_finished() {
            if began.elapsed() > SETTLE {
                return false;
            }
            std::thread::yield_now();
        }
        true
    }
}

/// The persistent kernels a backend has started.
#[derive(Default)]
pub(super) struct Persistent {
    kernels: Vec<Running>,
    /// The first fault of a kernel started here, set by its thread before it marks the control
    /// block: from then on the worker is unusable, as a GPU context is after a fault.
    fault: Arc<OnceLock<String>>,
}

impl Persistent {
    /// Refuses (`LaunchFailed`) a kernel `name` of `ctas` CTAs that would take the CTAs of running
    /// persistent kernels past [`EMU_MAX_RESIDENT_CTAS`].
    pub fn check_room(&self, name: &str, ctas: u64) -> Result<(), BackendError> {
        let held: u64 = self
            .kernels
            .iter()
            .filter(|k| !k.ended())
            .map(|k| k.ctas)
            .sum();
        if ctas.saturating_add(held) <= EMU_MAX_RESIDENT_CTAS {
            return Ok(());
        }
        let others = if held == 0 {
            String::new()
        } else {
            format!(" ({held} held by persistent kernels already running)")
        };
        Err(BackendError::new(
            ErrorKind::LaunchFailed,
            format!(
                "a persistent kernel {} of {ctas} blocks cannot be resident all at once: the \
                 emulator runs at most EMU_MAX_RESIDENT_CTAS = {EMU_MAX_RESIDENT_CTAS} blocks of \
                 persistent kernels at once{others}; launch fewer blocks, each looping over more \
                 work",
                quote::name(name)
            ),
        ))
    }

    /// Marks `control` started, then runs the kernel on a thread of its own (which runs each CTA
    /// on one more), with no step limit; the thread marks `control` ended once the kernel is.
    pub fn start(&mut self, s: Start, control: ControlBlock) -> Result<(), BackendError> {
        // Before the kernel can read the block: what an earlier kernel left there (a request to
        // terminate) must not stop this one.
        control.start();
        let started = Instant::now();
        let returned = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&returned);
        let name = s.name.clone();
        let ctas = s.ctas;
        let fault = Arc::clone(&self.fault);
        let spawned = std::thread::Builder::new()
            .name("persistent-kernel".into())
            .spawn(move || {
                let params = LaunchParams {
                    grid: s.grid,
                    block: s.block,
                    shared_mem_bytes: s.shared_mem_bytes,
                    args: &s.args,
                    step_limit: u64::MAX,
                    // One thread per CTA: every CTA resident at once.
                    threads: s.ctas as usize,
                };
                // Cooperative: its blocks may wait for each other (`grid.sync()`).
                let ran = catch_unwind(AssertUnwindSafe(|| {
                    s.module
                        .launch_cooperative_by_index(s.kernel, &s.memory, &params)
                }));
                let ended = Instant::now();
                let exit = match ran {
                    Ok(Ok(_)) => Exit::Returned,
                    Ok(Err(e)) => Exit::Faulted(super::exec_error(e).message),
                    Err(_) => Exit::Faulted(format!(
                        "the emulator failed while running kernel {} (a bug in the emulator)",
                        quote::name(&s.name)
                    )),
                };
                if let Exit::Faulted(why) = &exit {
                    // Before the block says so: a host that saw the fault there finds the worker
                    // unusable at its next op.
                    fault.get_or_init(|| {
                        format!("persistent kernel {} faulted: {why}", quote::name(&s.name))
                    });
                }
                seen.store(true, Ordering::Release);
                control.finish(&exit);
                ended
            });
        match spawned {
            Ok(thread) => {
                self.kernels.push(Running {
                    ctas,
                    started,
                    returned,
                    thread,
                });
                Ok(())
            }
            Err(e) => {
                let message = format!(
                    "cannot start a thread for persistent kernel {}: {e}",
                    quote::name(&name)
                );
                control.finish(&Exit::Faulted(message.clone()));
                Err(BackendError::new(ErrorKind::OutOfMemory, message))
            }
        }
    }

    /// The first fault of a kernel started here, once one has faulted (`KernelFault`).
    pub fn fault(&self) -> Option<BackendError> {
        self.fault
            .get()
            .map(|m| BackendError::new(ErrorKind::KernelFault, m.clone()))
    }

    /// Whether a kernel started here has not yet been seen to end.
    pub fn running(&self) -> bool {
        self.kernels.iter().any(|k| !k.ended())
    }

    /// Forgets the kernels whose threads have finished: the wall time they ran, start to end.
    pub fn reap(&mut self) -> Duration {
        let mut ran = Duration::ZERO;
        let (done, running): (Vec<Running>, Vec<Running>) = std::mem::take(&mut self.kernels)
            .into_iter()
            .partition(|k| k.thread.is_finished());
        self.kernels = running;
        for k in done {
            // The thread has finished and catches the launch's panics: join returns at once.
            if let Ok(ended) = k.thread.join() {
                ran = ran.saturating_add(ended.saturating_duration_since(k.started));
            }
        }
        ran
    }

    /// The wall time the kernels not yet reaped have run so far.
    pub fn running_for(&self) -> Duration {
        self.kernels
            .iter()
            .map(|k| k.started.elapsed())
            .fold(Duration::ZERO, Duration::saturating_add)
    }
}
