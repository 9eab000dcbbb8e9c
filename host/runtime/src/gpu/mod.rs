//! The GPU capability core: what a tasklet may do with GPUs, apart from how it asks (the WIT glue
//! in `crate::wit`, or a node's wire protocol) and from where the work runs.
//!
//! [`GpuService`] is the one interface through which a tasklet's GPU operations go, handles named
//! by id. [`LocalGpu`] is the implementation over this process's lease manager and worker
//! processes: it checks every operation against the grant (rights, quotas, the ownership of every
//! id, every span) and builds each launch's argument block, once. A node serving remote sessions
//! runs a `LocalGpu` per client, so a remote implementation of the trait only forwards: the checks
//! happen where the GPU is, and never trust the caller's side.

mod actors;
mod args;
mod local;
mod queues;
mod submit;
mod types;
mod usage;

pub use actors::{
    ActorArg, ActorId, ActorOp, ActorReply, ActorStatus, RingDirection, RingId, RingLayout,
    MAX_LEASE_MAPPED_BYTES, MAX_MESSAGE_BYTES, MAX_RECV_WAIT, MAX_SESSION_RINGS, MAX_STOP_GRACE,
};
pub use args::submit_args_after_region;
pub use local::{LocalGpu, DIRECT_MIN_BYTES};
pub use queues::{EventId, QueueOp, QueueReply, StreamId, MAX_SESSION_EVENTS, MAX_SESSION_STREAMS};
pub use submit::{check_region_spans, submit_in_session, OutsideRegion};
pub use types::{
    check_burst_size, BufferId, Burst, BurstArg, DeviceInfo, GraphArg, GraphId, GuestBytes,
    KernelArg, KernelParam, KernelRef, KernelSignature, LaunchConfig, LeaseId, LeaseInfo,
    LeaseRequest, ModuleId, ModuleSource, ParamKind, Relocation, SessionId, Submit, SubmitArg,
    MAX_BURST_CHANGES, MAX_BURST_LAUNCHES, MAX_GRAPH_NODES, MAX_GRAPH_REPLAYS, MAX_GRAPH_SCALARS,
    MAX_LEASE_SESSIONS, MAX_SESSION_GRAPHS, MAX_SESSION_GRAPH_ARG_BYTES,
};
pub use usage::{UsageHandle, UsageStats};

use crate::error::GpuError;
use crate::placement::DeviceRequirement;
use std::time::{Duration, Instant};

/// Where a tasklet's GPU operations go. Every id was returned by the same service; an id it did
/// not return, or one of another session, fails with a typed error (never a panic).
///
/// Launches and writes may return before the device has done them; their errors surface at the
/// next `sync` (or an operation that waits for them, such as a read), naming the operation.
pub trait GpuService: Send {
    /// The run this service serves ends at `ends`, when its wall-time limit runs out: no
    /// operation waits past it. One still waiting then fails with `deadline-exceeded` naming the
    /// limit, and what it waited on is given up. The runner says so before the run starts.
    ///
    /// Required, with no default, so that every service (a wrapper of another included, which
    /// passes it on) says what it does with the run's end: the wall-time limit holds only if
    /// the service that waits is told.
    fn run_ends_at(&mut self, ends: Instant);

    /// The run is over: give back everything it holds (every lease, at once), as dropping the
    /// service would. The runner says so when the tasklet's call returns, before its instance
    /// is torn down, so that what the run held is free by the time anyone hears it ended,
    /// however much later the instance goes. Nothing but dropping follows.
    ///
    /// Required, as `run_ends_at` is: a service that kept its leases until it is dropped would
    /// hold them past the run's answer.
    fn end(&mut self);

    /// The devices the tasklet may lease (none when it may lease nothing).
    fn devices(&mut self) -> Vec<DeviceInfo>;

    fn lease_acquire(&mut self, request: LeaseRequest) -> Result<LeaseId, GpuError>;
    /// [`GpuService::lease_acquire`] on a device that meets `requires` too. A service that
    /// cannot place by requirement (the default) serves a request that requires nothing and
    /// refuses any other `unsupported`, rather than lease a device that may not fit.
    fn lease_acquire_with(
        &mut self,
        request: LeaseRequest,
        requires: &DeviceRequirement,
    ) -> Result<LeaseId, GpuError> {
        if requires.is_empty() {
            return self.lease_acquire(request);
        }
        Err(crate::error::unsupported(format!(
            "this host cannot place a lease by device requirements ({requires}); leave them out, or run where the \
             GPU is local"
        )))
    }
    /// `count` leases of `request.min_vram` bytes each, on `count` distinct devices that each
    /// meet `requires` (`request.device` must be none for more than one), all granted or none:
    /// a refusal leaves nothing held. In the placement rule's order as the group is asked for
    /// (most memory free, then fewest leases, then lowest index); each lease counts against the
    /// grant's `max-leases`. A service that cannot place a group (the default) serves a group of
    /// one as [`GpuService::lease_acquire_with`] and refuses larger ones `unsupported`.
    fn lease_acquire_group(
        &mut self,
        request: LeaseRequest,
        requires: &DeviceRequirement,
        count: u32,
    ) -> Result<Vec<LeaseId>, GpuError> {
        match count {
            0 => return Err(crate::error::invalid("a group of leases needs count > 0")),
            1 => return Ok(vec![self.lease_acquire_with(request, requires)?]),
            _ => {}
        }
        Err(crate::error::unsupported(format!(
            "this host cannot place a group of {count} leases on distinct devices; acquire them one by one with a \
             device each, or run where the GPUs are local"
        )))
    }
    fn lease_renew(&mut self, lease: LeaseId, secs: u32) -> Result<(), GpuError>;
    fn lease_info(&mut self, lease: LeaseId) -> Result<LeaseInfo, GpuError>;
    /// Ends the lease: everything under it is freed.
    fn lease_drop(&mut self, lease: LeaseId);

    fn session_open(&mut self, lease: LeaseId) -> Result<SessionId, GpuError>;
    /// Frees what the session still holds.
    fn session_drop(&mut self, session: SessionId);

    /// Allocates `bytes` of zeroed device memory, charged to the session's lease.
    fn mem_alloc(&mut self, session: SessionId, bytes: u64) -> Result<BufferId, GpuError>;
    fn mem_free(&mut self, session: SessionId, buffer: BufferId);
    fn mem_write(
        &mut self,
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        data: &[u8],
    ) -> Result<(), GpuError>;
    /// Reads `len` bytes from `offset` in `buffer`, after all earlier work of the session. A read
    /// larger than the tasklet's memory is refused before anything is allocated for it.
    fn mem_read(
        &mut self,
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, GpuError>;
    /// [`GpuService::mem_read`] into the tasklet's own memory, in place.
    fn mem_read_into(
        &mut self,
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        dst: GuestBytes,
    ) -> Result<(), GpuError>;
    fn mem_copy(
        &mut self,
        session: SessionId,
        dst: (BufferId, u64),
        src: (BufferId, u64),
        len: u64,
    ) -> Result<(), GpuError>;

    /// Copies `len` bytes from `src` (a session, a buffer of it, an offset) to `dst` (likewise),
    /// the two sessions the holder's own, typically under leases on different devices. A
    /// service that cannot copy between sessions (the default) copies within one session only.
    fn mem_copy_between(
        &mut self,
        dst: (SessionId, BufferId, u64),
        src: (SessionId, BufferId, u64),
        len: u64,
    ) -> Result<(), GpuError> {
        if dst.0 == src.0 {
            return self.mem_copy(dst.0, (dst.1, dst.2), (src.1, src.2), len);
        }
        Err(crate::error::unsupported(
            "this host cannot copy between sessions; read the data and write it",
        ))
    }

    fn module_load(&mut self, session: SessionId, ptx: &str) -> Result<ModuleId, GpuError>;
    fn module_load_source(
        &mut self,
        session: SessionId,
        source: &str,
        options: &[String],
    ) -> Result<ModuleId, GpuError>;
    /// The module's kernel names, in the order launches may name them by index.
    fn module_kernels(&mut self, session: SessionId, module: ModuleId) -> Vec<String>;
    /// The module's kernels with their parameters, in the same order (none for a module that is
    /// not the session's).
    fn module_signatures(&mut self, session: SessionId, module: ModuleId) -> Vec<KernelSignature>;
    fn module_unload(&mut self, session: SessionId, module: ModuleId);
    /// Hot reload: loads `source` as the new code of the session's module `module`, then
    /// unloads the old code, leaving the session's buffers as they are. Returns the module's new
    /// id; the old one is refused from then on, as are kernels resolved from it and graphs that
    /// launch them (resolve and record them again). A load that fails leaves the old module
    /// loaded and usable.
    fn module_reload(
        &mut self,
        session: SessionId,
        module: ModuleId,
        source: ModuleSource<'_>,
    ) -> Result<ModuleId, GpuError> {
        if self.module_kernels(session, module).is_empty() {
            return Err(crate::error::invalid(format!(
                "module {module} belongs to another session, or was unloaded; only a loaded module of this session reloads"
            )));
        }
        let new = match source {
            ModuleSource::Ptx(ptx) => self.module_load(session, ptx)?,
            ModuleSource::Cuda { source, options } => {
                self.module_load_source(session, source, options)?
            }
        };
        self.module_unload(session, module);
        Ok(new)
    }

    fn launch(
        &mut self,
        session: SessionId,
        module: ModuleId,
        kernel: &str,
        config: &LaunchConfig,
        args: &[KernelArg<'_>],
    ) -> Result<(), GpuError>;
    /// [`GpuService::launch`] of a kernel named, or given by its place in the module's list (no
    /// name to look up), returning the launch's ordinal: its number among the launches under the
    /// session's lease, counting from 1, by which a later asynchronous error names it ("launch
    /// #N of kernel `k`").
    fn launch_kernel(
        &mut self,
        session: SessionId,
        module: ModuleId,
        kernel: KernelRef<'_>,
        config: &LaunchConfig,
        args: &[KernelArg<'_>],
    ) -> Result<u64, GpuError>;
    /// Launches one kernel [`Burst::counts`]`.len()` times, in order, with per-launch changes to
    /// its arguments, as one unit: every launch is checked (rights, the ownership and bounds of
    /// every buffer, the arguments against the kernel, the device's limits, quotas) before any is
    /// queued, and a refusal names the launch ("launch 3 of the burst: …"). At most
    /// [`MAX_BURST_LAUNCHES`]. Returns the first launch's ordinal; the others follow it, one by
    /// one. A service that cannot do it as one unit says `unsupported`.
    fn launch_burst(
        &mut self,
        session: SessionId,
        module: ModuleId,
        kernel: KernelRef<'_>,
        burst: &Burst<'_>,
    ) -> Result<u64, GpuError> {
        let _ = (session, module, kernel, burst);
        Err(crate::error::unsupported(
            "this GPU service does not take bursts; launch one at a time",
        ))
    }

    /// A new, empty graph of the session: a sequence of operations recorded once
    /// ([`GpuService::graph_launch`], [`GpuService::graph_copy`], [`GpuService::graph_fill`]),
    /// each checked as the operation of the same name when it is recorded, and replayed as a
    /// whole ([`GpuService::graph_replay`]) with the same results as the operations one by one.
    fn graph_create(&mut self, session: SessionId) -> Result<GraphId, GpuError> {
        let _ = session;
        Err(no_graphs())
    }

    /// Records a launch at the end of the graph; its node's index.
    fn graph_launch(
        &mut self,
        session: SessionId,
        graph: GraphId,
        module: ModuleId,
        kernel: KernelRef<'_>,
        config: &LaunchConfig,
        args: &[GraphArg<'_>],
    ) -> Result<u32, GpuError> {
        let _ = (session, graph, module, kernel, config, args);
        Err(no_graphs())
    }

    /// Records a copy between two of the session's buffers (ranges that do not overlap).
    fn graph_copy(
        &mut self,
        session: SessionId,
        graph: GraphId,
        dst: (BufferId, u64),
        src: (BufferId, u64),
        len: u64,
    ) -> Result<u32, GpuError> {
        let _ = (session, graph, dst, src, len);
        Err(no_graphs())
    }

    /// Records a fill of `len` bytes at `dst` with `value` repeated (offset and length
    /// multiples of 4).
    fn graph_fill(
        &mut self,
        session: SessionId,
        graph: GraphId,
        dst: (BufferId, u64),
        len: u64,
        value: u32,
    ) -> Result<u32, GpuError> {
        let _ = (session, graph, dst, len, value);
        Err(no_graphs())
    }

    /// A new device scalar of the graph (8 bytes of device memory it holds, charged to the
    /// lease), holding `value` from the next replay on; its index, for [`GraphArg::Scalar`].
    fn graph_scalar(
        &mut self,
        session: SessionId,
        graph: GraphId,
        value: u64,
    ) -> Result<u32, GpuError> {
        let _ = (session, graph, value);
        Err(no_graphs())
    }

    /// Sets a device scalar for the next replays, without recording anything again.
    fn graph_set_scalar(
        &mut self,
        session: SessionId,
        graph: GraphId,
        scalar: u32,
        value: u64,
    ) -> Result<(), GpuError> {
        let _ = (session, graph, scalar, value);
        Err(no_graphs())
    }

    /// Replaces the arguments of the recorded launch `node` for the next replays (checked as
    /// the launch was).
    fn graph_set_args(
        &mut self,
        session: SessionId,
        graph: GraphId,
        node: u32,
        args: &[GraphArg<'_>],
    ) -> Result<(), GpuError> {
        let _ = (session, graph, node, args);
        Err(no_graphs())
    }

    /// Replays the graph `times` times (1 to [`MAX_GRAPH_REPLAYS`]), in order with the
    /// session's other work. May return before the work completes: its errors surface here or
    /// at the next wait, naming the graph's node.
    fn graph_replay(
        &mut self,
        session: SessionId,
        graph: GraphId,
        times: u32,
    ) -> Result<(), GpuError> {
        let _ = (session, graph, times);
        Err(no_graphs())
    }

    /// Frees what the graph holds (its device scalars, its instantiated form).
    fn graph_drop(&mut self, session: SessionId, graph: GraphId) {
        let _ = (session, graph);
    }

    /// An operation on the session's streams and events (contract 0.2; see [`QueueOp`]). A
    /// service without streams (the default) refuses every one as unsupported.
    fn queue_op(&mut self, session: SessionId, op: QueueOp) -> Result<QueueReply, GpuError> {
        let _ = (session, op);
        Err(crate::error::unsupported(
            "this GPU service has no streams or events; use the session's own queue and `sync`",
        ))
    }

    /// [`GpuService::launch_kernel`] queued on `stream` of the session (refused unless the
    /// stream is the session's). By default the session's launch, which every stream's later
    /// work then waits for: more order than asked, never less.
    fn stream_launch(
        &mut self,
        session: SessionId,
        stream: StreamId,
        module: ModuleId,
        kernel: KernelRef<'_>,
        config: &LaunchConfig,
        args: &[KernelArg<'_>],
    ) -> Result<u64, GpuError> {
        self.queue_op(session, QueueOp::CheckStream(stream))?;
        self.launch_kernel(session, module, kernel, config, args)
    }

    /// [`GpuService::mem_write`] queued on `stream`: it waits only for the work the stream
    /// depends on (its own, what the events it waited on follow, the session's work outside
    /// streams), so it may run beside kernels of other streams. By default the session's write,
    /// after everything.
    fn stream_write(
        &mut self,
        session: SessionId,
        stream: StreamId,
        buffer: BufferId,
        offset: u64,
        data: &[u8],
    ) -> Result<(), GpuError> {
        self.queue_op(session, QueueOp::CheckStream(stream))?;
        self.mem_write(session, buffer, offset, data)
    }

    /// [`GpuService::mem_read`] queued on `stream`, ordered as [`GpuService::stream_write`].
    fn stream_read(
        &mut self,
        session: SessionId,
        stream: StreamId,
        buffer: BufferId,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, GpuError> {
        self.queue_op(session, QueueOp::CheckStream(stream))?;
        self.mem_read(session, buffer, offset, len)
    }

    /// An operation on the session's rings and persistent kernels (contract 0.2; see
    /// [`ActorOp`]). A service without them (the default) refuses every one as unsupported.
    fn actor_op(&mut self, session: SessionId, op: ActorOp<'_>) -> Result<ActorReply, GpuError> {
        let _ = (session, op);
        Err(crate::error::unsupported(
            "this GPU service runs no persistent kernels; run the tasklet where the GPU is local, or deploy it to the node",
        ))
    }

    /// Waits for all work of the session; reports the first asynchronous failure since the last.
    fn sync(&mut self, session: SessionId) -> Result<(), GpuError>;

    /// The device time the lease's kernels have taken so far, every kernel finished by now
    /// included (read before and after a launch and its sync: that launch's GPU time). What the
    /// holder's `gpu-seconds` quota counts. A service that cannot tell says `unsupported`.
    fn gpu_time(&mut self, lease: LeaseId) -> Result<Duration, GpuError> {
        let _ = lease;
        Err(crate::error::unsupported(
            "this GPU service does not report GPU time",
        ))
    }

    /// Runs a one-shot (see [`Submit`]) and returns its output. By default through the
    /// service's own session operations ([`submit_in_session`]); a service whose GPU is
    /// elsewhere may send it whole.
    fn submit(&mut self, call: &Submit<'_>) -> Result<Vec<u8>, GpuError> {
        submit_in_session(self, call)
    }
}

fn no_graphs() -> GpuError {
    crate::error::unsupported("this GPU service records no graphs; run the operations one by one")
}
