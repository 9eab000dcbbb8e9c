//! The local host: a [`Runner`] whose tasklets lease this machine's GPU, from one lease manager over
//! one worker pool. Tasklets are compiled once ([`Host::load`]) and run many times.

use crate::config::WorkerPolicy;
use crate::config::{Manifest, Policy};
use crate::gpu::LocalGpu;
use crate::lease::{Accounting, Device, LeaseManager};
use crate::runner::{RunError, Runner, Tasklet};
use std::sync::Arc;
use tasklet_worker::{BackendKind, Pool, PoolConfig, WorkerCommand, WorkerError, WorkerInfo};

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

/// Runs tasklets on this machine's GPUs: a [`Runner`] whose tasklets lease from one lease manager
/// over one worker pool.
pub struct Host {
    runner: Runner,
    leases: Arc<LeaseManager>,
    policy: Policy,
}

impl Host {
    pub fn new(config: HostConfig) -> Result<Host, HostError> {
        let w = &config.policy.workers;
        let pool = Pool::start(PoolConfig {
            command: config.worker,
            backend: config.backend,
            warm: w.warm,
            max_workers: w.max,
            // Each worker's own cap: the emulated device's size; on CUDA the device's memory (the
            // host enforces each lease's grant before anything reaches a worker).
            device_memory: match config.backend {
                BackendKind::Emu => w.emu_memory,
                BackendKind::Cuda => u64::MAX,
            },
            op_timeout: w.op_timeout,
            reuse: w.reuse,
        })?;
        // The device is what the backend says it is: ask a (warm) worker. This also proves the
        // backend works here before anything is promised to a tasklet.
        let info = {
            let mut worker = pool.acquire()?;
            let info = worker.info();
            pool.release(worker);
            info?
        };
        let sizing = Sizing::new(config.backend, w, &info);
        if let Some(note) = &sizing.note {
            eprintln!("tasklet: {note}");
        }
        pool.set_limits(sizing.warm, sizing.max_workers);
        let device = Device {
            index: 0,
            name: info.device.clone(),
            backend: config.backend.as_str(),
            total_memory: sizing.capacity,
            device_memory: info.device_memory,
            compute_capability: info.compute_capability,
            uuid: info.uuid.clone(),
            driver_version: info.driver_version,
            pinned_data: info.pinned_data,
            launch_limits: info.launch_limits,
        };
        let leases = LeaseManager::start(pool, device);
        Ok(Host {
            runner: Runner::new()?,
            leases,
            policy: config.policy,
        })
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

    /// Compiles the manifest's component; it is granted the intersection of its manifest and the
    /// host's policy.
    pub fn load(&self, manifest: Manifest) -> Result<Tasklet, HostError> {
        let grant = self.policy.grant(&manifest);
        self.runner.load(manifest, grant)
    }

    /// Runs a tasklet once on `input`, its GPU operations on this machine. Whatever the outcome,
    /// every lease it held is released before this returns.
    pub fn run(&self, tasklet: &Tasklet, input: &[u8]) -> Result<Vec<u8>, RunError> {
        let gpu = LocalGpu::new(tasklet.grant, Arc::clone(&self.leases));
        self.runner.run(tasklet, input, Box::new(gpu))
    }

    /// The engine tasklets run on (for running one with its GPU elsewhere).
    pub fn runner(&self) -> &Runner {
        &self.runner
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

    /// The lease manager (for operators, benchmarks and tests that drive workers directly).
    pub fn leases(&self) -> &Arc<LeaseManager> {
        &self.leases
    }
}

/// How much of the device is lent and how many workers run, from the policy and the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sizing {
    /// Bytes lent to leases in all.
    pub capacity: u64,
    pub warm: usize,
    pub max_workers: usize,
    /// Why the policy's numbers were cut, for the operator.
    pub note: Option<String>,
}

impl Sizing {
    /// - emu: capacity is the emulated device (`emu-memory`), capped by `max-device-memory`.
    /// - cuda: every worker process holds a CUDA context, which costs `context-reserve` of device
    ///   memory that leases cannot use. Contexts may take at most half the device: `warm + max`
    ///   workers are cut to fit (max first, keeping one warm worker; with room for a single
    ///   context, one worker and none warm). Capacity is the device's memory less
    ///   `(warm + max) × context-reserve`, capped by `max-device-memory`.
    pub fn new(backend: BackendKind, w: &WorkerPolicy, info: &WorkerInfo) -> Sizing {
        let cap = w.max_device_memory.unwrap_or(u64::MAX);
        if backend == BackendKind::Emu {
            return Sizing {
                capacity: info.memory_total.min(cap),
                warm: w.warm,
                max_workers: w.max.max(1),
                note: None,
            };
        }
        let reserve = w.context_reserve.max(1);
        // Worker processes whose contexts fit in half the device.
        let budget = usize::try_from(info.device_memory / 2 / reserve).unwrap_or(usize::MAX);
        let (mut warm, mut max) = (w.warm, w.max.max(1));
        let mut note = None;
        if warm + max > budget.max(1) {
            if budget <= 1 {
                // Room for one context only: one worker, started on demand.
                (warm, max) = (0, 1);
            } else {
                max = max.min(budget - warm.min(1)).max(1);
                warm = warm.min(budget - max);
            }
            note = Some(format!(
                "the device has {} bytes and each worker's CUDA context is reserved {reserve} bytes \
                 (`context-reserve`); at most half the device goes to contexts, so the pool runs {max} worker(s) \
                 at once and keeps {warm} warm (the policy asks for {} and {})",
                info.device_memory, w.max, w.warm
            ));
        }
        let reserved = reserve.saturating_mul((warm + max) as u64);
        let capacity = info
            .device_memory
            .saturating_sub(reserved)
            .min(info.memory_total)
            .min(cap);
        Sizing {
            capacity,
            warm,
            max_workers: max,
            note,
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.leases.shutdown();
        self.leases.pool().shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(device_memory: u64) -> WorkerInfo {
        WorkerInfo {
            device_memory,
            memory_total: device_memory,
            ..WorkerInfo::default()
        }
    }

    #[test]
    fn cuda_capacity_is_the_device_less_the_contexts_capped_by_policy() {
        let mut p = Policy::default().workers;
        p.warm = 2;
        p.max = 8;
        let gib = 1u64 << 30;
        let s = Sizing::new(BackendKind::Cuda, &p, &info(80 * gib));
        assert_eq!((s.warm, s.max_workers, s.note), (2, 8, None));
        assert_eq!(s.capacity, 80 * gib - 10 * (512 << 20));
        p.max_device_memory = Some(gib);
        assert_eq!(
            Sizing::new(BackendKind::Cuda, &p, &info(80 * gib)).capacity,
            gib
        );
    }

    #[test]
    fn a_small_device_runs_fewer_workers() {
        let mut p = Policy::default().workers;
        p.warm = 2;
        p.max = 8;
        // 4 GiB: contexts may take 2 GiB = 4 contexts of 512 MiB.
        let s = Sizing::new(BackendKind::Cuda, &p, &info(4 << 30));
        assert_eq!((s.warm, s.max_workers), (1, 3));
        assert!(s
            .note
            .as_deref()
            .is_some_and(|n| n.contains("context-reserve")));
        assert_eq!(s.capacity, (4u64 << 30) - 4 * (512 << 20));
        // 1 GiB: one context fits in half of it; one worker, none warm, half the device lent.
        let s = Sizing::new(BackendKind::Cuda, &p, &info(1 << 30));
        assert_eq!((s.warm, s.max_workers, s.capacity), (0, 1, 512 << 20));
        // Even a tiny device gets one worker (and lends what the context leaves, if anything).
        let s = Sizing::new(BackendKind::Cuda, &p, &info(256 << 20));
        assert_eq!((s.warm, s.max_workers, s.capacity), (0, 1, 0));
    }

    #[test]
    fn emu_capacity_is_the_emulated_device() {
        let mut p = Policy::default().workers;
        let s = Sizing::new(BackendKind::Emu, &p, &info(256 << 20));
        assert_eq!(
            (s.capacity, s.warm, s.max_workers),
            (256 << 20, p.warm, p.max)
        );
        p.max_device_memory = Some(1 << 20);
        assert_eq!(
            Sizing::new(BackendKind::Emu, &p, &info(256 << 20)).capacity,
            1 << 20
        );
    }
}
