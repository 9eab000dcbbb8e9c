//! A connection's GPU thread: it owns the connection's `LocalGpu` and runs the connection's
//! requests on it one at a time, in the order they arrived.
//!
//! Every operation goes through `LocalGpu` with the tenant's grant, so the node checks rights,
//! quotas and the ownership of every id itself; ids from the wire mean something only to the
//! `LocalGpu` of the connection that was handed them.
//!
//! Pipelined ops (LAUNCH, MEM_WRITE, STREAM_LAUNCH, STREAM_WRITE) are answered only when they
//! fail, and then at the session's next barrier (SYNC, MEM_READ, STREAM_READ), which names the
//! op; until that barrier the session's later pipelined ops are skipped, as on a device whose
//! stream has faulted.
//!
//! The stream ops go to the service's `stream_launch`, `stream_write` and `stream_read`, which
//! refuse a stream that is not the session's (another session's, another connection's, a dropped
//! one) as QUEUE_OP does, and order a copy after only the work its stream depends on.

mod book;
mod convert;
mod errors;
mod poll;
mod reads;
mod submit;

use crate::caller::Caller;
use crate::inventory;
use crate::job::{Batch, Job, ReplyTo, Work, WritePiece};
use crate::metrics::PerOp;
use crate::reply::{close, fail, send, Failure};
use crate::shared::Shared;
use book::{Book, LeaseEntry, ModuleEntry};
use errors::code_of;
use prometheus::Histogram;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tasklet_runtime::config::Grant;
use tasklet_runtime::gpu::DIRECT_MIN_BYTES;
use tasklet_runtime::gpu::{self, GpuService, LaunchConfig, LocalGpu};
use tasklet_runtime::guest_memory::staging::{StagingBuffer, StagingPool};
use tasklet_wire::{
    negotiate, ErrorCode, ErrorReply, FailedOp, LoadedModule, Opcode, Reply, Request, RequestId,
};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{mpsc, Notify};

/// Sessions whose failed pipelined op awaits its barrier, at most: past this a client that
/// never syncs cannot make the node remember more.
const MAX_HELD: usize = 4096;

pub(crate) struct Dispatcher {
    shared: Arc<Shared>,
    /// Who the connection is; its `ceiling` is the most it may have, and GRANT narrows `grant`
    /// within it.
    caller: Arc<Caller>,
    grant: Grant,
    /// Made at the first GPU operation, with `grant`.
    gpu: Option<LocalGpu>,
    book: Book,
    /// Per session, the first pipelined op that failed since its last barrier.
    held: HashMap<gpu::SessionId, ErrorReply>,
    said_hello: bool,
    closed: Arc<AtomicBool>,
    hello: Arc<Notify>,
    latency: PerOp<Histogram>,
    /// The connection's staging memory, which bulk reads (see `reads`) and write pieces go
    /// through.
    staging: Arc<StagingPool>,
}

impl Dispatcher {
    pub fn new(
        shared: Arc<Shared>,
        caller: Arc<Caller>,
        closed: Arc<AtomicBool>,
        hello: Arc<Notify>,
        staging: Arc<StagingPool>,
    ) -> Dispatcher {
        Dispatcher {
            shared,
            grant: caller.ceiling,
            caller,
            gpu: None,
            book: Book::default(),
            held: HashMap::new(),
            said_hello: false,
            closed,
            hello,
            latency: PerOp::new(),
            staging,
        }
    }

    /// Runs jobs until every stream of the connection has let go of the queue; then the
    /// connection's leases end with its `LocalGpu`.
    pub fn run(mut self, mut queue: mpsc::Receiver<Batch>) {
        let mut waiter = poll::Waiter::new();
        let mut open = reads::OpenReads::default();
        loop {
            // While reads are open, a piece of one is sent between looks at the queue.
            let batch = if open.is_empty() {
                waiter.next(&mut queue)
            } else {
                match queue.try_recv() {
                    Ok(batch) => Some(batch),
                    Err(TryRecvError::Empty) => {
                        self.step_reads(&mut open);
                        continue;
                    }
                    Err(TryRecvError::Disconnected) => None,
                }
            };
            let Some(batch) = batch else { break };
            tracing::trace!(name: "taken", target: crate::TIMELINE, "");
            // Open reads move on however fast new batches come.
            self.step_reads(&mut open);
            // The batch's requests stay counted as unanswered until its last job is done (its
            // open reads sent).
            let Batch {
                jobs,
                reply,
                _unanswered,
                branch,
            } = batch;
            let unanswered = Rc::new(_unanswered);
            // One clock reading per job: a job's end is the next one's start.
            let mut start = Instant::now();
            for job in jobs {
                // A closed connection's queued work is dropped, not done.
                if self.closed.load(Ordering::Acquire) {
                    open.clear();
                    break;
                }
                let opcode = match &job.work {
                    Work::Request(request) => request.opcode(),
                    Work::WritePiece(piece) => piece_opcode(piece),
                };
                // Only a branch's reads go side by side (see `reads::OpenReads`); before HELLO a
                // read is a protocol error, which `job` says.
                let interleaved = (branch && self.said_hello)
                    .then(|| reads::interleaved(&job.work))
                    .flatten();
                if let Some(read) = interleaved {
                    self.open_read(&reply, job.request_id, read, &unanswered, &mut open);
                    start = Instant::now();
                    continue;
                }
                // Anything but a read goes after every read before it, and is timed from
                // there.
                if !open.is_empty() {
                    self.finish_reads(&mut open);
                    start = Instant::now();
                }
                self.job(job, &reply);
                tracing::trace!(name: "done", target: crate::TIMELINE, "");
                let end = Instant::now();
                let shared = &self.shared;
                self.latency
                    .get(opcode, || shared.metrics.op_seconds(opcode))
                    .observe(end.duration_since(start).as_secs_f64());
                start = end;
            }
        }
        let leases = self.book.leases.len() as u64;
        drop(self.gpu.take());
        if leases > 0 {
            self.caller.metrics.lease_dropped.inc_by(leases);
            tracing::info!(
                connection = self.caller.connection,
                tenant = %self.caller.tenant,
                leases,
                "leases ended with their connection"
            );
        }
    }

    fn protocol_error(&self, reply: &ReplyTo, why: String) {
        // Nothing later on the connection is served (see `connection::stream`).
        self.closed.store(true, Ordering::Release);
        self.caller.metrics.protocol_errors.inc();
        tracing::warn!(connection = self.caller.connection, tenant = %self.caller.tenant, "closing a connection: {why}");
        close(reply, ErrorReply::new(ErrorCode::ProtocolError, why));
    }

    fn gpu(&mut self) -> &mut LocalGpu {
        self.gpu.get_or_insert_with(|| {
            LocalGpu::new(self.grant, Arc::clone(self.shared.host.leases()))
                .with_tenant(self.caller.tenant.as_str())
                .with_tenant_totals(self.caller.totals)
                .with_holder_gone(Arc::clone(&self.closed))
        })
    }

    fn job(&mut self, job: Job, reply: &ReplyTo) {
        let Job {
            request_id, work, ..
        } = job;
        let request = match work {
            Work::WritePiece(piece) => return self.write_piece(request_id, piece),
            Work::Request(request) => request,
        };
        let opcode = request.opcode();
        match (self.said_hello, opcode) {
            (false, Opcode::Hello) => {}
            (false, _) => {
                let why =
                    format!("{opcode} before HELLO: HELLO is the first request of a connection");
                return self.protocol_error(reply, why);
            }
            (true, Opcode::Hello) => return self.protocol_error(reply, "a second HELLO".into()),
            (true, _) => {}
        }
        match request {
            Request::Launch(launch) => {
                let session = convert::session(launch.session);
                self.pipelined(request_id, Opcode::Launch, session, |d| {
                    d.launch(None, &launch)
                });
            }
            Request::StreamLaunch { stream, launch } => {
                let session = convert::session(launch.session);
                let stream = convert::stream(stream);
                self.pipelined(request_id, Opcode::StreamLaunch, session, |d| {
                    d.launch(Some(stream), &launch)
                });
            }
            Request::StreamWrite {
                stream,
                session,
                buffer,
                offset,
                ..
            } => {
                // Only a STREAM_WRITE of no bytes comes whole: it checks the stream and the
                // span, as an empty MEM_WRITE checks the span.
                let (session, buffer) = (convert::session(session), convert::buffer(buffer));
                let stream = convert::stream(stream);
                self.pipelined(request_id, Opcode::StreamWrite, session, |d| {
                    d.gpu().stream_write(session, stream, buffer, offset, &[])
                });
            }
            Request::StreamRead {
                stream,
                session,
                buffer,
                offset,
                len,
            } => {
                // On the device it waits only for what the stream depends on.
                let read = reads::Read {
                    stream: Some(convert::stream(stream)),
                    session: convert::session(session),
                    buffer: convert::buffer(buffer),
                    offset,
                    len,
                };
                if let Err(failure) = self.stream_read(reply, request_id, read) {
                    fail(reply, request_id, opcode, failure);
                }
            }
            Request::MemWrite {
                session,
                buffer,
                offset,
                ..
            } => {
                // Only a MEM_WRITE of no bytes comes whole; the others come as pieces.
                let (session, buffer) = (convert::session(session), convert::buffer(buffer));
                self.pipelined(request_id, Opcode::MemWrite, session, |d| {
                    d.gpu().mem_write(session, buffer, offset, &[])
                });
            }
            Request::MemRead {
                session,
                buffer,
                offset,
                len,
            } => {
                let read = reads::Read {
                    stream: None,
                    session: convert::session(session),
                    buffer: convert::buffer(buffer),
                    offset,
                    len,
                };
                if let Err(failure) = self.stream_read(reply, request_id, read) {
                    fail(reply, request_id, opcode, failure);
                }
            }
            Request::GpuSubmit(submit) => self.submit(reply, request_id, submit),
            Request::Hello {
                min_version,
                max_version,
                ..
            } => {
                self.said_hello = true;
                self.caller.greet();
                self.hello.notify_one();
                match negotiate(min_version, max_version) {
                    Some(version) => send(
                        reply,
                        request_id,
                        &Reply::Hello {
                            version,
                            node: self.shared.name.clone(),
                            max_stream_bytes: self.shared.limits.max_stream_bytes,
                        },
                    ),
                    None => {
                        let error = ErrorReply::new(
                            ErrorCode::Unsupported,
                            format!(
                                "this node speaks protocol version {}, the client offered {min_version} to {max_version}",
                                tasklet_wire::PROTOCOL_VERSION
                            ),
                        );
                        fail(reply, request_id, opcode, Failure(error.clone()));
                        close(reply, error);
                    }
                }
            }
            request => {
                let answer = self.call(request).unwrap_or_else(|failure| Reply::Error {
                    opcode,
                    error: failure.0,
                });
                send(reply, request_id, &answer);
            }
        }
    }

    /// The requests answered with one reply message.
    fn call(&mut self, request: Request) -> Result<Reply, Failure> {
        Ok(match request {
            Request::Grant(asked) => {
                if self.gpu.is_some() {
                    return Err(Failure::new(
                        ErrorCode::InvalidArgument,
                        "GRANT comes before the connection's first GPU operation; the grant in force stays",
                    ));
                }
                let (limits, gpu) = convert::requested(&asked, &self.caller.ceiling);
                self.grant = self.caller.ceiling.narrowed(&limits, &gpu);
                Reply::Grant(convert::to_wire_grant(&self.grant))
            }
            Request::GetInventory => Reply::Inventory {
                devices: inventory::devices(&self.shared.host),
                draining: self.shared.draining(),
            },
            Request::LeaseAlloc {
                min_bytes,
                seconds,
                device,
                requires,
            } => self.lease_alloc(min_bytes, seconds, device, requires)?,
            Request::LeaseAllocGroup(group) => self.lease_alloc_group(group)?,
            Request::MemFree { lease } => {
                let lease = convert::lease(lease);
                self.known_lease(lease)?;
                // Whether it had ended already, said after it is gone either way.
                let ended = self.gpu().lease_info(lease).err();
                self.gpu().lease_drop(lease);
                self.book.leases.remove(&lease);
                self.caller.metrics.lease_dropped.inc();
                tracing::info!(connection = self.caller.connection, tenant = %self.caller.tenant, "lease released");
                match ended {
                    Some(err @ tasklet_runtime::GpuError::LeaseExpired(_)) => {
                        return Err(err.into())
                    }
                    _ => Reply::MemFree,
                }
            }
            Request::LeaseRenew { lease, seconds } => {
                let lease = convert::lease(lease);
                self.known_lease(lease)?;
                self.gpu().lease_renew(lease, seconds)?;
                let entry = self
                    .book
                    .leases
                    .get_mut(&lease)
                    .ok_or_else(|| no_lease(lease))?;
                entry.generation += 1;
                Reply::LeaseRenew {
                    generation: entry.generation,
                    ttl_ms: u64::from(seconds) * 1000,
                }
            }
            Request::LeaseInfo { lease } => {
                let lease = convert::lease(lease);
                self.known_lease(lease)?;
                let info = self.gpu().lease_info(lease)?;
                Reply::LeaseInfo {
                    device: info.device,
                    generation: self.book.leases.get(&lease).map_or(1, |e| e.generation),
                    granted_bytes: info.granted_bytes,
                    used_bytes: info.used_bytes,
                    remaining_ms: info.remaining_ms,
                }
            }
            Request::SessionOpen { lease } => Reply::SessionOpen {
                session: tasklet_wire::SessionId(self.gpu().session_open(convert::lease(lease))?.0),
            },
            Request::SessionClose { session } => {
                let session = convert::session(session);
                self.gpu().session_drop(session);
                self.held.remove(&session);
                self.book.close_session(session);
                Reply::SessionClose
            }
            Request::MemAlloc { session, bytes } => Reply::MemAlloc {
                buffer: tasklet_wire::BufferId(
                    self.gpu().mem_alloc(convert::session(session), bytes)?.0,
                ),
            },
            Request::Free { session, buffer } => {
                self.gpu()
                    .mem_free(convert::session(session), convert::buffer(buffer));
                Reply::Free
            }
            Request::MemCopy {
                session,
                dst,
                dst_offset,
                src,
                src_offset,
                len,
            } => {
                self.gpu().mem_copy(
                    convert::session(session),
                    (convert::buffer(dst), dst_offset),
                    (convert::buffer(src), src_offset),
                    len,
                )?;
                Reply::MemCopy
            }
            Request::MemCopyBetween {
                dst_session,
                dst,
                dst_offset,
                src_session,
                src,
                src_offset,
                len,
            } => {
                // The connection's `LocalGpu` holds both sessions or refuses: another
                // connection's session is no session of its.
                self.gpu().mem_copy_between(
                    (
                        convert::session(dst_session),
                        convert::buffer(dst),
                        dst_offset,
                    ),
                    (
                        convert::session(src_session),
                        convert::buffer(src),
                        src_offset,
                    ),
                    len,
                )?;
                Reply::MemCopyBetween
            }
            Request::ModuleLoad { session, ptx } => {
                let session = convert::session(session);
                let text = std::str::from_utf8(&ptx).map_err(|err| {
                    Failure::new(
                        ErrorCode::LoadFailed,
                        format!("the module is not UTF-8 text: {err}"),
                    )
                })?;
                let module = self.gpu().module_load(session, text)?;
                Reply::ModuleLoad(self.loaded(session, module, Some(text)))
            }
            Request::ModuleLoadSource {
                session,
                source,
                options,
            } => {
                let session = convert::session(session);
                let module = self.gpu().module_load_source(session, &source, &options)?;
                Reply::ModuleLoadSource(self.loaded(session, module, None))
            }
            Request::ModuleUnload { session, module } => {
                let module = convert::module(module);
                self.gpu().module_unload(convert::session(session), module);
                self.book.modules.remove(&module);
                Reply::ModuleUnload
            }
            Request::Sync { session } => {
                let session = convert::session(session);
                if let Some(failure) = self.held.remove(&session) {
                    return Err(Failure(failure));
                }
                self.gpu().sync(session)?;
                Reply::Sync
            }
            Request::LaunchBurst(burst) => {
                // Launches after a failed pipelined one are dropped; a burst then is refused
                // with that failure, which it reports.
                let session = convert::session(burst.session);
                if let Some(failure) = self.held.remove(&session) {
                    return Err(Failure(failure));
                }
                self.launch_burst(&burst)?;
                Reply::LaunchBurst
            }
            Request::Graph(graph) => {
                let session = convert::session(graph.session);
                if matches!(graph.op, tasklet_wire::GraphOp::Replay { .. }) {
                    // A replay queues launches: after a failed pipelined op it is refused with
                    // that failure, as a burst is.
                    if let Some(failure) = self.held.remove(&session) {
                        return Err(Failure(failure));
                    }
                }
                Reply::Graph {
                    value: self.graph_op(graph)?,
                }
            }
            Request::QueueOp(queue) => {
                let session = convert::session(queue.session);
                let op = convert::queue_op(queue.op);
                if waits_for_work(op) {
                    // An op that waits for the session's work reports a failed pipelined op
                    // before it, as SYNC does (without naming it: only a barrier's reply may).
                    if let Some(mut failure) = self.held.remove(&session) {
                        failure.failed_op = None;
                        return Err(Failure(failure));
                    }
                }
                Reply::QueueOp(convert::queue_answer(self.gpu().queue_op(session, op)?))
            }
            // Handled by `job` before it gets here, or (deployments, fork markers) never sent
            // to the GPU thread: a stream serves those itself (see `connection::deploy`,
            // `connection::forks`).
            Request::Fork { .. }
            | Request::Branch { .. }
            | Request::BranchEnd { .. }
            | Request::DeployPush { .. }
            | Request::DeployHas { .. }
            | Request::DeployRun { .. }
            | Request::Hello { .. }
            | Request::Launch(_)
            | Request::MemWrite { .. }
            | Request::MemRead { .. }
            | Request::StreamLaunch { .. }
            | Request::StreamWrite { .. }
            | Request::StreamRead { .. }
            | Request::GpuSubmit(_) => {
                return Err(Failure::new(
                    ErrorCode::Internal,
                    "request routed to the wrong handler",
                ))
            }
        })
    }

    /// Refuses a new lease while the node drains.
    fn not_draining(&self) -> Result<(), Failure> {
        if self.shared.draining() {
            tracing::info!(connection = self.caller.connection, tenant = %self.caller.tenant, "refused a lease: draining");
            return Err(Failure::new(
                ErrorCode::Draining,
                "the node is shutting down and takes no new leases; use another node",
            ));
        }
        Ok(())
    }

    fn lease_alloc(
        &mut self,
        min_bytes: u64,
        seconds: u32,
        device: Option<u32>,
        requires: tasklet_wire::LeaseRequirements,
    ) -> Result<Reply, Failure> {
        self.not_draining()?;
        let requires = convert::requirements(requires);
        let lease = self
            .gpu()
            .lease_acquire_with(
                gpu::LeaseRequest {
                    min_vram: min_bytes,
                    secs: seconds,
                    device,
                },
                &requires,
            )
            .inspect_err(|err| self.refused("a lease", 1, err))?;
        let info = self.gpu().lease_info(lease)?;
        self.book.leases.insert(
            lease,
            LeaseEntry {
                generation: 1,
                region: None,
            },
        );
        self.caller.metrics.lease_acquired.inc();
        tracing::info!(
            connection = self.caller.connection,
            tenant = %self.caller.tenant,
            bytes = info.granted_bytes,
            seconds,
            "lease acquired"
        );
        Ok(Reply::LeaseAlloc {
            lease: tasklet_wire::LeaseId(lease.0),
            generation: 1,
            device: info.device,
            granted_bytes: info.granted_bytes,
            ttl_ms: info.remaining_ms,
        })
    }

    /// LEASE_ALLOC_GROUP: the service places the group all or none; each lease is then booked
    /// and counted as LEASE_ALLOC's is.
    fn lease_alloc_group(&mut self, group: tasklet_wire::LeaseGroup) -> Result<Reply, Failure> {
        self.not_draining()?;
        let count = group.count;
        let leases = self
            .gpu()
            .lease_acquire_group(
                gpu::LeaseRequest {
                    min_vram: group.min_bytes,
                    secs: group.seconds,
                    device: group.device,
                },
                &convert::requirements(group.requires),
                count,
            )
            .inspect_err(|err| self.refused("a group of leases", count, err))?;
        let mut granted = Vec::with_capacity(leases.len());
        for &lease in &leases {
            match self.gpu().lease_info(lease) {
                Ok(info) => granted.push(tasklet_wire::GroupLease {
                    lease: tasklet_wire::LeaseId(lease.0),
                    device: info.device,
                    granted_bytes: info.granted_bytes,
                    ttl_ms: info.remaining_ms,
                }),
                Err(err) => {
                    // All or none: a lease that ended before it could be reported takes the
                    // others with it, rather than leave them held under ids never sent.
                    for &lease in &leases {
                        self.gpu().lease_drop(lease);
                    }
                    return Err(err.into());
                }
            }
        }
        for &lease in &leases {
            self.book.leases.insert(
                lease,
                LeaseEntry {
                    generation: 1,
                    region: None,
                },
            );
        }
        self.caller
            .metrics
            .lease_acquired
            .inc_by(leases.len() as u64);
        tracing::info!(
            connection = self.caller.connection,
            tenant = %self.caller.tenant,
            bytes = group.min_bytes,
            seconds = group.seconds,
            devices = ?granted.iter().map(|l| l.device).collect::<Vec<_>>(),
            "group of leases acquired"
        );
        Ok(Reply::LeaseAllocGroup { leases: granted })
    }

    fn known_lease(&self, lease: gpu::LeaseId) -> Result<(), Failure> {
        match self.book.leases.contains_key(&lease) {
            true => Ok(()),
            false => Err(no_lease(lease)),
        }
    }

    /// Logs a refused lease (or group of `count`): at `info` where the request or the tenant's
    /// grant is why, at `error` where the node itself could not serve it (a worker that does
    /// not start): an operator must see that, every tenant's leases fail alike.
    fn refused(&self, what: &str, count: u32, err: &tasklet_runtime::GpuError) {
        let (connection, tenant) = (self.caller.connection, &self.caller.tenant);
        if matches!(err, tasklet_runtime::GpuError::DeviceLost(_)) {
            tracing::error!(connection, %tenant, count, "could not serve {what}: {err}");
        } else {
            tracing::info!(connection, %tenant, count, "refused {what}: {err}");
        }
    }

    /// MODULE_LOAD's reply, the module's kernels remembered for LAUNCH's indexes.
    fn loaded(
        &mut self,
        session: gpu::SessionId,
        module: gpu::ModuleId,
        ptx: Option<&str>,
    ) -> LoadedModule {
        // Every kernel in the worker's order, with its parameters as the worker read them.
        let signatures = self.gpu().module_signatures(session, module);
        let kernels = convert::kernel_list(ptx, signatures);
        self.book.modules.insert(
            module,
            ModuleEntry {
                session,
                kernels: kernels.iter().map(|k| Arc::from(k.name.as_str())).collect(),
            },
        );
        LoadedModule {
            module: tasklet_wire::ModuleId(module.0),
            kernels,
        }
    }

    /// A LAUNCH, or a STREAM_LAUNCH on `stream`.
    fn launch(
        &mut self,
        stream: Option<gpu::StreamId>,
        launch: &tasklet_wire::Launch,
    ) -> Result<(), tasklet_runtime::GpuError> {
        let (session, module) = (
            convert::session(launch.session),
            convert::module(launch.module),
        );
        let kernel = match self.book.modules.get(&module) {
            Some(entry) if entry.session == session => entry
                .kernels
                .get(launch.kernel as usize)
                .cloned()
                .ok_or_else(|| {
                    tasklet_runtime::GpuError::LaunchFailed(format!(
                        "kernel index {} is past the module's {} kernel(s)",
                        launch.kernel,
                        entry.kernels.len()
                    ))
                })?,
            // The host says what is wrong with the module id in its own words.
            _ => Arc::from(""),
        };
        let config = LaunchConfig {
            grid: launch.grid,
            block: launch.block,
            shared_mem_bytes: launch.shared_mem_bytes,
        };
        let relocations = convert::relocations(&launch.args);
        let args = convert::kernel_args(&launch.args, &relocations);
        match stream {
            None => self.gpu().launch(session, module, &kernel, &config, &args),
            Some(stream) => self
                .gpu()
                .stream_launch(
                    session,
                    stream,
                    module,
                    gpu::KernelRef::Named(&kernel),
                    &config,
                    &args,
                )
                .map(drop),
        }
    }

    /// A LAUNCH_BURST, through the service's own burst: every launch checked before any is
    /// queued.
    fn launch_burst(
        &mut self,
        b: &tasklet_wire::LaunchBurst,
    ) -> Result<(), tasklet_runtime::GpuError> {
        let (session, module) = (convert::session(b.session), convert::module(b.module));
        let config = LaunchConfig {
            grid: b.grid,
            block: b.block,
            shared_mem_bytes: b.shared_mem_bytes,
        };
        let relocations = convert::relocations(&b.args);
        let args = convert::kernel_args(&b.args, &relocations);
        let values: Vec<tasklet_wire::KernelArg> =
            b.changes.iter().map(|(_, arg)| arg.clone()).collect();
        let value_relocations = convert::relocations(&values);
        let lifted = convert::kernel_args(&values, &value_relocations);
        let changes: Vec<gpu::BurstArg<'_>> = b
            .changes
            .iter()
            .zip(lifted)
            .map(|(&(index, _), arg)| gpu::BurstArg { index, arg })
            .collect();
        let burst = gpu::Burst {
            config,
            args: &args,
            changes: &changes,
            counts: &b.counts,
        };
        self.gpu()
            .launch_burst(session, module, gpu::KernelRef::At(b.kernel), &burst)
            .map(drop)
    }

    /// A GRAPH operation through the service's graph of the same name; what it made (a graph's
    /// id, a node's or a scalar's index), else 0.
    fn graph_op(&mut self, g: tasklet_wire::Graph) -> Result<u64, tasklet_runtime::GpuError> {
        use tasklet_wire::GraphOp;
        let session = convert::session(g.session);
        let graph = gpu::GraphId(g.graph);
        let gpu = self.gpu();
        Ok(match g.op {
            GraphOp::Create => gpu.graph_create(session)?.0,
            GraphOp::Launch {
                module,
                kernel,
                grid,
                block,
                shared_mem_bytes,
                args,
            } => {
                let config = LaunchConfig {
                    grid,
                    block,
                    shared_mem_bytes,
                };
                let (values, relocations) = convert::graph_arg_values(&args);
                let lifted = convert::graph_args(&args, &values, &relocations);
                let kernel = gpu::KernelRef::At(kernel);
                let module = convert::module(module);
                gpu.graph_launch(session, graph, module, kernel, &config, &lifted)?
                    .into()
            }
            GraphOp::Copy {
                dst,
                dst_offset,
                src,
                src_offset,
                len,
            } => gpu
                .graph_copy(
                    session,
                    graph,
                    (convert::buffer(dst), dst_offset),
                    (convert::buffer(src), src_offset),
                    len,
                )?
                .into(),
            GraphOp::Fill {
                dst,
                offset,
                len,
                value,
            } => gpu
                .graph_fill(session, graph, (convert::buffer(dst), offset), len, value)?
                .into(),
            GraphOp::Scalar { value } => gpu.graph_scalar(session, graph, value)?.into(),
            GraphOp::SetScalar { index, value } => {
                gpu.graph_set_scalar(session, graph, index, value)?;
                0
            }
            GraphOp::SetArgs { node, args } => {
                let (values, relocations) = convert::graph_arg_values(&args);
                let lifted = convert::graph_args(&args, &values, &relocations);
                gpu.graph_set_args(session, graph, node, &lifted)?;
                0
            }
            GraphOp::Replay { times } => {
                gpu.graph_replay(session, graph, times)?;
                0
            }
            GraphOp::Drop => {
                gpu.graph_drop(session, graph);
                0
            }
        })
    }

    /// Runs a pipelined op unless an earlier one of its session failed; holds its failure for
    /// the session's next barrier. Whether it ran and succeeded.
    fn pipelined(
        &mut self,
        request_id: RequestId,
        opcode: Opcode,
        session: gpu::SessionId,
        op: impl FnOnce(&mut Self) -> Result<(), tasklet_runtime::GpuError>,
    ) -> bool {
        if self.held.contains_key(&session) {
            return false;
        }
        let Err(err) = op(self) else { return true };
        if self.held.len() < MAX_HELD {
            let mut failure = ErrorReply::new(code_of(&err), err.into_message());
            failure.failed_op = Some(FailedOp { request_id, opcode });
            self.held.insert(session, failure);
        }
        false
    }

    /// A piece of a MEM_WRITE's (or STREAM_WRITE's) data, gathered into staging memory (so the
    /// worker copies it to the device itself) when it is large enough and a buffer comes free
    /// in time. The first piece of a write longer than one piece checks that the whole write
    /// fits before anything is written. A STREAM_WRITE's pieces are each written on its stream,
    /// in order. Once a piece is refused (or skipped for an earlier failure), the write's later
    /// pieces are dropped.
    fn write_piece(&mut self, request_id: RequestId, piece: WritePiece) {
        if piece.refused.load(Ordering::Relaxed) {
            return;
        }
        let session = convert::session(piece.session);
        let buffer = convert::buffer(piece.buffer);
        let stream = piece.stream.map(convert::stream);
        let write = move |d: &mut Self, offset: u64, bytes: &[u8]| match stream {
            None => d.gpu().mem_write(session, buffer, offset, bytes),
            Some(stream) => d.gpu().stream_write(session, stream, buffer, offset, bytes),
        };
        let ran = self.pipelined(request_id, piece_opcode(&piece), session, |d| {
            if piece.first && piece.rest > piece.len as u64 {
                // In a local write's order: the right, the session, the buffer and the stream
                // (a write of no bytes at its start, which every buffer has), then the span.
                write(d, 0, &[])?;
                d.gpu()
                    .check_span(session, buffer, piece.offset, piece.rest)?;
            }
            let staged = (piece.len >= DIRECT_MIN_BYTES && piece.len <= d.staging.buffer_size())
                .then(|| d.staging_buffer())
                .flatten();
            let gathered;
            let bytes: &[u8] = match (staged, piece.chunks.as_slice()) {
                (Some(mut buffer), chunks) => {
                    for chunk in chunks {
                        buffer.fill_from(chunk);
                    }
                    gathered = Gathered::Staged(buffer);
                    gathered.as_ref()
                }
                (None, [one]) => one,
                (None, chunks) => {
                    gathered = Gathered::Plain(chunks.concat());
                    gathered.as_ref()
                }
            };
            tracing::trace!(name: "piece-gathered", target: crate::TIMELINE, "");
            let written = write(d, piece.offset, bytes);
            tracing::trace!(name: "piece-written", target: crate::TIMELINE, "");
            written
        });
        if !ran {
            piece.refused.store(true, Ordering::Relaxed);
        }
    }
}

/// The op whose data a write piece carries.
fn piece_opcode(piece: &WritePiece) -> Opcode {
    match piece.stream {
        None => Opcode::MemWrite,
        Some(_) => Opcode::StreamWrite,
    }
}

/// A write piece's bytes in one place.
enum Gathered {
    Staged(StagingBuffer),
    Plain(Vec<u8>),
}

impl AsRef<[u8]> for Gathered {
    fn as_ref(&self) -> &[u8] {
        match self {
            Gathered::Staged(buffer) => buffer.as_ref(),
            Gathered::Plain(bytes) => bytes,
        }
    }
}

/// Whether a queue op waits for the session's work queued before it (and so would see a
/// pipelined op's failure, were it run locally).
fn waits_for_work(op: gpu::QueueOp) -> bool {
    matches!(
        op,
        gpu::QueueOp::SyncStream(_) | gpu::QueueOp::SyncEvent(_) | gpu::QueueOp::Record { .. }
    )
}

fn no_lease(lease: gpu::LeaseId) -> Failure {
    Failure::new(
        ErrorCode::NotFound,
        format!("no lease {lease} on this connection"),
    )
}
