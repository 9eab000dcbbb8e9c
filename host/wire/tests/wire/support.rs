//! What the integration tests share: strategies for every message, and a decoding harness that
//! feeds bytes in given pieces and gathers what comes out.

use proptest::collection::vec;
use proptest::prelude::*;
use tasklet_wire::*;

/// A decoded event with its data owned, and consecutive data of one message merged: what a
/// stream *means*, whatever pieces its bytes were fed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owned {
    Request(RequestId, Request),
    Reply(RequestId, Reply),
    GoAway(ErrorReply),
    Data(RequestId, Opcode, Vec<u8>),
}

/// Feeds `input` to `decoder` in pieces of the sizes in `cuts` (cycled; 0 is taken as 1) and
/// gathers the events, stopping at the first error. Bounded: each call uses at least one byte.
pub fn decode_in_pieces(
    decoder: &mut Decoder,
    input: &[u8],
    cuts: &[usize],
) -> (Vec<Owned>, Result<(), DecodeError>) {
    let mut events = Vec::new();
    let mut rest = input;
    let mut cut = cuts.iter().copied().cycle();
    while !rest.is_empty() {
        let size = cut.next().unwrap_or(1).max(1).min(rest.len());
        let (mut piece, after) = rest.split_at(size);
        rest = after;
        while !piece.is_empty() {
            match decoder.decode(piece) {
                Ok((used, event)) => {
                    assert!(
                        used > 0 && used <= piece.len(),
                        "decode used {used} of {}",
                        piece.len()
                    );
                    piece = &piece[used..];
                    if let Some(event) = event {
                        push(&mut events, event);
                    }
                }
                Err(err) => return (events, Err(err)),
            }
        }
    }
    (events, decoder.finish())
}

pub fn decode_whole(direction: Direction, input: &[u8]) -> (Vec<Owned>, Result<(), DecodeError>) {
    let mut decoder = Decoder::new(direction, DecoderConfig::default());
    decode_in_pieces(&mut decoder, input, &[usize::MAX])
}

fn push(events: &mut Vec<Owned>, event: Event) {
    match event {
        Event::Request {
            request_id,
            request,
        } => events.push(Owned::Request(request_id, request)),
        Event::Reply { request_id, reply } => events.push(Owned::Reply(request_id, reply)),
        Event::GoAway(error) => events.push(Owned::GoAway(error)),
        Event::Data {
            request_id,
            opcode,
            bytes,
            ..
        } => {
            if let Some(Owned::Data(id, op, data)) = events.last_mut() {
                if *id == request_id && *op == opcode {
                    data.extend_from_slice(bytes);
                    return;
                }
            }
            events.push(Owned::Data(request_id, opcode, bytes.to_vec()));
        }
    }
}

/// The events a stream of these messages must decode to.
pub fn expected_requests(items: &[(RequestId, Request, Vec<u8>)]) -> Vec<Owned> {
    let mut events = Vec::new();
    for (id, request, data) in items {
        events.push(Owned::Request(*id, request.clone()));
        if !data.is_empty() {
            events.push(Owned::Data(*id, request.opcode(), data.clone()));
        }
    }
    events
}

pub fn expected_replies(items: &[(RequestId, Reply, Vec<u8>)]) -> Vec<Owned> {
    let mut events = Vec::new();
    for (id, reply, data) in items {
        events.push(Owned::Reply(*id, reply.clone()));
        if !data.is_empty() {
            events.push(Owned::Data(*id, reply.opcode(), data.clone()));
        }
    }
    events
}

/// Encodes a message's data in pieces of the sizes in `cuts` (each piece one or more frames).
pub fn encode_data(encoder: Option<DataEncoder>, data: &[u8], cuts: &[usize], out: &mut Vec<u8>) {
    let Some(mut encoder) = encoder else {
        assert!(data.is_empty(), "no encoder for {} bytes", data.len());
        return;
    };
    let mut cut = cuts.iter().copied().cycle();
    let mut rest = data;
    while !rest.is_empty() {
        let size = cut.next().unwrap_or(1).max(1).min(rest.len());
        let (piece, after) = rest.split_at(size);
        encoder.encode(piece, out).unwrap();
        rest = after;
    }
    assert!(encoder.is_done());
}

// ---- strategies ----

pub fn text(max_chars: usize) -> impl Strategy<Value = String> {
    vec(any::<char>(), 0..=max_chars).prop_map(|chars| chars.into_iter().collect())
}

pub fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..=max)
}

fn dims() -> impl Strategy<Value = [u32; 3]> {
    any::<[u32; 3]>()
}

pub fn digest() -> impl Strategy<Value = Digest> {
    any::<[u8; 32]>().prop_map(Digest)
}

pub fn kernel_arg() -> impl Strategy<Value = KernelArg> {
    prop_oneof![
        (any::<u64>(), any::<u64>()).prop_map(|(b, offset)| KernelArg::Buffer {
            buffer: BufferId(b),
            offset
        }),
        any::<i32>().prop_map(KernelArg::I32),
        any::<u32>().prop_map(KernelArg::U32),
        any::<i64>().prop_map(KernelArg::I64),
        any::<u64>().prop_map(KernelArg::U64),
        any::<u32>().prop_map(|bits| KernelArg::F32(f32::from_bits(bits))),
        any::<u64>().prop_map(|bits| KernelArg::F64(f64::from_bits(bits))),
        bytes(64).prop_map(KernelArg::Bytes),
        (
            bytes(64),
            proptest::collection::vec(
                (any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(at, b, offset)| {
                    Relocation {
                        at,
                        buffer: BufferId(b),
                        offset,
                    }
                }),
                0..4
            )
        )
            .prop_map(|(bytes, relocations)| KernelArg::Relocated { bytes, relocations }),
    ]
}

pub fn loaded_module() -> impl Strategy<Value = LoadedModule> {
    let param = (
        text(16),
        any::<u32>(),
        any::<u32>(),
        proptest::option::of(text(8)),
        any::<bool>(),
    )
        .prop_map(|(name, size, align, ptx_type, pointer)| KernelParam {
            name,
            size,
            align,
            ptx_type,
            pointer,
        });
    let kernel = (text(24), vec(param, 0..6)).prop_map(|(name, params)| Kernel { name, params });
    (any::<u64>(), vec(kernel, 0..5)).prop_map(|(m, kernels)| LoadedModule {
        module: ModuleId(m),
        kernels,
    })
}

pub fn device() -> impl Strategy<Value = Device> {
    (
        any::<u32>(),
        text(24),
        text(6),
        text(40),
        any::<u64>(),
        any::<u64>(),
        any::<(u32, u32)>(),
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(
            |(
                index,
                name,
                backend,
                uuid,
                total_memory,
                free_memory,
                compute_capability,
                driver_version,
                leases,
            )| Device {
                index,
                name,
                backend,
                uuid,
                total_memory,
                free_memory,
                compute_capability,
                driver_version,
                leases,
            },
        )
}

pub fn grant() -> impl Strategy<Value = Grant> {
    (
        any::<u64>(),
        any::<u64>(),
        any::<u32>(),
        any::<u64>(),
        0..=rights::ALL,
    )
        .prop_map(
            |(memory, max_vram, max_leases, max_lease_ms, rights)| Grant {
                memory,
                max_vram,
                max_leases,
                max_lease_ms,
                rights,
            },
        )
}

fn lease() -> impl Strategy<Value = LeaseId> {
    any::<u64>().prop_map(LeaseId)
}

fn session() -> impl Strategy<Value = SessionId> {
    any::<u64>().prop_map(SessionId)
}

fn buffer() -> impl Strategy<Value = BufferId> {
    any::<u64>().prop_map(BufferId)
}

/// Every request kind, with streamed lengths left at 0 (see [`request_with_data`]).
pub fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (any::<u8>(), any::<u8>(), text(32)).prop_map(|(min_version, max_version, agent)| {
            Request::Hello {
                min_version,
                max_version,
                agent,
            }
        }),
        grant().prop_map(Request::Grant),
        Just(Request::GetInventory),
        (
            any::<u64>(),
            any::<u32>(),
            proptest::option::of(any::<u32>()),
            proptest::option::of(text(24)),
            proptest::option::of(text(24)),
            proptest::option::of((any::<u32>(), any::<u32>())),
            proptest::option::of(any::<u64>()),
        )
            .prop_map(|(min_bytes, seconds, device, uuid, model, cc, total)| {
                Request::LeaseAlloc {
                    min_bytes,
                    seconds,
                    device,
                    requires: LeaseRequirements {
                        uuid,
                        model,
                        min_compute_capability: cc,
                        min_total_memory: total,
                    },
                }
            }),
        lease().prop_map(|lease| Request::MemFree { lease }),
        (lease(), any::<u32>()).prop_map(|(lease, seconds)| Request::LeaseRenew { lease, seconds }),
        lease().prop_map(|lease| Request::LeaseInfo { lease }),
        (
            any::<u64>(),
            any::<u32>(),
            proptest::option::of(any::<u32>()),
            proptest::option::of(text(24)),
            proptest::option::of((any::<u32>(), any::<u32>())),
            0..=limits::MAX_GROUP_LEASES as u32,
        )
            .prop_map(|(min_bytes, seconds, device, model, cc, count)| {
                Request::LeaseAllocGroup(LeaseGroup {
                    min_bytes,
                    seconds,
                    device,
                    requires: LeaseRequirements {
                        uuid: None,
                        model,
                        min_compute_capability: cc,
                        min_total_memory: None,
                    },
                    count,
                })
            }),
        (
            lease(),
            bytes(256),
            text(24),
            dims(),
            dims(),
            bytes(64),
            any::<u64>(),
            any::<u64>(),
            bytes(64)
        )
            .prop_map(
                |(lease, ptx, kernel, grid, block, args, output_size, output_offset, input)| {
                    Request::GpuSubmit(GpuSubmit {
                        lease,
                        ptx,
                        kernel,
                        grid,
                        block,
                        args,
                        output_size,
                        output_offset,
                        input,
                    })
                }
            ),
        (session(), any::<u64>()).prop_map(|(session, bytes)| Request::MemAlloc { session, bytes }),
        (session(), buffer(), any::<u64>()).prop_map(|(session, buffer, offset)| {
            Request::MemWrite {
                session,
                buffer,
                offset,
                len: 0,
            }
        }),
        (session(), bytes(256)).prop_map(|(session, ptx)| Request::ModuleLoad { session, ptx }),
        (
            session(),
            any::<u64>(),
            any::<u32>(),
            dims(),
            dims(),
            any::<u32>(),
            vec(kernel_arg(), 0..8)
        )
            .prop_map(
                |(session, module, kernel, grid, block, shared_mem_bytes, args)| {
                    Request::Launch(Launch {
                        session,
                        module: ModuleId(module),
                        kernel,
                        grid,
                        block,
                        shared_mem_bytes,
                        args,
                    })
                }
            ),
        (
            session(),
            any::<u64>(),
            any::<u32>(),
            dims(),
            vec(kernel_arg(), 0..4),
            vec((any::<u32>(), kernel_arg()), 0..6),
            vec(any::<u32>(), 0..6)
        )
            .prop_map(|(session, module, kernel, grid, args, changes, counts)| {
                Request::LaunchBurst(LaunchBurst {
                    session,
                    module: ModuleId(module),
                    kernel,
                    grid,
                    block: grid,
                    shared_mem_bytes: kernel,
                    args,
                    changes,
                    counts,
                })
            }),
        (
            session(),
            any::<u64>(),
            any::<u32>(),
            dims(),
            vec(kernel_arg(), 0..3),
            any::<u64>()
        )
            .prop_map(|(session, graph, n, grid, args, value)| {
                let args: Vec<GraphArg> = args
                    .into_iter()
                    .map(GraphArg::Arg)
                    .chain([GraphArg::Scalar(n)])
                    .collect();
                let op = match n % 9 {
                    0 => GraphOp::Create,
                    1 => GraphOp::Launch {
                        module: ModuleId(value),
                        kernel: n,
                        grid,
                        block: grid,
                        shared_mem_bytes: n,
                        args,
                    },
                    2 => GraphOp::Copy {
                        dst: BufferId(value),
                        dst_offset: graph,
                        src: BufferId(graph),
                        src_offset: value,
                        len: u64::from(n),
                    },
                    3 => GraphOp::Fill {
                        dst: BufferId(value),
                        offset: graph,
                        len: value,
                        value: n,
                    },
                    4 => GraphOp::Scalar { value },
                    5 => GraphOp::SetScalar { index: n, value },
                    6 => GraphOp::SetArgs { node: n, args },
                    7 => GraphOp::Replay { times: n },
                    _ => GraphOp::Drop,
                };
                Request::Graph(Graph { session, graph, op })
            }),
        (session(), 0u8..11, any::<u64>(), any::<u64>()).prop_map(|(session, tag, a, b)| {
            let op = match tag {
                0 => QueueOp::NewStream,
                1 => QueueOp::DropStream { stream: a },
                2 => QueueOp::CheckStream { stream: a },
                3 => QueueOp::Wait {
                    stream: a,
                    event: b,
                },
                4 => QueueOp::SyncStream { stream: a },
                5 => QueueOp::NewEvent,
                6 => QueueOp::DropEvent { event: a },
                7 => QueueOp::Record {
                    event: a,
                    stream: b,
                },
                8 => QueueOp::Query { event: a },
                9 => QueueOp::SyncEvent { event: a },
                _ => QueueOp::Elapsed { start: a, end: b },
            };
            Request::QueueOp(Queue { session, op })
        }),
        (any::<u64>(), session(), buffer(), any::<u64>()).prop_map(
            |(stream, session, buffer, offset)| Request::StreamWrite {
                stream,
                session,
                buffer,
                offset,
                len: 0,
            }
        ),
        (
            any::<u64>(),
            session(),
            any::<u64>(),
            any::<u32>(),
            dims(),
            vec(kernel_arg(), 0..4)
        )
            .prop_map(|(stream, session, module, kernel, grid, args)| {
                Request::StreamLaunch {
                    stream,
                    launch: Launch {
                        session,
                        module: ModuleId(module),
                        kernel,
                        grid,
                        block: grid,
                        shared_mem_bytes: kernel,
                        args,
                    },
                }
            }),
        (
            any::<u64>(),
            session(),
            buffer(),
            any::<u64>(),
            any::<u64>()
        )
            .prop_map(
                |(stream, session, buffer, offset, len)| Request::StreamRead {
                    stream,
                    session,
                    buffer,
                    offset,
                    len,
                }
            ),
        session().prop_map(|session| Request::Sync { session }),
        (session(), buffer(), any::<u64>(), any::<u64>()).prop_map(
            |(session, buffer, offset, len)| Request::MemRead {
                session,
                buffer,
                offset,
                len
            }
        ),
        (session(), buffer()).prop_map(|(session, buffer)| Request::Free { session, buffer }),
        lease().prop_map(|lease| Request::SessionOpen { lease }),
        session().prop_map(|session| Request::SessionClose { session }),
        (
            session(),
            buffer(),
            any::<u64>(),
            buffer(),
            any::<u64>(),
            any::<u64>()
        )
            .prop_map(|(session, dst, dst_offset, src, src_offset, len)| {
                Request::MemCopy {
                    session,
                    dst,
                    dst_offset,
                    src,
                    src_offset,
                    len,
                }
            }),
        (
            (session(), buffer(), any::<u64>()),
            (session(), buffer(), any::<u64>()),
            any::<u64>()
        )
            .prop_map(
                |((dst_session, dst, dst_offset), (src_session, src, src_offset), len)| {
                    Request::MemCopyBetween {
                        dst_session,
                        dst,
                        dst_offset,
                        src_session,
                        src,
                        src_offset,
                        len,
                    }
                }
            ),
        (session(), text(200), vec(text(16), 0..6)).prop_map(|(session, source, options)| {
            Request::ModuleLoadSource {
                session,
                source,
                options,
            }
        }),
        (session(), any::<u64>()).prop_map(|(session, module)| Request::ModuleUnload {
            session,
            module: ModuleId(module)
        }),
        bytes(128).prop_map(|manifest| Request::DeployPush {
            manifest,
            component_len: 0
        }),
        digest().prop_map(|digest| Request::DeployHas { digest }),
        digest().prop_map(|digest| Request::DeployRun {
            digest,
            input_len: 0
        }),
        (any::<u64>(), 1..=tasklet_wire::limits::MAX_BRANCHES)
            .prop_map(|(fork, branches)| Request::Fork { fork, branches }),
        any::<u64>().prop_map(|fork| Request::Branch { fork }),
        any::<u64>().prop_map(|fork| Request::BranchEnd { fork }),
    ]
}

/// A request with data of the length it announces (empty for requests that stream nothing).
pub fn request_with_data() -> impl Strategy<Value = (Request, Vec<u8>)> {
    (request(), bytes(3000)).prop_map(|(mut request, data)| {
        let len = data.len() as u64;
        match &mut request {
            Request::MemWrite { len: l, .. } | Request::StreamWrite { len: l, .. } => *l = len,
            Request::DeployPush { component_len, .. } => *component_len = len,
            Request::DeployRun { input_len, .. } => *input_len = len,
            _ => return (request, Vec::new()),
        }
        (request, data)
    })
}

pub fn error_code() -> impl Strategy<Value = ErrorCode> {
    proptest::sample::select(ErrorCode::ALL.to_vec())
}

/// An error reply for a request of `opcode`: naming a failed pipelined op, or a cause, only where
/// allowed.
pub fn error_reply(opcode: Opcode) -> impl Strategy<Value = ErrorReply> {
    let failed = proptest::option::of(
        (
            any::<u32>(),
            prop_oneof![
                Just(Opcode::Launch),
                Just(Opcode::MemWrite),
                Just(Opcode::StreamLaunch),
                Just(Opcode::StreamWrite)
            ],
        )
            .prop_map(|(request_id, opcode)| FailedOp { request_id, opcode }),
    );
    let cause = proptest::option::of(error_code());
    (error_code(), text(200), failed, cause).prop_map(move |(code, message, failed_op, cause)| {
        ErrorReply {
            code,
            message,
            failed_op: failed_op.filter(|_| opcode.is_barrier()),
            cause: cause.filter(|_| opcode == Opcode::GpuSubmit),
        }
    })
}

/// Every reply kind, failures included, with streamed lengths left at 0 (see [`reply_with_data`]).
pub fn reply() -> impl Strategy<Value = Reply> {
    let answered: Vec<Opcode> = Opcode::ALL
        .into_iter()
        .filter(|op| op.has_reply())
        .collect();
    let failure = proptest::sample::select(answered).prop_flat_map(|opcode| {
        error_reply(opcode).prop_map(move |error| Reply::Error { opcode, error })
    });
    prop_oneof![
        (any::<u8>(), text(32), any::<u64>()).prop_map(|(version, node, max_stream_bytes)| {
            Reply::Hello {
                version,
                node,
                max_stream_bytes,
            }
        }),
        grant().prop_map(Reply::Grant),
        (vec(device(), 0..4), any::<bool>())
            .prop_map(|(devices, draining)| Reply::Inventory { devices, draining }),
        (
            lease(),
            any::<u64>(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>()
        )
            .prop_map(|(lease, generation, device, granted_bytes, ttl_ms)| {
                Reply::LeaseAlloc {
                    lease,
                    generation,
                    device,
                    granted_bytes,
                    ttl_ms,
                }
            }),
        Just(Reply::MemFree),
        (any::<u64>(), any::<u64>())
            .prop_map(|(generation, ttl_ms)| Reply::LeaseRenew { generation, ttl_ms }),
        (
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>()
        )
            .prop_map(
                |(device, generation, granted_bytes, used_bytes, remaining_ms)| Reply::LeaseInfo {
                    device,
                    generation,
                    granted_bytes,
                    used_bytes,
                    remaining_ms
                }
            ),
        vec(
            (lease(), any::<u32>(), any::<u64>(), any::<u64>()).prop_map(
                |(lease, device, granted_bytes, ttl_ms)| GroupLease {
                    lease,
                    device,
                    granted_bytes,
                    ttl_ms,
                }
            ),
            0..4
        )
        .prop_map(|leases| Reply::LeaseAllocGroup { leases }),
        Just(Reply::GpuSubmit { output_len: 0 }),
        buffer().prop_map(|buffer| Reply::MemAlloc { buffer }),
        loaded_module().prop_map(Reply::ModuleLoad),
        Just(Reply::Sync),
        Just(Reply::MemRead { len: 0 }),
        Just(Reply::StreamRead { len: 0 }),
        Just(Reply::Free),
        session().prop_map(|session| Reply::SessionOpen { session }),
        Just(Reply::SessionClose),
        Just(Reply::MemCopy),
        Just(Reply::MemCopyBetween),
        Just(Reply::LaunchBurst),
        any::<u64>().prop_map(|value| Reply::Graph { value }),
        prop_oneof![
            Just(QueueAnswer::Done),
            any::<u64>().prop_map(QueueAnswer::Stream),
            any::<u64>().prop_map(QueueAnswer::Event),
            any::<bool>().prop_map(QueueAnswer::Ready),
            any::<u64>().prop_map(QueueAnswer::ElapsedNs),
        ]
        .prop_map(Reply::QueueOp),
        loaded_module().prop_map(Reply::ModuleLoadSource),
        Just(Reply::ModuleUnload),
        (digest(), any::<bool>()).prop_map(|(digest, already_present)| Reply::DeployPush {
            digest,
            already_present
        }),
        any::<bool>().prop_map(|present| Reply::DeployHas { present }),
        (any::<u128>(), any::<i32>(), any::<u64>()).prop_map(
            |(run_id, exit_status, elapsed_us)| {
                Reply::DeployRun {
                    run_id,
                    exit_status,
                    elapsed_us,
                    output_len: 0,
                }
            }
        ),
        failure,
    ]
}

/// A reply with data of the length it announces (empty for replies that stream nothing).
pub fn reply_with_data() -> impl Strategy<Value = (Reply, Vec<u8>)> {
    (reply(), bytes(3000)).prop_map(|(mut reply, data)| {
        let len = data.len() as u64;
        match &mut reply {
            Reply::GpuSubmit { output_len } | Reply::DeployRun { output_len, .. } => {
                *output_len = len
            }
            Reply::MemRead { len: l } | Reply::StreamRead { len: l } => *l = len,
            _ => return (reply, Vec::new()),
        }
        (reply, data)
    })
}

/// Piece sizes for cutting a byte stream: mostly small, some large.
pub fn cuts() -> impl Strategy<Value = Vec<usize>> {
    vec(prop_oneof![4 => 1usize..16, 1 => 16usize..4096], 1..32)
}
