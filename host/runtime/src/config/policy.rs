//! The node's policy: the most any tasklet gets, what each tenant gets (`[tenants.NAME]`, see
//! `tenants`), how the node runs its GPU workers, and how much it keeps of deployed tasklets
//! (`[deploy]`, `[store]`). A tasklet is granted the intersection of its manifest and this
//! policy.

use super::devices::{DevicePolicy, RawCuda, RawEmu};
use super::manifest::{GpuRequest, Limits, Manifest};
use super::rights::Rights;
use super::tenants::{TenantCaps, TenantTotals};
use super::units;
use super::value::{key_line, locate, Size, Time};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Caps on every tasklet's limits.
    pub limits: Limits,
    /// Caps on every tasklet's GPU request.
    pub gpu: GpuRequest,
    pub workers: WorkerPolicy,
    /// `[tasklets] deploy`: whether tenants may push and run deployed tasklets on the node at all
    /// (default `true`); a `[tenants.NAME]` section may only take the right away (see
    /// [`Policy::tenant_may_deploy`]).
    pub deploy: bool,
    /// `[tenants.NAME]`: each tenant's caps under `limits` and `gpu`, by tenant name. Empty: every
    /// tenant gets `limits` and `gpu` (see [`Policy::tenant_ceiling`]).
    pub tenants: BTreeMap<String, TenantCaps>,
    /// `[deploy]` and `[store]`: how much a node keeps of deployed tasklets.
    pub deploy_limits: DeployLimits,
    /// `[tasklets] gpu-seconds`: the most device time one tasklet's kernels may take, all its
    /// leases together (a run, or a client's connection to a node); `None`: no cap.
    pub gpu_time: Option<Duration>,
    /// `[emu] devices` and `[cuda] devices`: the devices the node lends, one pool each.
    pub devices: DevicePolicy,
    /// `[tasklets] tenant-max-*`: what each tenant may hold at once, all its connections and
    /// runs together (see [`Policy::tenant_totals`]).
    pub totals: TenantTotals,
}

/// `[deploy]` and `[store]`: the limits of a node's deployed tasklets and of the store they are
/// kept in. Each left out (`None`) keeps the node's default; the node's errors name the key that
/// raises the limit they hit (`max-component-size` under `[deploy]`, …).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeployLimits {
    /// `[deploy] max-component-size`: the largest component a push may carry.
    pub max_component_size: Option<u64>,
    /// `[deploy] warm-tasklets`: linked tasklets kept in memory between runs.
    pub warm_tasklets: Option<usize>,
    /// `[deploy] warm-size`: compiled code those tasklets may account for.
    pub warm_size: Option<u64>,
    /// `[store] max-blob-size`: the largest file (component, manifest) the store keeps.
    pub max_blob_size: Option<u64>,
    /// `[store] compiled-cache-size`: compiled components kept on disk.
    pub compiled_cache_size: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct WorkerPolicy {
    /// Workers kept started and idle so that a lease never waits for a process start.
    pub warm: usize,
    /// Most workers (hence leases) at once on the node.
    pub max: usize,
    /// Longest a kernel may run before its worker is killed (`deadline-exceeded`).
    pub kernel_deadline: Duration,
    /// Longest any other worker operation may take before the worker counts as lost.
    pub op_timeout: Duration,
    /// Device memory of the emulated device (`emu` backend).
    pub emu_memory: u64,
    /// Most device memory lent to leases in all; `None`: the device's memory less
    /// `context_reserve` per worker (and for emu, `emu_memory`).
    pub max_device_memory: Option<u64>,
    /// Device memory set aside for each worker's CUDA context (code, stacks, printf buffer),
    /// which leases cannot use. Also bounds the pool: contexts may take at most half the device.
    pub context_reserve: u64,
    /// Reuse a worker (reset) after its lease ends cleanly; `false` gives every lease a fresh
    /// process and CUDA context (see docs/operating.md).
    pub reuse: bool,
}

/// Default [`WorkerPolicy::context_reserve`]: a CUDA context on a current datacenter GPU takes
/// roughly 300-600 MiB of device memory (local-memory stacks for every resident thread, the
/// printf FIFO and malloc heap, loaded code).
pub const DEFAULT_CONTEXT_RESERVE: u64 = 512 << 20;

/// The most `[workers] max` may say: each worker is a process (on cuda with a device context),
/// and a number past this is a typo, not a machine.
pub const MAX_WORKERS: usize = 4096;

/// The least linear memory a policy may grant a tasklet: one WebAssembly page, in less than
/// which no component runs (a Rust one needs about 1.1 MiB; a small hand-written one may live
/// in a page).
pub const MIN_TASKLET_MEMORY: u64 = 64 << 10;

/// Default `[tasklets] max-persistent`: each persistent kernel holds its worker's GPU for as
/// long as its lease, so a node caps them well under its default 8 workers.
pub const DEFAULT_MAX_PERSISTENT: u32 = 4;

impl Default for Policy {
    fn default() -> Self {
        Policy {
            limits: Limits {
                memory: 1 << 30,
                wall_time: Duration::from_secs(600),
            },
            gpu: GpuRequest {
                max_vram: u64::MAX,
                max_leases: 8,
                max_lease_time: Duration::from_secs(3600),
                max_persistent: DEFAULT_MAX_PERSISTENT,
                rights: Rights::ALL,
            },
            workers: WorkerPolicy {
                warm: 2,
                max: 8,
                kernel_deadline: Duration::from_secs(10),
                op_timeout: Duration::from_secs(30),
                emu_memory: 4 << 30,
                max_device_memory: None,
                context_reserve: DEFAULT_CONTEXT_RESERVE,
                reuse: true,
            },
            deploy: true,
            tenants: BTreeMap::new(),
            deploy_limits: DeployLimits::default(),
            gpu_time: None,
            devices: DevicePolicy::default(),
            totals: TenantTotals::default(),
        }
    }
}

/// What one tasklet may do: its manifest cut down by the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub limits: Limits,
    pub gpu: GpuRequest,
    pub kernel_deadline: Duration,
    /// The most device time the holder's kernels may take, all its leases together
    /// (`gpu-seconds`); `None`: no cap. Once it is used, the next operation fails
    /// `quota-exceeded`, and no kernel is given a deadline past what is left of it.
    pub gpu_time: Option<Duration>,
}

impl Policy {
    pub fn grant(&self, manifest: &Manifest) -> Grant {
        self.ceiling().narrowed(&manifest.limits, &manifest.gpu)
    }

    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Io {
            path: path.into(),
            source,
        })?;
        Policy::parse(&text).map_err(|(line, message)| PolicyError::Invalid {
            path: path.into(),
            line,
            message,
        })
    }

    /// Parses a policy file. Every key is optional; what is left out keeps its default.
    pub fn parse(text: &str) -> Result<Policy, (Option<u32>, String)> {
        let raw: RawPolicy = toml::from_str(text).map_err(|e| locate(text, &e))?;
        let mut p = Policy::default();
        let t = raw.tasklets;
        set(&mut p.limits.memory, t.max_memory.map(|s| s.0));
        set(&mut p.limits.wall_time, t.max_wall_time.map(|t| t.0));
        set(&mut p.gpu.max_vram, t.max_vram.map(|s| s.0));
        set(&mut p.gpu.max_leases, t.max_leases);
        set(&mut p.gpu.max_lease_time, t.max_lease_secs.map(|t| t.0));
        set(&mut p.gpu.max_persistent, t.max_persistent);
        set(&mut p.gpu.rights, t.rights);
        set(&mut p.deploy, t.deploy);
        p.gpu_time = t.gpu_seconds.map(|t| t.0);
        p.totals = t.totals();
        let w = raw.workers;
        set(&mut p.workers.warm, w.warm);
        set(&mut p.workers.max, w.max);
        set(
            &mut p.workers.kernel_deadline,
            w.kernel_deadline.map(|t| t.0),
        );
        set(&mut p.workers.op_timeout, w.op_timeout.map(|t| t.0));
        set(&mut p.workers.emu_memory, w.emu_memory.map(|s| s.0));
        if let Some(m) = w.max_device_memory {
            p.workers.max_device_memory = Some(m.0);
        }
        set(
            &mut p.workers.context_reserve,
            w.context_reserve.map(|s| s.0),
        );
        set(&mut p.workers.reuse, w.reuse);
        p.deploy_limits = DeployLimits {
            max_component_size: raw.deploy.max_component_size.map(|s| s.0),
            warm_tasklets: raw.deploy.warm_tasklets,
            warm_size: raw.deploy.warm_size.map(|s| s.0),
            max_blob_size: raw.store.max_blob_size.map(|s| s.0),
            compiled_cache_size: raw.store.compiled_cache_size.map(|s| s.0),
        };
        p.tenants = raw
            .tenants
            .into_iter()
            .map(|(name, t)| (name, t.into_caps()))
            .collect();
        p.devices = DevicePolicy::from_raw(raw.emu, raw.cuda).map_err(|m| (None, m))?;
        let at = |table: &str, key: &str| key_line(text, table, key);
        if p.workers.max == 0 || p.workers.max > MAX_WORKERS {
            return Err((
                at("workers", "max"),
                format!(
                    "`[workers] max` is {}: it is from 1 to {MAX_WORKERS} (each worker is a process, on cuda with a \
                     device context of its own)",
                    p.workers.max
                ),
            ));
        }
        if p.workers.warm > p.workers.max {
            return Err((
                at("workers", "warm").or(at("workers", "max")),
                format!(
                    "`[workers] warm` is {}, more than `max` ({}): the node never holds more workers than `max`; \
                     make `warm` at most {}",
                    p.workers.warm, p.workers.max, p.workers.max
                ),
            ));
        }
        for (key, zero) in [
            ("kernel-deadline", p.workers.kernel_deadline.is_zero()),
            ("op-timeout", p.workers.op_timeout.is_zero()),
        ] {
            if zero {
                return Err((
                    at("workers", key),
                    format!("`[workers] {key}` must be greater than zero"),
                ));
            }
        }
        if p.workers.emu_memory == 0 {
            return Err((
                at("workers", "emu-memory"),
                "`[workers] emu-memory` is 0: the emulated device would have no memory to lend; give it a size such as \"4GiB\""
                    .into(),
            ));
        }
        if p.gpu.max_lease_time.is_zero() {
            return Err((
                at("tasklets", "max-lease-secs"),
                "`[tasklets] max-lease-secs` is zero: no lease could be held at all; give it a time such as \"10m\""
                    .into(),
            ));
        }
        // Limits no tasklet could run within: every run would fail, in words a manifest cannot
        // mend.
        let runs_within = |table: &str, memory: Option<u64>, wall: Option<Duration>| {
            if let Some(memory) = memory.filter(|&m| m < MIN_TASKLET_MEMORY) {
                return Err((
                    at(table, "max-memory"),
                    format!(
                        "`[{table}] max-memory` is {}: no tasklet runs in less than one page of linear memory ({}; a \
                         Rust component needs about 1.1 MiB); give it a size such as \"64MiB\"",
                        units::format_size(memory),
                        units::format_size(MIN_TASKLET_MEMORY)
                    ),
                ));
            }
            if wall.is_some_and(|w| w.is_zero()) {
                return Err((
                    at(table, "max-wall-time"),
                    format!("`[{table}] max-wall-time` is zero: every run would be out of time at once; give it a time such as \"30s\""),
                ));
            }
            Ok(())
        };
        runs_within("tasklets", Some(p.limits.memory), Some(p.limits.wall_time))?;
        for (name, caps) in &p.tenants {
            runs_within(
                &format!("tenants.{name}"),
                caps.max_memory,
                caps.max_wall_time,
            )?;
            if caps.max_lease_time.is_some_and(|t| t.is_zero()) {
                return Err((
                    at(&format!("tenants.{name}"), "max-lease-secs"),
                    format!(
                        "`[tenants.{name}] max-lease-secs` is zero: no lease of the tenant could be held; give it a \
                         time such as \"10m\", or leave it out to keep `[tasklets]`'s"
                    ),
                ));
            }
        }
        Ok(p)
    }
}

fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *slot = v;
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("cannot read policy {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("policy {path}{}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Invalid {
        path: PathBuf,
        line: Option<u32>,
        message: String,
    },
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawPolicy {
    #[serde(default)]
    tasklets: RawTaskletCaps,
    #[serde(default)]
    workers: RawWorkers,
    #[serde(default)]
    tenants: BTreeMap<String, RawTaskletCaps>,
    #[serde(default)]
    deploy: RawDeploy,
    #[serde(default)]
    store: RawStore,
    #[serde(default)]
    emu: RawEmu,
    #[serde(default)]
    cuda: RawCuda,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawDeploy {
    max_component_size: Option<Size>,
    warm_tasklets: Option<usize>,
    warm_size: Option<Size>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawStore {
    max_blob_size: Option<Size>,
    compiled_cache_size: Option<Size>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawTaskletCaps {
    max_memory: Option<Size>,
    max_wall_time: Option<Time>,
    max_vram: Option<Size>,
    max_leases: Option<u32>,
    max_lease_secs: Option<Time>,
    max_persistent: Option<u32>,
    rights: Option<Rights>,
    deploy: Option<bool>,
    gpu_seconds: Option<Time>,
    tenant_max_leases: Option<u32>,
    tenant_max_vram: Option<Size>,
    tenant_max_runs: Option<u32>,
    tenant_max_deployments: Option<u32>,
}

impl RawTaskletCaps {
    fn totals(&self) -> TenantTotals {
        TenantTotals {
            leases: self.tenant_max_leases,
            vram: self.tenant_max_vram.map(|s| s.0),
            runs: self.tenant_max_runs,
            deployments: self.tenant_max_deployments,
        }
    }

    fn into_caps(self) -> TenantCaps {
        TenantCaps {
            max_memory: self.max_memory.map(|s| s.0),
            max_wall_time: self.max_wall_time.map(|t| t.0),
            max_vram: self.max_vram.map(|s| s.0),
            max_leases: self.max_leases,
            max_lease_time: self.max_lease_secs.map(|t| t.0),
            max_persistent: self.max_persistent,
            rights: self.rights,
            deploy: self.deploy,
            gpu_time: self.gpu_seconds.map(|t| t.0),
            totals: self.totals(),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawWorkers {
    warm: Option<usize>,
    max: Option<usize>,
    kernel_deadline: Option<Time>,
    op_timeout: Option<Time>,
    emu_memory: Option<Size>,
    max_device_memory: Option<Size>,
    context_reserve: Option<Size>,
    reuse: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::super::rights::Right;
    use super::*;

    #[test]
    fn grant_is_the_intersection() {
        let policy = Policy::parse(
            "[tasklets]\nmax-vram = \"1GiB\"\nmax-leases = 1\nrights = [\"alloc\", \"launch\"]\n[workers]\nwarm = 1\n",
        )
        .unwrap();
        assert_eq!(policy.workers.warm, 1);
        let manifest = Manifest::parse(
            "name='t'\ncomponent='t.wasm'\n[gpu]\nmax-vram='4GiB'\nmax-leases=3\nmax-lease-secs='10s'\nrights=['alloc','read','launch']\n",
            Path::new("."),
        )
        .unwrap();
        let g = policy.grant(&manifest);
        assert_eq!(g.gpu.max_vram, 1 << 30);
        assert_eq!(g.gpu.max_leases, 1);
        assert_eq!(g.gpu.max_lease_time, Duration::from_secs(10));
        assert!(g.gpu.rights.contains(Right::Launch) && !g.gpu.rights.contains(Right::Read));
    }

    const PERSISTENT_MANIFEST: &str = "name='t'\ncomponent='t.wasm'\n[gpu]\nmax-vram='1GiB'\nmax-lease-secs='10s'\nmax-persistent=6\nrights=['launch','persistent']\n";

    #[test]
    fn persistent_is_allowed_like_every_right_unless_the_policy_lists_rights() {
        let manifest = Manifest::parse(PERSISTENT_MANIFEST, Path::new(".")).unwrap();
        // No `rights` key: every right, as for the others; the default ceiling of 4.
        let d = Policy::parse("").unwrap();
        assert_eq!(d.gpu.max_persistent, DEFAULT_MAX_PERSISTENT);
        let g = d.grant(&manifest);
        assert!(g.gpu.rights.contains(Right::Persistent));
        assert_eq!(g.gpu.max_persistent, 4, "6 asked, 4 allowed");
        // Listing the usual five withholds it.
        let five = Policy::parse(
            "[tasklets]\nrights = [\"alloc\", \"write\", \"read\", \"load\", \"launch\"]\n",
        )
        .unwrap();
        let g = five.grant(&manifest);
        assert!(!g.gpu.rights.contains(Right::Persistent));
        assert!(g.gpu.rights.contains(Right::Launch));
        // The smaller of the two counts, either way round.
        let p = Policy::parse("[tasklets]\nmax-persistent = 2\n").unwrap();
        assert_eq!(p.grant(&manifest).gpu.max_persistent, 2);
        let p = Policy::parse("[tasklets]\nmax-persistent = 100\n").unwrap();
        assert_eq!(p.grant(&manifest).gpu.max_persistent, 6);
        // A manifest without the right asks for none.
        let plain = Manifest::parse(
            "name='t'\ncomponent='t.wasm'\n[gpu]\nmax-vram='1GiB'\nmax-lease-secs='10s'\nrights=['launch']\n",
            Path::new("."),
        )
        .unwrap();
        let g = d.grant(&plain);
        assert_eq!(g.gpu.max_persistent, 0);
        assert!(!g.gpu.rights.contains(Right::Persistent));
    }

    #[test]
    fn max_persistent_of_the_wrong_type_names_key_and_line() {
        for bad in ["\"many\"", "-1", "2.5", "[1]"] {
            for section in ["[tasklets]", "[tenants.dev]"] {
                let text = format!("{section}\nmax-leases = 2\nmax-persistent = {bad}\n");
                let (line, msg) = Policy::parse(&text).unwrap_err();
                assert_eq!(line, Some(3), "{text}: {msg}");
                assert!(msg.contains("max-persistent"), "{text}: {msg}");
            }
        }
        let (line, msg) = Policy::parse("[tasklets]\nrights = [\"persistant\"]\n").unwrap_err();
        assert_eq!(line, Some(2), "{msg}");
        assert!(
            msg.contains("persistant") && msg.contains("launch, persistent"),
            "{msg}"
        );
    }

    #[test]
    fn worker_memory_keys_parse() {
        let p = Policy::parse("[workers]\nmax-device-memory = \"8GiB\"\ncontext-reserve = \"256MiB\"\nreuse = false\n").unwrap();
        assert_eq!(p.workers.max_device_memory, Some(8 << 30));
        assert_eq!(p.workers.context_reserve, 256 << 20);
        assert!(!p.workers.reuse);
        let d = Policy::parse("").unwrap();
        assert_eq!(
            (
                d.workers.max_device_memory,
                d.workers.context_reserve,
                d.workers.reuse
            ),
            (None, DEFAULT_CONTEXT_RESERVE, true)
        );
    }

    #[test]
    fn deploy_and_store_limits_parse() {
        let p = Policy::parse(
            "[deploy]\nmax-component-size = \"8MiB\"\nwarm-tasklets = 4\n[store]\ncompiled-cache-size = \"1GiB\"\n",
        )
        .unwrap();
        assert_eq!(
            p.deploy_limits,
            DeployLimits {
                max_component_size: Some(8 << 20),
                warm_tasklets: Some(4),
                warm_size: None,
                max_blob_size: None,
                compiled_cache_size: Some(1 << 30),
            }
        );
        assert_eq!(
            Policy::parse("").unwrap().deploy_limits,
            DeployLimits::default()
        );
        let (line, msg) = Policy::parse("[store]\nmax-blobs = 1\n").unwrap_err();
        assert_eq!(line, Some(2), "{msg}");
    }

    #[test]
    fn gpu_seconds_caps_every_grant_and_a_tenant_can_only_lower_it() {
        let none = Policy::parse("").unwrap();
        assert_eq!(none.ceiling().gpu_time, None);
        let p = Policy::parse(
            "[tasklets]\ngpu-seconds = 60\n[tenants.dev]\n[tenants.small]\ngpu-seconds = \"500ms\"\n[tenants.big]\ngpu-seconds = 3600\n",
        )
        .unwrap();
        assert_eq!(p.ceiling().gpu_time, Some(Duration::from_secs(60)));
        let of = |t: &str| p.tenant_ceiling(t).unwrap().gpu_time;
        assert_eq!(of("dev"), Some(Duration::from_secs(60)));
        assert_eq!(of("small"), Some(Duration::from_millis(500)));
        assert_eq!(of("big"), Some(Duration::from_secs(60)), "never widened");
        let manifest = Manifest::parse("name='t'\ncomponent='t.wasm'\n", Path::new(".")).unwrap();
        assert_eq!(p.grant(&manifest).gpu_time, Some(Duration::from_secs(60)));
        let small = p.tenant_ceiling("small").unwrap();
        assert_eq!(
            p.ceiling().intersect(&small).gpu_time,
            Some(Duration::from_millis(500))
        );
        let (line, msg) = Policy::parse("[tasklets]\ngpu-seconds = \"lots\"\n").unwrap_err();
        assert_eq!(line, Some(2), "{msg}");
    }

    #[test]
    fn device_lists_parse_and_bad_entries_name_their_line_and_fix() {
        use super::super::devices::DeviceSelector;
        let p = Policy::parse(
            "[emu]\ndevices = [\"16GiB\", \"16GiB\", \"8GiB\"]\n[cuda]\ndevices = [\"0\", 1, \"GPU-ab12\"]\n",
        )
        .unwrap();
        assert_eq!(p.devices.emu, Some(vec![16 << 30, 16 << 30, 8 << 30]));
        assert_eq!(
            p.devices.cuda,
            Some(vec![
                DeviceSelector::Index(0),
                DeviceSelector::Index(1),
                DeviceSelector::Uuid("GPU-ab12".into())
            ])
        );
        assert_eq!(Policy::parse("").unwrap().devices, DevicePolicy::default());
        let (line, msg) = Policy::parse("[emu]\ndevices = [\"16GiB\", \"lots\"]\n").unwrap_err();
        assert_eq!(line, Some(2), "{msg}");
        assert!(msg.contains("lots"), "{msg}");
        let (line, msg) = Policy::parse("[emu]\ndevices = [\"16GB!\"]\n").unwrap_err();
        assert_eq!(line, Some(2), "{msg}");
        assert!(msg.contains("GiB"), "names the units that work: {msg}");
        let (_, msg) = Policy::parse("[emu]\ndevices = []\n").unwrap_err();
        assert!(msg.contains("at least one"), "{msg}");
        let (_, msg) = Policy::parse("[emu]\ndevices = [\"1GiB\", 0]\n").unwrap_err();
        assert!(msg.contains("entry 1 is 0 bytes"), "{msg}");
        let (line, msg) = Policy::parse("[cuda]\ndevices = [\"first\"]\n").unwrap_err();
        assert_eq!(line, Some(2), "{msg}");
        assert!(msg.contains("nvidia-smi -L"), "{msg}");
        let (line, msg) = Policy::parse("[emu]\ndevice = [\"1GiB\"]\n").unwrap_err();
        assert_eq!(line, Some(2), "{msg}");
        assert!(msg.contains("device"), "{msg}");
    }

    #[test]
    fn worker_counts_and_times_out_of_range_are_errors_with_their_line() {
        let (line, msg) = Policy::parse("[workers]\nmax = 4\nwarm = 100000\n").unwrap_err();
        assert_eq!(line, Some(3), "{msg}");
        assert!(msg.contains("more than `max` (4)"), "{msg}");
        let (line, msg) = Policy::parse("[workers]\nwarm = 9\n").unwrap_err();
        assert_eq!(line, Some(2), "the default max is 8: {msg}");
        let (line, msg) = Policy::parse("# workers\n[workers]\nmax = 0\n").unwrap_err();
        assert_eq!(line, Some(3), "{msg}");
        assert!(msg.contains("from 1 to 4096"), "{msg}");
        let (line, msg) = Policy::parse("[workers]\nmax = 5000\nwarm = 1\n").unwrap_err();
        assert_eq!(line, Some(2), "{msg}");
        let (line, msg) = Policy::parse("[workers]\nkernel-deadline = \"0s\"\n").unwrap_err();
        assert_eq!(line, Some(2), "{msg}");
        assert!(msg.contains("kernel-deadline"), "{msg}");
        let (line, msg) =
            Policy::parse("[tasklets]\nmax-vram = \"1GiB\"\nmax-lease-secs = \"0s\"\n")
                .unwrap_err();
        assert_eq!(line, Some(3), "{msg}");
        assert!(msg.contains("no lease could be held"), "{msg}");
        let (line, msg) =
            Policy::parse("[tenants.dev]\nmax-lease-secs = 0\n[tenants.ops]\n").unwrap_err();
        assert_eq!(line, Some(2), "{msg}");
        assert!(msg.contains("[tenants.dev]"), "{msg}");
        let (line, msg) = Policy::parse("[workers]\nmax = 2\nemu-memory = \"0B\"\n").unwrap_err();
        assert_eq!(line, Some(3), "{msg}");
        assert!(msg.contains("emu-memory` is 0"), "{msg}");
        let p = Policy::parse("[workers]\nmax = 4096\nwarm = 4096\n").unwrap();
        assert_eq!((p.workers.warm, p.workers.max), (4096, 4096));
        // Limits no tasklet could run within.
        let (line, msg) = Policy::parse("[tasklets]\nmax-wall-time = \"0s\"\n").unwrap_err();
        assert_eq!(line, Some(2), "{msg}");
        assert!(msg.contains("max-wall-time` is zero"), "{msg}");
        let (line, msg) = Policy::parse("[tasklets]\nmax-memory = 1\n").unwrap_err();
        assert_eq!(line, Some(2), "{msg}");
        assert!(
            msg.contains("less than one page of linear memory (64KiB"),
            "{msg}"
        );
        let (line, msg) =
            Policy::parse("[tenants.ops]\n[tenants.dev]\nmax-memory = \"32KiB\"\n").unwrap_err();
        assert_eq!(line, Some(3), "{msg}");
        assert!(msg.contains("[tenants.dev] max-memory"), "{msg}");
        Policy::parse("[tasklets]\nmax-memory = \"64KiB\"\nmax-wall-time = \"1s\"\n").unwrap();
    }

    #[test]
    fn unknown_policy_key_is_an_error_with_line() {
        let (line, msg) = Policy::parse("[workers]\nwarm = 1\nspare = 2\n").unwrap_err();
        assert_eq!(line, Some(3));
        assert!(msg.contains("spare"), "{msg}");
    }
}
