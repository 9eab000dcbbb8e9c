//! Replies (node → client) and their bodies.
//!
//! Every reply body starts with a `u16` status. Status 0 (OK) is followed by the op's fields in
//! the order declared here; any other status by the error body: the message, then whether a
//! failed pipelined op is named, then that op. GOAWAY's body is an error body too.

use super::device::{decode_devices, encode_devices, Device};
use super::grant::Grant;
use super::group::{decode_group_leases, encode_group_leases, GroupLease};
use super::kernel::LoadedModule;
use super::queue::QueueAnswer;
use crate::codec::{Reader, Writer};
use crate::error::{DecodeError, EncodeError};
use crate::ids::{BufferId, Digest, LeaseId, SessionId};
use crate::limits::{MAX_ERROR_MESSAGE, MAX_PEER_NAME};
use crate::opcode::Opcode;
use crate::status::{capped_message, ErrorCode, ErrorReply, FailedOp, STATUS_OK};

/// A reply. Those marked *streamed* are followed by data frames carrying the announced number of
/// bytes; failed replies never are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The version both ends will speak, what the node is, and the most streamed data it accepts
    /// after one request.
    Hello {
        version: u8,
        node: String,
        max_stream_bytes: u64,
    },
    /// The grant in force on the connection from now on.
    Grant(Grant),
    Inventory {
        devices: Vec<Device>,
        /// The node is draining: it refuses new leases, sessions and runs, and serves what runs.
        draining: bool,
    },
    /// `generation` starts at 1 and grows by one with each renewal.
    LeaseAlloc {
        lease: LeaseId,
        generation: u64,
        device: u32,
        granted_bytes: u64,
        ttl_ms: u64,
    },
    MemFree,
    LeaseRenew {
        generation: u64,
        ttl_ms: u64,
    },
    LeaseInfo {
        device: u32,
        generation: u64,
        granted_bytes: u64,
        used_bytes: u64,
        remaining_ms: u64,
    },
    /// Every lease of the group, in placement order (the first on the device placement ranks
    /// best).
    LeaseAllocGroup {
        leases: Vec<GroupLease>,
    },
    /// Streamed: the `output_len` bytes read back (the request's `output_size`). The exit code
    /// of a GPU_SUBMIT is the reply's status.
    GpuSubmit {
        output_len: u64,
    },
    MemAlloc {
        buffer: BufferId,
    },
    ModuleLoad(LoadedModule),
    Sync,
    /// Streamed: the `len` bytes read (the request's `len`).
    MemRead {
        len: u64,
    },
    /// Streamed, as MEM_READ's: the `len` bytes read on the stream (the request's `len`).
    StreamRead {
        len: u64,
    },
    Free,
    SessionOpen {
        session: SessionId,
    },
    SessionClose,
    MemCopy,
    MemCopyBetween,
    /// Every launch of the burst is queued.
    LaunchBurst,
    /// What a GRAPH operation made (a graph's id, a node's or a scalar's index), else 0.
    Graph {
        value: u64,
    },
    /// What a QUEUE_OP answers.
    QueueOp(QueueAnswer),
    ModuleLoadSource(LoadedModule),
    ModuleUnload,
    DeployPush {
        digest: Digest,
        already_present: bool,
    },
    DeployHas {
        present: bool,
    },
    /// Streamed: `output_len` bytes of the run's output.
    DeployRun {
        /// The node's id for the run: all 128 of its random bits.
        run_id: u128,
        exit_status: i32,
        elapsed_us: u64,
        output_len: u64,
    },
    /// The request of `opcode` failed.
    Error {
        opcode: Opcode,
        error: ErrorReply,
    },
}

impl Reply {
    /// The opcode of the request this answers.
    pub fn opcode(&self) -> Opcode {
        match self {
            Reply::Hello { .. } => Opcode::Hello,
            Reply::Grant(_) => Opcode::Grant,
            Reply::Inventory { .. } => Opcode::GetInventory,
            Reply::LeaseAlloc { .. } => Opcode::LeaseAlloc,
            Reply::MemFree => Opcode::MemFree,
            Reply::LeaseRenew { .. } => Opcode::LeaseRenew,
            Reply::LeaseInfo { .. } => Opcode::LeaseInfo,
            Reply::LeaseAllocGroup { .. } => Opcode::LeaseAllocGroup,
            Reply::GpuSubmit { .. } => Opcode::GpuSubmit,
            Reply::MemAlloc { .. } => Opcode::MemAlloc,
            Reply::ModuleLoad(_) => Opcode::ModuleLoad,
            Reply::Sync => Opcode::Sync,
            Reply::MemRead { .. } => Opcode::MemRead,
            Reply::StreamRead { .. } => Opcode::StreamRead,
            Reply::Free => Opcode::Free,
            Reply::SessionOpen { .. } => Opcode::SessionOpen,
            Reply::SessionClose => Opcode::SessionClose,
            Reply::MemCopy => Opcode::MemCopy,
            Reply::MemCopyBetween => Opcode::MemCopyBetween,
            Reply::LaunchBurst => Opcode::LaunchBurst,
            Reply::Graph { .. } => Opcode::Graph,
            Reply::QueueOp(_) => Opcode::QueueOp,
            Reply::ModuleLoadSource(_) => Opcode::ModuleLoadSource,
            Reply::ModuleUnload => Opcode::ModuleUnload,
            Reply::DeployPush { .. } => Opcode::DeployPush,
            Reply::DeployHas { .. } => Opcode::DeployHas,
            Reply::DeployRun { .. } => Opcode::DeployRun,
            Reply::Error { opcode, .. } => *opcode,
        }
    }

    /// The bytes of streamed data that follow this reply, and the field that announces them.
    pub fn streamed(&self) -> Option<(&'static str, u64)> {
        match self {
            Reply::GpuSubmit { output_len } => Some(("output_len", *output_len)),
            Reply::MemRead { len } | Reply::StreamRead { len } => Some(("len", *len)),
            Reply::DeployRun { output_len, .. } => Some(("output_len", *output_len)),
            _ => None,
        }
    }

    pub(crate) fn encode_body(&self, w: &mut Writer) -> Result<(), EncodeError> {
        if let Reply::Error { opcode, error } = self {
            if !opcode.has_reply() {
                return Err(EncodeError::InvalidValue {
                    field: "opcode",
                    reason: "this op gets no reply",
                });
            }
            return encode_error(error, *opcode, w);
        }
        w.u16(STATUS_OK);
        match self {
            Reply::Hello {
                version,
                node,
                max_stream_bytes,
            } => {
                w.u8(*version);
                w.string("node", node, MAX_PEER_NAME)?;
                w.u64(*max_stream_bytes);
            }
            Reply::Grant(grant) => grant.encode(w)?,
            Reply::Inventory { devices, draining } => {
                encode_devices(devices, w)?;
                w.bool(*draining);
            }
            Reply::LeaseAlloc {
                lease,
                generation,
                device,
                granted_bytes,
                ttl_ms,
            } => {
                w.u64(lease.0);
                w.u64(*generation);
                w.u32(*device);
                w.u64(*granted_bytes);
                w.u64(*ttl_ms);
            }
            Reply::LeaseRenew { generation, ttl_ms } => {
                w.u64(*generation);
                w.u64(*ttl_ms);
            }
            Reply::LeaseInfo {
                device,
                generation,
                granted_bytes,
                used_bytes,
                remaining_ms,
            } => {
                w.u32(*device);
                w.u64(*generation);
                w.u64(*granted_bytes);
                w.u64(*used_bytes);
                w.u64(*remaining_ms);
            }
            Reply::LeaseAllocGroup { leases } => encode_group_leases(leases, w)?,
            Reply::GpuSubmit { output_len: len }
            | Reply::MemRead { len }
            | Reply::StreamRead { len } => w.u64(*len),
            Reply::MemAlloc { buffer } => w.u64(buffer.0),
            Reply::ModuleLoad(module) | Reply::ModuleLoadSource(module) => module.encode(w)?,
            Reply::SessionOpen { session } => w.u64(session.0),
            Reply::Graph { value } => w.u64(*value),
            Reply::QueueOp(answer) => answer.encode(w),
            Reply::DeployPush {
                digest,
                already_present,
            } => {
                digest.encode(w)?;
                w.bool(*already_present);
            }
            Reply::DeployHas { present } => w.bool(*present),
            Reply::DeployRun {
                run_id,
                exit_status,
                elapsed_us,
                output_len,
            } => {
                // 16 bytes, big-endian: the high half first.
                w.u64((*run_id >> 64) as u64);
                w.u64(*run_id as u64);
                w.i32(*exit_status);
                w.u64(*elapsed_us);
                w.u64(*output_len);
            }
            Reply::MemFree
            | Reply::Sync
            | Reply::Free
            | Reply::SessionClose
            | Reply::MemCopy
            | Reply::MemCopyBetween
            | Reply::LaunchBurst
            | Reply::ModuleUnload
            | Reply::Error { .. } => {}
        }
        Ok(())
    }

    /// Decodes the body of a reply frame of `opcode` (not GOAWAY: see [`decode_goaway_body`]), all of it.
    pub(crate) fn decode_body(opcode: Opcode, body: &[u8]) -> Result<Reply, DecodeError> {
        if !opcode.has_reply() {
            return Err(DecodeError::WrongDirection {
                opcode,
                direction: "reply",
            });
        }
        let mut r = Reader::new(body);
        let status = r.u16("status")?;
        if status != STATUS_OK {
            let error = decode_error(status, opcode, &mut r)?;
            r.finish()?;
            return Ok(Reply::Error { opcode, error });
        }
        let reply = match opcode {
            // Checked above; listed so that a new opcode must be placed here.
            Opcode::GoAway
            | Opcode::Launch
            | Opcode::MemWrite
            | Opcode::StreamLaunch
            | Opcode::StreamWrite
            | Opcode::Fork
            | Opcode::Branch
            | Opcode::BranchEnd => {
                return Err(DecodeError::WrongDirection {
                    opcode,
                    direction: "reply",
                });
            }
            Opcode::Hello => Reply::Hello {
                version: r.u8("version")?,
                node: r.string("node", MAX_PEER_NAME)?,
                max_stream_bytes: r.u64("max_stream_bytes")?,
            },
            Opcode::Grant => Reply::Grant(Grant::decode(&mut r)?),
            Opcode::GetInventory => Reply::Inventory {
                devices: decode_devices(&mut r)?,
                draining: r.bool("draining")?,
            },
            Opcode::LeaseAlloc => Reply::LeaseAlloc {
                lease: LeaseId(r.u64("lease")?),
                generation: r.u64("generation")?,
                device: r.u32("device")?,
                granted_bytes: r.u64("granted_bytes")?,
                ttl_ms: r.u64("ttl_ms")?,
            },
            Opcode::MemFree => Reply::MemFree,
            Opcode::LeaseRenew => Reply::LeaseRenew {
                generation: r.u64("generation")?,
                ttl_ms: r.u64("ttl_ms")?,
            },
            Opcode::LeaseInfo => Reply::LeaseInfo {
                device: r.u32("device")?,
                generation: r.u64("generation")?,
                granted_bytes: r.u64("granted_bytes")?,
                used_bytes: r.u64("used_bytes")?,
                remaining_ms: r.u64("remaining_ms")?,
            },
            Opcode::LeaseAllocGroup => Reply::LeaseAllocGroup {
                leases: decode_group_leases(&mut r)?,
            },
            Opcode::GpuSubmit => Reply::GpuSubmit {
                output_len: r.u64("output_len")?,
            },
            Opcode::MemAlloc => Reply::MemAlloc {
                buffer: BufferId(r.u64("buffer")?),
            },
            Opcode::ModuleLoad => Reply::ModuleLoad(LoadedModule::decode(&mut r)?),
            Opcode::Sync => Reply::Sync,
            Opcode::MemRead => Reply::MemRead { len: r.u64("len")? },
            Opcode::StreamRead => Reply::StreamRead { len: r.u64("len")? },
            Opcode::Free => Reply::Free,
            Opcode::SessionOpen => Reply::SessionOpen {
                session: SessionId(r.u64("session")?),
            },
            Opcode::SessionClose => Reply::SessionClose,
            Opcode::MemCopy => Reply::MemCopy,
            Opcode::MemCopyBetween => Reply::MemCopyBetween,
            Opcode::LaunchBurst => Reply::LaunchBurst,
            Opcode::Graph => Reply::Graph {
                value: r.u64("value")?,
            },
            Opcode::QueueOp => Reply::QueueOp(QueueAnswer::decode(&mut r)?),
            Opcode::ModuleLoadSource => Reply::ModuleLoadSource(LoadedModule::decode(&mut r)?),
            Opcode::ModuleUnload => Reply::ModuleUnload,
            Opcode::DeployPush => Reply::DeployPush {
                digest: Digest::decode(&mut r)?,
                already_present: r.bool("already_present")?,
            },
            Opcode::DeployHas => Reply::DeployHas {
                present: r.bool("present")?,
            },
            Opcode::DeployRun => {
                let (high, low) = (r.u64("run_id")?, r.u64("run_id")?);
                Reply::DeployRun {
                    run_id: (u128::from(high) << 64) | u128::from(low),
                    exit_status: r.i32("exit_status")?,
                    elapsed_us: r.u64("elapsed_us")?,
                    output_len: r.u64("output_len")?,
                }
            }
        };
        r.finish()?;
        Ok(reply)
    }
}

/// The error body, after its status: the message (cut to [`MAX_ERROR_MESSAGE`] bytes), then a
/// presence byte and, when present, the failed op's request id and opcode; in GPU_SUBMIT's reply
/// only, then a presence byte and, when present, the precise status (the cause).
fn encode_error(error: &ErrorReply, opcode: Opcode, w: &mut Writer) -> Result<(), EncodeError> {
    w.u16(error.code as u16);
    w.string("message", capped_message(&error.message), MAX_ERROR_MESSAGE)?;
    match error.failed_op {
        None => w.bool(false),
        Some(failed) => {
            if !opcode.is_barrier() {
                return Err(EncodeError::InvalidValue {
                    field: "failed_op",
                    reason: "only a SYNC, MEM_READ or STREAM_READ reply names a failed op",
                });
            }
            if !failed.opcode.is_pipelined() {
                return Err(EncodeError::InvalidValue {
                    field: "failed_op.opcode",
                    reason: "only LAUNCH, MEM_WRITE, STREAM_LAUNCH and STREAM_WRITE are pipelined",
                });
            }
            w.bool(true);
            w.u32(failed.request_id);
            w.u16(failed.opcode as u16);
        }
    }
    match (opcode, error.cause) {
        (Opcode::GpuSubmit, None) => w.bool(false),
        (Opcode::GpuSubmit, Some(cause)) => {
            w.bool(true);
            w.u16(cause as u16);
        }
        (_, None) => {}
        (_, Some(_)) => {
            return Err(EncodeError::InvalidValue {
                field: "cause",
                reason: "only a GPU_SUBMIT reply carries a cause",
            })
        }
    }
    Ok(())
}

fn decode_error(status: u16, opcode: Opcode, r: &mut Reader) -> Result<ErrorReply, DecodeError> {
    let code = ErrorCode::from_u16(status).ok_or(DecodeError::UnknownStatus { status })?;
    let message = r.string("message", MAX_ERROR_MESSAGE)?;
    let failed_op = if r.present("failed_op")? {
        if !opcode.is_barrier() {
            return Err(DecodeError::InvalidValue {
                field: "failed_op",
                value: 1,
            });
        }
        let request_id = r.u32("failed_op.request_id")?;
        let code = r.u16("failed_op.opcode")?;
        match Opcode::from_u16(code) {
            Some(op) if op.is_pipelined() => Some(FailedOp {
                request_id,
                opcode: op,
            }),
            _ => {
                return Err(DecodeError::InvalidValue {
                    field: "failed_op.opcode",
                    value: code.into(),
                })
            }
        }
    } else {
        None
    };
    let cause = if opcode == Opcode::GpuSubmit && r.present("cause")? {
        let status = r.u16("cause")?;
        Some(ErrorCode::from_u16(status).ok_or(DecodeError::UnknownStatus { status })?)
    } else {
        None
    };
    Ok(ErrorReply {
        code,
        message,
        failed_op,
        cause,
    })
}

/// GOAWAY's body: an error body (status, message, no failed op).
pub(crate) fn encode_goaway_body(error: &ErrorReply, w: &mut Writer) -> Result<(), EncodeError> {
    encode_error(error, Opcode::GoAway, w)
}

pub(crate) fn decode_goaway_body(body: &[u8]) -> Result<ErrorReply, DecodeError> {
    let mut r = Reader::new(body);
    let status = r.u16("status")?;
    if status == STATUS_OK {
        return Err(DecodeError::InvalidValue {
            field: "status",
            value: STATUS_OK.into(),
        });
    }
    let error = decode_error(status, Opcode::GoAway, &mut r)?;
    r.finish()?;
    Ok(error)
}
