//! Launches, writes and reads on a stream through the node (STREAM_LAUNCH, STREAM_WRITE,
//! STREAM_READ): the bytes a local run gives, in the stream's order, for writes and reads of
//! several pieces too; a stream that is not the session's refused as a local run refuses it,
//! by the client and, for frames that bypass it, by the node; a malformed stream frame closes
//! only its connection.
//!
//! The emulator runs one stream's copies after every kernel (streams overlap only on the cuda
//! backend), so these check order and bytes, not overlap.

use crate::support::*;
use tasklet_remote::RemoteGpu;
use tasklet_runtime::gpu::{
    BufferId, GpuService, KernelArg, KernelRef, LaunchConfig, LeaseRequest, LocalGpu, QueueOp,
    QueueReply, SessionId, StreamId,
};
use tasklet_runtime::{GpuError, Manifest};
use tasklet_wire::{
    encode_request, ErrorCode, Launch, ModuleId, Opcode, Reply, Request, RequestId,
};

const IOTA_PTX: &str = include_str!("../../../../kernels/iota.ptx");

/// More than two of the node's 4 MiB write and read pieces, and not a whole number of them.
const BIG: u64 = (9 << 20) + 3;

fn request() -> LeaseRequest {
    LeaseRequest {
        min_vram: 16 << 20,
        secs: 60,
        device: None,
    }
}

fn new_stream(gpu: &mut dyn GpuService, session: SessionId) -> Result<StreamId, String> {
    match gpu.queue_op(session, QueueOp::NewStream) {
        Ok(QueueReply::Stream(id)) => Ok(id),
        other => Err(format!("a new stream: {other:?}")),
    }
}

fn iota(out: BufferId, n: u32) -> [KernelArg<'static>; 2] {
    [
        KernelArg::Buffer {
            buffer: out,
            offset: 0,
        },
        KernelArg::U32(n),
    ]
}

const ONE_BLOCK: LaunchConfig = LaunchConfig {
    grid: [1, 1, 1],
    block: [256, 1, 1],
    shared_mem_bytes: 0,
};

/// Writes, launches and reads on two streams ordered by an event, and what each read returned.
fn on_two_streams(gpu: &mut dyn GpuService) -> Result<Vec<Vec<u8>>, GpuError> {
    let lease = gpu.lease_acquire(request())?;
    let session = gpu.session_open(lease)?;
    let a = new_stream(gpu, session).map_err(GpuError::InvalidArgument)?;
    let b = new_stream(gpu, session).map_err(GpuError::InvalidArgument)?;
    let event = match gpu.queue_op(session, QueueOp::NewEvent)? {
        QueueReply::Event(id) => id,
        other => return Err(GpuError::InvalidArgument(format!("a new event: {other:?}"))),
    };
    let module = gpu.module_load(session, IOTA_PTX)?;
    let big = gpu.mem_alloc(session, BIG)?;
    let out = gpu.mem_alloc(session, 4 * 256)?;
    let data: Vec<u8> = (0..BIG).map(|i| (i * 31 + i / 4099) as u8).collect();

    // On A: the big write, then the kernel; B waits for both through the event.
    gpu.stream_write(session, a, big, 0, &data)?;
    gpu.stream_launch(
        session,
        a,
        module,
        KernelRef::Named("iota"),
        &ONE_BLOCK,
        &iota(out, 256),
    )?;
    gpu.queue_op(session, QueueOp::Record { event, stream: a })?;
    gpu.queue_op(session, QueueOp::Wait { stream: b, event })?;
    let mut reads = vec![gpu.stream_read(session, b, out, 0, 4 * 256)?];
    reads.push(gpu.stream_read(session, b, big, 0, BIG)?);
    // A write on B, then a read on B after it, sees it; a read on A's stream after a sync too.
    gpu.stream_write(session, b, out, 16, &[9; 8])?;
    reads.push(gpu.stream_read(session, b, out, 0, 32)?);
    gpu.stream_write(session, a, big, BIG - 5, b"tail!")?;
    gpu.queue_op(session, QueueOp::SyncStream(a))?;
    reads.push(gpu.stream_read(session, a, big, BIG - 16, 16)?);
    reads.push(gpu.mem_read(session, big, 0, 64)?);
    gpu.lease_drop(lease);
    Ok(reads)
}

pub fn writes_launches_and_reads_on_streams_give_the_local_bytes() -> TestResult {
    let node = TestNode::with(Setup {
        metrics: true,
        ..Setup::default()
    });
    let host = local_host();
    let manifest = Manifest::load(&tasklet("testing/probe")).map_err(|e| e.to_string())?;
    let mut local = LocalGpu::new(host.policy().grant(&manifest), host.leases().clone());
    let here = on_two_streams(&mut local).map_err(|e| format!("local: {e}"))?;
    let mut remote = RemoteGpu::new(node.client("dev"));
    let there = on_two_streams(&mut remote).map_err(|e| format!("remote: {e}"))?;
    check(here == there, || {
        let sizes = |r: &[Vec<u8>]| r.iter().map(Vec::len).collect::<Vec<_>>();
        format!(
            "the reads differ: local sizes {:?}, remote sizes {:?}",
            sizes(&here),
            sizes(&there)
        )
    })?;
    // And they are what was asked for: the kernel's values, the big write, the later writes.
    let values: Vec<u32> = there[0]
        .chunks(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    check(values == (1..=256).collect::<Vec<u32>>(), || {
        format!("iota on stream A read on B: {:?}", &values[..8])
    })?;
    let data: Vec<u8> = (0..BIG).map(|i| (i * 31 + i / 4099) as u8).collect();
    check(there[1] == data, || {
        "the big write came back changed".into()
    })?;
    check(
        there[2][16..24] == [9; 8] && there[2][..4] == 1u32.to_le_bytes(),
        || format!("a write then a read on B: {:?}", there[2]),
    )?;
    check(there[3][11..] == *b"tail!", || format!("{:?}", there[3]))?;
    check(there[4] == data[..64], || {
        "a session read after the streams".into()
    })?;
    // They went as the stream ops, not as the session's ops after a check: three writes, one
    // launch and four reads on streams, one read of the session, no MEM_WRITE or LAUNCH.
    let (samples, text) = crate::metrics::scrape(&node)?;
    let count = |op: &str| {
        let series = format!("tasklet_requests_total{{op=\"{op}\",tenant=\"dev\"}}");
        samples.get(&series).copied().unwrap_or(0.0)
    };
    for (op, wanted) in [
        ("STREAM_WRITE", 3.0),
        ("STREAM_LAUNCH", 1.0),
        ("STREAM_READ", 4.0),
        ("MEM_READ", 1.0),
        ("MEM_WRITE", 0.0),
        ("LAUNCH", 0.0),
    ] {
        check(count(op) == wanted, || {
            format!(
                "{op}: {} requests, not {wanted}; the scrape:\n{text}",
                count(op)
            )
        })?;
    }
    drop(remote);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

const FAULTS_PTX: &str = include_str!("../../../../kernels/faults.ptx");

/// On a GPU, a copy on one stream of a remote session runs beside a kernel on another, as it
/// does locally: while `spin_forever` runs on one stream (it ends only at the node's kernel
/// deadline, 4 s here), 2 MiB is written and read back 16 times on another, each read equal to
/// what was written, all well before the deadline (a copy that waited for the kernel would wait
/// for the deadline and fail with it). The kernel's stream then meets the deadline. The
/// emulator keeps every stream in one order: skipped there.
pub fn on_a_gpu_a_remote_copy_on_one_stream_runs_beside_a_kernel_on_another() -> TestResult {
    const PIECE: usize = 2 << 20;
    const ROUNDS: usize = 16;
    let mut policy = policy();
    policy.workers.kernel_deadline = std::time::Duration::from_secs(4);
    if backend_for(&policy) != tasklet_runtime::BackendKind::Cuda {
        println!("skipped: no CUDA device: streams overlap only on the cuda backend");
        return Ok(());
    }
    let node = TestNode::with(Setup {
        policy,
        ..Setup::default()
    });
    let mut gpu = RemoteGpu::new(node.client("dev"));
    let lease = gpu.lease_acquire(request())?;
    let session = gpu.session_open(lease)?;
    let copies = new_stream(&mut gpu, session)?;
    let compute = new_stream(&mut gpu, session)?;
    let faults = gpu.module_load(session, FAULTS_PTX)?;
    let flag = gpu.mem_alloc(session, 64)?;
    let data = gpu.mem_alloc(session, PIECE as u64)?;
    let pattern: Vec<u8> = (0..PIECE).map(|i| (i % 251) as u8).collect();
    gpu.sync(session)?;
    let one = LaunchConfig {
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_mem_bytes: 0,
    };
    let arg = [KernelArg::Buffer {
        buffer: flag,
        offset: 0,
    }];
    let started = std::time::Instant::now();
    gpu.stream_launch(
        session,
        compute,
        faults,
        KernelRef::Named("spin_forever"),
        &one,
        &arg,
    )?;
    for round in 0..ROUNDS {
        gpu.stream_write(session, copies, data, 0, &pattern)
            .map_err(|e| format!("write {round} beside the kernel: {e}"))?;
        let back = gpu
            .stream_read(session, copies, data, 0, PIECE as u64)
            .map_err(|e| format!("read {round} beside the kernel: {e}"))?;
        check(back == pattern, || {
            format!("round {round} read back other bytes")
        })?;
    }
    let beside = started.elapsed();
    println!(
        "remote streams: {ROUNDS} x (2 MiB write + read) beside a spinning kernel in {beside:?} ({:.2} GB/s)",
        (2 * ROUNDS * PIECE) as f64 / beside.as_secs_f64() / 1e9
    );
    check(beside < std::time::Duration::from_secs(3), || {
        format!("the copies took {beside:?}: they waited for the kernel")
    })?;
    match gpu.queue_op(session, QueueOp::SyncStream(compute)) {
        Err(GpuError::DeadlineExceeded(_)) => {}
        other => {
            return Err(
                format!("the spinning kernel should meet its deadline, got {other:?}").into(),
            )
        }
    }
    gpu.lease_drop(lease);
    drop(gpu);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// `got` is refused `invalid-argument` with a message containing `says`.
fn invalid<T: std::fmt::Debug>(what: &str, got: Result<T, GpuError>, says: &str) -> TestResult {
    check(
        got.as_ref()
            .is_err_and(|e| e.name() == "invalid-argument" && e.message().contains(says)),
        || format!("{what}: {got:?}"),
    )
}

/// Each stream op naming another session's stream, another connection's, or a dropped one, is
/// refused at once in a local run's words; the session goes on.
pub fn a_stream_not_the_sessions_is_refused_for_each_stream_op() -> TestResult {
    let node = TestNode::start();
    let mut owner = RemoteGpu::new(node.client("dev"));
    let lease = owner.lease_acquire(request())?;
    let (s1, s2) = (owner.session_open(lease)?, owner.session_open(lease)?);
    let stream = new_stream(&mut owner, s1)?;
    let module = owner.module_load(s2, IOTA_PTX)?;
    let out = owner.mem_alloc(s2, 4 * 256)?;
    let mut other = RemoteGpu::new(node.client("team"));
    let theirs = other.lease_acquire(request())?;
    let session = other.session_open(theirs)?;
    let their_out = other.mem_alloc(session, 64)?;
    let dropped = new_stream(&mut owner, s2)?;
    owner.queue_op(s2, QueueOp::DropStream(dropped))?;

    type Op<'a> =
        Box<dyn Fn(&mut RemoteGpu, SessionId, StreamId, BufferId) -> Result<(), GpuError> + 'a>;
    let ops: [(&str, Op); 3] = [
        (
            "a launch",
            Box::new(|gpu, session, stream, buffer| {
                gpu.stream_launch(
                    session,
                    stream,
                    module,
                    KernelRef::Named("iota"),
                    &ONE_BLOCK,
                    &iota(buffer, 4),
                )
                .map(drop)
            }),
        ),
        (
            "a write",
            Box::new(|gpu, session, stream, buffer| {
                gpu.stream_write(session, stream, buffer, 0, &[1; 16])
            }),
        ),
        (
            "a read",
            Box::new(|gpu, session, stream, buffer| {
                gpu.stream_read(session, stream, buffer, 0, 16).map(drop)
            }),
        ),
    ];
    for (what, op) in &ops {
        invalid(
            &format!("{what} on another session's stream"),
            op(&mut owner, s2, stream, out),
            "belongs to another session",
        )?;
        invalid(
            &format!("{what} on a dropped stream"),
            op(&mut owner, s2, dropped, out),
            "or was dropped",
        )?;
        invalid(
            &format!("{what} on another connection's stream"),
            op(&mut other, session, stream, their_out),
            "belongs to another session",
        )?;
    }
    // A launch on the session's own stream that the node refuses (one argument too few) is
    // reported by the stream's next read, naming STREAM_LAUNCH; the session goes on.
    let own = new_stream(&mut owner, s2)?;
    owner.stream_launch(
        s2,
        own,
        module,
        KernelRef::Named("iota"),
        &ONE_BLOCK,
        &iota(out, 4)[..1],
    )?;
    let got = owner.stream_read(s2, own, out, 0, 16);
    invalid("a read after a refused launch", got, "STREAM_LAUNCH")?;
    owner.stream_read(s2, own, out, 0, 16)?;
    // The sessions go on, and the owner's stream is still its own.
    owner.sync(s2)?;
    other.sync(session)?;
    owner.queue_op(s1, QueueOp::CheckStream(stream))?;
    drop((owner, other));
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// Frames a client that skipped the check sends: the node refuses the stream itself. A
/// STREAM_WRITE or STREAM_LAUNCH on a foreign stream is reported by the session's next barrier,
/// naming it; a STREAM_READ is answered `INVALID_ARGUMENT` at once.
pub fn the_node_refuses_a_foreign_stream_in_frames_that_skip_the_check() -> TestResult {
    let node = TestNode::start();
    let mut raw = RawClient::connect(&node, "dev");
    raw.request(1, &hello())?;
    let lease = raw.lease(2, 1 << 20)?;
    let mut open = |id: RequestId| -> Result<tasklet_wire::SessionId, String> {
        match raw.request(id, &Request::SessionOpen { lease })? {
            (Reply::SessionOpen { session }, _) => Ok(session),
            other => Err(format!("session: {other:?}")),
        }
    };
    let (s1, s2) = (open(3)?, open(4)?);
    let stream = match raw.request(
        5,
        &Request::QueueOp(tasklet_wire::Queue {
            session: s1,
            op: tasklet_wire::QueueOp::NewStream,
        }),
    )? {
        (Reply::QueueOp(tasklet_wire::QueueAnswer::Stream(id)), _) => id,
        other => return Err(format!("a new stream: {other:?}").into()),
    };
    let buffer = match raw.request(
        6,
        &Request::MemAlloc {
            session: s2,
            bytes: 64,
        },
    )? {
        (Reply::MemAlloc { buffer }, _) => buffer,
        other => return Err(format!("alloc: {other:?}").into()),
    };
    let write = Request::StreamWrite {
        stream,
        session: s2,
        buffer,
        offset: 0,
        len: 4,
    };
    let launch = Request::StreamLaunch {
        stream,
        launch: Launch {
            session: s2,
            module: ModuleId(1),
            kernel: 0,
            grid: [1; 3],
            block: [1; 3],
            shared_mem_bytes: 0,
            args: Vec::new(),
        },
    };
    for (id, request, opcode) in [
        (7, write, Opcode::StreamWrite),
        (9, launch, Opcode::StreamLaunch),
    ] {
        let mut frames = Vec::new();
        if let Some(mut data) =
            encode_request(id, &request, &mut frames).map_err(|e| e.to_string())?
        {
            data.encode(b"abcd", &mut frames)
                .map_err(|e| e.to_string())?;
        }
        raw.send_bytes(&frames);
        match raw.request(id + 1, &Request::Sync { session: s2 })? {
            (Reply::Error { error, .. }, _) => check(
                error.code == ErrorCode::InvalidArgument
                    && error.message.contains("belongs to another session")
                    && error
                        .failed_op
                        .is_some_and(|op| op.request_id == id && op.opcode == opcode),
                || format!("{opcode}: the sync's report: {error:?}"),
            )?,
            other => return Err(format!("{opcode}: the sync was answered {other:?}").into()),
        }
    }
    let read = Request::StreamRead {
        stream,
        session: s2,
        buffer,
        offset: 0,
        len: 4,
    };
    match raw.request(11, &read)? {
        (Reply::Error { opcode, error }, _) => check(
            opcode == Opcode::StreamRead
                && error.code == ErrorCode::InvalidArgument
                && error.message.contains("belongs to another session")
                && error.failed_op.is_none(),
            || format!("the read's refusal: {error:?}"),
        )?,
        other => return Err(format!("a read on a foreign stream was answered {other:?}").into()),
    }
    // On its own session's stream the same frames are served.
    let read = Request::StreamRead {
        stream,
        session: s1,
        buffer,
        offset: 0,
        len: 4,
    };
    match raw.request(12, &read)? {
        (Reply::Error { error, .. }, _) => check(error.message.contains("buffer"), || {
            format!("another session's buffer: {error:?}")
        })?,
        other => return Err(format!("a read of another session's buffer: {other:?}").into()),
    }
    drop(raw);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// A frame of `opcode` with `body`, request id 2, at this version.
fn frame(opcode: Opcode, body: &[u8]) -> Vec<u8> {
    let mut bytes = vec![tasklet_wire::PROTOCOL_VERSION, 0];
    bytes.extend_from_slice(&(opcode as u16).to_be_bytes());
    bytes.extend_from_slice(&2u32.to_be_bytes());
    bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
    bytes.extend_from_slice(body);
    bytes
}

/// `count` u64 fields, 1 to `count`.
fn fields(count: u64) -> Vec<u8> {
    (1..=count).flat_map(u64::to_be_bytes).collect()
}

pub fn malformed_stream_ops_close_only_their_connection() -> TestResult {
    let node = TestNode::start();
    let mut bystander = RemoteGpu::new(node.client("dev"));
    let lease = bystander.lease_acquire(request())?;
    let session = bystander.session_open(lease)?;
    let stream = new_stream(&mut bystander, session)?;
    let buffer = bystander.mem_alloc(session, 64)?;
    let mut bad_arg = fields(3);
    bad_arg.extend_from_slice(&[0; 4 + 12 + 12 + 4]);
    bad_arg.extend_from_slice(&1u32.to_be_bytes());
    bad_arg.extend_from_slice(&[9; 17]);
    let mut long_read = fields(5);
    long_read.push(0);
    let mut huge_write = fields(4);
    huge_write.extend_from_slice(&u64::MAX.to_be_bytes());
    let cases = [
        (
            "a write cut inside its len",
            frame(Opcode::StreamWrite, &fields(4)),
            "inside field len",
        ),
        (
            "a write announcing more than the node takes",
            frame(Opcode::StreamWrite, &huge_write),
            "len",
        ),
        (
            "a launch with an unknown argument tag",
            frame(Opcode::StreamLaunch, &bad_arg),
            "args[].tag",
        ),
        (
            "a launch without its stream",
            frame(Opcode::StreamLaunch, &[0; 5]),
            "inside field stream",
        ),
        (
            "a read with a byte too many",
            frame(Opcode::StreamRead, &long_read),
            "after its last field",
        ),
    ];
    for (what, bytes, named) in cases {
        let mut raw = RawClient::connect(&node, "team");
        raw.request(1, &hello())
            .map_err(|e| format!("{what}: HELLO: {e}"))?;
        raw.send_bytes(&bytes);
        raw.closed_for_breaking_the_protocol(what, named)?;
        // The bystander's stream ops are served throughout.
        bystander.stream_write(session, stream, buffer, 0, &what.as_bytes()[..8])?;
        let back = bystander.stream_read(session, stream, buffer, 0, 8)?;
        check(back == what.as_bytes()[..8], || {
            format!("{what}: the bystander read {back:?}")
        })?;
    }
    drop(bystander);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// A client of version 7, which knows no stream ops, is refused at HELLO in words naming both
/// versions, and the connection closes.
pub fn a_client_of_version_7_is_told_at_hello() -> TestResult {
    an_older_client_is_told_at_hello(7, "before stream ops")
}
