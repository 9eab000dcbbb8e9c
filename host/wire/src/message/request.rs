//! Requests (client → node) and their bodies.
//!
//! A body is the op's fields in the order they are declared here, each as `crate::codec` writes
//! it; docs/wire.md lists the same layouts for implementers in other languages.

use super::grant::Grant;
use super::graph::Graph;
use super::group::LeaseGroup;
use super::kernel::{decode_args, encode_args, KernelArg};
use super::queue::Queue;
use super::requirements::LeaseRequirements;
use crate::codec::{Reader, Writer};
use crate::error::{DecodeError, EncodeError};
use crate::ids::{BufferId, Digest, LeaseId, ModuleId, SessionId};
use crate::limits::{
    MAX_ARG_BYTES, MAX_BRANCHES, MAX_BURST_CHANGES, MAX_BURST_LAUNCHES, MAX_COMPILE_OPTION,
    MAX_COMPILE_OPTIONS, MAX_MANIFEST_BYTES, MAX_MODULE_BYTES, MAX_NAME, MAX_PEER_NAME,
    MAX_SOURCE_BYTES, MAX_SUBMIT_INPUT,
};
use crate::opcode::Opcode;

/// A request. Those marked *streamed* are followed by data frames carrying the announced number
/// of bytes; those marked *pipelined* get no reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// The protocol versions the client speaks (an inclusive range) and what it is.
    Hello {
        min_version: u8,
        max_version: u8,
        agent: String,
    },
    /// Narrow the connection's grant to this (each field a ceiling); only before its first lease.
    Grant(Grant),
    GetInventory,
    /// Acquire a GPU (`device`, or any that meets `requires`) and at least `min_bytes` of its
    /// memory for `seconds`.
    LeaseAlloc {
        min_bytes: u64,
        seconds: u32,
        device: Option<u32>,
        requires: LeaseRequirements,
    },
    /// Release the lease and free its device memory.
    MemFree {
        lease: LeaseId,
    },
    /// Extend the lease to `seconds` from now.
    LeaseRenew {
        lease: LeaseId,
        seconds: u32,
    },
    LeaseInfo {
        lease: LeaseId,
    },
    /// A group of leases on distinct devices, all or none.
    LeaseAllocGroup(LeaseGroup),
    GpuSubmit(GpuSubmit),
    MemAlloc {
        session: SessionId,
        bytes: u64,
    },
    /// Pipelined, streamed: `len` bytes written at `offset` in `buffer`.
    MemWrite {
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        len: u64,
    },
    /// `ptx`: the module's text, passed as bytes (the node checks it).
    ModuleLoad {
        session: SessionId,
        ptx: Vec<u8>,
    },
    /// Pipelined.
    Launch(Launch),
    /// Answered once every launch is queued, or refused whole.
    LaunchBurst(LaunchBurst),
    Graph(Graph),
    Sync {
        session: SessionId,
    },
    MemRead {
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        len: u64,
    },
    /// Free one buffer.
    Free {
        session: SessionId,
        buffer: BufferId,
    },
    SessionOpen {
        lease: LeaseId,
    },
    SessionClose {
        session: SessionId,
    },
    MemCopy {
        session: SessionId,
        dst: BufferId,
        dst_offset: u64,
        src: BufferId,
        src_offset: u64,
        len: u64,
    },
    /// Copies `len` bytes from `src` at `src_offset` in session `src_session` to `dst` at
    /// `dst_offset` in session `dst_session`, both sessions the connection's.
    MemCopyBetween {
        dst_session: SessionId,
        dst: BufferId,
        dst_offset: u64,
        src_session: SessionId,
        src: BufferId,
        src_offset: u64,
        len: u64,
    },
    /// One operation on the session's streams and events.
    QueueOp(Queue),
    /// Pipelined, streamed: a MEM_WRITE queued on `stream`, one of the session's streams.
    StreamWrite {
        stream: u64,
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        len: u64,
    },
    /// Pipelined: a LAUNCH queued on `stream`, one of the session's streams.
    StreamLaunch {
        stream: u64,
        launch: Launch,
    },
    /// No reply: the next `branches` branches of `fork` (BRANCH … BRANCH_END, each on another
    /// stream) are served after what this stream carried before this, and what it carries after
    /// this is served after all of them.
    Fork {
        fork: u64,
        branches: u8,
    },
    /// No reply: what follows on this stream up to its BRANCH_END is one branch of `fork`.
    Branch {
        fork: u64,
    },
    /// No reply: the end of this stream's branch of `fork`.
    BranchEnd {
        fork: u64,
    },
    /// A MEM_READ queued on `stream`, one of the session's streams.
    StreamRead {
        stream: u64,
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        len: u64,
    },
    ModuleLoadSource {
        session: SessionId,
        source: String,
        options: Vec<String>,
    },
    ModuleUnload {
        session: SessionId,
        module: ModuleId,
    },
    /// Streamed: `component_len` bytes of the WebAssembly component.
    DeployPush {
        manifest: Vec<u8>,
        component_len: u64,
    },
    DeployHas {
        digest: Digest,
    },
    /// Streamed: `input_len` bytes of input.
    DeployRun {
        digest: Digest,
        input_len: u64,
    },
}

/// GPU_SUBMIT: the node writes `input` at the start of the lease's device memory (its *region*),
/// loads `ptx`, launches `kernel` with the region's address as its first argument followed by
/// `args`, waits, and replies with `output_size` bytes read from `output_offset` in the region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuSubmit {
    pub lease: LeaseId,
    pub ptx: Vec<u8>,
    pub kernel: String,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// The rest of the kernel's argument block, laid out by the client, after the pointer.
    pub args: Vec<u8>,
    pub output_size: u64,
    pub output_offset: u64,
    /// Written at offset 0 of the region before the launch (at most [`MAX_SUBMIT_INPUT`] bytes;
    /// empty: the region is left as it was).
    pub input: Vec<u8>,
}

/// LAUNCH: run kernel `kernel` (an index into the module's kernel list) of `module`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub session: SessionId,
    pub module: ModuleId,
    pub kernel: u32,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Bytes of dynamic shared memory per block.
    pub shared_mem_bytes: u32,
    pub args: Vec<KernelArg>,
}

/// LAUNCH_BURST: launch kernel `kernel` of `module` once per entry of `counts`, in order: launch
/// `i` with `args`, but for the next `counts[i]` entries of `changes`, each the argument at its
/// index replaced. The node checks every launch before it queues any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchBurst {
    pub session: SessionId,
    pub module: ModuleId,
    pub kernel: u32,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
    pub args: Vec<KernelArg>,
    /// (argument index, its value in one launch), launch by launch.
    pub changes: Vec<(u32, KernelArg)>,
    pub counts: Vec<u32>,
}

impl Launch {
    fn encode(&self, w: &mut Writer) -> Result<(), EncodeError> {
        w.u64(self.session.0);
        w.u64(self.module.0);
        w.u32(self.kernel);
        dims(w, self.grid);
        dims(w, self.block);
        w.u32(self.shared_mem_bytes);
        encode_args(&self.args, w)
    }

    fn decode(r: &mut Reader) -> Result<Launch, DecodeError> {
        Ok(Launch {
            session: SessionId(r.u64("session")?),
            module: ModuleId(r.u64("module")?),
            kernel: r.u32("kernel")?,
            grid: read_dims(r, "grid")?,
            block: read_dims(r, "block")?,
            shared_mem_bytes: r.u32("shared_mem_bytes")?,
            args: decode_args(r)?,
        })
    }
}

impl LaunchBurst {
    fn encode(&self, w: &mut Writer) -> Result<(), EncodeError> {
        w.u64(self.session.0);
        w.u64(self.module.0);
        w.u32(self.kernel);
        dims(w, self.grid);
        dims(w, self.block);
        w.u32(self.shared_mem_bytes);
        encode_args(&self.args, w)?;
        w.count("changes", self.changes.len(), MAX_BURST_CHANGES)?;
        for (index, arg) in &self.changes {
            w.u32(*index);
            arg.encode(w)?;
        }
        w.count("counts", self.counts.len(), MAX_BURST_LAUNCHES)?;
        for c in &self.counts {
            w.u32(*c);
        }
        Ok(())
    }

    fn decode(r: &mut Reader) -> Result<LaunchBurst, DecodeError> {
        let session = SessionId(r.u64("session")?);
        let module = ModuleId(r.u64("module")?);
        let kernel = r.u32("kernel")?;
        let grid = read_dims(r, "grid")?;
        let block = read_dims(r, "block")?;
        let shared_mem_bytes = r.u32("shared_mem_bytes")?;
        let args = decode_args(r)?;
        // A change is at least its index, an argument's tag and a 4-byte value.
        let n = r.count("changes", MAX_BURST_CHANGES, 4 + 1 + 4)?;
        let mut changes = Vec::with_capacity(n);
        for _ in 0..n {
            let index = r.u32("change index")?;
            changes.push((index, KernelArg::decode(r)?));
        }
        let n = r.count("counts", MAX_BURST_LAUNCHES, 4)?;
        let mut counts = Vec::with_capacity(n);
        for _ in 0..n {
            counts.push(r.u32("count")?);
        }
        Ok(LaunchBurst {
            session,
            module,
            kernel,
            grid,
            block,
            shared_mem_bytes,
            args,
            changes,
            counts,
        })
    }
}

/// The fewest bytes a compiler option takes on the wire (its length).
const OPTION_MIN_BYTES: usize = 4;

impl Request {
    pub fn opcode(&self) -> Opcode {
        match self {
            Request::Hello { .. } => Opcode::Hello,
            Request::Grant(_) => Opcode::Grant,
            Request::GetInventory => Opcode::GetInventory,
            Request::LeaseAlloc { .. } => Opcode::LeaseAlloc,
            Request::MemFree { .. } => Opcode::MemFree,
            Request::LeaseRenew { .. } => Opcode::LeaseRenew,
            Request::LeaseInfo { .. } => Opcode::LeaseInfo,
            Request::LeaseAllocGroup(_) => Opcode::LeaseAllocGroup,
            Request::GpuSubmit(_) => Opcode::GpuSubmit,
            Request::MemAlloc { .. } => Opcode::MemAlloc,
            Request::MemWrite { .. } => Opcode::MemWrite,
            Request::ModuleLoad { .. } => Opcode::ModuleLoad,
            Request::Launch(_) => Opcode::Launch,
            Request::LaunchBurst(_) => Opcode::LaunchBurst,
            Request::Graph(_) => Opcode::Graph,
            Request::Sync { .. } => Opcode::Sync,
            Request::MemRead { .. } => Opcode::MemRead,
            Request::Free { .. } => Opcode::Free,
            Request::SessionOpen { .. } => Opcode::SessionOpen,
            Request::SessionClose { .. } => Opcode::SessionClose,
            Request::MemCopy { .. } => Opcode::MemCopy,
            Request::MemCopyBetween { .. } => Opcode::MemCopyBetween,
            Request::QueueOp(_) => Opcode::QueueOp,
            Request::StreamWrite { .. } => Opcode::StreamWrite,
            Request::StreamLaunch { .. } => Opcode::StreamLaunch,
            Request::StreamRead { .. } => Opcode::StreamRead,
            Request::ModuleLoadSource { .. } => Opcode::ModuleLoadSource,
            Request::ModuleUnload { .. } => Opcode::ModuleUnload,
            Request::DeployPush { .. } => Opcode::DeployPush,
            Request::DeployHas { .. } => Opcode::DeployHas,
            Request::DeployRun { .. } => Opcode::DeployRun,
            Request::Fork { .. } => Opcode::Fork,
            Request::Branch { .. } => Opcode::Branch,
            Request::BranchEnd { .. } => Opcode::BranchEnd,
        }
    }

    /// The session a session op acts on (MEM_COPY_BETWEEN's: the destination's).
    pub fn session(&self) -> Option<SessionId> {
        match self {
            Request::MemAlloc { session, .. }
            | Request::MemWrite { session, .. }
            | Request::ModuleLoad { session, .. }
            | Request::Sync { session }
            | Request::MemRead { session, .. }
            | Request::Free { session, .. }
            | Request::SessionClose { session }
            | Request::MemCopy { session, .. }
            | Request::ModuleLoadSource { session, .. }
            | Request::ModuleUnload { session, .. }
            | Request::StreamWrite { session, .. }
            | Request::StreamRead { session, .. }
            | Request::MemCopyBetween {
                dst_session: session,
                ..
            } => Some(*session),
            Request::Launch(launch) | Request::StreamLaunch { launch, .. } => Some(launch.session),
            Request::LaunchBurst(burst) => Some(burst.session),
            Request::Graph(graph) => Some(graph.session),
            Request::QueueOp(queue) => Some(queue.session),
            _ => None,
        }
    }

    /// The bytes of streamed data that follow this request, and the field that announces them.
    pub fn streamed(&self) -> Option<(&'static str, u64)> {
        match self {
            Request::MemWrite { len, .. } | Request::StreamWrite { len, .. } => Some(("len", *len)),
            Request::DeployPush { component_len, .. } => Some(("component_len", *component_len)),
            Request::DeployRun { input_len, .. } => Some(("input_len", *input_len)),
            _ => None,
        }
    }

    pub(crate) fn encode_body(&self, w: &mut Writer) -> Result<(), EncodeError> {
        match self {
            Request::Hello {
                min_version,
                max_version,
                agent,
            } => {
                w.u8(*min_version);
                w.u8(*max_version);
                w.string("agent", agent, MAX_PEER_NAME)?;
            }
            Request::Grant(grant) => grant.encode(w)?,
            Request::GetInventory => {}
            Request::LeaseAlloc {
                min_bytes,
                seconds,
                device,
                requires,
            } => {
                w.u64(*min_bytes);
                w.u32(*seconds);
                w.bool(device.is_some());
                if let Some(device) = device {
                    w.u32(*device);
                }
                requires.encode(w)?;
            }
            Request::LeaseAllocGroup(group) => group.encode(w)?,
            Request::MemFree { lease }
            | Request::LeaseInfo { lease }
            | Request::SessionOpen { lease } => w.u64(lease.0),
            Request::LeaseRenew { lease, seconds } => {
                w.u64(lease.0);
                w.u32(*seconds);
            }
            Request::GpuSubmit(submit) => {
                w.u64(submit.lease.0);
                w.bytes("ptx", &submit.ptx, MAX_MODULE_BYTES)?;
                w.string("kernel", &submit.kernel, MAX_NAME)?;
                dims(w, submit.grid);
                dims(w, submit.block);
                w.bytes("args", &submit.args, MAX_ARG_BYTES)?;
                w.u64(submit.output_size);
                w.u64(submit.output_offset);
                w.bytes("input", &submit.input, MAX_SUBMIT_INPUT)?;
            }
            Request::MemAlloc { session, bytes } => {
                w.u64(session.0);
                w.u64(*bytes);
            }
            Request::MemWrite {
                session,
                buffer,
                offset,
                len,
            }
            | Request::MemRead {
                session,
                buffer,
                offset,
                len,
            } => {
                w.u64(session.0);
                w.u64(buffer.0);
                w.u64(*offset);
                w.u64(*len);
            }
            Request::ModuleLoad { session, ptx } => {
                w.u64(session.0);
                w.bytes("ptx", ptx, MAX_MODULE_BYTES)?;
            }
            Request::LaunchBurst(burst) => burst.encode(w)?,
            Request::Graph(graph) => graph.encode(w)?,
            Request::QueueOp(queue) => queue.encode(w),
            Request::Launch(launch) => launch.encode(w)?,
            // A stream op is its stream, then the body of the op it queues on that stream.
            Request::StreamLaunch { stream, launch } => {
                w.u64(*stream);
                launch.encode(w)?;
            }
            Request::StreamWrite {
                stream,
                session,
                buffer,
                offset,
                len,
            }
            | Request::StreamRead {
                stream,
                session,
                buffer,
                offset,
                len,
            } => {
                w.u64(*stream);
                w.u64(session.0);
                w.u64(buffer.0);
                w.u64(*offset);
                w.u64(*len);
            }
            Request::Sync { session } | Request::SessionClose { session } => w.u64(session.0),
            Request::Free { session, buffer } => {
                w.u64(session.0);
                w.u64(buffer.0);
            }
            Request::MemCopy {
                session,
                dst,
                dst_offset,
                src,
                src_offset,
                len,
            } => {
                w.u64(session.0);
                w.u64(dst.0);
                w.u64(*dst_offset);
                w.u64(src.0);
                w.u64(*src_offset);
                w.u64(*len);
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
                w.u64(dst_session.0);
                w.u64(dst.0);
                w.u64(*dst_offset);
                w.u64(src_session.0);
                w.u64(src.0);
                w.u64(*src_offset);
                w.u64(*len);
            }
            Request::ModuleLoadSource {
                session,
                source,
                options,
            } => {
                w.u64(session.0);
                w.string("source", source, MAX_SOURCE_BYTES)?;
                w.count("options", options.len(), MAX_COMPILE_OPTIONS)?;
                for option in options {
                    w.string("options[]", option, MAX_COMPILE_OPTION)?;
                }
            }
            Request::ModuleUnload { session, module } => {
                w.u64(session.0);
                w.u64(module.0);
            }
            Request::DeployPush {
                manifest,
                component_len,
            } => {
                w.bytes("manifest", manifest, MAX_MANIFEST_BYTES)?;
                w.u64(*component_len);
            }
            Request::DeployHas { digest } => digest.encode(w)?,
            Request::DeployRun { digest, input_len } => {
                digest.encode(w)?;
                w.u64(*input_len);
            }
            Request::Fork { fork, branches } => {
                if !(1..=MAX_BRANCHES).contains(branches) {
                    return Err(EncodeError::InvalidValue {
                        field: "branches",
                        reason: "a fork has 1 to MAX_BRANCHES branches",
                    });
                }
                w.u64(*fork);
                w.u8(*branches);
            }
            Request::Branch { fork } | Request::BranchEnd { fork } => w.u64(*fork),
        }
        Ok(())
    }

    /// Decodes the body of a request frame of `opcode`, all of it.
    pub(crate) fn decode_body(opcode: Opcode, body: &[u8]) -> Result<Request, DecodeError> {
        let mut r = Reader::new(body);
        let request = match opcode {
            Opcode::GoAway => {
                return Err(DecodeError::WrongDirection {
                    opcode,
                    direction: "request",
                })
            }
            Opcode::Hello => Request::Hello {
                min_version: r.u8("min_version")?,
                max_version: r.u8("max_version")?,
                agent: r.string("agent", MAX_PEER_NAME)?,
            },
            Opcode::Grant => Request::Grant(Grant::decode(&mut r)?),
            Opcode::GetInventory => Request::GetInventory,
            Opcode::LeaseAlloc => Request::LeaseAlloc {
                min_bytes: r.u64("min_bytes")?,
                seconds: r.u32("seconds")?,
                device: if r.present("device")? {
                    Some(r.u32("device")?)
                } else {
                    None
                },
                requires: LeaseRequirements::decode(&mut r)?,
            },
            Opcode::MemFree => Request::MemFree {
                lease: LeaseId(r.u64("lease")?),
            },
            Opcode::LeaseRenew => Request::LeaseRenew {
                lease: LeaseId(r.u64("lease")?),
                seconds: r.u32("seconds")?,
            },
            Opcode::LeaseInfo => Request::LeaseInfo {
                lease: LeaseId(r.u64("lease")?),
            },
            Opcode::LeaseAllocGroup => Request::LeaseAllocGroup(LeaseGroup::decode(&mut r)?),
            Opcode::GpuSubmit => Request::GpuSubmit(GpuSubmit {
                lease: LeaseId(r.u64("lease")?),
                ptx: r.bytes("ptx", MAX_MODULE_BYTES)?.to_vec(),
                kernel: r.string("kernel", MAX_NAME)?,
                grid: read_dims(&mut r, "grid")?,
                block: read_dims(&mut r, "block")?,
                args: r.bytes("args", MAX_ARG_BYTES)?.to_vec(),
                output_size: r.u64("output_size")?,
                output_offset: r.u64("output_offset")?,
                input: r.bytes("input", MAX_SUBMIT_INPUT)?.to_vec(),
            }),
            Opcode::MemAlloc => Request::MemAlloc {
                session: SessionId(r.u64("session")?),
                bytes: r.u64("bytes")?,
            },
            Opcode::MemWrite => Request::MemWrite {
                session: SessionId(r.u64("session")?),
                buffer: BufferId(r.u64("buffer")?),
                offset: r.u64("offset")?,
                len: r.u64("len")?,
            },
            Opcode::ModuleLoad => Request::ModuleLoad {
                session: SessionId(r.u64("session")?),
                ptx: r.bytes("ptx", MAX_MODULE_BYTES)?.to_vec(),
            },
            Opcode::LaunchBurst => Request::LaunchBurst(LaunchBurst::decode(&mut r)?),
            Opcode::Graph => Request::Graph(Graph::decode(&mut r)?),
            Opcode::QueueOp => Request::QueueOp(Queue::decode(&mut r)?),
            Opcode::Launch => Request::Launch(Launch::decode(&mut r)?),
            Opcode::StreamLaunch => Request::StreamLaunch {
                stream: r.u64("stream")?,
                launch: Launch::decode(&mut r)?,
            },
            Opcode::StreamWrite => Request::StreamWrite {
                stream: r.u64("stream")?,
                session: SessionId(r.u64("session")?),
                buffer: BufferId(r.u64("buffer")?),
                offset: r.u64("offset")?,
                len: r.u64("len")?,
            },
            Opcode::StreamRead => Request::StreamRead {
                stream: r.u64("stream")?,
                session: SessionId(r.u64("session")?),
                buffer: BufferId(r.u64("buffer")?),
                offset: r.u64("offset")?,
                len: r.u64("len")?,
            },
            Opcode::Sync => Request::Sync {
                session: SessionId(r.u64("session")?),
            },
            Opcode::MemRead => Request::MemRead {
                session: SessionId(r.u64("session")?),
                buffer: BufferId(r.u64("buffer")?),
                offset: r.u64("offset")?,
                len: r.u64("len")?,
            },
            Opcode::Free => Request::Free {
                session: SessionId(r.u64("session")?),
                buffer: BufferId(r.u64("buffer")?),
            },
            Opcode::SessionOpen => Request::SessionOpen {
                lease: LeaseId(r.u64("lease")?),
            },
            Opcode::SessionClose => Request::SessionClose {
                session: SessionId(r.u64("session")?),
            },
            Opcode::MemCopy => Request::MemCopy {
                session: SessionId(r.u64("session")?),
                dst: BufferId(r.u64("dst")?),
                dst_offset: r.u64("dst_offset")?,
                src: BufferId(r.u64("src")?),
                src_offset: r.u64("src_offset")?,
                len: r.u64("len")?,
            },
            Opcode::MemCopyBetween => Request::MemCopyBetween {
                dst_session: SessionId(r.u64("dst_session")?),
                dst: BufferId(r.u64("dst")?),
                dst_offset: r.u64("dst_offset")?,
                src_session: SessionId(r.u64("src_session")?),
                src: BufferId(r.u64("src")?),
                src_offset: r.u64("src_offset")?,
                len: r.u64("len")?,
            },
            Opcode::ModuleLoadSource => {
                let session = SessionId(r.u64("session")?);
                let source = r.string("source", MAX_SOURCE_BYTES)?;
                let count = r.count("options", MAX_COMPILE_OPTIONS, OPTION_MIN_BYTES)?;
                let mut options = Vec::with_capacity(count);
                for _ in 0..count {
                    options.push(r.string("options[]", MAX_COMPILE_OPTION)?);
                }
                Request::ModuleLoadSource {
                    session,
                    source,
                    options,
                }
            }
            Opcode::ModuleUnload => Request::ModuleUnload {
                session: SessionId(r.u64("session")?),
                module: ModuleId(r.u64("module")?),
            },
            Opcode::DeployPush => Request::DeployPush {
                manifest: r.bytes("manifest", MAX_MANIFEST_BYTES)?.to_vec(),
                component_len: r.u64("component_len")?,
            },
            Opcode::DeployHas => Request::DeployHas {
                digest: Digest::decode(&mut r)?,
            },
            Opcode::DeployRun => Request::DeployRun {
                digest: Digest::decode(&mut r)?,
                input_len: r.u64("input_len")?,
            },
            Opcode::Fork => {
                let fork = r.u64("fork")?;
                let branches = r.u8("branches")?;
                if !(1..=MAX_BRANCHES).contains(&branches) {
                    return Err(DecodeError::InvalidValue {
                        field: "branches",
                        value: branches.into(),
                    });
                }
                Request::Fork { fork, branches }
            }
            Opcode::Branch => Request::Branch {
                fork: r.u64("fork")?,
            },
            Opcode::BranchEnd => Request::BranchEnd {
                fork: r.u64("fork")?,
            },
        };
        r.finish()?;
        Ok(request)
    }
}

fn dims(w: &mut Writer, dims: [u32; 3]) {
    dims.into_iter().for_each(|d| w.u32(d));
}

fn read_dims(r: &mut Reader, field: &'static str) -> Result<[u32; 3], DecodeError> {
    Ok([r.u32(field)?, r.u32(field)?, r.u32(field)?])
}
