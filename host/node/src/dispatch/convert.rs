//! Between the wire's types and the host's: ids, grants, kernel arguments.

use std::time::Duration;
use tasklet_runtime::config::{GpuRequest, Grant, Limits, Right, Rights};
use tasklet_runtime::gpu;
use tasklet_wire as wire;
use tasklet_wire::rights;

pub(super) fn lease(id: wire::LeaseId) -> gpu::LeaseId {
    gpu::LeaseId(id.0)
}

pub(super) fn session(id: wire::SessionId) -> gpu::SessionId {
    gpu::SessionId(id.0)
}

pub(super) fn buffer(id: wire::BufferId) -> gpu::BufferId {
    gpu::BufferId(id.0)
}

pub(super) fn module(id: wire::ModuleId) -> gpu::ModuleId {
    gpu::ModuleId(id.0)
}

/// A stream id of STREAM_LAUNCH, STREAM_WRITE or STREAM_READ (the service checks it is the
/// session's, as QUEUE_OP's are).
pub(super) fn stream(id: u64) -> gpu::StreamId {
    gpu::StreamId(id)
}

/// What LEASE_ALLOC or LEASE_ALLOC_GROUP requires of a device, as the host places by it (the
/// index travels in the request's own `device`).
pub(super) fn requirements(r: wire::LeaseRequirements) -> tasklet_runtime::DeviceRequirement {
    tasklet_runtime::DeviceRequirement {
        index: None,
        uuid: r.uuid,
        model: r.model,
        min_compute_capability: r.min_compute_capability,
        min_total_memory: r.min_total_memory,
    }
}

/// QUEUE_OP's operation as the GPU service takes it.
pub(super) fn queue_op(op: wire::QueueOp) -> gpu::QueueOp {
    use gpu::{EventId as E, QueueOp as Q, StreamId as S};
    match op {
        wire::QueueOp::NewStream => Q::NewStream,
        wire::QueueOp::DropStream { stream } => Q::DropStream(S(stream)),
        wire::QueueOp::CheckStream { stream } => Q::CheckStream(S(stream)),
        wire::QueueOp::Wait { stream, event } => Q::Wait {
            stream: S(stream),
            event: E(event),
        },
        wire::QueueOp::SyncStream { stream } => Q::SyncStream(S(stream)),
        wire::QueueOp::NewEvent => Q::NewEvent,
        wire::QueueOp::DropEvent { event } => Q::DropEvent(E(event)),
        wire::QueueOp::Record { event, stream } => Q::Record {
            event: E(event),
            stream: S(stream),
        },
        wire::QueueOp::Query { event } => Q::Query(E(event)),
        wire::QueueOp::SyncEvent { event } => Q::SyncEvent(E(event)),
        wire::QueueOp::Elapsed { start, end } => Q::Elapsed {
            start: E(start),
            end: E(end),
        },
    }
}

/// The GPU service's answer to a queue op as QUEUE_OP's reply says it (nanoseconds past
/// `u64::MAX`, some 584 years, are said as `u64::MAX`).
pub(super) fn queue_answer(reply: gpu::QueueReply) -> wire::QueueAnswer {
    match reply {
        gpu::QueueReply::Done => wire::QueueAnswer::Done,
        gpu::QueueReply::Stream(id) => wire::QueueAnswer::Stream(id.0),
        gpu::QueueReply::Event(id) => wire::QueueAnswer::Event(id.0),
        gpu::QueueReply::Ready(ready) => wire::QueueAnswer::Ready(ready),
        gpu::QueueReply::Elapsed(d) => {
            wire::QueueAnswer::ElapsedNs(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        }
    }
}

const RIGHT_BITS: [(Right, u8); 5] = [
    (Right::Alloc, rights::ALLOC),
    (Right::Write, rights::WRITE),
    (Right::Read, rights::READ),
    (Right::Load, rights::LOAD),
    (Right::Launch, rights::LAUNCH),
];

pub(super) fn to_wire_grant(grant: &Grant) -> wire::Grant {
    wire::Grant {
        memory: grant.limits.memory,
        max_vram: grant.gpu.max_vram,
        max_leases: grant.gpu.max_leases,
        max_lease_ms: u64::try_from(grant.gpu.max_lease_time.as_millis()).unwrap_or(u64::MAX),
        rights: RIGHT_BITS
            .iter()
            .filter(|(right, _)| grant.gpu.rights.contains(*right))
            .fold(0, |bits, (_, bit)| bits | bit),
    }
}

/// What a GRANT asks for, as a manifest would: its wall time is not the node's concern (the
/// tasklet runs on the client), so it asks for none beyond what the ceiling allows.
pub(super) fn requested(grant: &wire::Grant, ceiling: &Grant) -> (Limits, GpuRequest) {
    let limits = Limits {
        memory: grant.memory,
        wall_time: ceiling.limits.wall_time,
    };
    let gpu = GpuRequest {
        max_vram: grant.max_vram,
        max_leases: grant.max_leases,
        max_lease_time: Duration::from_millis(grant.max_lease_ms),
        // The wire's GRANT carries neither the `persistent` right nor a count for it yet.
        max_persistent: 0,
        rights: RIGHT_BITS
            .iter()
            .filter(|(_, bit)| grant.rights & bit != 0)
            .map(|(right, _)| *right)
            .collect::<Rights>(),
    };
    (limits, gpu)
}

/// The buffer relocations of a LAUNCH's relocated arguments, all in one list in argument order,
/// for [`kernel_args`] to borrow.
pub(super) fn relocations(args: &[wire::KernelArg]) -> Vec<gpu::Relocation> {
    args.iter()
        .flat_map(|arg| match arg {
            wire::KernelArg::Relocated { relocations, .. } => relocations.as_slice(),
            _ => &[],
        })
        .map(|r| gpu::Relocation {
            at: r.at,
            buffer: buffer(r.buffer),
            offset: r.offset,
        })
        .collect()
}

/// A LAUNCH's typed arguments as the host takes them, borrowing by-value bytes, and each
/// relocated argument's share of `relocations` (what [`relocations`] made of the same `args`).
pub(super) fn kernel_args<'a>(
    args: &'a [wire::KernelArg],
    relocations: &'a [gpu::Relocation],
) -> Vec<gpu::KernelArg<'a>> {
    let mut rest = relocations;
    args.iter()
        .map(|arg| match arg {
            wire::KernelArg::Buffer { buffer: b, offset } => gpu::KernelArg::Buffer {
                buffer: buffer(*b),
                offset: *offset,
            },
            wire::KernelArg::I32(v) => gpu::KernelArg::I32(*v),
            wire::KernelArg::U32(v) => gpu::KernelArg::U32(*v),
            wire::KernelArg::I64(v) => gpu::KernelArg::I64(*v),
            wire::KernelArg::U64(v) => gpu::KernelArg::U64(*v),
            wire::KernelArg::F32(v) => gpu::KernelArg::F32(*v),
            wire::KernelArg::F64(v) => gpu::KernelArg::F64(*v),
            wire::KernelArg::Bytes(v) => gpu::KernelArg::Bytes(v),
            wire::KernelArg::Relocated { bytes, relocations } => {
                let (own, after) = rest.split_at(relocations.len().min(rest.len()));
                rest = after;
                gpu::KernelArg::Relocated {
                    bytes,
                    relocations: own,
                }
            }
        })
        .collect()
}

/// A GRAPH launch's kernel arguments (its device scalars left out), and their relocations, for
/// [`graph_args`] to borrow.
pub(super) fn graph_arg_values(
    args: &[wire::GraphArg],
) -> (Vec<wire::KernelArg>, Vec<gpu::Relocation>) {
    let values: Vec<wire::KernelArg> = args
        .iter()
        .filter_map(|a| match a {
            wire::GraphArg::Arg(arg) => Some(arg.clone()),
            wire::GraphArg::Scalar(_) => None,
        })
        .collect();
    let relocations = relocations(&values);
    (values, relocations)
}

/// A GRAPH launch's arguments as the host takes them: its kernel arguments (`values`, from
/// [`graph_arg_values`]) in their places among its device scalars.
pub(super) fn graph_args<'a>(
    args: &[wire::GraphArg],
    values: &'a [wire::KernelArg],
    relocations: &'a [gpu::Relocation],
) -> Vec<gpu::GraphArg<'a>> {
    let mut lifted = kernel_args(values, relocations).into_iter();
    args.iter()
        .filter_map(|a| match a {
            wire::GraphArg::Arg(_) => lifted.next().map(gpu::GraphArg::Arg),
            wire::GraphArg::Scalar(index) => Some(gpu::GraphArg::Scalar(*index)),
        })
        .collect()
}

/// The kernels of a loaded module for MODULE_LOAD's reply, in the order LAUNCH indexes them:
/// each one's parameters as the worker that loaded the module read them (`signatures`: places,
/// sizes and which are pointers, for PTX and CUDA C modules alike), with their PTX types where
/// the module's PTX text is at hand.
pub(super) fn kernel_list(
    ptx: Option<&str>,
    signatures: Vec<gpu::KernelSignature>,
) -> Vec<wire::Kernel> {
    let ptx_types = ptx.and_then(|ptx| {
        let infos = tasklet_ptx::entry_signatures(ptx).ok()?;
        let types = tasklet_ptx::entry_param_types(ptx).ok()?;
        Some((infos, types))
    });
    let types_of = |name: &str| {
        let (infos, types) = ptx_types.as_ref()?;
        types.get(infos.iter().position(|k| k.name == name)?)
    };
    signatures
        .into_iter()
        .map(|k| {
            let types = types_of(&k.name);
            let params = k
                .params
                .into_iter()
                .enumerate()
                .map(|(i, p)| wire::KernelParam {
                    ptx_type: types
                        .and_then(|t| t.get(i))
                        .filter(|t| t.len() <= tasklet_wire::limits::MAX_PTX_TYPE)
                        .cloned(),
                    pointer: p.kind == gpu::ParamKind::Pointer,
                    name: p.name,
                    size: p.size,
                    align: p.align,
                })
                .collect();
            wire::Kernel {
                name: k.name,
                params,
            }
        })
        .collect()
}
