//! [`LocalGpu`]: a tasklet's (or a remote client's) GPU operations on this machine's lease manager
//! and worker processes, each checked against the grant before anything reaches a worker.
//!
//! Ownership is checked by id, never by position (a table index is reused; an id is not): a buffer
//! or module is usable only in the session that made it, a session only while its lease lives.
//! Ids are unguessable (a keyed hash of a counter), so a client that learns one of its own ids
//! learns nothing about another's, and any id this service did not hand out is refused.

use super::args::KernelEntry;
use super::queues::StreamId;
use super::types::{
    BufferId, DeviceInfo, GraphArg, GraphId, GuestBytes, KernelArg, KernelRef, KernelSignature,
    LaunchConfig, LeaseId, LeaseInfo, LeaseRequest, ModuleId, SessionId, MAX_LEASE_SESSIONS,
};
use super::usage::{Usage, UsageHandle};
use super::GpuService;
use crate::config::{Grant, Right};
use crate::error::{invalid, out_of_bounds, quota, quoted, unauthorized, unsupported, GpuError};
use crate::lease::{EndReason, Lease, LeaseManager, RunLimit, LOCAL_TENANT};
use crate::placement::DeviceRequirement;
use rustc_hash::FxHashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tasklet_worker::host::mapped::MappedArea;
use tasklet_worker::{Launch, LoadedModule, ALLOC_GRANULE};

mod actors;
mod burst;
mod graph;
mod kernel_tables;
mod queues;
mod reloads;

/// Transfers of at least this many bytes go between the device and linear memory directly (the
/// worker maps the guest's memory); smaller ones go through the worker's message area, which costs
/// less than a direct transfer's setup.
pub const DIRECT_MIN_BYTES: usize = 64 << 10;

/// The most bytes a copy between sessions holds in host memory at once: the size of its
/// staging memory.
const COPY_PIECE: u64 = 4 << 20;

/// One grantee's GPU state: its grant, its leases, and the sessions under them. Everything it
/// leased goes back when it is dropped, however its holder ended.
pub struct LocalGpu {
    grant: Grant,
    manager: Arc<LeaseManager>,
    leases: FxHashMap<LeaseId, Arc<Lease>>,
    sessions: FxHashMap<SessionId, Session>,
    ids: IdSource,
    /// Where each launch's argument block is built (kept: no allocation per launch).
    arg_block: Vec<u8>,
    /// Launches posted under each lease: the latest one's ordinal, which the lease's worker
    /// counts alike (from 1, since it was started or reset for the lease) and names
    /// asynchronous errors by.
    launched: FxHashMap<LeaseId, u64>,
    /// The end of the run this serves, once the runner has said (see
    /// [`GpuService::run_ends_at`]): every lease is bound to it.
    run: Option<RunLimit>,
    /// GPU time (against the `gpu-seconds` quota), launches, bytes moved, peak memory.
    usage: Usage,
    /// Set once no one waits for this service's answers (see [`LocalGpu::with_holder_gone`]).
    holder_gone: Option<Arc<AtomicBool>>,
    /// Each lease's mapped memory, once it has rings or actors.
    areas: actors::Areas,
    /// Where copies between sessions on different workers pass, made at the first: memory both
    /// workers map, so each piece goes device to host and host to device by the workers' own
    /// copies (DMA where they have page-locked it), with no copy by this process.
    copy_staging: Option<MappedArea>,
}

/// What the service remembers of a session.
struct Session {
    lease: Arc<Lease>,
    lease_id: LeaseId,
    /// Buffer → (device address, size).
    buffers: FxHashMap<BufferId, (u64, u64)>,
    modules: FxHashMap<ModuleId, Module>,
    /// Its modules' kernel tables, one per worker module (repeated loads share one).
    kernel_tables: kernel_tables::KernelTables,
    graphs: FxHashMap<GraphId, graph::Graph>,
    /// Bytes of launch arguments its graphs' recorded launches hold (at most
    /// [`super::MAX_SESSION_GRAPH_ARG_BYTES`]).
    graph_arg_bytes: usize,
    /// Modules replaced by a reload (their old ids, the latest of each live module), to say so
    /// when one is named again.
    reloaded: reloads::Reloads,
    /// Its streams and events.
    queues: queues::Queues,
    /// Its rings and persistent kernels.
    actors: actors::Actors,
}

/// A loaded module: the worker's id for it and its kernels in the worker's order.
struct Module {
    id: u32,
    kernels: Arc<[KernelEntry]>,
}

/// Unguessable, unique ids: a counter through a hash keyed at random for this service.
struct IdSource {
    key: RandomState,
    next: u64,
}

impl IdSource {
    fn fresh(&mut self) -> u64 {
        self.next += 1;
        self.key.hash_one(self.next)
    }
}

impl LocalGpu {
    pub fn new(grant: Grant, manager: Arc<LeaseManager>) -> LocalGpu {
        LocalGpu {
            grant,
            manager,
            leases: FxHashMap::default(),
            sessions: FxHashMap::default(),
            ids: IdSource {
                key: RandomState::new(),
                next: 0,
            },
            arg_block: Vec::new(),
            usage: Usage::new(LOCAL_TENANT, grant.gpu_time),
            launched: FxHashMap::default(),
            run: None,
            holder_gone: None,
            areas: Default::default(),
            copy_staging: None,
        }
    }

    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    /// This service with the GPU time of its leases charged to `tenant` (a node's client; the
    /// default is [`LOCAL_TENANT`]). Given before any lease is acquired.
    pub fn with_tenant(mut self, tenant: &str) -> LocalGpu {
        self.usage = Usage::new(tenant, self.grant.gpu_time);
        self
    }

    /// This service with its leases counted in its tenant's `totals` (`tenant-max-leases`,
    /// `tenant-max-vram`), with those of every other holder under the same tenant: an acquire
    /// past them fails `quota-exceeded`. Given after [`LocalGpu::with_tenant`], before any
    /// lease is acquired.
    pub fn with_tenant_totals(mut self, totals: crate::config::TenantTotals) -> LocalGpu {
        self.usage.set_totals(totals);
        self
    }

    /// This service with its leases' workers given up, mid-wait, once `gone` is set: a node
    /// passes the flag it sets when the connection this serves closes, so that a GPU call in
    /// progress (a sync on a kernel that may run until its deadline) ends within milliseconds
    /// and the connection's leases are freed, instead of after the kernel's deadline.
    pub fn with_holder_gone(mut self, gone: Arc<AtomicBool>) -> LocalGpu {
        self.holder_gone = Some(gone);
        self
    }

    /// What the holder has used so far (device time, launches, bytes moved, peak memory),
    /// readable after the service is gone: `tasklet run --stats` reads it once the run ended.
    pub fn usage(&self) -> UsageHandle {
        self.usage.handle()
    }

    fn need(&self, right: Right) -> Result<(), GpuError> {
        if self.grant.gpu.rights.contains(right) {
            return Ok(());
        }
        let name = right.name();
        Err(unauthorized(format!(
            "missing right `{name}`: add \"{name}\" to `rights` under [gpu] in the tasklet's manifest; if it is there, a policy withholds it (`--policy` of the run, or on a node its policy's section for your tenant)"
        )))
    }

    /// A request for `count` leases past the checks every acquire makes: the grant lends GPUs,
    /// the device named exists and agrees with the requirements, the size and time are sane and
    /// within the grant, and `count` more leases of it fit `max-leases` and `max-vram`. Returns
    /// each lease's bytes (in whole allocation units, so that what is granted can be
    /// allocated), its time, and the requirements with the device named folded in.
    fn checked_request(
        &self,
        request: &LeaseRequest,
        requires: &DeviceRequirement,
        count: u32,
    ) -> Result<(u64, Duration, DeviceRequirement), GpuError> {
        let grant = self.grant.gpu;
        if grant.max_leases == 0 {
            return Err(unauthorized(
                "this tasklet may not lease GPUs: its manifest has no [gpu] section, or the node policy grants it no leases \
                 (max-leases = 0 under [tasklets] or under its tenant's [tenants.NAME])",
            ));
        }
        let lent = self.manager.devices().len();
        let mut requires = requires.clone();
        match (request.device, requires.index) {
            (Some(asked), _) if asked as usize >= lent => {
                return Err(invalid(format!(
                    "no device {asked}; this node lends devices 0 to {} (see inventory)",
                    lent.saturating_sub(1)
                )))
            }
            (Some(a), Some(b)) if a != b => {
                return Err(invalid(format!(
                    "the request asks for device {a} and its requirements for device {b}; name one"
                )))
            }
            (Some(a), _) => requires.index = Some(a),
            _ => {}
        }
        if request.min_vram == 0 || request.secs == 0 {
            return Err(invalid("a lease needs min-vram > 0 bytes and secs > 0"));
        }
        let ttl = Duration::from_secs(request.secs.into());
        if ttl > grant.max_lease_time {
            return Err(quota(format!(
                "a lease of {}s is longer than the granted {}s (max-lease-secs)",
                request.secs,
                grant.max_lease_time.as_secs()
            )));
        }
        let bytes = request
            .min_vram
            .checked_next_multiple_of(ALLOC_GRANULE)
            .ok_or_else(|| invalid("min-vram is too large"))?;
        let live: Vec<&Arc<Lease>> = self.leases.values().filter(|l| l.is_live()).collect();
        let held: u64 = live.iter().map(|l| l.granted).sum();
        let asked = bytes.saturating_mul(count.into());
        if count == 1 {
            if live.len() >= grant.max_leases as usize {
                return Err(quota(format!(
                    "this tasklet already holds {} lease(s), the most it is granted (max-leases); drop one first",
                    live.len()
                )));
            }
            if held.saturating_add(bytes) > grant.max_vram {
                return Err(quota(format!(
                    "a lease of {bytes} bytes would bring this tasklet to {} bytes of VRAM, over its grant of {} \
                     (max-vram: the manifest's [gpu] max-vram, cut down by a policy's, the run's --policy or on a \
                     node its section for your tenant)",
                    held.saturating_add(bytes),
                    grant.max_vram
                )));
            }
        } else {
            let left = (grant.max_leases as usize).saturating_sub(live.len());
            if count as usize > left {
                return Err(quota(format!(
                    "a group of {count} leases is more than this tasklet may still hold: it holds {} of the {} it is \
                     granted (max-leases), so {left} more; ask for fewer, or drop some first",
                    live.len(),
                    grant.max_leases
                )));
            }
            if held.saturating_add(asked) > grant.max_vram {
                return Err(quota(format!(
                    "a group of {count} leases of {bytes} bytes would bring this tasklet to {} bytes of VRAM, over \
                     its grant of {} (max-vram: the manifest's [gpu] max-vram, cut down by a policy's, the run's \
                     --policy or on a node its section for your tenant)",
                    held.saturating_add(asked),
                    grant.max_vram
                )));
            }
        }
        self.usage.check()?;
        Ok((bytes, ttl, requires))
    }

    /// Holds a lease just granted: watched for its holder going (where a node serves this),
    /// under a fresh id.
    fn hold(&mut self, lease: Arc<Lease>) -> LeaseId {
        if let Some(gone) = &self.holder_gone {
            self.manager.watch_holder(&lease, Arc::clone(gone));
        }
        let id = LeaseId(self.ids.fresh());
        self.leases.insert(id, lease);
        id
    }

    fn lease(&self, id: LeaseId) -> Result<&Arc<Lease>, GpuError> {
        self.leases
            .get(&id)
            .ok_or_else(|| invalid(format!("no lease {id} here")))
    }

    fn session(&self, id: SessionId) -> Result<&Session, GpuError> {
        self.sessions
            .get(&id)
            .ok_or_else(|| invalid(format!("no session {id} here")))
    }

    /// Whether `offset..offset+len` lies within one of the session's buffers: the refusal a
    /// transfer of that span gets, in its words, before any of its bytes is moved (a node
    /// checks a write arriving in pieces with it).
    pub fn check_span(
        &self,
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        len: u64,
    ) -> Result<(), GpuError> {
        self.span(session, buffer, offset, len).map(drop)
    }

    /// The device address of `offset..offset+len` of one of the session's buffers, and the lease
    /// to run under: the checks every transfer passes, whichever way its bytes travel. The
    /// lease's liveness is checked when the operation runs.
    fn span(
        &self,
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        len: u64,
    ) -> Result<(u64, &Lease), GpuError> {
        let s = self.session(session)?;
        let (addr, size) = s.buffer(buffer)?;
        Ok((span(addr, size, offset, len)?, &s.lease))
    }

    fn run<T>(
        &self,
        lease: &Lease,
        op: impl FnOnce(&mut tasklet_worker::Worker) -> Result<T, tasklet_worker::WorkerError>,
    ) -> Result<T, GpuError> {
        self.usage.check()?;
        self.manager
            .with_worker_owing(lease, op)
            .map_err(|e| self.usage.blame(&self.manager, lease, e))
    }

    /// [`LocalGpu::run`] for an operation the lease manager makes of worker calls itself (a
    /// load through the node-wide module cache).
    fn run_managed<T>(
        &self,
        lease: &Lease,
        op: impl FnOnce(&LeaseManager) -> Result<T, GpuError>,
    ) -> Result<T, GpuError> {
        self.usage.check()?;
        op(&self.manager).map_err(|e| self.usage.blame(&self.manager, lease, e))
    }

    /// [`GpuService::launch`] past the right check, building the argument block in `block` and
    /// checking the launch against the device's limits before it goes to the worker. Returns
    /// the lease the launch was posted under.
    fn launch_with(
        &self,
        session: SessionId,
        module: ModuleId,
        kernel: KernelRef<'_>,
        config: &LaunchConfig,
        args: &[KernelArg<'_>],
        block: &mut Vec<u8>,
    ) -> Result<LeaseId, GpuError> {
        let s = self.session(session)?;
        let (m, index) = s.kernel(module, kernel)?;
        let kernel = m.kernels[index].info.name.as_str();
        m.kernels[index].argument_block(args, |id| s.buffer(id), block)?;
        self.check_limits(&s.lease, kernel, config, block.len())?;
        let launch = Launch {
            module: m.id,
            kernel: index as u32,
            grid: config.grid,
            block: config.block,
            shared_mem_bytes: config.shared_mem_bytes,
            args: block,
            deadline: self.usage.deadline(&s.lease, self.grant.kernel_deadline)?,
        };
        self.run(&s.lease, |w| w.launch(&launch))
            .inspect(|_| self.usage.launched())?;
        Ok(s.lease_id)
    }

    /// Checks a launch of `kernel` with an argument block of `block_len` bytes against the
    /// limits of the lease's device: a handful of integer comparisons, so a launch the device
    /// would refuse fails here, at once and naming the limit, rather than later and reported by
    /// another call.
    fn check_limits(
        &self,
        lease: &Lease,
        kernel: &str,
        config: &LaunchConfig,
        block_len: usize,
    ) -> Result<(), GpuError> {
        self.manager
            .device_of(lease)
            .launch_limits
            .check(
                config.grid,
                config.block,
                config.shared_mem_bytes,
                block_len,
            )
            .map_err(|e| {
                GpuError::LaunchFailed(format!("cannot launch kernel {}: {e}", quoted(kernel)))
            })
    }

    /// A launch past the right check, with the argument block built in the service's buffer
    /// (taken out for the call, so the session can be borrowed beside it, and put back after:
    /// no allocation per launch). Returns the launch's ordinal under its lease.
    fn launch_counted(
        &mut self,
        session: SessionId,
        module: ModuleId,
        kernel: KernelRef<'_>,
        config: &LaunchConfig,
        args: &[KernelArg<'_>],
    ) -> Result<u64, GpuError> {
        self.need(Right::Launch)?;
        let mut block = std::mem::take(&mut self.arg_block);
        let r = self.launch_with(session, module, kernel, config, args, &mut block);
        self.arg_block = block;
        let ordinal = self.launched.entry(r?).or_insert(0);
        *ordinal += 1;
        Ok(*ordinal)
    }

    /// [`GpuService::mem_write`], after the launches the worker is told (`after`: see
    /// `tasklet_worker`'s copies; `None`, every launch so far).
    fn write_after(
        &mut self,
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        data: &[u8],
        after: Option<u64>,
    ) -> Result<(), GpuError> {
        self.need(Right::Write)?;
        let (at, lease) = self.span(session, buffer, offset, data.len() as u64)?;
        // Large data already in memory a worker maps (the tasklet's own linear memory) goes to
        // the device in one copy by the worker, with no staging here.
        let direct = if data.len() >= DIRECT_MIN_BYTES {
            tasklet_worker::guest_memory::locate(data.as_ptr(), data.len())
        } else {
            None
        };
        match direct {
            Some(span) => {
                self.run(lease, |w| w.write_from_after(at, &span, after))?;
                self.usage.wrote(span.len());
                self.manager.count_direct(span.len(), 0);
                Ok(())
            }
            None => self
                .run(lease, |w| w.write_after(at, data, after))
                .inspect(|_| self.usage.wrote(data.len())),
        }
    }

    /// [`GpuService::mem_read`], after the launches the worker is told ([`LocalGpu::write_after`]).
    fn read_after(
        &mut self,
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        len: u64,
        after: Option<u64>,
    ) -> Result<Vec<u8>, GpuError> {
        self.need(Right::Read)?;
        let (at, lease) = self.span(session, buffer, offset, len)?;
        // The result must fit in the holder's memory: refuse before allocating it.
        let limit = self.grant.limits.memory;
        if len > limit {
            return Err(out_of_bounds(format!(
                "a read of {len} bytes cannot fit in the tasklet's {limit}-byte memory limit; read in pieces"
            )));
        }
        let len =
            usize::try_from(len).map_err(|_| out_of_bounds("read too large for this host"))?;
        let mut out = crate::large_buffer::zeroed(len);
        self.run(lease, |w| w.read_after(at, &mut out, after))?;
        self.usage.read(len);
        Ok(out)
    }

    fn add_module(
        &mut self,
        session: SessionId,
        loaded: LoadedModule,
    ) -> Result<ModuleId, GpuError> {
        let id = ModuleId(self.ids.fresh());
        let s = self
            .sessions
            .get_mut(&session)
            .ok_or_else(|| invalid(format!("no session {session} here")))?;
        let kernels = s.kernel_tables.hold(&loaded);
        s.modules.insert(
            id,
            Module {
                id: loaded.id,
                kernels,
            },
        );
        Ok(id)
    }
}

impl Session {
    /// The session's module `module` and the place of `kernel` in its list.
    fn kernel(
        &self,
        module: ModuleId,
        kernel: KernelRef<'_>,
    ) -> Result<(&Module, usize), GpuError> {
        let m = self.modules.get(&module).ok_or_else(|| {
            if self.reloaded.contains(&module) {
                return invalid(
                    "the kernel's module was reloaded since the kernel was resolved (or the graph recorded it); resolve the kernel again from the module (and record the graph again)",
                );
            }
            invalid(format!(
                "module {module} belongs to another session, or was unloaded; load it in this one"
            ))
        })?;
        let index = match kernel {
            KernelRef::Named(name) => m.kernels.iter().position(|k| k.info.name == name),
            KernelRef::At(i) => Some(i as usize).filter(|&i| i < m.kernels.len()),
        };
        let Some(index) = index else {
            let names: Vec<&str> = m.kernels.iter().map(|k| k.info.name.as_str()).collect();
            let asked = match kernel {
                KernelRef::Named(name) => format!("no kernel named {}", quoted(name)),
                KernelRef::At(i) => format!("no kernel #{i}"),
            };
            return Err(crate::error::no_such_kernel(&asked, &names));
        };
        Ok((m, index))
    }

    /// A buffer's device address and size, if it is this session's.
    fn buffer(&self, id: BufferId) -> Result<(u64, u64), GpuError> {
        self.buffers.get(&id).copied().ok_or_else(|| {
            invalid(format!(
                "buffer {id} belongs to another session, or was freed; a buffer is usable only in the session that \
                 allocated it"
            ))
        })
    }
}

/// `offset..offset+len` within a buffer of `size` bytes at `addr`, as a device address.
fn span(addr: u64, size: u64, offset: u64, len: u64) -> Result<u64, GpuError> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(addr + offset),
        _ => Err(out_of_bounds(format!(
            "bytes {offset}..{} are outside the buffer's {size} bytes",
            offset as u128 + len as u128
        ))),
    }
}

impl Drop for LocalGpu {
    /// However the holder ended (returned, trapped, ran out of time, disconnected), everything it
    /// leased goes back, at once: a lease whose kernels may still run has its worker given up
    /// rather than waited for.
    fn drop(&mut self) {
        self.end();
    }
}

impl GpuService for LocalGpu {
    fn run_ends_at(&mut self, ends: Instant) {
        let run = RunLimit {
            ends,
            wall_time: self.grant.limits.wall_time,
        };
        self.run = Some(run);
        for lease in self.leases.values() {
            self.manager.bind_to_run(lease, run);
        }
    }

    fn end(&mut self) {
        for (_, lease) in self.leases.drain() {
            self.manager.end(&lease, EndReason::TaskletEnded);
        }
    }

    fn devices(&mut self) -> Vec<DeviceInfo> {
        if self.grant.gpu.max_leases == 0 {
            return Vec::new();
        }
        let usage = self.manager.device_usage();
        self.manager
            .devices()
            .iter()
            .map(|d| DeviceInfo {
                index: d.index,
                name: d.name.clone(),
                backend: d.backend.to_string(),
                total_memory: d.total_memory,
                free_memory: self.manager.free_memory_on(d.index),
                compute_capability: d.compute_capability,
                uuid: d.uuid.clone(),
                leases: usage
                    .iter()
                    .find(|u| u.index == d.index)
                    .map_or(0, |u| u32::try_from(u.leases).unwrap_or(u32::MAX)),
            })
            .collect()
    }

    fn lease_acquire(&mut self, request: LeaseRequest) -> Result<LeaseId, GpuError> {
        self.lease_acquire_with(request, &DeviceRequirement::default())
    }

    fn lease_acquire_with(
        &mut self,
        request: LeaseRequest,
        requires: &DeviceRequirement,
    ) -> Result<LeaseId, GpuError> {
        let (bytes, ttl, requires) = self.checked_request(&request, requires, 1)?;
        let lease =
            self.manager
                .acquire_placed(bytes, ttl, self.run, self.usage.account(), &requires)?;
        Ok(self.hold(lease))
    }

    fn lease_acquire_group(
        &mut self,
        request: LeaseRequest,
        requires: &DeviceRequirement,
        count: u32,
    ) -> Result<Vec<LeaseId>, GpuError> {
        if count == 0 {
            return Err(invalid("a group of leases needs count > 0"));
        }
        if count > 1 && request.device.is_some() {
            return Err(invalid(format!(
                "a group of {count} leases goes to {count} distinct devices, so it cannot name one \
                 (`lease-request.device`); leave it out and say what the devices must be in the requirements"
            )));
        }
        let (bytes, ttl, requires) = self.checked_request(&request, requires, count)?;
        let leases = self.manager.acquire_group(
            count as usize,
            bytes,
            ttl,
            self.run,
            self.usage.account(),
            &requires,
        )?;
        Ok(leases.into_iter().map(|l| self.hold(l)).collect())
    }

    fn lease_renew(&mut self, lease: LeaseId, secs: u32) -> Result<(), GpuError> {
        let lease = self.lease(lease)?;
        if secs == 0 {
            return Err(invalid("renew needs secs > 0"));
        }
        let ceiling = self.grant.gpu.max_lease_time;
        self.manager
            .renew(lease, Duration::from_secs(secs.into()), ceiling)
    }

    fn lease_info(&mut self, lease: LeaseId) -> Result<LeaseInfo, GpuError> {
        let lease = self.lease(lease)?;
        if let Some((used, remaining)) = lease.snapshot() {
            return Ok(LeaseInfo {
                device: lease.device,
                granted_bytes: lease.granted,
                used_bytes: used,
                remaining_ms: remaining.as_millis().try_into().unwrap_or(u64::MAX),
            });
        }
        // Ended or expired: report, and act on, the end of the lease in the one place that does both.
        self.manager.with_worker(lease, |_| Ok(()))?;
        Err(GpuError::LeaseExpired("the lease has ended".into()))
    }

    fn lease_drop(&mut self, lease: LeaseId) {
        self.launched.remove(&lease);
        self.areas.forget(lease);
        if let Some(lease) = self.leases.remove(&lease) {
            self.manager.end(&lease, EndReason::Dropped);
        }
    }

    fn session_open(&mut self, lease_id: LeaseId) -> Result<SessionId, GpuError> {
        let lease = Arc::clone(self.lease(lease_id)?);
        // Each session holds host state: a lease's are bounded, so a loop of opens cannot grow
        // this host's memory without end.
        let open = self
            .sessions
            .values()
            .filter(|s| s.lease_id == lease_id)
            .count();
        if open >= MAX_LEASE_SESSIONS {
            return Err(invalid(format!(
                "lease {lease_id} has {MAX_LEASE_SESSIONS} sessions open, the most one lease may (MAX_LEASE_SESSIONS); drop a session first"
            )));
        }
        // Refuse sessions on ended leases now rather than at their first operation.
        self.manager.with_worker(&lease, |_| Ok(()))?;
        let id = SessionId(self.ids.fresh());
        self.sessions.insert(
            id,
            Session {
                lease,
                lease_id,
                buffers: FxHashMap::default(),
                modules: FxHashMap::default(),
                kernel_tables: Default::default(),
                graphs: FxHashMap::default(),
                graph_arg_bytes: 0,
                reloaded: Default::default(),
                queues: Default::default(),
                actors: Default::default(),
            },
        );
        Ok(id)
    }

    fn session_drop(&mut self, session: SessionId) {
        // Its persistent kernels stop before anything they may use is freed.
        self.drop_actors(session);
        let Some(s) = self.sessions.remove(&session) else {
            return;
        };
        self.drop_marks(&s.lease, &s.queues);
        // Free what the session still holds; if its lease already ended, that is done. Neither
        // waits on running kernels: a busy worker is given up, and with it the lease. Graphs go
        // first: an instantiated graph must not outlive the kernels it launches.
        for id in graph::worker_graphs(&s) {
            if self
                .manager
                .release_with(&s.lease, |w| w.graph_destroy(id))
                .is_err()
            {
                return;
            }
        }
        for &(addr, size) in s.buffers.values() {
            if self.manager.free(&s.lease, addr, size).is_err() {
                return;
            }
        }
        for m in s.modules.values() {
            if self.manager.unload(&s.lease, m.id).is_err() {
                return;
            }
        }
    }

    fn mem_alloc(&mut self, session: SessionId, bytes: u64) -> Result<BufferId, GpuError> {
        self.need(Right::Alloc)?;
        let s = self.session(session)?;
        if bytes == 0 {
            return Err(invalid("cannot allocate 0 bytes"));
        }
        self.usage.check()?;
        let addr = self.manager.alloc(&s.lease, bytes)?;
        self.usage
            .holding(self.leases.values().map(|l| l.used()).sum());
        let id = BufferId(self.ids.fresh());
        if let Some(s) = self.sessions.get_mut(&session) {
            s.buffers.insert(id, (addr, bytes));
        }
        Ok(id)
    }

    fn mem_free(&mut self, session: SessionId, buffer: BufferId) {
        let Some(s) = self.sessions.get_mut(&session) else {
            return;
        };
        if let Some((addr, size)) = s.buffers.remove(&buffer) {
            let _ = self.manager.free(&s.lease, addr, size);
        }
    }

    fn mem_write(
        &mut self,
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        data: &[u8],
    ) -> Result<(), GpuError> {
        self.write_after(session, buffer, offset, data, None)
    }

    fn mem_read(
        &mut self,
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, GpuError> {
        self.read_after(session, buffer, offset, len, None)
    }

    fn stream_launch(
        &mut self,
        session: SessionId,
        stream: StreamId,
        module: ModuleId,
        kernel: KernelRef<'_>,
        config: &LaunchConfig,
        args: &[KernelArg<'_>],
    ) -> Result<u64, GpuError> {
        self.stream_needs(session, stream)?;
        let ordinal = self.launch_counted(session, module, kernel, config, args)?;
        self.stream_launched(session, stream, ordinal);
        Ok(ordinal)
    }

    fn stream_write(
        &mut self,
        session: SessionId,
        stream: StreamId,
        buffer: BufferId,
        offset: u64,
        data: &[u8],
    ) -> Result<(), GpuError> {
        let after = self.stream_needs(session, stream)?;
        self.write_after(session, buffer, offset, data, Some(after))
    }

    fn stream_read(
        &mut self,
        session: SessionId,
        stream: StreamId,
        buffer: BufferId,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, GpuError> {
        let after = self.stream_needs(session, stream)?;
        self.read_after(session, buffer, offset, len, Some(after))
    }

    fn mem_read_into(
        &mut self,
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        dst: GuestBytes,
    ) -> Result<(), GpuError> {
        self.need(Right::Read)?;
        let (at, lease) = self.span(session, buffer, offset, dst.len() as u64)?;
        let Some(span) = dst.span() else {
            // Only reachable with a memory this host did not create (see guest_memory).
            return Err(unsupported(
                "the destination is not in memory the GPU worker can reach, so it cannot be filled in place; use mem-read",
            ));
        };
        if dst.len() >= DIRECT_MIN_BYTES {
            self.run(lease, |w| w.read_into(at, &span))?;
            self.usage.read(dst.len());
            self.manager.count_direct(0, dst.len());
            return Ok(());
        }
        let mut staged = vec![0u8; dst.len()];
        self.run(lease, |w| w.read(at, &mut staged))?;
        self.usage.read(dst.len());
        dst.fill(&staged)
    }

    fn mem_copy(
        &mut self,
        session: SessionId,
        dst: (BufferId, u64),
        src: (BufferId, u64),
        len: u64,
    ) -> Result<(), GpuError> {
        self.need(Right::Write)?;
        let s = self.session(session)?;
        let (daddr, dsize) = s.buffer(dst.0)?;
        let (saddr, ssize) = s.buffer(src.0)?;
        let to = span(daddr, dsize, dst.1, len)?;
        let from = span(saddr, ssize, src.1, len)?;
        self.run(&s.lease, |w| w.copy(to, from, len))
    }

    fn mem_copy_between(
        &mut self,
        dst: (SessionId, BufferId, u64),
        src: (SessionId, BufferId, u64),
        len: u64,
    ) -> Result<(), GpuError> {
        if dst.0 == src.0 {
            return self.mem_copy(dst.0, (dst.1, dst.2), (src.1, src.2), len);
        }
        self.need(Right::Read)?;
        self.need(Right::Write)?;
        let (ds, ss) = (self.session(dst.0)?, self.session(src.0)?);
        let (daddr, dsize) = ds.buffer(dst.1)?;
        let (saddr, ssize) = ss.buffer(src.1)?;
        let to = span(daddr, dsize, dst.2, len)?;
        let from = span(saddr, ssize, src.2, len)?;
        let (dlease, slease) = (Arc::clone(&ds.lease), Arc::clone(&ss.lease));
        if len == 0 {
            return Ok(());
        }
        if Arc::ptr_eq(&dlease, &slease) {
            // Two sessions of one lease: one worker, one copy on its device.
            return self.run(&dlease, |w| w.copy(to, from, len));
        }
        // GPU to GPU where the leases' workers can (a group's, on GPUs with peer access): the
        // source's worker finishes its work and exports the buffer, the destination's copies out
        // of it and waits.
        self.usage.check()?;
        let peer = self
            .manager
            .copy_peer(&dlease, to, &slease, saddr, from - saddr, len)
            .map_err(|e| self.usage.blame(&self.manager, &slease, e))?;
        if peer {
            return Ok(());
        }
        // Otherwise through memory both workers map, a bounded piece at a time, the source's
        // worker copying into it and the destination's out of it. The read waits for the
        // source's kernels; the write is in order before the destination's later work.
        if self.copy_staging.is_none() {
            let area = MappedArea::create(COPY_PIECE as usize).map_err(|e| {
                GpuError::CapacityExceeded(format!(
                    "this host cannot make memory to stage a copy between devices through now: {e}"
                ))
            })?;
            self.copy_staging = Some(area);
        }
        let staging = self.copy_staging.as_ref().expect("made just above");
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(COPY_PIECE) as usize;
            let piece = staging.span(0, n).expect("a piece fits the staging memory");
            self.run(&slease, |w| w.read_into(from + done, &piece))?;
            self.run(&dlease, |w| w.write_from(to + done, &piece))?;
            done += n as u64;
        }
        Ok(())
    }

    fn module_load(&mut self, session: SessionId, ptx: &str) -> Result<ModuleId, GpuError> {
        self.need(Right::Load)?;
        let s = self.session(session)?;
        let loaded = self.run_managed(&s.lease, |m| m.load_module(&s.lease, ptx))?;
        self.add_module(session, loaded)
    }

    fn module_load_source(
        &mut self,
        session: SessionId,
        source: &str,
        options: &[String],
    ) -> Result<ModuleId, GpuError> {
        self.need(Right::Load)?;
        let s = self.session(session)?;
        let loaded = self.run_managed(&s.lease, |m| m.load_source(&s.lease, source, options))?;
        self.add_module(session, loaded)
    }

    fn module_kernels(&mut self, session: SessionId, module: ModuleId) -> Vec<String> {
        self.sessions
            .get(&session)
            .and_then(|s| s.modules.get(&module))
            .map(|m| m.kernels.iter().map(|k| k.info.name.clone()).collect())
            .unwrap_or_default()
    }

    fn module_signatures(&mut self, session: SessionId, module: ModuleId) -> Vec<KernelSignature> {
        self.sessions
            .get(&session)
            .and_then(|s| s.modules.get(&module))
            .map(|m| m.kernels.iter().map(|k| (&k.info).into()).collect())
            .unwrap_or_default()
    }

    fn module_unload(&mut self, session: SessionId, module: ModuleId) {
        self.graphs_before_unload(session, module);
        let Some(s) = self.sessions.get_mut(&session) else {
            return;
        };
        if let Some(m) = s.modules.remove(&module) {
            s.kernel_tables.release(m.id);
            s.reloaded.unloaded(module);
            let _ = self.manager.unload(&s.lease, m.id);
        }
    }

    fn module_reload(
        &mut self,
        session: SessionId,
        module: ModuleId,
        source: super::ModuleSource<'_>,
    ) -> Result<ModuleId, GpuError> {
        self.need(Right::Load)?;
        if !self.session(session)?.modules.contains_key(&module) {
            return Err(invalid(format!(
                "module {module} belongs to another session, or was unloaded; only a loaded module of this session reloads"
            )));
        }
        let s = self.session(session)?;
        let loaded = match source {
            super::ModuleSource::Ptx(ptx) => {
                self.run_managed(&s.lease, |m| m.load_module(&s.lease, ptx))?
            }
            super::ModuleSource::Cuda { source, options } => {
                self.run_managed(&s.lease, |m| m.load_source(&s.lease, source, options))?
            }
        };
        let new = self.add_module(session, loaded)?;
        self.module_unload(session, module);
        if let Some(s) = self.sessions.get_mut(&session) {
            s.reloaded.replaced(module, new);
        }
        Ok(new)
    }

    fn launch(
        &mut self,
        session: SessionId,
        module: ModuleId,
        kernel: &str,
        config: &LaunchConfig,
        args: &[KernelArg<'_>],
    ) -> Result<(), GpuError> {
        self.launch_kernel(session, module, KernelRef::Named(kernel), config, args)?;
        Ok(())
    }

    fn launch_kernel(
        &mut self,
        session: SessionId,
        module: ModuleId,
        kernel: KernelRef<'_>,
        config: &LaunchConfig,
        args: &[KernelArg<'_>],
    ) -> Result<u64, GpuError> {
        let ordinal = self.launch_counted(session, module, kernel, config, args)?;
        self.default_launched(session, ordinal);
        Ok(ordinal)
    }

    fn launch_burst(
        &mut self,
        session: SessionId,
        module: ModuleId,
        kernel: KernelRef<'_>,
        burst: &super::Burst<'_>,
    ) -> Result<u64, GpuError> {
        let first = self.burst_counted(session, module, kernel, burst)?;
        let last = first.saturating_add(burst.counts.len().saturating_sub(1) as u64);
        self.default_launched(session, last);
        Ok(first)
    }

    fn graph_create(&mut self, session: SessionId) -> Result<GraphId, GpuError> {
        self.graph_new(session)
    }

    fn graph_launch(
        &mut self,
        session: SessionId,
        graph: GraphId,
        module: ModuleId,
        kernel: KernelRef<'_>,
        config: &LaunchConfig,
        args: &[GraphArg<'_>],
    ) -> Result<u32, GpuError> {
        self.graph_record_launch(session, graph, module, kernel, config, args)
    }

    fn graph_copy(
        &mut self,
        session: SessionId,
        graph: GraphId,
        dst: (BufferId, u64),
        src: (BufferId, u64),
        len: u64,
    ) -> Result<u32, GpuError> {
        self.graph_record_copy(session, graph, dst, src, len)
    }

    fn graph_fill(
        &mut self,
        session: SessionId,
        graph: GraphId,
        dst: (BufferId, u64),
        len: u64,
        value: u32,
    ) -> Result<u32, GpuError> {
        self.graph_record_fill(session, graph, dst, len, value)
    }

    fn graph_scalar(
        &mut self,
        session: SessionId,
        graph: GraphId,
        value: u64,
    ) -> Result<u32, GpuError> {
        self.graph_new_scalar(session, graph, value)
    }

    fn graph_set_scalar(
        &mut self,
        session: SessionId,
        graph: GraphId,
        scalar: u32,
        value: u64,
    ) -> Result<(), GpuError> {
        self.graph_set_scalar_value(session, graph, scalar, value)
    }

    fn graph_set_args(
        &mut self,
        session: SessionId,
        graph: GraphId,
        node: u32,
        args: &[GraphArg<'_>],
    ) -> Result<(), GpuError> {
        self.graph_update_args(session, graph, node, args)
    }

    fn graph_replay(
        &mut self,
        session: SessionId,
        graph: GraphId,
        times: u32,
    ) -> Result<(), GpuError> {
        self.graph_run(session, graph, times)?;
        // A replay is no launch of its own: the worker places it before the next launch.
        let next = self
            .session(session)
            .map(|s| self.launched.get(&s.lease_id).copied().unwrap_or(0))?
            .saturating_add(1);
        self.default_launched(session, next);
        Ok(())
    }

    fn graph_drop(&mut self, session: SessionId, graph: GraphId) {
        self.graph_forget(session, graph)
    }

    fn sync(&mut self, session: SessionId) -> Result<(), GpuError> {
        let s = self.session(session)?;
        self.run(&s.lease, |w| w.sync())
            .inspect(|_| self.usage.synced())
    }

    fn queue_op(
        &mut self,
        session: SessionId,
        op: super::QueueOp,
    ) -> Result<super::QueueReply, GpuError> {
        self.queue(session, op)
    }

    fn actor_op(
        &mut self,
        session: SessionId,
        op: super::ActorOp<'_>,
    ) -> Result<super::ActorReply, GpuError> {
        self.actor_op_local(session, op)
    }

    fn gpu_time(&mut self, lease: LeaseId) -> Result<Duration, GpuError> {
        let lease = self.lease(lease)?;
        self.manager.gpu_time(lease, true)
    }
}
