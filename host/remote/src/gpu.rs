//! [`RemoteGpu`]: the `GpuService` whose GPU is on a node, so that a tasklet running here does
//! its GPU work there, unchanged.
//!
//! Each operation is the node's request of the same name. LAUNCH and MEM_WRITE are pipelined:
//! they are sent without waiting (gathered, and written at the next operation that waits or
//! when enough have gathered), and their failures come back from the session's next `sync` or
//! read, naming the op. Everything else is one round trip, streams and events too (QUEUE_OP:
//! a record, wait, query or sync is a call). A launch, write or read on a stream is
//! STREAM_LAUNCH, STREAM_WRITE or STREAM_READ, pipelined (the first two) as LAUNCH and
//! MEM_WRITE are, so that the node runs a copy on one stream beside another stream's kernels as
//! a local run does. The check that the stream is the session's costs no round trip for a stream
//! this side made in the session; any other is asked of the node first (QUEUE_OP CHECK_STREAM),
//! which refuses it in the words a local run gives. The node checks every operation
//! itself; nothing is checked here that the node would not check again, except what only this
//! side can know (a kernel's name, from the module's list).
//!
//! A one-shot ([`GpuService::submit`]) whose shape GPU_SUBMIT carries — a PTX module, the region
//! as the kernel's first argument and nowhere else, no dynamic shared memory, an input within
//! [`wire::limits::MAX_SUBMIT_INPUT`] — goes as one GPU_SUBMIT between its lease's LEASE_ALLOC
//! and MEM_FREE; any other runs as the session operations it stands for.
//!
//! Given a [`Fallback`] ([`RemoteGpu::with_fallback`]), a one-shot, or a lease asked for, that
//! fails because the connection was lost or the node refused before starting (full, draining),
//! while the tasklet holds nothing else on that node, runs again on the next node, and the
//! service goes on there. Anything a session holds pins the service to its node: once that is
//! lost, its operations fail `disconnected`.
//!
//! The run's end ([`GpuService::run_ends_at`]) bounds every wait for the node: a call still
//! waiting then fails `deadline-exceeded` and the connection is closed, so that the node ends the
//! run's leases and kernels.

use crate::client::{unexpected, NodeClient};
use crate::error::ClientError;
use crate::fallback::Fallback;
use std::collections::{HashMap, HashSet};
use std::time::Instant;
use tasklet_runtime::config::{Grant as HostGrant, Manifest, Right};
use tasklet_runtime::gpu::{
    check_burst_size, submit_args_after_region, submit_in_session, BufferId, Burst, DeviceInfo,
    EventId, GpuService, GraphArg, GraphId, GuestBytes, KernelArg, KernelParam, KernelRef,
    KernelSignature, LaunchConfig, LeaseId, LeaseInfo, LeaseRequest, ModuleId, ModuleSource,
    ParamKind, QueueOp, QueueReply, SessionId, StreamId, Submit, SubmitArg,
};
use tasklet_runtime::DeviceRequirement;
use tasklet_runtime::GpuError;
use tasklet_wire as wire;

// A burst the host accepts is one request the wire carries, and the other way round.
const _: () = assert!(
    wire::limits::MAX_BURST_LAUNCHES == tasklet_runtime::gpu::MAX_BURST_LAUNCHES
        && wire::limits::MAX_BURST_CHANGES == tasklet_runtime::gpu::MAX_BURST_CHANGES
);
use tasklet_wire::{rights, Reply, Request};

/// A node's GPU as a [`GpuService`].
pub struct RemoteGpu {
    client: NodeClient,
    /// The grant the node confirmed, when one was asked for.
    grant: Option<wire::Grant>,
    /// Each loaded module's kernels, in the order LAUNCH indexes them.
    modules: HashMap<ModuleId, Vec<KernelSignature>>,
    /// The lease each open session is under, to number launches by lease.
    sessions: HashMap<SessionId, LeaseId>,
    /// The streams the node made for each open session here and that were not dropped: a
    /// launch or copy naming one is checked here (see `queue_op`), without a round trip.
    streams: HashMap<SessionId, HashSet<StreamId>>,
    /// The streams a write or read of 32 MiB or more is spread over (1: not spread).
    transfer_streams: usize,
    /// The size of each buffer allocated here in each open session and not freed: a transfer is
    /// spread over several streams only where its span is known to fit (see `spread`).
    buffers: HashMap<SessionId, HashMap<BufferId, u64>>,
    /// LAUNCHes sent under each lease: the latest one's ordinal.
    launched: HashMap<LeaseId, u64>,
    /// The leases held on this connection: while there are any, the service stays on its node.
    leases: HashSet<LeaseId>,
    /// The grant asked for, to ask a node moved to for it again.
    asked: Option<wire::Grant>,
    /// Where stateless calls go when this node is lost.
    fallback: Option<Box<dyn Fallback>>,
    /// The run's end: no wait for the node goes past it.
    run_ends: Option<Instant>,
    /// What every lease of this service requires of its device besides its own requirements
    /// (the cluster's `--requires`, for example), so that a node of several devices places it
    /// on one that meets what the node was chosen for.
    requires: wire::LeaseRequirements,
}

impl RemoteGpu {
    /// The service over `client`'s connection, with the grant the node gives the tenant.
    pub fn new(client: NodeClient) -> RemoteGpu {
        RemoteGpu {
            client,
            grant: None,
            modules: HashMap::new(),
            sessions: HashMap::new(),
            streams: HashMap::new(),
            buffers: HashMap::new(),
            transfer_streams: crate::channel::transfer_streams(),
            launched: HashMap::new(),
            leases: HashSet::new(),
            asked: None,
            fallback: None,
            run_ends: None,
            requires: wire::LeaseRequirements::default(),
        }
    }

    /// The service, each of its leases also requiring `requires` of its device (a lease's own
    /// requirement of the same field takes its place).
    pub fn with_requirements(mut self, requires: wire::LeaseRequirements) -> RemoteGpu {
        self.requires = requires;
        self
    }

    /// The service, spreading each write or read of 32 MiB or more over `streams` streams of
    /// its connection (1 to 16; 1: none), in place of `TASKLET_TRANSFER_STREAMS`' count (or 1).
    /// The session's order holds either way (docs/wire.md, "One transfer over several
    /// streams"); it is worth more than one where a stream's 16 MiB flow-control window per
    /// round trip bounds a transfer (a long path).
    pub fn with_transfer_streams(mut self, streams: usize) -> RemoteGpu {
        self.transfer_streams = crate::channel::clamp_streams(streams);
        self
    }

    /// The service, its stateless calls moving to `fallback`'s nodes when this node is lost
    /// (see the module's doc).
    pub fn with_fallback(mut self, fallback: Box<dyn Fallback>) -> RemoteGpu {
        self.fallback = Some(fallback);
        self
    }

    /// The service over `client`'s connection, its grant narrowed to what `manifest` asks for
    /// (the node cuts it down to the tenant's policy too): the same grant a local run of the
    /// tasklet gets, checked by the node.
    pub fn for_manifest(client: NodeClient, manifest: &Manifest) -> Result<RemoteGpu, ClientError> {
        RemoteGpu::asking(client, manifest_grant(manifest))
    }

    /// The service over `client`'s connection, its grant narrowed to `grant` (a manifest's
    /// grant under this machine's policy, as `Policy::grant` makes it; the node cuts it down to
    /// the tenant's policy too): a run here under `--policy` keeps that policy's GPU caps when
    /// its GPU work goes elsewhere.
    pub fn for_grant(client: NodeClient, grant: &HostGrant) -> Result<RemoteGpu, ClientError> {
        RemoteGpu::asking(client, host_grant_to_wire(grant))
    }

    fn asking(mut client: NodeClient, asked: wire::Grant) -> Result<RemoteGpu, ClientError> {
        let grant = client.grant(&asked)?;
        let mut gpu = RemoteGpu::new(client);
        gpu.grant = Some(grant);
        gpu.asked = Some(asked);
        Ok(gpu)
    }

    /// The grant the node confirmed, if one was asked for.
    pub fn grant(&self) -> Option<&wire::Grant> {
        self.grant.as_ref()
    }

    pub fn client(&mut self) -> &mut NodeClient {
        &mut self.client
    }

    fn call(&mut self, request: &Request) -> Result<(Reply, Vec<u8>), GpuError> {
        Ok(self.client.request(request)?)
    }

    /// Posts `data` as pipelined writes, each `request(offset into data, its length)`: one
    /// request may carry no more than the node accepts in one message (HELLO said how much), so
    /// a larger write goes as several, each at its own offset.
    fn post_writes(
        &mut self,
        data: &[u8],
        request: impl Fn(u64, u64) -> Request,
    ) -> Result<(), GpuError> {
        let most = usize::try_from(self.client.max_stream_bytes())
            .unwrap_or(usize::MAX)
            .max(1);
        let mut at = 0usize;
        loop {
            let piece = &data[at..data.len().min(at.saturating_add(most))];
            self.client
                .post(&request(at as u64, piece.len() as u64), piece)?;
            at += piece.len();
            if at >= data.len() {
                return Ok(());
            }
        }
    }

    /// The parts a transfer of `len` bytes at `offset` of `buffer` is spread over (see
    /// `channel::spread`): `None` when it goes whole, as a small one does, or one whose span
    /// this side does not know to fit (the node then refuses it whole, in its own words).
    fn spread(
        &self,
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        len: u64,
    ) -> Option<Vec<(u64, u64)>> {
        let size = *self.buffers.get(&session)?.get(&buffer)?;
        let fits = offset.checked_add(len).is_some_and(|end| end <= size);
        if !fits {
            return None;
        }
        let most = self.client.max_stream_bytes();
        crate::channel::spread_parts(len, most, self.transfer_streams)
    }

    /// A read's parts as MEM_READs, each with where its bytes go in the read's result.
    fn read_parts(
        &self,
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        len: u64,
    ) -> Option<Vec<(Request, usize)>> {
        let parts = self.spread(session, buffer, offset, len)?;
        let read = |(at, len): (u64, u64)| {
            let request = Request::MemRead {
                session: wire::SessionId(session.0),
                buffer: wire::BufferId(buffer.0),
                offset: offset + at,
                len,
            };
            (request, at as usize)
        };
        Some(parts.into_iter().map(read).collect())
    }

    /// Refuses a stream that is not the session's, as a local run does, before an op on it is
    /// sent: one this side made in the session and has not dropped is answered here, any other
    /// by the node (see `queue_op`). The node checks the stream again when the op comes.
    fn check_stream(&mut self, session: SessionId, stream: StreamId) -> Result<(), GpuError> {
        self.queue_op(session, QueueOp::CheckStream(stream))
            .map(drop)
    }

    /// LAUNCH's fields.
    fn wire_launch(
        &self,
        session: SessionId,
        module: ModuleId,
        kernel: KernelRef<'_>,
        config: &LaunchConfig,
        args: &[KernelArg<'_>],
    ) -> Result<wire::Launch, GpuError> {
        Ok(wire::Launch {
            session: wire::SessionId(session.0),
            module: wire::ModuleId(module.0),
            kernel: self.kernel_index(module, kernel)?,
            grid: config.grid,
            block: config.block,
            shared_mem_bytes: config.shared_mem_bytes,
            args: args.iter().map(to_wire_arg).collect(),
        })
    }

    /// The ordinal of a launch just sent in `session`: numbered as the node's worker numbers
    /// the launches under the lease, so long as the node refused none of them (a refused one is
    /// reported at the next barrier).
    fn numbered(&mut self, session: SessionId) -> u64 {
        let lease = self.sessions.get(&session).copied();
        lease.map_or(0, |lease| {
            let n = self.launched.entry(lease).or_insert(0);
            *n += 1;
            *n
        })
    }

    /// One GRAPH operation; what it made (a graph's id, a node's or a scalar's index), else 0.
    fn graph_call(
        &mut self,
        session: SessionId,
        graph: GraphId,
        op: wire::GraphOp,
    ) -> Result<u64, GpuError> {
        let request = Request::Graph(wire::Graph {
            session: wire::SessionId(session.0),
            graph: graph.0,
            op,
        });
        match self.call(&request)? {
            (Reply::Graph { value }, _) => Ok(value),
            (other, _) => Err(unexpected(other).into()),
        }
    }

    /// A GRAPH operation that answers an index (a node's, a scalar's).
    fn graph_index(
        &mut self,
        session: SessionId,
        graph: GraphId,
        op: wire::GraphOp,
    ) -> Result<u32, GpuError> {
        let value = self.graph_call(session, graph, op)?;
        u32::try_from(value).map_err(|_| {
            GpuError::DeviceLost(format!("the node answered a graph index of {value}"))
        })
    }

    /// A launch's kernel by its place in the module: a name is looked up in the kernel list the
    /// module was loaded with. A module this side never loaded is the node's to refuse (index 0
    /// names nothing then).
    fn kernel_index(&self, module: ModuleId, kernel: KernelRef<'_>) -> Result<u32, GpuError> {
        match kernel {
            KernelRef::At(index) => Ok(index),
            KernelRef::Named(kernel) => match self.modules.get(&module) {
                None => Ok(0),
                Some(kernels) => match kernels.iter().position(|k| k.name == kernel) {
                    Some(i) => Ok(i as u32),
                    None => {
                        let names: Vec<&str> = kernels.iter().map(|k| k.name.as_str()).collect();
                        let asked =
                            format!("no kernel named {}", tasklet_runtime::error::quoted(kernel));
                        Err(tasklet_runtime::error::no_such_kernel(&asked, &names))
                    }
                },
            },
        }
    }

    /// Runs `attempt`, a stateless call, again on the next node for as long as it fails in a
    /// way that may move (see the module's doc) and there is a next node.
    fn stateless<T>(
        &mut self,
        mut attempt: impl FnMut(&mut RemoteGpu) -> Result<T, GpuError>,
    ) -> Result<T, GpuError> {
        loop {
            let held = !self.leases.is_empty();
            let err = match attempt(self) {
                Ok(done) => return Ok(done),
                Err(err) => err,
            };
            let lost = self.client.is_lost();
            let refused = matches!(&err, GpuError::CapacityExceeded(_));
            if held || !(lost || refused) || self.fallback.is_none() {
                return Err(err);
            }
            let why = match lost {
                true => format!(
                    "node {} was lost before it answered ({err})",
                    self.client.node_name()
                ),
                false => format!("node {} refused it ({err})", self.client.node_name()),
            };
            if !self.move_on(&why) {
                return Err(err);
            }
        }
    }

    /// Connects to the next node that takes this service (its grant, when one was asked for)
    /// and goes on there; false when none is left.
    fn move_on(&mut self, why: &str) -> bool {
        let Some(fallback) = self.fallback.as_mut() else {
            return false;
        };
        let mut why = why.to_owned();
        loop {
            let mut client = match fallback.next_node(&why) {
                None => return false,
                Some(Ok(client)) => client,
                Some(Err(err)) => {
                    why = err.to_string();
                    continue;
                }
            };
            client.set_deadline(self.run_ends);
            if let Some(asked) = &self.asked {
                match client.grant(asked) {
                    Ok(grant) => self.grant = Some(grant),
                    Err(err) => {
                        why = format!("node {} refused the grant ({err})", client.node_name());
                        continue;
                    }
                }
            }
            self.client = client;
            self.modules.clear();
            self.sessions.clear();
            self.streams.clear();
            self.buffers.clear();
            self.launched.clear();
            return true;
        }
    }
}

/// What a manifest asks of the node's GPU, as GRANT says it.
pub fn manifest_grant(manifest: &Manifest) -> wire::Grant {
    host_grant_to_wire(&HostGrant {
        limits: manifest.limits,
        gpu: manifest.gpu,
        kernel_deadline: std::time::Duration::ZERO,
        gpu_time: None,
    })
}

fn host_grant_to_wire(grant: &HostGrant) -> wire::Grant {
    let bits = [
        (Right::Alloc, rights::ALLOC),
        (Right::Write, rights::WRITE),
        (Right::Read, rights::READ),
        (Right::Load, rights::LOAD),
        (Right::Launch, rights::LAUNCH),
    ];
    wire::Grant {
        memory: grant.limits.memory,
        max_vram: grant.gpu.max_vram,
        max_leases: grant.gpu.max_leases,
        max_lease_ms: u64::try_from(grant.gpu.max_lease_time.as_millis()).unwrap_or(u64::MAX),
        rights: bits
            .iter()
            .filter(|(right, _)| grant.gpu.rights.contains(*right))
            .fold(0, |all, (_, bit)| all | bit),
    }
}

/// A graph launch's argument as a GRAPH request carries it.
/// A queue op as QUEUE_OP carries it.
fn to_wire_queue_op(op: QueueOp) -> wire::QueueOp {
    match op {
        QueueOp::NewStream => wire::QueueOp::NewStream,
        QueueOp::DropStream(s) => wire::QueueOp::DropStream { stream: s.0 },
        QueueOp::CheckStream(s) => wire::QueueOp::CheckStream { stream: s.0 },
        QueueOp::Wait { stream, event } => wire::QueueOp::Wait {
            stream: stream.0,
            event: event.0,
        },
        QueueOp::SyncStream(s) => wire::QueueOp::SyncStream { stream: s.0 },
        QueueOp::NewEvent => wire::QueueOp::NewEvent,
        QueueOp::DropEvent(e) => wire::QueueOp::DropEvent { event: e.0 },
        QueueOp::Record { event, stream } => wire::QueueOp::Record {
            event: event.0,
            stream: stream.0,
        },
        QueueOp::Query(e) => wire::QueueOp::Query { event: e.0 },
        QueueOp::SyncEvent(e) => wire::QueueOp::SyncEvent { event: e.0 },
        QueueOp::Elapsed { start, end } => wire::QueueOp::Elapsed {
            start: start.0,
            end: end.0,
        },
    }
}

fn to_wire_graph_arg(arg: &GraphArg<'_>) -> wire::GraphArg {
    match arg {
        GraphArg::Arg(a) => wire::GraphArg::Arg(to_wire_arg(a)),
        GraphArg::Scalar(index) => wire::GraphArg::Scalar(*index),
    }
}

fn to_wire_arg(arg: &KernelArg<'_>) -> wire::KernelArg {
    match *arg {
        KernelArg::Buffer { buffer, offset } => wire::KernelArg::Buffer {
            buffer: wire::BufferId(buffer.0),
            offset,
        },
        KernelArg::I32(v) => wire::KernelArg::I32(v),
        KernelArg::U32(v) => wire::KernelArg::U32(v),
        KernelArg::I64(v) => wire::KernelArg::I64(v),
        KernelArg::U64(v) => wire::KernelArg::U64(v),
        KernelArg::F32(v) => wire::KernelArg::F32(v),
        KernelArg::F64(v) => wire::KernelArg::F64(v),
        KernelArg::Bytes(v) => wire::KernelArg::Bytes(v.to_vec()),
        KernelArg::Relocated { bytes, relocations } => wire::KernelArg::Relocated {
            bytes: bytes.to_vec(),
            relocations: relocations
                .iter()
                .map(|r| wire::Relocation {
                    at: r.at,
                    buffer: wire::BufferId(r.buffer.0),
                    offset: r.offset,
                })
                .collect(),
        },
    }
}

impl GpuService for RemoteGpu {
    fn run_ends_at(&mut self, ends: Instant) {
        self.run_ends = Some(ends);
        self.client.set_deadline(Some(ends));
    }

    fn end(&mut self) {
        // The node ends a connection's leases, its sessions' kernels included, when it closes:
        // one close rather than a MEM_FREE round trip per lease.
        self.leases.clear();
        self.client.close_now();
    }

    fn devices(&mut self) -> Vec<DeviceInfo> {
        if self.grant.is_some_and(|g| g.max_leases == 0) {
            return Vec::new();
        }
        // The trait has no error to give: a node that cannot be asked lends nothing.
        let Ok(devices) = self.client.inventory() else {
            return Vec::new();
        };
        devices
            .into_iter()
            .map(|d| DeviceInfo {
                index: d.index,
                name: d.name,
                backend: d.backend,
                total_memory: d.total_memory,
                free_memory: d.free_memory,
                compute_capability: d.compute_capability,
                uuid: d.uuid,
                leases: d.leases,
            })
            .collect()
    }

    fn lease_acquire(&mut self, request: LeaseRequest) -> Result<LeaseId, GpuError> {
        self.stateless(|gpu| {
            let lease = gpu.client.lease_alloc_with(
                request.min_vram,
                request.secs,
                request.device,
                gpu.requires.clone(),
            )?;
            let lease = LeaseId(lease.lease.0);
            gpu.leases.insert(lease);
            Ok(lease)
        })
    }

    fn lease_acquire_with(
        &mut self,
        request: LeaseRequest,
        requires: &DeviceRequirement,
    ) -> Result<LeaseId, GpuError> {
        let device = request.device.or(requires.index);
        let requires = self.wire_requirements(requires);
        self.stateless(|gpu| {
            let lease = gpu.client.lease_alloc_with(
                request.min_vram,
                request.secs,
                device,
                requires.clone(),
            )?;
            let lease = LeaseId(lease.lease.0);
            gpu.leases.insert(lease);
            Ok(lease)
        })
    }

    fn lease_acquire_group(
        &mut self,
        request: LeaseRequest,
        requires: &DeviceRequirement,
        count: u32,
    ) -> Result<Vec<LeaseId>, GpuError> {
        // One request cannot carry more; no node lends more devices than that.
        let most = wire::limits::MAX_GROUP_LEASES;
        if count as usize > most {
            return Err(GpuError::CapacityExceeded(format!(
                "a group of {count} leases needs {count} distinct devices, and a node lends at most {most}; \
                 ask for fewer"
            )));
        }
        let group = wire::LeaseGroup {
            min_bytes: request.min_vram,
            seconds: request.secs,
            device: request.device.or(requires.index),
            requires: self.wire_requirements(requires),
            count,
        };
        self.stateless(|gpu| gpu.lease_group(&group))
    }

    fn lease_renew(&mut self, lease: LeaseId, secs: u32) -> Result<(), GpuError> {
        self.call(&Request::LeaseRenew {
            lease: wire::LeaseId(lease.0),
            seconds: secs,
        })?;
        Ok(())
    }

    fn lease_info(&mut self, lease: LeaseId) -> Result<LeaseInfo, GpuError> {
        match self.call(&Request::LeaseInfo {
            lease: wire::LeaseId(lease.0),
        })? {
            (
                Reply::LeaseInfo {
                    device,
                    granted_bytes,
                    used_bytes,
                    remaining_ms,
                    ..
                },
                _,
            ) => Ok(LeaseInfo {
                device,
                granted_bytes,
                used_bytes,
                remaining_ms,
            }),
            (other, _) => Err(unexpected(other).into()),
        }
    }

    fn lease_drop(&mut self, lease: LeaseId) {
        self.leases.remove(&lease);
        self.launched.remove(&lease);
        self.sessions.retain(|_, l| *l != lease);
        let sessions = &self.sessions;
        self.streams
            .retain(|session, _| sessions.contains_key(session));
        self.buffers
            .retain(|session, _| sessions.contains_key(session));
        // Whatever the answer, the lease is gone for the caller (an ended one too).
        let _ = self.client.mem_free(wire::LeaseId(lease.0));
    }

    fn session_open(&mut self, lease: LeaseId) -> Result<SessionId, GpuError> {
        match self.call(&Request::SessionOpen {
            lease: wire::LeaseId(lease.0),
        })? {
            (Reply::SessionOpen { session }, _) => {
                let session = SessionId(session.0);
                self.sessions.insert(session, lease);
                Ok(session)
            }
            (other, _) => Err(unexpected(other).into()),
        }
    }

    fn session_drop(&mut self, session: SessionId) {
        self.sessions.remove(&session);
        self.streams.remove(&session);
        self.buffers.remove(&session);
        let _ = self.call(&Request::SessionClose {
            session: wire::SessionId(session.0),
        });
    }

    fn mem_alloc(&mut self, session: SessionId, bytes: u64) -> Result<BufferId, GpuError> {
        match self.call(&Request::MemAlloc {
            session: wire::SessionId(session.0),
            bytes,
        })? {
            (Reply::MemAlloc { buffer }, _) => {
                let buffer = BufferId(buffer.0);
                if self.sessions.contains_key(&session) {
                    let sizes = self.buffers.entry(session).or_default();
                    sizes.insert(buffer, bytes);
                }
                Ok(buffer)
            }
            (other, _) => Err(unexpected(other).into()),
        }
    }

    fn mem_free(&mut self, session: SessionId, buffer: BufferId) {
        if let Some(sizes) = self.buffers.get_mut(&session) {
            sizes.remove(&buffer);
        }
        let _ = self.call(&Request::Free {
            session: wire::SessionId(session.0),
            buffer: wire::BufferId(buffer.0),
        });
    }

    fn mem_write(
        &mut self,
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        data: &[u8],
    ) -> Result<(), GpuError> {
        if let Some(parts) = self.spread(session, buffer, offset, data.len() as u64) {
            let parts: Vec<(Request, &[u8])> = parts
                .into_iter()
                .map(|(at, len)| {
                    let request = Request::MemWrite {
                        session: wire::SessionId(session.0),
                        buffer: wire::BufferId(buffer.0),
                        offset: offset + at,
                        len,
                    };
                    (request, &data[at as usize..(at + len) as usize])
                })
                .collect();
            return Ok(self.client.post_spread(&parts)?);
        }
        self.post_writes(data, |at, len| Request::MemWrite {
            session: wire::SessionId(session.0),
            buffer: wire::BufferId(buffer.0),
            offset: offset.saturating_add(at),
            len,
        })
    }

    fn mem_read(
        &mut self,
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, GpuError> {
        if let Some(parts) = self.read_parts(session, buffer, offset, len) {
            // Fresh pages from the kernel, zero already: no write before the read's own.
            let mut data = tasklet_runtime::large_buffer::zeroed(len as usize);
            self.client.call_spread(&parts, &mut data)?;
            return Ok(data);
        }
        let (_, data) = self.call(&Request::MemRead {
            session: wire::SessionId(session.0),
            buffer: wire::BufferId(buffer.0),
            offset,
            len,
        })?;
        Ok(data)
    }

    fn mem_read_into(
        &mut self,
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        dst: GuestBytes,
    ) -> Result<(), GpuError> {
        // Straight into the tasklet's memory as the bytes arrive: no buffer of their own, no
        // second copy.
        let request = Request::MemRead {
            session: wire::SessionId(session.0),
            buffer: wire::BufferId(buffer.0),
            offset,
            len: dst.len() as u64,
        };
        let mut into = crate::sink::Guest::new(dst);
        let len = into.len() as u64;
        match self.read_parts(session, buffer, offset, len) {
            Some(parts) => self.client.call_spread(&parts, &mut into)?,
            None => {
                self.client.request_into(&request, &mut into)?;
            }
        }
        if into.full() {
            return Ok(());
        }
        Err(GpuError::DeviceLost(
            "the node's answer to a read carried fewer bytes than asked for".into(),
        ))
    }

    fn mem_copy(
        &mut self,
        session: SessionId,
        dst: (BufferId, u64),
        src: (BufferId, u64),
        len: u64,
    ) -> Result<(), GpuError> {
        self.call(&Request::MemCopy {
            session: wire::SessionId(session.0),
            dst: wire::BufferId(dst.0 .0),
            dst_offset: dst.1,
            src: wire::BufferId(src.0 .0),
            src_offset: src.1,
            len,
        })?;
        Ok(())
    }

    fn mem_copy_between(
        &mut self,
        dst: (SessionId, BufferId, u64),
        src: (SessionId, BufferId, u64),
        len: u64,
    ) -> Result<(), GpuError> {
        // After the gathered launches and writes, as every call is: the copy sees their data.
        self.call(&Request::MemCopyBetween {
            dst_session: wire::SessionId(dst.0 .0),
            dst: wire::BufferId(dst.1 .0),
            dst_offset: dst.2,
            src_session: wire::SessionId(src.0 .0),
            src: wire::BufferId(src.1 .0),
            src_offset: src.2,
            len,
        })?;
        Ok(())
    }

    fn module_load(&mut self, session: SessionId, ptx: &str) -> Result<ModuleId, GpuError> {
        let request = Request::ModuleLoad {
            session: wire::SessionId(session.0),
            ptx: ptx.as_bytes().to_vec(),
        };
        self.loaded(&request)
    }

    fn module_load_source(
        &mut self,
        session: SessionId,
        source: &str,
        options: &[String],
    ) -> Result<ModuleId, GpuError> {
        let request = Request::ModuleLoadSource {
            session: wire::SessionId(session.0),
            source: source.to_owned(),
            options: options.to_vec(),
        };
        self.loaded(&request)
    }

    fn module_kernels(&mut self, _session: SessionId, module: ModuleId) -> Vec<String> {
        self.modules
            .get(&module)
            .map(|ks| ks.iter().map(|k| k.name.clone()).collect())
            .unwrap_or_default()
    }

    fn module_signatures(&mut self, _session: SessionId, module: ModuleId) -> Vec<KernelSignature> {
        self.modules.get(&module).cloned().unwrap_or_default()
    }

    fn module_unload(&mut self, session: SessionId, module: ModuleId) {
        self.modules.remove(&module);
        let _ = self.call(&Request::ModuleUnload {
            session: wire::SessionId(session.0),
            module: wire::ModuleId(module.0),
        });
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
        let launch = self.wire_launch(session, module, kernel, config, args)?;
        self.client.post(&Request::Launch(launch), &[])?;
        Ok(self.numbered(session))
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
        self.check_stream(session, stream)?;
        let launch = self.wire_launch(session, module, kernel, config, args)?;
        let request = Request::StreamLaunch {
            stream: stream.0,
            launch,
        };
        self.client.post(&request, &[])?;
        Ok(self.numbered(session))
    }

    fn stream_write(
        &mut self,
        session: SessionId,
        stream: StreamId,
        buffer: BufferId,
        offset: u64,
        data: &[u8],
    ) -> Result<(), GpuError> {
        self.check_stream(session, stream)?;
        // Streamed as a MEM_WRITE's data is, in as many requests as the node's limit needs; the
        // node writes them on the stream in order.
        self.post_writes(data, |at, len| Request::StreamWrite {
            stream: stream.0,
            session: wire::SessionId(session.0),
            buffer: wire::BufferId(buffer.0),
            offset: offset.saturating_add(at),
            len,
        })
    }

    fn stream_read(
        &mut self,
        session: SessionId,
        stream: StreamId,
        buffer: BufferId,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, GpuError> {
        self.check_stream(session, stream)?;
        let (_, data) = self.call(&Request::StreamRead {
            stream: stream.0,
            session: wire::SessionId(session.0),
            buffer: wire::BufferId(buffer.0),
            offset,
            len,
        })?;
        Ok(data)
    }

    fn launch_burst(
        &mut self,
        session: SessionId,
        module: ModuleId,
        kernel: KernelRef<'_>,
        burst: &Burst<'_>,
    ) -> Result<u64, GpuError> {
        // What one request cannot carry is refused here, in the node's words for the same limit
        // (the wire's limits are the host's: checked where this crate is built).
        check_burst_size(burst.counts.len(), burst.changes.len())?;
        let index = self.kernel_index(module, kernel)?;
        let request = Request::LaunchBurst(wire::LaunchBurst {
            session: wire::SessionId(session.0),
            module: wire::ModuleId(module.0),
            kernel: index,
            grid: burst.config.grid,
            block: burst.config.block,
            shared_mem_bytes: burst.config.shared_mem_bytes,
            args: burst.args.iter().map(to_wire_arg).collect(),
            changes: burst
                .changes
                .iter()
                .map(|c| (c.index, to_wire_arg(&c.arg)))
                .collect(),
            counts: burst.counts.to_vec(),
        });
        // Answered once the node queued every launch, or refused whole: the node's service
        // checks them all first.
        self.call(&request)?;
        let n = burst.counts.len() as u64;
        let lease = self.sessions.get(&session).copied();
        Ok(lease.map_or(0, |lease| {
            let launched = self.launched.entry(lease).or_insert(0);
            *launched += n;
            *launched - n + 1
        }))
    }

    fn graph_create(&mut self, session: SessionId) -> Result<GraphId, GpuError> {
        self.graph_call(session, GraphId(0), wire::GraphOp::Create)
            .map(GraphId)
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
        let op = wire::GraphOp::Launch {
            module: wire::ModuleId(module.0),
            kernel: self.kernel_index(module, kernel)?,
            grid: config.grid,
            block: config.block,
            shared_mem_bytes: config.shared_mem_bytes,
            args: args.iter().map(to_wire_graph_arg).collect(),
        };
        self.graph_index(session, graph, op)
    }

    fn graph_copy(
        &mut self,
        session: SessionId,
        graph: GraphId,
        dst: (BufferId, u64),
        src: (BufferId, u64),
        len: u64,
    ) -> Result<u32, GpuError> {
        let op = wire::GraphOp::Copy {
            dst: wire::BufferId(dst.0 .0),
            dst_offset: dst.1,
            src: wire::BufferId(src.0 .0),
            src_offset: src.1,
            len,
        };
        self.graph_index(session, graph, op)
    }

    fn graph_fill(
        &mut self,
        session: SessionId,
        graph: GraphId,
        dst: (BufferId, u64),
        len: u64,
        value: u32,
    ) -> Result<u32, GpuError> {
        let op = wire::GraphOp::Fill {
            dst: wire::BufferId(dst.0 .0),
            offset: dst.1,
            len,
            value,
        };
        self.graph_index(session, graph, op)
    }

    fn graph_scalar(
        &mut self,
        session: SessionId,
        graph: GraphId,
        value: u64,
    ) -> Result<u32, GpuError> {
        self.graph_index(session, graph, wire::GraphOp::Scalar { value })
    }

    fn graph_set_scalar(
        &mut self,
        session: SessionId,
        graph: GraphId,
        scalar: u32,
        value: u64,
    ) -> Result<(), GpuError> {
        let op = wire::GraphOp::SetScalar {
            index: scalar,
            value,
        };
        self.graph_call(session, graph, op).map(drop)
    }

    fn graph_set_args(
        &mut self,
        session: SessionId,
        graph: GraphId,
        node: u32,
        args: &[GraphArg<'_>],
    ) -> Result<(), GpuError> {
        let op = wire::GraphOp::SetArgs {
            node,
            args: args.iter().map(to_wire_graph_arg).collect(),
        };
        self.graph_call(session, graph, op).map(drop)
    }

    fn graph_replay(
        &mut self,
        session: SessionId,
        graph: GraphId,
        times: u32,
    ) -> Result<(), GpuError> {
        self.graph_call(session, graph, wire::GraphOp::Replay { times })
            .map(drop)
    }

    fn graph_drop(&mut self, session: SessionId, graph: GraphId) {
        // Whatever the answer, the graph is gone for the caller.
        let _ = self.graph_call(session, graph, wire::GraphOp::Drop);
    }

    fn queue_op(&mut self, session: SessionId, op: QueueOp) -> Result<QueueReply, GpuError> {
        // A stream this side made in the session and has not dropped is the session's on the
        // node too: the check before each of its launches and copies costs no round trip. Any
        // other goes to the node, which refuses it in its own words.
        if let QueueOp::CheckStream(stream) = op {
            if self
                .streams
                .get(&session)
                .is_some_and(|streams| streams.contains(&stream))
            {
                return Ok(QueueReply::Done);
            }
        }
        if let QueueOp::DropStream(stream) = op {
            if let Some(streams) = self.streams.get_mut(&session) {
                streams.remove(&stream);
            }
        }
        let request = Request::QueueOp(wire::Queue {
            session: wire::SessionId(session.0),
            op: to_wire_queue_op(op),
        });
        let answer = match self.call(&request)? {
            (Reply::QueueOp(answer), _) => answer,
            (other, _) => return Err(unexpected(other).into()),
        };
        let reply = match (op, answer) {
            (QueueOp::NewStream, wire::QueueAnswer::Stream(id)) => {
                let id = StreamId(id);
                if self.sessions.contains_key(&session) {
                    self.streams.entry(session).or_default().insert(id);
                }
                QueueReply::Stream(id)
            }
            (QueueOp::NewEvent, wire::QueueAnswer::Event(id)) => QueueReply::Event(EventId(id)),
            (QueueOp::Query(_), wire::QueueAnswer::Ready(ready)) => QueueReply::Ready(ready),
            (QueueOp::Elapsed { .. }, wire::QueueAnswer::ElapsedNs(ns)) => {
                QueueReply::Elapsed(std::time::Duration::from_nanos(ns))
            }
            (
                QueueOp::DropStream(_)
                | QueueOp::CheckStream(_)
                | QueueOp::Wait { .. }
                | QueueOp::SyncStream(_)
                | QueueOp::DropEvent(_)
                | QueueOp::Record { .. }
                | QueueOp::SyncEvent(_),
                wire::QueueAnswer::Done,
            ) => QueueReply::Done,
            (op, answer) => {
                return Err(GpuError::DeviceLost(format!(
                    "node {} answered {op:?} with {answer:?}",
                    self.client.node_name()
                )))
            }
        };
        Ok(reply)
    }

    fn sync(&mut self, session: SessionId) -> Result<(), GpuError> {
        self.call(&Request::Sync {
            session: wire::SessionId(session.0),
        })?;
        Ok(())
    }

    fn submit(&mut self, call: &Submit<'_>) -> Result<Vec<u8>, GpuError> {
        match self.as_gpu_submit(call) {
            Ok(Some((ptx, args))) => self.stateless(|gpu| gpu.gpu_submit(call, ptx, &args)),
            Ok(None) => self.stateless(|gpu| submit_in_session(gpu, call)),
            // Arguments that do not fit the kernel go as session operations too, so that what
            // a local one-shot reports before its launch (a region span, a module that does
            // not load) is reported first here as well. When the launch is what failed, on
            // these arguments, the error is the one found here: a local one-shot's words, without
            // the note of which pipelined request the node reported it for.
            Err(refused) => match self.stateless(|gpu| submit_in_session(gpu, call)) {
                Err(GpuError::InvalidArgument(launch)) if matches!(&refused, GpuError::InvalidArgument(words) if launch.starts_with(words.as_str())) => {
                    Err(refused)
                }
                other => other,
            },
        }
    }
}

impl RemoteGpu {
    /// A lease's own requirements, each field it leaves out taken from the service's.
    fn wire_requirements(&self, requires: &DeviceRequirement) -> wire::LeaseRequirements {
        let base = &self.requires;
        wire::LeaseRequirements {
            uuid: requires.uuid.clone().or_else(|| base.uuid.clone()),
            model: requires.model.clone().or_else(|| base.model.clone()),
            min_compute_capability: requires
                .min_compute_capability
                .or(base.min_compute_capability),
            min_total_memory: requires.min_total_memory.or(base.min_total_memory),
        }
    }

    /// One LEASE_ALLOC_GROUP: the leases in placement order, all of them held from now on.
    fn lease_group(&mut self, group: &wire::LeaseGroup) -> Result<Vec<LeaseId>, GpuError> {
        let leases = match self.call(&Request::LeaseAllocGroup(group.clone()))? {
            (Reply::LeaseAllocGroup { leases }, _) => leases,
            (other, _) => return Err(unexpected(other).into()),
        };
        let ids: Vec<LeaseId> = leases.iter().map(|l| LeaseId(l.lease.0)).collect();
        self.leases.extend(ids.iter().copied());
        if ids.len() != group.count as usize {
            // All or none, here too: what a node that broke the rule granted goes back.
            for &lease in &ids {
                self.lease_drop(lease);
            }
            return Err(GpuError::DeviceLost(format!(
                "node {} answered a group of {} leases with {}",
                self.client.node_name(),
                group.count,
                ids.len()
            )));
        }
        Ok(ids)
    }

    /// `call` as one GPU_SUBMIT, `args` laid out after the region, between its lease's
    /// LEASE_ALLOC and MEM_FREE.
    fn gpu_submit(
        &mut self,
        call: &Submit<'_>,
        ptx: &str,
        args: &[u8],
    ) -> Result<Vec<u8>, GpuError> {
        let request = call.lease;
        let lease = LeaseId(
            self.client
                .lease_alloc_with(
                    request.min_vram,
                    request.secs,
                    request.device,
                    self.requires.clone(),
                )?
                .lease
                .0,
        );
        let submit = wire::GpuSubmit {
            lease: wire::LeaseId(lease.0),
            ptx: ptx.as_bytes().to_vec(),
            kernel: call.kernel.to_owned(),
            grid: call.config.grid,
            block: call.config.block,
            args: args.to_vec(),
            output_size: call.output_size,
            output_offset: call.output_offset,
            input: call.input.to_vec(),
        };
        let output = self.client.gpu_submit(&submit);
        self.lease_drop(lease);
        Ok(output?)
    }
}

impl RemoteGpu {
    /// GPU_SUBMIT's `args` for `call`, when GPU_SUBMIT can carry it (see the module's doc);
    /// `None` when it must go as session operations. Arguments that do not fit the kernel are
    /// refused here, before a lease is taken, as the node would refuse them.
    fn as_gpu_submit<'c>(&self, call: &Submit<'c>) -> Result<Option<(&'c str, Vec<u8>)>, GpuError> {
        let ModuleSource::Ptx(ptx) = call.module else {
            return Ok(None);
        };
        let region_first = matches!(call.args.first(), Some(SubmitArg::Region { offset: 0 }));
        let regions = call
            .args
            .iter()
            .filter(|a| matches!(a, SubmitArg::Region { .. }))
            .count();
        // The frame holds the module and the input whole, beside the other fields (a few KiB
        // at most: the name, the argument block).
        let frame_room = wire::limits::MAX_FRAME_BODY as usize - wire::limits::MAX_ARG_BYTES;
        let fits = call.input.len() <= wire::limits::MAX_SUBMIT_INPUT
            && ptx.len() <= wire::limits::MAX_MODULE_BYTES
            && ptx.len() + call.input.len() + call.kernel.len() < frame_room
            && call.kernel.len() <= wire::limits::MAX_NAME;
        if !region_first || regions != 1 || call.config.shared_mem_bytes != 0 || !fits {
            return Ok(None);
        }
        // The module's signature, read here to lay the arguments out as the node will split
        // them; a module this side cannot read goes as session operations, to be judged by
        // the node's worker.
        let Ok(kernels) = tasklet_ptx::entry_signatures(ptx) else {
            return Ok(None);
        };
        let Some(kernel) = kernels.iter().find(|k| k.name == call.kernel) else {
            return Ok(None);
        };
        Ok(Some((ptx, submit_args_after_region(kernel, call.args)?)))
    }

    fn loaded(&mut self, request: &Request) -> Result<ModuleId, GpuError> {
        match self.call(request)? {
            (Reply::ModuleLoad(loaded) | Reply::ModuleLoadSource(loaded), _) => {
                let id = ModuleId(loaded.module.0);
                let kernels = loaded.kernels.into_iter().map(signature).collect();
                self.modules.insert(id, kernels);
                Ok(id)
            }
            (other, _) => Err(unexpected(other).into()),
        }
    }
}

/// A kernel as MODULE_LOAD's reply lists it: the node's worker judged which parameters are
/// pointers, as a local worker does for a local module.
fn signature(kernel: wire::Kernel) -> KernelSignature {
    KernelSignature {
        name: kernel.name,
        params: kernel
            .params
            .into_iter()
            .map(|p| KernelParam {
                name: p.name,
                size: p.size,
                align: p.align,
                kind: if p.pointer {
                    ParamKind::Pointer
                } else {
                    ParamKind::Value
                },
            })
            .collect(),
    }
}
