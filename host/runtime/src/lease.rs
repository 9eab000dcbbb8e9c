//! The lease manager: node-wide VRAM accounting, lease lifetimes, and the reaper that ends expired
//! leases whether or not their tasklet is running.
//!
//! A node lends one or more devices (slots, see `crate::devices`), each with a warm pool of its
//! own and its own books; a lease is placed on one of them (`crate::placement`) and owns one
//! worker process of that device's pool for its lifetime. Ending a lease (drop, expiry, a lost or
//! faulted worker, the tasklet's end) gives the worker back to the pool, which resets and reuses a
//! healthy one and kills a suspect one, and returns the lease's grant to the device's free memory.
//!
//! A lease's byte counter is its own: sessions charge and release memory through
//! [`LeaseManager::alloc`] and [`LeaseManager::free`], which check the grant and move the counter
//! together with the worker's allocation, under the lease's lock.
//!
//! Nothing here waits on a running kernel past what its caller can afford. A lease held by a run
//! is bound to the run's end (its wall-time limit, [`RunLimit`]): no wait under it goes past that,
//! and one that would gives the worker up and ends the lease ([`EndReason::WallTime`]). Freeing
//! memory or unloading a module while the lease's kernels run waits for them only briefly
//! ([`RELEASE_GRACE`]) before giving the worker up ([`EndReason::DroppedWhileBusy`]); ending a
//! lease whose kernels may still run gives its worker up without asking it anything. A worker
//! given up is killed at once and reaped off the caller's path; its memory goes with the process,
//! and the lease's books with the lease, so the accounting returns to baseline exactly.
//!
//! GPU time: every worker reports, with each answer, the device time its launches have taken
//! (`Worker::gpu_time`). After each operation under a lease, and once more as it ends, the
//! difference since the last look is charged to the lease, to its tenant (node-wide, by name) and
//! to its holder's account (one tasklet run, or one client's connection): so the leases' times
//! always sum to their tenant's, and a holder's quota (`gpu-seconds`) sees every lease it held.
//! A kernel stopped at its deadline, whose worker is killed before it can report the time, is
//! charged the deadline it was given ([`Lease::gave_deadline`]) as its lease ends; one still
//! running when its lease ends before then, the time it ran (`Worker::unreported_run`). Either
//! once per lease.
//!
//! Reconciliation: quotas are only real if the books match the device, so when a lease ends with a
//! healthy worker, the worker is asked what it really holds (`info`) and that is compared with the lease's own accounting. A
//! worker that holds a different number of bytes than the lease thinks is not trusted again: it
//! is killed instead of reused, the mismatch is logged, and [`Accounting::mismatches`] counts it.

use crate::config::TenantTotals;
use crate::error::{quota, GpuError};
use crate::module_cache::ModuleCache;
use crate::placement::{self, Candidate, DeviceRequirement};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tasklet_worker::{
    charged_bytes, BackendKind, ErrorKind, LaunchLimits, LoadedModule, Pool, Worker, WorkerError,
    ALLOC_GRANULE,
};

/// How a device refuses a lease when every worker of its pool is leased.
const NO_FREE_WORKER: &str = "has no free GPU worker";

/// A device as leases see it, described by the backend (a worker's `info`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub index: u32,
    pub name: String,
    /// `emu` or `cuda`.
    pub backend: &'static str,
    /// Bytes lent to leases in all: the device's memory less the workers' context reserve,
    /// capped by the policy (`[workers] max-device-memory`). What tasklets see as total memory.
    pub total_memory: u64,
    /// The device's own memory (emu: the emulated size).
    pub device_memory: u64,
    pub compute_capability: (u32, u32),
    /// `GPU-…` (empty for the emulator).
    pub uuid: String,
    /// The CUDA driver's version (12080 = 12.8; 0 for the emulator).
    pub driver_version: u32,
    /// Whether worker data regions are page-locked (pinned-speed copies).
    pub pinned_data: bool,
    /// What one launch may ask of the device, as its workers report it: every launch is checked
    /// against it before it reaches a worker.
    pub launch_limits: LaunchLimits,
}

/// One device's share of the books (for metrics and inventories).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceUsage {
    pub index: u32,
    pub leases: usize,
    pub granted_bytes: u64,
    pub used_bytes: u64,
    /// Device time charged to leases on this device since the host started.
    pub gpu_time: Duration,
}

/// Node-wide totals; after every tasklet has ended they return to zero (`mismatches` stays zero
/// unless a worker's real holdings ever disagreed with a lease's books).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Accounting {
    pub leases: usize,
    pub granted_bytes: u64,
    pub used_bytes: u64,
    /// Leases that ended with their worker holding other than what the lease accounted for.
    pub mismatches: u64,
}

/// How long freeing memory or unloading a module waits for the lease's running kernels before
/// it gives the worker up: a kernel that has about finished is waited for, a busy one is not.
pub const RELEASE_GRACE: Duration = Duration::from_millis(20);

/// How long a lease that ends gives its persistent kernels to return once asked (through their
/// control blocks) before their worker is ended instead.
pub const PERSISTENT_GRACE: Duration = Duration::from_millis(500);

/// The end of the run that holds a lease: when its wall-time limit runs out, and the limit as
/// configured (for messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimit {
    pub ends: Instant,
    pub wall_time: Duration,
}

impl RunLimit {
    /// What an operation cut short by the run's end fails with.
    fn exceeded(&self) -> GpuError {
        GpuError::DeadlineExceeded(format!(
            "the tasklet reached its wall-time limit of {:?} while waiting for the GPU; raise `wall-time` under \
             [limits] if it needs longer (a policy's `max-wall-time` caps it)",
            self.wall_time
        ))
    }
}

/// Why a lease ended; what later operations under it are told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndReason {
    Dropped,
    Expired,
    WorkerLost(String),
    Poisoned(String),
    TaskletEnded,
    /// The holder's run reached its wall-time limit (this one) while waiting for the worker.
    WallTime(Duration),
    /// Memory or a module of the lease was released while its kernels still ran, and the worker
    /// was given up rather than waited for.
    DroppedWhileBusy,
    /// A persistent kernel did not return within its grace period (this one) of being asked to
    /// stop, and its worker was ended.
    ActorUnstoppable(Duration),
    /// The holder's `gpu-seconds` quota ran out while a persistent kernel of the lease ran.
    GpuTimeQuota,
}

impl EndReason {
    fn describe(&self) -> String {
        match self {
            EndReason::Dropped => "the lease was dropped".into(),
            EndReason::Expired => {
                "the lease expired; acquire a new one, or renew before it runs out".into()
            }
            EndReason::WorkerLost(why) => {
                format!("the lease ended when its GPU worker was lost ({why})")
            }
            EndReason::Poisoned(why) => {
                format!("the lease ended after a fatal kernel error ({why})")
            }
            EndReason::TaskletEnded => "the tasklet that held the lease has ended".into(),
            EndReason::WallTime(limit) => format!(
                "the lease ended when the tasklet reached its wall-time limit of {limit:?} while waiting for the GPU \
                 (`wall-time` under [limits])"
            ),
            EndReason::DroppedWhileBusy => "the lease ended when a buffer, module or session of it was dropped while its \
                 kernels still ran: the host gives such a worker up rather than wait for it; sync before dropping \
                 handles while kernels may still run"
                .into(),
            EndReason::ActorUnstoppable(grace) => format!(
                "the lease ended when a persistent kernel did not return within {grace:?} of being asked to stop \
                 (`should_terminate` in its control block): its worker was ended; have the kernel check its control \
                 block between messages"
            ),
            EndReason::GpuTimeQuota => "the lease ended when its persistent kernel used up the tasklet's GPU time \
                 (`gpu-seconds`, set by the node policy): its worker was ended"
                .into(),
        }
    }
}

pub struct Lease {
    pub id: u64,
    pub device: u32,
    /// Bytes granted; allocations under the lease may hold at most this much at once.
    pub granted: u64,
    /// One of a group of leases on distinct devices: its memory is allocated so that the other
    /// workers of the group can copy out of it (see [`LeaseManager::copy_peer`]).
    pub grouped: bool,
    acquired: Instant,
    state: Mutex<LeaseState>,
    /// Bytes charged to the lease's allocations now. Changed only under `state`'s lock (by
    /// allocations, frees and the lease's end), read without it: the node's inventory and
    /// metrics read every lease's, and an operation holding a lease's lock can wait on its
    /// kernels for as long as their deadline (another tenant's inventory must not wait that long).
    used: AtomicU64,
    /// Device time charged to the lease, in nanoseconds.
    gpu_nanos: AtomicU64,
    /// Who else each charge goes to: its tenant's and its holder's counters ([`GpuAccount`]),
    /// and its device's.
    charged_to: [Arc<AtomicU64>; 3],
    /// The least deadline given a kernel under the lease, in nanoseconds (`u64::MAX`: none yet):
    /// what a kernel stopped at its deadline ran at least ([`Lease::gave_deadline`]).
    least_deadline: AtomicU64,
    /// A kernel's unreported time was charged ([`Lease::charge_unreported`]): once per lease,
    /// however many paths see the same kernel stopped.
    unreported_charged: AtomicBool,
    /// The tenant whose totals the lease counts in, until it ends.
    tenant: Arc<str>,
}

/// Where the GPU time of a lease is charged besides the lease itself: its tenant, node-wide, and
/// its holder (a tasklet run, or a client's connection), whose `gpu-seconds` quota counts it.
/// Also what the tenant may hold at once, all its holders together, which every acquire checks.
#[derive(Debug, Clone)]
pub struct GpuAccount {
    /// The tenant's name (`local` for runs on the host itself).
    pub tenant: String,
    /// The holder's counter, in nanoseconds; every lease it acquires adds to it.
    pub holder: Arc<AtomicU64>,
    /// The tenant's `tenant-max-leases` and `tenant-max-vram` (its `runs` are the node's to
    /// count).
    pub totals: TenantTotals,
}

impl GpuAccount {
    /// A fresh holder's account under `tenant`, with no totals.
    pub fn new(tenant: impl Into<String>) -> GpuAccount {
        GpuAccount {
            tenant: tenant.into(),
            holder: Arc::default(),
            totals: TenantTotals::default(),
        }
    }

    /// The device time charged to the holder so far.
    pub fn used(&self) -> Duration {
        Duration::from_nanos(self.holder.load(Ordering::Relaxed))
    }
}

/// The tenant of leases acquired without one ([`LeaseManager::acquire_for`]): the host's own runs.
pub const LOCAL_TENANT: &str = "local";

struct LeaseState {
    /// Present until the lease ends.
    worker: Option<Worker>,
    expires: Instant,
    ended: Option<EndReason>,
    /// The end of the run holding the lease, which bounds every wait under it.
    run: Option<RunLimit>,
    /// The worker's GPU time when the lease last charged for it (`Worker::gpu_time`, which
    /// counts from the worker's start, earlier leases included).
    gpu_seen: Duration,
    /// What each loaded module's `.global` variables are charged (by the worker's module id;
    /// none for a module without them): part of the lease's `used`, but not of what its worker
    /// reports holding in allocations.
    variables: HashMap<u32, u64>,
    /// A failure a release (free, unload) was answered with in its place: an earlier launch's,
    /// which the worker holds for its next call. The release was then made again; the failure
    /// is owed to the next operation the lease's holder asks for
    /// ([`LeaseManager::with_worker_owing`]), which returns it instead of being performed, as
    /// the worker would have.
    owed: Option<WorkerError>,
}

impl LeaseState {
    /// The lease's worker; `Lost` once the lease has none (it ended).
    fn worker(&mut self) -> Result<&mut Worker, WorkerError> {
        self.worker
            .as_mut()
            .ok_or_else(|| WorkerError::Lost("the lease has no worker".into()))
    }

    /// Makes a release (`op`: a free, an unload, a graph's destroy), each try under [`briefly`]
    /// where `bounded` (a failed sync drained nothing, so kernels may still run at the second);
    /// a failure held for the next call that answered it in its place is owed to the holder's
    /// next operation (see [`owing_held`]). The release's own outcome.
    fn release(
        &mut self,
        bounded: bool,
        mut op: impl FnMut(&mut Worker) -> Result<(), WorkerError>,
    ) -> Result<(), WorkerError> {
        let run = self.run;
        let worker = self.worker()?;
        let (owed, done) = match bounded {
            true => owing_held(worker, |w| briefly(w, run, &mut op)),
            false => owing_held(worker, op),
        };
        self.owed = self.owed.take().or(owed);
        done
    }
}

impl Lease {
    fn lock(&self) -> MutexGuard<'_, LeaseState> {
        // A panic while holding the lock cannot leave the state half-updated in a way that matters
        // more than refusing service, so keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn is_live(&self) -> bool {
        self.lock().ended.is_none()
    }

    /// Bytes charged to the lease's allocations now; never waits.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Usage and time left, read under one lock; `None` once the lease has ended or run out.
    pub fn snapshot(&self) -> Option<(u64, Duration)> {
        let st = self.lock();
        let remaining = st.expires.saturating_duration_since(Instant::now());
        (st.ended.is_none() && !remaining.is_zero()).then_some((self.used(), remaining))
    }

    pub fn worker_pid(&self) -> Option<u32> {
        self.lock().worker.as_ref().map(Worker::pid)
    }

    /// The device time charged to the lease so far: what its worker reported with its last
    /// answer (see [`LeaseManager::gpu_time`] for a fresh figure), plus any charge for a kernel
    /// stopped without a report ([`LeaseManager::charge_gpu`]).
    pub fn gpu_time(&self) -> Duration {
        Duration::from_nanos(self.gpu_nanos.load(Ordering::Relaxed))
    }

    /// Why the lease ended, if it has.
    pub fn end_reason(&self) -> Option<EndReason> {
        self.lock().ended.clone()
    }

    /// Notes that a kernel launched under the lease may run until `deadline`: a kernel stopped at
    /// its deadline is charged the least so noted as the lease ends, its worker, killed for it,
    /// being unable to report the time (see the module's docs). The least, not the last: a
    /// graph's kernels keep the deadline they were recorded with.
    pub fn gave_deadline(&self, deadline: Duration) {
        let nanos = u64::try_from(deadline.as_nanos()).unwrap_or(u64::MAX);
        // Every launch passes here, nearly always with the deadline already noted: a plain read
        // then, not a locked read-modify-write.
        if nanos < self.least_deadline.load(Ordering::Relaxed) {
            self.least_deadline.fetch_min(nanos, Ordering::Relaxed);
        }
    }

    /// Charges a kernel stopped at its deadline, unreported, what it ran at least.
    fn charge_stopped(&self) {
        match self.least_deadline.load(Ordering::Relaxed) {
            u64::MAX => {}
            nanos => self.charge_unreported(Duration::from_nanos(nanos)),
        }
    }

    /// Charges `d` that kernels killed with their worker ran and never reported: once, the first
    /// path to see them stopped (a failing op, then the lease's end, see the same kernel).
    fn charge_unreported(&self, d: Duration) {
        if !self.unreported_charged.swap(true, Ordering::Relaxed) {
            self.charge(d);
        }
    }

    /// Adds `d` to the lease, its tenant and its holder.
    fn charge(&self, d: Duration) {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        if nanos == 0 {
            return;
        }
        self.gpu_nanos.fetch_add(nanos, Ordering::Relaxed);
        for to in &self.charged_to {
            to.fetch_add(nanos, Ordering::Relaxed);
        }
    }

    /// Charges what the worker reported since the last look (see the module's docs).
    fn charge_reported(&self, st: &mut LeaseState) {
        if let Some(now) = st.worker.as_ref().map(Worker::gpu_time) {
            if now > st.gpu_seen {
                self.charge(now - st.gpu_seen);
                st.gpu_seen = now;
            }
        }
    }
}

/// Serves leases on a node's devices, each from its own worker pool.
pub struct LeaseManager {
    /// By device index (`devices[i].index == i`).
    devices: Vec<Device>,
    pools: Vec<Arc<Pool>>,
    /// Device time charged to each device's leases, in nanoseconds.
    device_gpu: Vec<Arc<AtomicU64>>,
    book: Mutex<Book>,
    wake: Condvar,
    next_id: AtomicU64,
    stopping: AtomicBool,
    reaper: Mutex<Option<JoinHandle<()>>>,
    mismatches: AtomicU64,
    direct: DirectTransfers,
    /// Device time charged to each tenant's leases, in nanoseconds, since the host started.
    tenants: Mutex<BTreeMap<String, Arc<AtomicU64>>>,
    /// What loading modules compiled, for every lease of the node (`crate::module_cache`).
    modules: ModuleCache,
}

/// Bytes moved between the device and tasklet memory directly (the worker mapping the guest's
/// memory), and between the devices of group leases GPU to GPU, since the host started: what
/// shows the zero-copy and peer paths are taken.
#[derive(Debug, Default)]
struct DirectTransfers {
    written: AtomicU64,
    read: AtomicU64,
    peer: AtomicU64,
    /// Why the last copy between workers that was not made GPU to GPU was not.
    peer_refused: Mutex<Option<String>>,
}

struct Book {
    live: HashMap<u64, Arc<Lease>>,
    /// Bytes granted on each device.
    granted: Vec<u64>,
    /// What each tenant holds, every device together: reserved with the device's memory,
    /// given back when the lease ends (or its worker could not be had).
    tenants: HashMap<Arc<str>, TenantHeld>,
}

/// Leases and bytes a tenant holds (or has reserved) now.
#[derive(Debug, Default, Clone, Copy)]
struct TenantHeld {
    leases: u32,
    bytes: u64,
}

impl Book {
    /// Reserves a lease of `bytes` for `account`'s tenant, unless that would take it past its
    /// totals: then the error to fail the acquire with.
    fn reserve_for_tenant(
        &mut self,
        account: &GpuAccount,
        bytes: u64,
    ) -> Result<Arc<str>, GpuError> {
        self.room_for_tenant(account, 1, bytes)?;
        let tenant = match self.tenants.get_key_value(account.tenant.as_str()) {
            Some((name, _)) => Arc::clone(name),
            None => Arc::from(account.tenant.as_str()),
        };
        let entry = self.tenants.entry(Arc::clone(&tenant)).or_default();
        entry.leases += 1;
        entry.bytes = entry.bytes.saturating_add(bytes);
        Ok(tenant)
    }

    /// Whether `account`'s tenant has room in its totals for `count` more leases of `bytes`
    /// each; if not, the error saying which total and how far.
    fn room_for_tenant(
        &self,
        account: &GpuAccount,
        count: u32,
        bytes: u64,
    ) -> Result<(), GpuError> {
        let tenant = &account.tenant;
        let held = self
            .tenants
            .get(tenant.as_str())
            .copied()
            .unwrap_or_default();
        let totals = account.totals;
        let (asked, more) = match count {
            1 => ("a lease".to_owned(), "one more".to_owned()),
            n => (format!("{n} leases"), format!("{n} more")),
        };
        // A total of zero is the policy allowing none: said so, not "drop one first".
        if let Some(max) = totals
            .leases
            .filter(|&max| max == 0 || held.leases.saturating_add(count) > max)
        {
            return Err(quota(if max == 0 {
                format!("tenant `{tenant}` may hold no leases on this node: its policy sets tenant-max-leases = 0")
            } else {
                format!(
                    "tenant `{tenant}` holds {} lease(s) on this node, all its connections and runs together, and {more} \
                     would pass the most its policy allows (tenant-max-leases = {max}); drop one first",
                    held.leases
                )
            }));
        }
        let after = held
            .bytes
            .saturating_add(bytes.saturating_mul(count.into()));
        if let Some(max) = totals.vram.filter(|&max| max == 0 || after > max) {
            return Err(quota(if max == 0 {
                format!("tenant `{tenant}` may hold no VRAM on this node: its policy sets tenant-max-vram = 0")
            } else {
                format!(
                    "{asked} of {bytes} bytes would bring tenant `{tenant}` to {after} bytes of VRAM on this node, all \
                     its connections and runs together, over its policy's {max} (tenant-max-vram); drop a lease or ask \
                     for less"
                )
            }));
        }
        Ok(())
    }

    /// Gives back what [`Book::reserve_for_tenant`] reserved.
    fn release_for_tenant(&mut self, tenant: &str, bytes: u64) {
        if let Some(held) = self.tenants.get_mut(tenant) {
            held.leases = held.leases.saturating_sub(1);
            held.bytes = held.bytes.saturating_sub(bytes);
            if held.leases == 0 {
                self.tenants.remove(tenant);
            }
        }
    }
}

impl LeaseManager {
    /// Serves leases on one device from `pool`.
    pub fn start(pool: Arc<Pool>, device: Device) -> Arc<LeaseManager> {
        LeaseManager::start_devices(vec![(pool, device)])
    }

    /// Serves leases on each device from its pool. Devices are renumbered by their place in
    /// the list, so that a device's index is where its books are. `slots` names at least one
    /// device (a host always lends one).
    pub fn start_devices(slots: Vec<(Arc<Pool>, Device)>) -> Arc<LeaseManager> {
        let (pools, mut devices): (Vec<_>, Vec<_>) = slots.into_iter().unzip();
        for (i, d) in devices.iter_mut().enumerate() {
            d.index = i as u32;
        }
        let mgr = Arc::new(LeaseManager {
            device_gpu: devices.iter().map(|_| Arc::default()).collect(),
            book: Mutex::new(Book {
                live: HashMap::new(),
                granted: vec![0; devices.len()],
                tenants: HashMap::new(),
            }),
            devices,
            pools,
            wake: Condvar::new(),
            next_id: AtomicU64::new(1),
            stopping: AtomicBool::new(false),
            reaper: Mutex::new(None),
            mismatches: AtomicU64::new(0),
            direct: DirectTransfers::default(),
            tenants: Mutex::new(BTreeMap::new()),
            modules: ModuleCache::default(),
        });
        let reaper_mgr = Arc::clone(&mgr);
        let handle = std::thread::Builder::new()
            .name("tasklet-lease-reaper".into())
            .spawn(move || reaper_mgr.reap_until_stopped())
            .ok();
        *mgr.reaper.lock().unwrap_or_else(|p| p.into_inner()) = handle;
        mgr
    }

    /// The first device (device 0).
    pub fn device(&self) -> &Device {
        &self.devices[0]
    }

    /// Every device the manager lends, by index.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// The device `lease` is on: whose launch limits its launches are checked against.
    pub fn device_of(&self, lease: &Lease) -> &Device {
        // A lease's device is one of this manager's: it was placed here.
        self.devices
            .get(lease.device as usize)
            .unwrap_or(&self.devices[0])
    }

    /// The pool of the first device (device 0).
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pools[0]
    }

    /// Each device's pool, by device index.
    pub fn pools(&self) -> &[Arc<Pool>] {
        &self.pools
    }

    fn book(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Device memory not granted to any lease, every device together.
    pub fn free_memory(&self) -> u64 {
        let book = self.book();
        self.devices
            .iter()
            .zip(&book.granted)
            .map(|(d, g)| d.total_memory.saturating_sub(*g))
            .sum()
    }

    /// Memory of device `index` not granted to any lease (0 for a device not lent).
    pub fn free_memory_on(&self, index: u32) -> u64 {
        let book = self.book();
        let i = index as usize;
        match (self.devices.get(i), book.granted.get(i)) {
            (Some(d), Some(g)) => d.total_memory.saturating_sub(*g),
            _ => 0,
        }
    }

    /// Grants `bytes` for `ttl` from a warm worker.
    pub fn acquire(&self, bytes: u64, ttl: Duration) -> Result<Arc<Lease>, GpuError> {
        self.acquire_for(bytes, ttl, None)
    }

    /// [`LeaseManager::acquire`] for a run that ends at `run` (where given): the wait for a
    /// worker, and every wait under the lease after, end by then (see the module's docs). Its
    /// GPU time is charged to [`LOCAL_TENANT`] and to no holder's account.
    pub fn acquire_for(
        &self,
        bytes: u64,
        ttl: Duration,
        run: Option<RunLimit>,
    ) -> Result<Arc<Lease>, GpuError> {
        self.acquire_charged(bytes, ttl, run, &GpuAccount::new(LOCAL_TENANT))
    }

    /// [`LeaseManager::acquire_for`] with the lease's GPU time charged to `account` too, on
    /// any device with room.
    pub fn acquire_charged(
        &self,
        bytes: u64,
        ttl: Duration,
        run: Option<RunLimit>,
        account: &GpuAccount,
    ) -> Result<Arc<Lease>, GpuError> {
        self.acquire_placed(bytes, ttl, run, account, &DeviceRequirement::default())
    }

    /// [`LeaseManager::acquire_charged`] on a device that meets `requires`, chosen by
    /// [`placement::rank`] (most free memory, then fewest leases). A device whose pool has no
    /// worker free is passed over for the next. Fails `capacity-exceeded` naming, device by
    /// device, what was missing.
    pub fn acquire_placed(
        &self,
        bytes: u64,
        ttl: Duration,
        run: Option<RunLimit>,
        account: &GpuAccount,
        requires: &DeviceRequirement,
    ) -> Result<Arc<Lease>, GpuError> {
        let ranked = {
            let book = self.book();
            let candidates = self.candidates(&book);
            placement::rank(&candidates, bytes, requires).map_err(GpuError::CapacityExceeded)?
        };
        let mut refused = Vec::new();
        for index in ranked {
            match self.try_on(index, bytes, ttl, run, account, false)? {
                Ok(lease) => return Ok(lease),
                Err(why) => refused.push(why),
            }
        }
        // Asking for less helps where memory ran short, not where every worker is leased.
        let fix = if refused.iter().all(|why| why.contains(NO_FREE_WORKER)) {
            "retry later: a worker comes free when a lease ends (`[workers] max` in the node's policy sets how many leases run at once)"
        } else {
            "ask for less or retry later"
        };
        Err(GpuError::CapacityExceeded(format!(
            "{}; {fix}",
            refused.join("; ")
        )))
    }

    /// `count` leases of `bytes` each on `count` distinct devices that meet `requires`, all or
    /// none: in [`placement::rank_group`]'s order as the group is asked for (most free memory,
    /// then fewest leases, then lowest index), a device whose pool has no worker free passed
    /// over for the next. The leases are taken one by one (a wait for a worker is not made under
    /// the books' lock); when the group cannot be completed, those already taken are ended
    /// before the error returns, so a refusal leaves nothing held. Fails `capacity-exceeded`
    /// saying how many devices the node lends and how many would do.
    pub fn acquire_group(
        &self,
        count: usize,
        bytes: u64,
        ttl: Duration,
        run: Option<RunLimit>,
        account: &GpuAccount,
        requires: &DeviceRequirement,
    ) -> Result<Vec<Arc<Lease>>, GpuError> {
        let ranked = {
            let book = self.book();
            // The whole group against the tenant's totals first: refused, it takes nothing,
            // not even for a moment (each lease is reserved again as it is taken).
            book.room_for_tenant(account, u32::try_from(count).unwrap_or(u32::MAX), bytes)?;
            let candidates = self.candidates(&book);
            placement::rank_group(&candidates, bytes, requires, count)
                .map_err(GpuError::CapacityExceeded)?
        };
        let mut taken: Vec<Arc<Lease>> = Vec::with_capacity(count);
        let mut refused = Vec::new();
        let give_back = |taken: &[Arc<Lease>]| {
            for lease in taken {
                self.end(lease, EndReason::Dropped);
            }
        };
        for index in ranked {
            if taken.len() == count {
                break;
            }
            match self.try_on(index, bytes, ttl, run, account, count > 1) {
                Ok(Ok(lease)) => taken.push(lease),
                Ok(Err(why)) => refused.push(why),
                Err(e) => {
                    give_back(&taken);
                    return Err(e);
                }
            }
        }
        if taken.len() < count {
            give_back(&taken);
            return Err(GpuError::CapacityExceeded(format!(
                "a group of {count} leases found only {} device(s) to serve it: {}; ask for fewer leases or retry \
                 later",
                taken.len(),
                refused.join("; ")
            )));
        }
        Ok(taken)
    }

    /// Each device as placement sees it, from the books.
    fn candidates<'a>(&'a self, book: &Book) -> Vec<Candidate<'a>> {
        self.devices
            .iter()
            .zip(&book.granted)
            .map(|(device, granted)| Candidate {
                device,
                free: device.total_memory.saturating_sub(*granted),
                leases: book
                    .live
                    .values()
                    .filter(|l| l.device == device.index)
                    .count(),
            })
            .collect()
    }

    /// A lease of `bytes` on device `index`: `Ok(Err(why))` when the device is to be passed
    /// over (its memory went to another lease since it was ranked, or its pool has no worker
    /// free), `Err` when the acquire fails outright.
    fn try_on(
        &self,
        index: u32,
        bytes: u64,
        ttl: Duration,
        run: Option<RunLimit>,
        account: &GpuAccount,
        grouped: bool,
    ) -> Result<Result<Arc<Lease>, String>, GpuError> {
        let d = index as usize;
        let tenant;
        {
            // Reserve the memory first, so two racing acquires cannot both pass the check.
            let mut book = self.book();
            let free = self.devices[d].total_memory.saturating_sub(book.granted[d]);
            if bytes > free {
                return Ok(Err(format!(
                    "device {index} has {free} bytes free for leases, {bytes} asked"
                )));
            }
            // The tenant's totals hold on every device alike: past them, the acquire fails.
            tenant = book.reserve_for_tenant(account, bytes)?;
            book.granted[d] += bytes;
        }
        match self.pools[d].acquire_by(run.map(|r| r.ends)) {
            Ok(worker) => Ok(Ok(
                self.lease_on(index, worker, bytes, ttl, run, account, tenant, grouped)
            )),
            Err(e) => {
                let mut book = self.book();
                book.granted[d] -= bytes;
                book.release_for_tenant(&tenant, bytes);
                drop(book);
                match (e, run) {
                    (WorkerError::NoCapacity(m), _) => {
                        Ok(Err(format!("device {index} {NO_FREE_WORKER}: {m}")))
                    }
                    (_, Some(run)) if Instant::now() >= run.ends => Err(run.exceeded()),
                    (other, _) => Err(other.into()),
                }
            }
        }
    }

    /// A new lease on device `index` served by `worker`; `grouped` as [`Lease::grouped`].
    #[allow(clippy::too_many_arguments)]
    fn lease_on(
        &self,
        index: u32,
        worker: Worker,
        bytes: u64,
        ttl: Duration,
        run: Option<RunLimit>,
        account: &GpuAccount,
        tenant: Arc<str>,
        grouped: bool,
    ) -> Arc<Lease> {
        let now = Instant::now();
        let gpu_seen = worker.gpu_time();
        let lease = Arc::new(Lease {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            device: index,
            granted: bytes,
            grouped,
            acquired: now,
            state: Mutex::new(LeaseState {
                worker: Some(worker),
                expires: now + ttl,
                ended: None,
                run,
                gpu_seen,
                variables: HashMap::new(),
                owed: None,
            }),
            used: AtomicU64::new(0),
            gpu_nanos: AtomicU64::new(0),
            charged_to: [
                self.tenant_counter(&account.tenant),
                Arc::clone(&account.holder),
                Arc::clone(&self.device_gpu[index as usize]),
            ],
            least_deadline: AtomicU64::new(u64::MAX),
            unreported_charged: AtomicBool::new(false),
            tenant,
        });
        self.book().live.insert(lease.id, Arc::clone(&lease));
        self.wake.notify_all();
        lease
    }

    /// Binds a lease acquired before its holder's run limit was known to `run` (see
    /// [`LeaseManager::acquire_for`]); nothing for a lease that has ended.
    pub fn bind_to_run(&self, lease: &Lease, run: RunLimit) {
        let mut st = lease.lock();
        if st.ended.is_none() {
            st.run = Some(run);
            if let Some(w) = st.worker.as_mut() {
                w.set_wait_limit(Some(run.ends));
            }
        }
    }

    /// Gives the lease's worker up at once, mid-wait, once `gone` is set (see
    /// [`tasklet_worker::Worker::set_holder_gone`]): a node sets it when the client that holds
    /// the lease disconnects, so that a wait on a kernel that may run until its deadline does
    /// not keep the lease that long. Nothing for a lease that has ended.
    pub fn watch_holder(&self, lease: &Lease, gone: Arc<AtomicBool>) {
        let mut st = lease.lock();
        if st.ended.is_none() {
            if let Some(w) = st.worker.as_mut() {
                w.set_holder_gone(Some(gone));
            }
        }
    }

    /// Moves the lease's expiry to `ttl` from now, if that stays within `ceiling` of its start.
    pub fn renew(&self, lease: &Lease, ttl: Duration, ceiling: Duration) -> Result<(), GpuError> {
        let mut st = self.live_state(lease)?;
        let new_expiry = Instant::now() + ttl;
        if new_expiry > lease.acquired + ceiling {
            return Err(GpuError::QuotaExceeded(format!(
                "renewing for {}s would make the lease last longer than the granted {}s (max-lease-secs)",
                ttl.as_secs(),
                ceiling.as_secs()
            )));
        }
        st.expires = new_expiry;
        drop(st);
        self.wake.notify_all();
        Ok(())
    }

    /// Runs one worker operation under a live lease. A lost or poisoned worker ends the lease.
    ///
    /// The operation sees the worker only: memory that counts against the lease goes through
    /// [`LeaseManager::alloc`] and [`LeaseManager::free`].
    pub fn with_worker<T>(
        &self,
        lease: &Lease,
        op: impl FnOnce(&mut Worker) -> Result<T, WorkerError>,
    ) -> Result<T, GpuError> {
        self.with_state(lease, |st| op(st.worker()?))
    }

    /// [`LeaseManager::with_worker`] for an operation the lease's holder asked for: a failure
    /// owed to the lease (an earlier launch's, which a release was answered with; see
    /// [`LeaseManager::free`]) is returned instead, the operation not performed, as the worker
    /// answers a call after a failed launch. The host's own calls (liveness checks, releases it
    /// makes of its own accord) use `with_worker` and leave the failure owed.
    pub fn with_worker_owing<T>(
        &self,
        lease: &Lease,
        op: impl FnOnce(&mut Worker) -> Result<T, WorkerError>,
    ) -> Result<T, GpuError> {
        self.with_state(lease, |st| match st.owed.take() {
            Some(owed) => Err(owed),
            None => op(st.worker()?),
        })
    }

    /// Allocates `bytes` of device memory under the lease, charged in whole allocation units (as
    /// the worker counts them, so that many tiny allocations cannot hold more of the device than
    /// was granted). Fails with `quota-exceeded` before the worker is asked when the charge would
    /// pass the grant. Returns the device address.
    pub fn alloc(&self, lease: &Lease, bytes: u64) -> Result<u64, GpuError> {
        let charge = charged_bytes(bytes);
        let mut over = None;
        let addr = self.with_state(lease, |st| {
            let after = lease.used().saturating_add(charge);
            if after > lease.granted {
                over = Some(after);
                return Ok(0);
            }
            let worker = st.worker()?;
            let addr = if lease.grouped {
                worker.alloc_shareable(bytes)?
            } else {
                worker.alloc(bytes)?
            };
            lease.used.store(after, Ordering::Relaxed);
            Ok(addr)
        })?;
        match over {
            Some(after) => Err(quota(format!(
                "allocating {bytes} bytes (charged {charge}: allocations count in units of {ALLOC_GRANULE}) would bring \
                 the lease to {after} of its {} granted bytes; acquire a larger lease",
                lease.granted
            ))),
            None => Ok(addr),
        }
    }

    /// Frees an allocation of `bytes` made by [`LeaseManager::alloc`] and releases its charge.
    /// Never waits on running kernels for longer than [`RELEASE_GRACE`]: a worker still busy then
    /// is given up and the lease ends (its memory, and its charge, go with it).
    pub fn free(&self, lease: &Lease, addr: u64, bytes: u64) -> Result<(), GpuError> {
        self.with_state(lease, |st| {
            st.release(true, |w| w.free(addr))?;
            let left = lease.used().saturating_sub(charged_bytes(bytes));
            lease.used.store(left, Ordering::Relaxed);
            Ok(())
        })
    }

    /// Makes a release the host makes of its own accord with the holder still there (a graph's
    /// worker form destroyed), waiting as any call does; where the worker answered it with an
    /// earlier launch's failure instead, it is made again and that failure stays owed to the
    /// holder's next operation, as for [`LeaseManager::free`].
    pub fn release_with(
        &self,
        lease: &Lease,
        op: impl FnMut(&mut Worker) -> Result<(), WorkerError>,
    ) -> Result<(), GpuError> {
        self.with_state(lease, |st| st.release(false, op))
    }

    /// Unloads module `module` (the worker's id for it) under the lease, and releases the
    /// charge for its variables; waits on running kernels no longer than [`LeaseManager::free`]
    /// does.
    pub fn unload(&self, lease: &Lease, module: u32) -> Result<(), GpuError> {
        self.with_state(lease, |st| {
            st.release(true, |w| w.unload_module(module))?;
            if let Some(charge) = st.variables.remove(&module) {
                let left = lease.used().saturating_sub(charge);
                lease.used.store(left, Ordering::Relaxed);
            }
            Ok(())
        })
    }

    /// Charges a module just loaded under the lease for its `.global` variables, as an
    /// allocation of their size: device memory each loaded copy holds. Past the lease's grant
    /// the module is unloaded again and the load fails `quota-exceeded`, as an allocation would.
    pub(crate) fn charge_variables(
        &self,
        lease: &Lease,
        loaded: LoadedModule,
    ) -> Result<LoadedModule, GpuError> {
        if loaded.variable_bytes == 0 {
            return Ok(loaded);
        }
        let charge = charged_bytes(loaded.variable_bytes);
        let mut over = None;
        self.with_state(lease, |st| {
            let after = lease.used().saturating_add(charge);
            if after > lease.granted {
                over = Some(after);
                let run = st.run;
                return briefly(st.worker()?, run, |w| w.unload_module(loaded.id));
            }
            st.variables.insert(loaded.id, charge);
            lease.used.store(after, Ordering::Relaxed);
            Ok(())
        })?;
        match over {
            Some(after) => Err(quota(format!(
                "the module's .global variables take {} bytes of device memory in each loaded copy, which would bring \
                 the lease to {after} of its {} granted bytes; acquire a larger lease, or declare smaller variables \
                 (a buffer allocated by the tasklet does the same work)",
                loaded.variable_bytes, lease.granted
            ))),
            None => Ok(loaded),
        }
    }

    /// Runs `op` on the state of a live lease; a lost, poisoned or given-up worker ends the lease.
    /// What the worker reported of its GPU time is charged, whatever the outcome.
    fn with_state<T>(
        &self,
        lease: &Lease,
        op: impl FnOnce(&mut LeaseState) -> Result<T, WorkerError>,
    ) -> Result<T, GpuError> {
        let mut st = self.live_state(lease)?;
        let done = op(&mut st);
        lease.charge_reported(&mut st);
        match done {
            Ok(v) => Ok(v),
            Err(e) => {
                let gave_up = st.worker.as_ref().is_some_and(Worker::gave_up);
                let (end, e) = match (e, st.run) {
                    // A wait cut short at the run's end, or else at a release's grace.
                    (_, Some(run)) if gave_up && Instant::now() >= run.ends => {
                        (Some(EndReason::WallTime(run.wall_time)), run.exceeded())
                    }
                    (e, _) if gave_up => (Some(EndReason::DroppedWhileBusy), e.into()),
                    (WorkerError::Lost(why), _) => (
                        Some(EndReason::WorkerLost(why.clone())),
                        WorkerError::Lost(why).into(),
                    ),
                    (
                        WorkerError::Op {
                            kind: kind @ (ErrorKind::KernelFault | ErrorKind::DeadlineExceeded),
                            message,
                        },
                        _,
                    ) => {
                        // A kernel stopped at its deadline held the device at least that long,
                        // and the lease ends here, once: charged for it, so that a quota cannot
                        // be dodged by runaways on fresh leases. Only the emulator, stopping the
                        // kernel itself at its step limit, reports that time (just charged); a
                        // worker killed for the kernel, or a GPU's, where it still runs, none.
                        let reported = st
                            .worker
                            .as_ref()
                            .is_some_and(|w| w.backend() == BackendKind::Emu && !w.is_lost());
                        if matches!(kind, ErrorKind::DeadlineExceeded) && !reported {
                            lease.charge_stopped();
                        }
                        (
                            Some(EndReason::Poisoned(message.clone())),
                            WorkerError::Op { kind, message }.into(),
                        )
                    }
                    (e, _) => (None, e.into()),
                };
                drop(st);
                if let Some(reason) = end {
                    self.end(lease, reason);
                }
                Err(e)
            }
        }
    }

    /// The lease's state, if it is still live; ends it here if its time is up.
    fn live_state<'l>(&self, lease: &'l Lease) -> Result<MutexGuard<'l, LeaseState>, GpuError> {
        let st = lease.lock();
        if let Some(reason) = &st.ended {
            return Err(GpuError::LeaseExpired(reason.describe()));
        }
        if Instant::now() >= st.expires {
            drop(st);
            self.end(lease, EndReason::Expired);
            return Err(GpuError::LeaseExpired(EndReason::Expired.describe()));
        }
        Ok(st)
    }

    /// Ends a lease: its worker goes back to the pool (after reconciling what it holds with the
    /// lease's books) and its grant back to the device.
    pub fn end(&self, lease: &Lease, reason: EndReason) {
        // A kernel that has had its grace already (its `stop` waited it out) gets none again.
        let grace = match reason {
            EndReason::ActorUnstoppable(_) => Duration::ZERO,
            _ => PERSISTENT_GRACE,
        };
        let (worker, used, gpu_seen) = {
            let mut st = lease.lock();
            if st.ended.is_some() {
                return;
            }
            st.ended = Some(reason);
            // What the worker must report holding in allocations: the lease's charge less its
            // modules' variables, which no allocation holds.
            let variables: u64 = st.variables.drain().map(|(_, charge)| charge).sum();
            let used = lease
                .used
                .swap(0, Ordering::Relaxed)
                .saturating_sub(variables);
            (st.worker.take(), used, st.gpu_seen)
        };
        if let Some(mut worker) = worker {
            // What is asked of the worker from here answers to no run's end, nor to its holder.
            worker.set_wait_limit(None);
            worker.set_holder_gone(None);
            // A kernel that ran past its deadline with no op to notice it (the lease dropped,
            // expired or its holder gone after it) held the device that long all the same.
            let unreported = if worker.overran() {
                lease.charge_stopped();
                true
            } else if let Some(ran) = worker.unreported_run() {
                // Cut short before its deadline (the lease dropped, expired or given up while
                // the kernel ran): killed with its worker, it reports nothing, and a runaway
                // dropped just in time on a fresh lease each time would run free.
                lease.charge_unreported(ran);
                true
            } else {
                false
            };
            // Its persistent kernels are asked to return and given a grace period; one still
            // running then ends with the worker, which is not reused.
            let stopped = worker.stop_persistent(grace);
            // One whose kernels may still run is given up by the pool without a question (any
            // answer would wait for them), and one just charged for unreported kernels is given
            // up too: an answer (the emulator reaching its step limit meanwhile) would report
            // their time a second time.
            let keep = stopped
                && !unreported
                && (worker.has_pending_launches() || self.reconcile(lease, &mut worker, used));
            // The reconciling answer brought the worker's last report: the lease's final charge.
            lease.charge(worker.gpu_time().saturating_sub(gpu_seen));
            // Back to the pool of the lease's own device: a replacement starts there, and no
            // other device's pool notices.
            let pool = &self.pools[lease.device as usize];
            if keep {
                pool.release(worker);
            } else {
                // Not reused; the pool starts a replacement.
                pool.discard(worker);
            }
        }
        let mut book = self.book();
        if book.live.remove(&lease.id).is_some() {
            book.granted[lease.device as usize] -= lease.granted;
            book.release_for_tenant(&lease.tenant, lease.granted);
        }
    }

    /// Compares what a healthy worker reports holding with the lease's books; false (and the
    /// mismatch logged and counted) when they differ. A lost or poisoned worker is killed by
    /// the pool anyway, and its memory freed with its process.
    fn reconcile(&self, lease: &Lease, worker: &mut Worker, used: u64) -> bool {
        if worker.is_lost() || worker.is_poisoned() {
            return true;
        }
        match worker.info() {
            Ok(info) if info.memory_used == used && used <= lease.granted => true,
            Ok(info) => {
                self.mismatches.fetch_add(1, Ordering::Relaxed);
                eprintln!(
                    "tasklet: lease {} ended with its worker (pid {}) holding {} bytes in {} allocation(s), but the lease \
                     accounted for {used} of its {} granted bytes; the worker is replaced, not reused",
                    lease.id,
                    worker.pid(),
                    info.memory_used,
                    info.allocations,
                    lease.granted
                );
                false
            }
            // The pool sees it lost and kills it.
            Err(_) => true,
        }
    }

    /// The device time charged to `lease`. With `refresh`, a live lease's worker is asked first
    /// (a ping, answered at once by a worker whose kernels are done: on cuda a sync the device
    /// signalled carries no report of its own), so the figure covers every kernel finished by
    /// then.
    pub fn gpu_time(&self, lease: &Lease, refresh: bool) -> Result<Duration, GpuError> {
        if refresh && lease.is_live() {
            self.with_worker(lease, |w| w.ping())?;
        }
        Ok(lease.gpu_time())
    }

    /// Charges `d` of device time to `lease` (and its tenant and holder) that its worker could
    /// not report (beyond a stopped kernel's deadline, which the lease charges itself: see
    /// [`Lease::gave_deadline`]).
    pub fn charge_gpu(&self, lease: &Lease, d: Duration) {
        lease.charge(d);
    }

    /// Device time charged to each tenant's leases since the host started, by tenant name.
    pub fn gpu_time_by_tenant(&self) -> Vec<(String, Duration)> {
        self.tenants
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(t, n)| (t.clone(), Duration::from_nanos(n.load(Ordering::Relaxed))))
            .collect()
    }

    /// The counter of `tenant`, made on first use.
    fn tenant_counter(&self, tenant: &str) -> Arc<AtomicU64> {
        let mut tenants = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = tenants.get(tenant) {
            return Arc::clone(c);
        }
        let c = Arc::new(AtomicU64::new(0));
        tenants.insert(tenant.to_owned(), Arc::clone(&c));
        c
    }

    pub fn accounting(&self) -> Accounting {
        let live: Vec<Arc<Lease>> = self.book().live.values().cloned().collect();
        Accounting {
            leases: live.len(),
            granted_bytes: live.iter().map(|l| l.granted).sum(),
            used_bytes: live.iter().map(|l| l.used()).sum(),
            mismatches: self.mismatches.load(Ordering::Relaxed),
        }
    }

    /// Each device's leases, memory and GPU time, by device index.
    pub fn device_usage(&self) -> Vec<DeviceUsage> {
        let live: Vec<Arc<Lease>> = self.book().live.values().cloned().collect();
        self.devices
            .iter()
            .map(|d| {
                let on: Vec<&Arc<Lease>> = live.iter().filter(|l| l.device == d.index).collect();
                DeviceUsage {
                    index: d.index,
                    leases: on.len(),
                    granted_bytes: on.iter().map(|l| l.granted).sum(),
                    used_bytes: on.iter().map(|l| l.used()).sum(),
                    gpu_time: Duration::from_nanos(
                        self.device_gpu[d.index as usize].load(Ordering::Relaxed),
                    ),
                }
            })
            .collect()
    }

    /// The node-wide module cache every lease's loads go through ([`LeaseManager::load_module`],
    /// [`LeaseManager::load_source`]).
    pub fn module_cache(&self) -> &ModuleCache {
        &self.modules
    }

    /// Bytes written to and read from devices straight from and into tasklet memory (no host
    /// staging), since the host started: `(written, read)`.
    pub fn direct_transfer_bytes(&self) -> (u64, u64) {
        (
            self.direct.written.load(Ordering::Relaxed),
            self.direct.read.load(Ordering::Relaxed),
        )
    }

    /// Bytes copied between the workers of two leases GPU to GPU ([`LeaseManager::copy_peer`]),
    /// since the host started.
    pub fn peer_copy_bytes(&self) -> u64 {
        self.direct.peer.load(Ordering::Relaxed)
    }

    /// Why the last copy between the workers of two leases was staged rather than made GPU to
    /// GPU (the worker's one-line cause), if one was.
    pub fn peer_copy_refusal(&self) -> Option<String> {
        self.direct
            .peer_refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Copies `len` bytes at `offset` of `src`'s allocation at `base` to `to` of `dst`'s memory,
    /// GPU to GPU: `src`'s worker finishes its queued work and exports the allocation, `dst`'s
    /// maps it, copies and unmaps it. `Ok(false)`, having copied nothing, when the two cannot (a
    /// lease not of a group, the emulator, a driver or GPU pair without peer access): the caller
    /// copies another way. The caller checks both ranges.
    ///
    /// `src` stays locked until the copy is done, so that neither its holder nor its expiry can
    /// free the memory while another process maps it. The only other lock taken meanwhile is
    /// `dst`'s (no one holds the books while waiting for a lease, nor two leases of one holder
    /// in the other order: a holder's operations are one at a time).
    pub fn copy_peer(
        &self,
        dst: &Lease,
        to: u64,
        src: &Lease,
        base: u64,
        offset: u64,
        len: u64,
    ) -> Result<bool, GpuError> {
        let refused = |e: &WorkerError| match e {
            WorkerError::Op {
                kind: ErrorKind::Unsupported,
                message,
            } => Some(message.clone()),
            _ => None,
        };
        if !(src.grouped && dst.grouped) {
            // Only a group's buffers are allocated to be shared: no worker need be asked.
            self.peer_refused("the two leases are not of one group (`lease.acquire-group`)".into());
            return Ok(false);
        }
        let mut why: Option<String> = None;
        let mut copied: Result<(), GpuError> = Ok(());
        self.with_state(src, |st| {
            let exporter = st.worker()?;
            let handle = match exporter.export(base) {
                Ok(handle) => handle,
                Err(e) => {
                    why = Some(refused(&e).ok_or(e)?);
                    return Ok(());
                }
            };
            copied = self.with_state(dst, |st| {
                let importer = st.worker()?;
                if let Err(e) = importer.copy_from_peer(to, &handle, offset, len) {
                    why = Some(refused(&e).ok_or(e)?);
                }
                Ok(())
            });
            Ok(())
        })?;
        copied?;
        match why {
            Some(why) => {
                self.peer_refused(why);
                Ok(false)
            }
            None => {
                self.direct.peer.fetch_add(len, Ordering::Relaxed);
                Ok(true)
            }
        }
    }

    /// Keeps why a copy between workers is staged ([`LeaseManager::peer_copy_refusal`]).
    fn peer_refused(&self, why: String) {
        *self
            .direct
            .peer_refused
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(why);
    }

    pub(crate) fn count_direct(&self, written: usize, read: usize) {
        self.direct
            .written
            .fetch_add(written as u64, Ordering::Relaxed);
        self.direct.read.fetch_add(read as u64, Ordering::Relaxed);
    }

    /// Worker process ids of live leases (for operators and tests).
    pub fn worker_pids(&self) -> Vec<u32> {
        let live: Vec<Arc<Lease>> = self.book().live.values().cloned().collect();
        live.iter().filter_map(|l| l.worker_pid()).collect()
    }

    fn reap_until_stopped(&self) {
        let mut book = self.book();
        while !self.stopping.load(Ordering::Acquire) {
            let now = Instant::now();
            let mut due = Vec::new();
            let mut next = now + Duration::from_secs(1);
            for lease in book.live.values() {
                // try_lock: a lease busy in an operation is checked on its next operation instead.
                if let Ok(st) = lease.state.try_lock() {
                    if st.expires <= now {
                        due.push(Arc::clone(lease));
                    } else {
                        next = next.min(st.expires);
                    }
                }
            }
            if !due.is_empty() {
                drop(book);
                for lease in due {
                    self.end(&lease, EndReason::Expired);
                }
                book = self.book();
                continue;
            }
            let wait = next
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            book = self
                .wake
                .wait_timeout(book, wait)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    /// Stops the reaper; live leases are ended.
    pub fn shutdown(&self) {
        self.stopping.store(true, Ordering::Release);
        self.wake.notify_all();
        if let Some(h) = self.reaper.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = h.join();
        }
        let live: Vec<Arc<Lease>> = self.book().live.values().cloned().collect();
        for lease in live {
            self.end(&lease, EndReason::TaskletEnded);
        }
    }

    /// Shuts every device's pool down (after [`LeaseManager::shutdown`]).
    pub fn shutdown_pools(&self) {
        for pool in &self.pools {
            pool.shutdown();
        }
    }
}

/// Runs `op`, a release, and runs it again where its answer was a failure held for the next
/// call (an earlier launch's, reported by a sync before it or by the worker in its place, which
/// then did not perform it): that failure is returned first, to be owed to the lease's next
/// operation, beside the release's own outcome. A release that fails on its own fails alike
/// twice, and is owed nothing.
fn owing_held(
    w: &mut Worker,
    mut op: impl FnMut(&mut Worker) -> Result<(), WorkerError>,
) -> (Option<WorkerError>, Result<(), WorkerError>) {
    match op(w) {
        Ok(()) => (None, Ok(())),
        // A fault or a missed deadline ends the lease instead; and a worker given up on (its
        // wait cut short) is asked nothing more.
        Err(first @ WorkerError::Op { kind, .. }) if !kind.poisons_worker() && !w.gave_up() => {
            match op(w) {
                Err(again) if again.to_string() == first.to_string() => (None, Err(again)),
                again => (Some(first), again),
            }
        }
        Err(e) => (None, Err(e)),
    }
}

/// Runs `op`, a release (free, unload), without waiting on the worker's running kernels for
/// longer than [`RELEASE_GRACE`] (or past the run's end, where that comes first): while launches
/// may be pending, the worker's waits are bounded by that, and by the run's end alone again after.
fn briefly<T>(
    w: &mut Worker,
    run: Option<RunLimit>,
    op: impl FnOnce(&mut Worker) -> Result<T, WorkerError>,
) -> Result<T, WorkerError> {
    if !w.has_pending_launches() {
        return op(w);
    }
    let run_ends = run.map(|r| r.ends);
    let grace = Instant::now() + RELEASE_GRACE;
    // The grace bounds the wait for the kernels alone, so they are waited for by a sync of their
    // own: the release itself is a driver call that may take longer than the grace (unloading a
    // module on a GPU does) with every kernel long finished. An error the sync reports belongs to
    // a launch and is answered here, as the worker answers it to any call after a failed launch.
    w.set_wait_limit(Some(run_ends.map_or(grace, |end| end.min(grace))));
    let drained = w.sync();
    w.set_wait_limit(run_ends);
    drained?;
    op(w)
}
