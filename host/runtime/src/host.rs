//! The host: one wasmtime engine, one linker, one lease manager over one worker pool. Tasklets are
//! compiled once ([`Host::load`]) and run many times, each run in a fresh store.

use crate::bindings;
use crate::config::{Grant, Manifest, Policy};
use crate::lease::{Accounting, Device, LeaseManager};
use crate::state::TaskletState;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tasklet_worker::{BackendKind, Pool, PoolConfig, WorkerCommand, WorkerError};
use wasmtime::component::{Component, Linker};
use wasmtime::{Engine, Store};

/// Granularity of the wall-time limit.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// How to start a host.
#[derive(Debug, Clone)]
pub struct HostConfig {
    pub policy: Policy,
    /// How to start a worker process (e.g. this program with a `worker` argument).
    pub worker: WorkerCommand,
    pub backend: BackendKind,
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("cannot set up the wasm engine: {0}")]
    Engine(String),
    #[error("cannot start GPU workers: {0}")]
    Workers(#[from] WorkerError),
    #[error("cannot load component {path}: {message}")]
    Component { path: String, message: String },
}

/// Why a run did not produce output.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The tasklet's `run` returned an error.
    #[error("the tasklet failed: {0}")]
    Failed(String),
    #[error("the tasklet trapped: {0}")]
    Trapped(String),
    #[error("the tasklet ran past its wall-time limit of {0:?}; raise `wall-time` under [limits] if it needs longer")]
    WallTime(Duration),
    #[error("cannot instantiate the tasklet: {0}")]
    Instantiate(String),
}

/// A compiled tasklet and what it is granted.
pub struct Tasklet {
    pub manifest: Manifest,
    pub grant: Grant,
    pre: bindings::TaskletPre<TaskletState>,
}

pub struct Host {
    engine: Engine,
    linker: Linker<TaskletState>,
    leases: Arc<LeaseManager>,
    policy: Policy,
    ticker: Ticker,
}

impl Host {
    pub fn new(config: HostConfig) -> Result<Host, HostError> {
        let mut wasm = wasmtime::Config::new();
        wasm.wasm_component_model(true).epoch_interruption(true);
        let engine = Engine::new(&wasm).map_err(|e| HostError::Engine(format!("{e:#}")))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| HostError::Engine(format!("{e:#}")))?;
        crate::gpu::add_to_linker(&mut linker).map_err(|e| HostError::Engine(format!("{e:#}")))?;

        let w = &config.policy.workers;
        let pool = Pool::start(PoolConfig {
            command: config.worker,
            backend: config.backend,
            warm: w.warm,
            max_workers: w.max,
            device_memory: w.emu_memory,
            op_timeout: w.op_timeout,
        })?;
        let device = match config.backend {
            BackendKind::Emu => Device {
                index: 0,
                name: "tasklet PTX emulator (CPU)".into(),
                backend: "emu",
                total_memory: w.emu_memory,
                compute_capability: (8, 0),
            },
            BackendKind::Cuda => return Err(HostError::Workers(WorkerError::Spawn("the cuda backend is not built into this host yet".into()))),
        };
        let leases = LeaseManager::start(pool, device);
        let ticker = Ticker::start(engine.clone());
        Ok(Host { engine, linker, leases, policy: config.policy, ticker })
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    pub fn device(&self) -> &Device {
        self.leases.device()
    }

    /// Device memory not granted to any lease.
    pub fn free_memory(&self) -> u64 {
        self.leases.free_memory()
    }

    /// Compiles the manifest's component and links it against the host.
    pub fn load(&self, manifest: Manifest) -> Result<Tasklet, HostError> {
        let path = manifest.component.display().to_string();
        let err = |e: wasmtime::Error| HostError::Component { path: path.clone(), message: format!("{e:#}") };
        let component = Component::from_file(&self.engine, &manifest.component).map_err(err)?;
        let pre = self.linker.instantiate_pre(&component).map_err(err)?;
        let pre = bindings::TaskletPre::new(pre).map_err(err)?;
        let grant = self.policy.grant(&manifest);
        Ok(Tasklet { manifest, grant, pre })
    }

    /// Runs a tasklet once on `input`. Whatever the outcome, every lease it held is released before
    /// this returns.
    pub fn run(&self, tasklet: &Tasklet, input: &[u8]) -> Result<Vec<u8>, RunError> {
        let state = TaskletState::new(tasklet.grant, Arc::clone(&self.leases));
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        let wall = tasklet.grant.limits.wall_time;
        store.set_epoch_deadline((wall.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64 + 1);
        store.epoch_deadline_trap();
        let classify = |e: wasmtime::Error| match e.downcast_ref::<wasmtime::Trap>() {
            Some(wasmtime::Trap::Interrupt) => RunError::WallTime(wall),
            _ => RunError::Trapped(format!("{e:?}")),
        };
        let instance = tasklet.pre.instantiate(&mut store).map_err(|e| RunError::Instantiate(format!("{e:#}")))?;
        let result = instance.call_run(&mut store, input).map_err(classify);
        drop(store);
        result?.map_err(RunError::Failed)
    }

    pub fn accounting(&self) -> Accounting {
        self.leases.accounting()
    }

    /// Process ids of the workers serving live leases.
    pub fn lease_worker_pids(&self) -> Vec<u32> {
        self.leases.worker_pids()
    }

    /// The worker pool behind the leases (for operators, benchmarks and tests).
    pub fn pool(&self) -> &Arc<Pool> {
        self.leases.pool()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.ticker.stop();
        self.leases.shutdown();
        self.leases.pool().shutdown();
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
