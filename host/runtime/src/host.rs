//! The local host: a [`Runner`] whose tasklets lease this machine's GPUs, from one lease manager
//! over one worker pool per device (`crate::devices` says which devices). Tasklets are compiled
//! once ([`Host::load`]) and run many times.

use crate::config::WorkerPolicy;
use crate::config::{Manifest, Policy};
use crate::devices::{self, PlanError, SlotPlan};
use crate::gpu::LocalGpu;
use crate::lease::{Accounting, Device, DeviceUsage, LeaseManager};
use crate::runner::{RunError, Runner, Tasklet};
use std::sync::Arc;
use std::time::Duration;
use tasklet_worker::nvml::{self, Inventory};
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
    /// A component's bytes that do not compile: why, in one line.
    #[error("{0}")]
    Compile(String),
    #[error("cannot lend the policy's devices: {0}")]
    Devices(#[from] PlanError),
    #[error("device {index}: the worker bound to {asked} reports device {found:?}; check `[cuda] devices` against `tasklet inventory`")]
    Binding {
        index: usize,
        asked: String,
        found: String,
    },
}

/// `text` on one line: each run of line breaks (and the whitespace around it) becomes one
/// space. Engine and parser messages sometimes span lines; a one-line error must not.
pub fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(line);
    }
    out
}

/// How long the NVML inventory may take when a cuda host starts.
const NVML_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs tasklets on this machine's GPUs: a [`Runner`] whose tasklets lease from one lease manager
/// over one worker pool.
pub struct Host {
    runner: Runner,
    leases: Arc<LeaseManager>,
    policy: Policy,
}

impl Host {
    pub fn new(config: HostConfig) -> Result<Host, HostError> {
        // The engine first: once the pools run, a failure here would leave their workers up.
        let runner = Runner::new()?;
        // Which devices: on cuda from NVML, read by a short-lived worker (the host process never
        // loads NVIDIA libraries).
        let inventory: Result<Inventory, String> = match config.backend {
            BackendKind::Cuda => nvml::inventory_via_worker(&config.worker, NVML_TIMEOUT),
            BackendKind::Emu => Err("the emulator has no NVML devices".into()),
        };
        let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        let plan = devices::plan(
            config.backend,
            &config.policy.devices,
            config.policy.workers.emu_memory,
            inventory.as_ref().map_err(String::as_str),
            visible.as_deref(),
        )?;
        // Every device's pool starts its workers at once, then each is described from its first
        // worker: a worker's start is mostly the driver's (about half a second on the H200
        // machines), and one device's need not wait for another's.
        let mut pools: Vec<Arc<Pool>> = Vec::with_capacity(plan.len());
        let described = plan
            .iter()
            .try_for_each(|slot| {
                pools.push(start_pool(&config, slot)?);
                Ok(())
            })
            .and_then(|()| {
                (plan.iter().zip(&pools).enumerate())
                    .map(|(index, (slot, pool))| {
                        let device =
                            describe_slot(&config, index, slot, pool, inventory.as_ref().ok())?;
                        Ok((Arc::clone(pool), device))
                    })
                    .collect::<Result<Vec<_>, HostError>>()
            });
        let slots = match described {
            Ok(slots) => slots,
            Err(e) => {
                for pool in &pools {
                    pool.shutdown();
                }
                return Err(e);
            }
        };
        let leases = LeaseManager::start_devices(slots);
        Ok(Host {
            runner,
            leases,
            policy: config.policy,
        })
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The first device the host lends (device 0).
    pub fn device(&self) -> &Device {
        self.leases.device()
    }

    /// Every device the host lends, by index.
    pub fn devices(&self) -> &[Device] {
        self.leases.devices()
    }

    /// Device memory not granted to any lease, every device together.
    pub fn free_memory(&self) -> u64 {
        self.leases.free_memory()
    }

    /// Memory of device `index` not granted to any lease.
    pub fn free_memory_on(&self, index: u32) -> u64 {
        self.leases.free_memory_on(index)
    }

    /// Each device's leases, memory and GPU time.
    pub fn device_usage(&self) -> Vec<DeviceUsage> {
        self.leases.device_usage()
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

    /// The worker pool of device 0 (for operators, benchmarks and tests).
    pub fn pool(&self) -> &Arc<Pool> {
        self.leases.pool()
    }

    /// Each device's worker pool, by device index.
    pub fn pools(&self) -> &[Arc<Pool>] {
        self.leases.pools()
    }

    /// The lease manager (for operators, benchmarks and tests that drive workers directly).
    pub fn leases(&self) -> &Arc<LeaseManager> {
        &self.leases
    }
}

/// Starts device slot `index`'s pool and asks one of its workers what the device is. This also
/// proves the backend works there before anything is promised to a tasklet.
/// Starts `slot`'s pool: its warm workers start in the background.
fn start_pool(config: &HostConfig, slot: &SlotPlan) -> Result<Arc<Pool>, HostError> {
    let w = &config.policy.workers;
    let pool = Pool::start_bound(
        PoolConfig {
            command: config.worker.clone(),
            backend: config.backend,
            warm: w.warm,
            max_workers: w.max,
            // Each worker's own cap: the emulated device's size; on CUDA the device's memory (the
            // host enforces each lease's grant before anything reaches a worker).
            device_memory: match config.backend {
                BackendKind::Emu => slot.emu_memory,
                BackendKind::Cuda => u64::MAX,
            },
            op_timeout: w.op_timeout,
            reuse: w.reuse,
        },
        slot.binding.clone(),
    )?;
    Ok(pool)
}

/// Describes device `index` from a worker of its pool (waiting for the first to start), checks
/// the worker is on the GPU the slot names, and sizes the pool to the device. The caller shuts
/// the pool down on an error.
fn describe_slot(
    config: &HostConfig,
    index: usize,
    slot: &SlotPlan,
    pool: &Arc<Pool>,
    inventory: Option<&Inventory>,
) -> Result<Device, HostError> {
    let w = &config.policy.workers;
    let info = pool.acquire().and_then(|mut worker| {
        let info = worker.info();
        pool.release(worker);
        info
    })?;
    // A worker bound to a GPU must not see another GPU of this machine (a MIG instance reports
    // its parent's UUID, so only GPU UUIDs are compared; a UUID NVML does not list is a driver
    // that ignores the binding, such as the tests' fake one, with no other GPU to confuse).
    let other_gpu = |uuid: &str| {
        inventory.is_some_and(|inv| inv.gpus.iter().any(|g| nvml::same_uuid(&g.uuid, uuid)))
    };
    if let Some(asked) = slot.binding.uuid.as_deref() {
        if asked.starts_with("GPU-") && other_gpu(&info.uuid) && !nvml::same_uuid(asked, &info.uuid)
        {
            return Err(HostError::Binding {
                index,
                asked: asked.to_owned(),
                found: info.uuid.clone(),
            });
        }
    }
    // Slots that share a device share its memory equally.
    let share = u64::from(slot.share.max(1));
    let slot_info = WorkerInfo {
        device_memory: info.device_memory / share,
        memory_total: info.memory_total / share,
        ..info.clone()
    };
    let sizing = Sizing::new(config.backend, w, &slot_info);
    if let Some(note) = &sizing.note {
        eprintln!("tasklet: device {index}: {note}");
    }
    pool.set_limits(sizing.warm, sizing.max_workers);
    let uuid = match (config.backend, slot.binding.uuid.as_deref()) {
        (BackendKind::Emu, _) => format!("emu-{index}"),
        (BackendKind::Cuda, Some(bound)) if !bound.starts_with("GPU-") => bound.to_owned(),
        _ => info.uuid.clone(),
    };
    let device = Device {
        index: index as u32,
        name: info.device.clone(),
        backend: config.backend.as_str(),
        total_memory: sizing.capacity,
        device_memory: slot_info.device_memory,
        compute_capability: info.compute_capability,
        uuid,
        driver_version: info.driver_version,
        pinned_data: info.pinned_data,
        launch_limits: info.launch_limits,
    };
    Ok(device)
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
        self.leases.shutdown_pools();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_joins_lines() {
        assert_eq!(one_line("a\n\n  b  \nc"), "a b c");
        assert_eq!(one_line("plain"), "plain");
        assert_eq!(one_line(""), "");
    }

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
