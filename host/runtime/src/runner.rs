//! The runner: one wasmtime engine and linker (WASI p2 + `tasklet:gpu`). Tasklets are compiled
//! once ([`Runner::load`]) and run many times, each run in a fresh store whose GPU operations go to
//! the [`GpuService`] the caller gives it: this machine's workers, or a node across the network.

use crate::component_bytes::{not_a_component, PREAMBLE_BYTES};
use crate::config::{Grant, Manifest};
use crate::gpu::GpuService;
use crate::guest_output::GuestOutput;
use crate::host::{one_line, HostError};
use crate::state::TaskletState;
use crate::wit::bindings;
use std::fmt;
use std::io::Read as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use wasmtime::component::{Component, Linker};
use wasmtime::{Engine, Store, UpdateDeadline};

/// Granularity of the wall-time limit, and how soon a [`RunStop`] takes effect.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Why a run did not produce output.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The tasklet's `run` returned an error.
    #[error("the tasklet failed: {0}")]
    Failed(String),
    #[error("the tasklet trapped: {0}")]
    Trapped(String),
    #[error("the tasklet ran past its wall-time limit of {0:?}; raise `wall-time` under [limits] if it needs longer (a policy's `max-wall-time` caps it)")]
    WallTime(Duration),
    #[error("cannot instantiate the tasklet: {0}")]
    Instantiate(String),
    /// The run was stopped from outside ([`RunStop::stop`]) before it ended.
    #[error("the run was stopped before it ended")]
    Stopped,
}

/// Stops a run early, from any thread: e.g. a node's run whose client went away. The tasklet's
/// wasm code traps at its next epoch check, within [`EPOCH_TICK`] of the stop, and a sleep ends
/// at once; a GPU call under way finishes first, bounded as always by the run's wall time.
/// Cloning shares the signal.
#[derive(Debug, Clone, Default)]
pub struct RunStop(Arc<StopSignal>);

#[derive(Debug, Default)]
struct StopSignal {
    stopped: AtomicBool,
    /// Wakes the run's sleeps (see `sleep`).
    woken: tokio::sync::Notify,
}

impl RunStop {
    pub fn new() -> RunStop {
        RunStop::default()
    }

    /// Stops every run given this signal (or a clone of it), now and from now on.
    pub fn stop(&self) {
        self.0.stopped.store(true, Ordering::Release);
        self.0.woken.notify_waiters();
    }

    pub fn is_stopped(&self) -> bool {
        self.0.stopped.load(Ordering::Acquire)
    }

    /// Once the signal is given: [`RunStop::stop`] wakes it, and it is ready at once after.
    pub(crate) async fn stopped(&self) {
        let woken = self.0.woken.notified();
        tokio::pin!(woken);
        // Registered before the flag is read, so that a stop between the two wakes it.
        woken.as_mut().enable();
        if !self.is_stopped() {
            woken.await;
        }
    }
}

/// A compiled tasklet and what it is granted. Cloning is cheap (the compiled code is shared), so
/// one compiled tasklet can serve concurrent runs, each under its own grant if need be.
#[derive(Clone)]
pub struct Tasklet {
    pub manifest: Manifest,
    pub grant: Grant,
    pre: bindings::TaskletPre<TaskletState>,
}

pub struct Runner {
    engine: Engine,
    linker: Linker<TaskletState>,
    ticker: Ticker,
}

impl Runner {
    pub fn new() -> Result<Runner, HostError> {
        let mut wasm = wasmtime::Config::new();
        wasm.wasm_component_model(true).epoch_interruption(true);
        // Every linear memory is a memfd mapping a worker can map too, so bulk transfers go
        // between the device and guest memory in one copy. Copy-on-write initialisation would map
        // a module's data image privately over that memory (and wasmtime only does it for its own
        // mmap memories), so data segments are copied in instead.
        // Memories of finished runs are zeroed and reused (see `guest_memory`);
        // `TASKLET_IDLE_MEMORIES=N` bounds how many are kept idle (0: none, every run maps a new
        // one and unmaps it at its end).
        let idle = std::env::var("TASKLET_IDLE_MEMORIES")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(crate::guest_memory::DEFAULT_IDLE_MEMORIES);
        let creator = crate::guest_memory::GuestMemoryCreator::new(
            idle,
            crate::guest_memory::DEFAULT_KEEP_RESIDENT,
        );
        wasm.with_host_memory(Arc::new(creator))
            .memory_init_cow(false);
        // `TASKLET_PERF_MAP=1`: name the compiled guest code in /tmp/perf-<pid>.map, so `perf`
        // attributes samples to guest functions instead of bare addresses.
        if std::env::var_os("TASKLET_PERF_MAP").is_some_and(|v| v == "1") {
            wasm.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let engine = Engine::new(&wasm).map_err(|e| HostError::Engine(format!("{e:#}")))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| HostError::Engine(format!("{e:#}")))?;
        crate::sleep::add_to_linker(&mut linker)
            .map_err(|e| HostError::Engine(format!("{e:#}")))?;
        crate::wit::add_to_linker(&mut linker).map_err(|e| HostError::Engine(format!("{e:#}")))?;

        let ticker = Ticker::start(engine.clone());
        Ok(Runner {
            engine,
            linker,
            ticker,
        })
    }

    /// Compiles the manifest's component and links it, to run with `grant`.
    pub fn load(&self, manifest: Manifest, grant: Grant) -> Result<Tasklet, HostError> {
        let mut preamble = Vec::with_capacity(PREAMBLE_BYTES);
        let read = std::fs::File::open(&manifest.component)
            .and_then(|f| f.take(PREAMBLE_BYTES as u64).read_to_end(&mut preamble));
        if let (Ok(_), Some(why)) = (read, not_a_component(&preamble)) {
            return Err(HostError::Component {
                path: manifest.component.display().to_string(),
                message: why.into(),
            });
        }
        let component = Component::from_file(&self.engine, &manifest.component)
            .map_err(|e| component_error(&manifest, e))?;
        self.link(manifest, grant, component)
    }

    /// What compiled code from [`Runner::precompile`] depends on besides the component itself:
    /// the engine's version and configuration. Part of any cache key for compiled components, so
    /// an entry compiled by another build or configuration is never loaded.
    pub fn engine_fingerprint(&self) -> String {
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        self.engine.precompile_compatibility_hash().hash(&mut h);
        format!(
            "tasklet-{}-engine-{:016x}",
            env!("CARGO_PKG_VERSION"),
            h.finish()
        )
    }

    /// Compiles a component's bytes into the form [`Runner::load_precompiled`] takes.
    pub fn precompile(&self, wasm: &[u8]) -> Result<Vec<u8>, HostError> {
        let preamble = &wasm[..wasm.len().min(PREAMBLE_BYTES)];
        if let Some(why) = not_a_component(preamble) {
            return Err(HostError::Compile(why.into()));
        }
        self.engine
            .precompile_component(wasm)
            .map_err(|e| HostError::Compile(one_line(&format!("{e:#}"))))
    }

    /// Links a component compiled by [`Runner::precompile`] (of an engine with the same
    /// [`Runner::engine_fingerprint`]), without compiling it again.
    ///
    /// # Safety
    ///
    /// `compiled` must be exactly what `precompile` returned, unaltered: wasmtime runs it as
    /// machine code. Callers keep it where nothing else writes and verify a digest on reading it
    /// back (the node's compiled cache does both).
    pub unsafe fn load_precompiled(
        &self,
        manifest: Manifest,
        grant: Grant,
        compiled: &[u8],
    ) -> Result<Tasklet, HostError> {
        // SAFETY: the caller's contract above.
        let component = unsafe { Component::deserialize(&self.engine, compiled) }
            .map_err(|e| component_error(&manifest, e))?;
        self.link(manifest, grant, component)
    }

    /// As [`Runner::load_precompiled`], from the file at `path`, which wasmtime maps rather than
    /// copies: for a large component that spares copying its compiled form (35 MB for a Python
    /// tasklet) into fresh memory. The file starts with what `precompile` returned; wasmtime
    /// reads its object file by the offsets inside it, so bytes after it (a cache's trailer)
    /// are not read.
    ///
    /// # Safety
    ///
    /// As for [`Runner::load_precompiled`], for the file's first bytes; and the file must not be
    /// written while the tasklet lives, since its pages are mapped.
    pub unsafe fn load_precompiled_file(
        &self,
        manifest: Manifest,
        grant: Grant,
        path: &std::path::Path,
    ) -> Result<Tasklet, HostError> {
        // SAFETY: the caller's contract above.
        let component = unsafe { Component::deserialize_file(&self.engine, path) }
            .map_err(|e| component_error(&manifest, e))?;
        self.link(manifest, grant, component)
    }

    fn link(
        &self,
        manifest: Manifest,
        grant: Grant,
        component: Component,
    ) -> Result<Tasklet, HostError> {
        let pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| component_error(&manifest, e))?;
        let pre = bindings::TaskletPre::new(pre).map_err(|e| component_error(&manifest, e))?;
        Ok(Tasklet {
            manifest,
            grant,
            pre,
        })
    }

    /// Runs a tasklet once on `input` with its GPU operations going to `gpu`. Whatever the
    /// outcome, the service (and with it, for a local one, every lease the run held) is dropped
    /// before this returns.
    ///
    /// The wall-time limit holds whatever the tasklet is doing: epoch interruption stops wasm
    /// code, and the GPU service is told when the run ends, so that no GPU call waits past it (a
    /// host call cannot be interrupted). A run that ends past its limit, however it ended, ran
    /// out of time: [`RunError::WallTime`].
    pub fn run(
        &self,
        tasklet: &Tasklet,
        input: &[u8],
        gpu: Box<dyn GpuService>,
    ) -> Result<Vec<u8>, RunError> {
        self.run_until(tasklet, input, gpu, &RunStop::new(), &GuestOutput::Inherit)
    }

    /// As [`Runner::run`], and stopped early, as [`RunError::Stopped`], once `stop` is: at once
    /// if it already is; what the tasklet prints goes where `output` says.
    pub fn run_until(
        &self,
        tasklet: &Tasklet,
        input: &[u8],
        gpu: Box<dyn GpuService>,
        stop: &RunStop,
        output: &GuestOutput,
    ) -> Result<Vec<u8>, RunError> {
        let (result, teardown) = self.run_leaving_teardown(tasklet, input, gpu, stop, output);
        drop(teardown);
        result
    }

    /// As [`Runner::run_until`], but the run's instance is left to the caller to tear down
    /// (see [`Teardown`]): a node answers first. The GPU service has ended (every lease of the
    /// run given back) by the time this returns, as with `run_until`.
    pub fn run_leaving_teardown(
        &self,
        tasklet: &Tasklet,
        input: &[u8],
        mut gpu: Box<dyn GpuService>,
        stop: &RunStop,
        output: &GuestOutput,
    ) -> (Result<Vec<u8>, RunError>, Teardown) {
        if stop.is_stopped() {
            gpu.end();
            return (Err(RunError::Stopped), Teardown { _store: None });
        }
        let wall = tasklet.grant.limits.wall_time;
        let started = Instant::now();
        let ends = started.checked_add(wall);
        if let Some(ends) = ends {
            gpu.run_ends_at(ends);
        }
        let bounds = crate::sleep::RunBounds {
            ends,
            stop: stop.clone(),
        };
        let state = TaskletState::new(tasklet.grant, gpu, output, bounds);
        let mut store = Store::new(&self.engine, state);
        let result = self.call(tasklet, input, &mut store, ends, stop);
        // Past the limit the guest may have returned an error a cut-short GPU call gave it, or
        // its output, before the next epoch check trapped it: either way it ran out of time.
        let out_of_time = ends.is_some_and(|ends| Instant::now() >= ends);
        store.data_mut().end_gpu();
        let teardown = Teardown {
            _store: Some(store),
        };
        let result = match result {
            Err(e @ (RunError::Stopped | RunError::Instantiate(_))) => Err(e),
            _ if out_of_time => Err(RunError::WallTime(wall)),
            result => result,
        };
        (result, teardown)
    }

    /// Instantiates `tasklet` in `store` and calls its `run` on `input`.
    fn call(
        &self,
        tasklet: &Tasklet,
        input: &[u8],
        store: &mut Store<TaskletState>,
        ends: Option<Instant>,
        stop: &RunStop,
    ) -> Result<Vec<u8>, RunError> {
        let wall = tasklet.grant.limits.wall_time;
        store.limiter(|s| &mut s.limits);
        // One call may carry as much data as the tasklet's memory can hold (wasmtime's default is
        // 128 MiB): a bulk mem-write is bounded by the memory limit, not by a second, smaller one.
        store.set_hostcall_fuel(usize::try_from(tasklet.grant.limits.memory).unwrap_or(usize::MAX));
        // Checked at every tick: past the wall time, or stopped, the wasm traps. By the clock,
        // not by counting ticks: a host call can span several ticks and is one check.
        let stopped = stop.clone();
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            let over = ends.is_some_and(|ends| Instant::now() >= ends);
            Ok(match over || stopped.is_stopped() {
                true => UpdateDeadline::Interrupt,
                false => UpdateDeadline::Continue(1),
            })
        });
        let instance = tasklet
            .pre
            .instantiate(&mut *store)
            .map_err(|e| RunError::Instantiate(format!("{e:#}")))?;
        let result = instance.call_run(&mut *store, input).map_err(|e| {
            match e.downcast_ref::<wasmtime::Trap>() {
                Some(wasmtime::Trap::Interrupt) if stop.is_stopped() => RunError::Stopped,
                Some(wasmtime::Trap::Interrupt) => RunError::WallTime(wall),
                _ => match store.data().limits.refusal() {
                    Some(why) => RunError::Trapped(format!(
                        "{} (likely out of memory: {why})",
                        trap_line(&e)
                    )),
                    None => RunError::Trapped(trap_line(&e)),
                },
            }
        });
        result?.map_err(RunError::Failed)
    }
}

/// What is left of a run once its call returned and its GPU service ended: its instance, its
/// linear memory and its WASI state. Dropping it tears them down: for a tiny run about a
/// quarter of its time (scrubbing the memory for the next instance), which a node spends
/// after it has answered rather than before.
#[must_use = "dropping it is the run's teardown"]
pub struct Teardown {
    // Never read: held to be dropped.
    _store: Option<Store<TaskletState>>,
}

impl fmt::Debug for Teardown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Teardown")
    }
}

fn component_error(manifest: &Manifest, e: wasmtime::Error) -> HostError {
    HostError::Component {
        path: manifest.component.display().to_string(),
        message: one_line(&format!("{e:#}")),
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.ticker.stop();
    }
}

/// Advances the engine's epoch so that wall-time deadlines fire.
struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    fn start(engine: Engine) -> Ticker {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("tasklet-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })
            .ok();
        Ticker { stop, thread }
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A trap as one line: what trapped, and where (the innermost wasm frame, by name where the
/// component keeps names), not the whole backtrace: failures are one line each. What the guest
/// printed before it (a Rust panic's message) went to the tasklet's stderr already.
fn trap_line(e: &wasmtime::Error) -> String {
    let what = e.root_cause().to_string();
    let what = what.strip_prefix("wasm trap: ").unwrap_or(&what);
    let at = e
        .downcast_ref::<wasmtime::WasmBacktrace>()
        .and_then(|trace| trace.frames().first())
        .map(|frame| match frame.func_name() {
            Some(name) => format!(" in {name}"),
            None => format!(" in wasm function {}", frame.func_index()),
        });
    format!("{what}{}", at.unwrap_or_default()).replace('\n', " ")
}
