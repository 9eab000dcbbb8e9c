//! Streams and events (contract 0.2) through a tasklet's GPU service on this node (`LocalGpu`)
//! and through the probe tasklet (the SDK's `Stream` and `Event`), on the suite's backend: work
//! queued on streams and ordered by events leaves what it would in order, the time between two
//! events is the device time charged to the lease between them, a fault on a stream surfaces at
//! its synchronize, and a stream or event is usable only in its own session, within its limits.

use std::sync::Arc;

use tasklet_runtime::gpu::{
    BufferId, EventId, GpuService, KernelArg, KernelRef, LaunchConfig, LeaseId, LeaseRequest,
    LocalGpu, ModuleId, QueueOp, QueueReply, SessionId, StreamId, MAX_SESSION_EVENTS,
    MAX_SESSION_STREAMS,
};
use tasklet_runtime::{GpuError, Host};
use tasklet_tests::{assert_baseline, manifest, run_probe, test_host};

use super::graphs::ADD_STEP_PTX;

const FAULTS_PTX: &str = include_str!("../../../kernels/faults.ptx");

/// Words in each buffer.
const N: u32 = 1000;

fn config() -> LaunchConfig {
    LaunchConfig {
        grid: [N.div_ceil(256), 1, 1],
        block: [256, 1, 1],
        shared_mem_bytes: 0,
    }
}

fn buf(buffer: BufferId) -> KernelArg<'static> {
    KernelArg::Buffer { buffer, offset: 0 }
}

struct Rig {
    gpu: LocalGpu,
    lease: LeaseId,
    s: SessionId,
    m: ModuleId,
}

fn rig(host: &Host) -> Rig {
    let grant = host.policy().grant(&manifest("testing/probe"));
    let mut gpu = LocalGpu::new(grant, Arc::clone(host.leases()));
    let lease = gpu
        .lease_acquire(LeaseRequest {
            min_vram: 4 << 20,
            secs: 60,
            device: None,
        })
        .expect("lease");
    let s = gpu.session_open(lease).expect("session");
    let m = gpu.module_load(s, ADD_STEP_PTX).expect("add_step loads");
    Rig { gpu, lease, s, m }
}

impl Rig {
    fn stream(&mut self) -> StreamId {
        match self.gpu.queue_op(self.s, QueueOp::NewStream) {
            Ok(QueueReply::Stream(id)) => id,
            other => panic!("a new stream, got {other:?}"),
        }
    }

    fn event(&mut self) -> EventId {
        match self.gpu.queue_op(self.s, QueueOp::NewEvent) {
            Ok(QueueReply::Event(id)) => id,
            other => panic!("a new event, got {other:?}"),
        }
    }

    fn op(&mut self, op: QueueOp) {
        assert_eq!(
            self.gpu.queue_op(self.s, op).expect("queue op"),
            QueueReply::Done,
            "{op:?}"
        );
    }

    /// `add_step` on `x` with the step in `step`, launched on `stream`.
    fn add_step_on(&mut self, stream: StreamId, x: BufferId, step: BufferId) {
        let args = [buf(x), buf(step), KernelArg::U32(N)];
        self.gpu
            .stream_launch(self.s, stream, self.m, KernelRef::At(0), &config(), &args)
            .expect("launch");
    }
}

fn refused(r: Result<impl std::fmt::Debug, GpuError>, says: &str) {
    match r {
        Err(GpuError::InvalidArgument(m)) if m.contains(says) => {}
        other => panic!("expected a refusal saying {says:?}, got {other:?}"),
    }
}

/// A write on one stream, an event recorded after it, a second stream waiting on the event and
/// launching on what was written: the result is the ordered one; the events' elapsed time is the
/// lease's device time between their records.
#[test]
fn work_ordered_by_events_across_streams_and_timed_between_them() {
    let host = test_host!();
    let mut r = rig(&host);
    let (copies, compute) = (r.stream(), r.stream());
    let (written, start, end) = (r.event(), r.event(), r.event());
    // Never recorded: complete, as on CUDA; the time since it is refused.
    assert_eq!(
        r.gpu.queue_op(r.s, QueueOp::Query(written)).expect("query"),
        QueueReply::Ready(true)
    );

    let x = r.gpu.mem_alloc(r.s, 4 * u64::from(N)).expect("alloc");
    let step = r.gpu.mem_alloc(r.s, 8).expect("alloc");
    let data: Vec<u8> = (0..N).flat_map(|i| i.to_le_bytes()).collect();
    r.gpu.stream_write(r.s, copies, x, 0, &data).expect("write");
    r.gpu
        .stream_write(r.s, copies, step, 0, &5u64.to_le_bytes())
        .expect("write step");
    r.op(QueueOp::Record {
        event: written,
        stream: copies,
    });
    r.op(QueueOp::Wait {
        stream: compute,
        event: written,
    });

    r.op(QueueOp::Record {
        event: start,
        stream: compute,
    });
    let before = r.gpu.gpu_time(r.lease).expect("gpu time");
    for _ in 0..3 {
        r.add_step_on(compute, x, step);
    }
    r.op(QueueOp::Record {
        event: end,
        stream: compute,
    });
    let after = r.gpu.gpu_time(r.lease).expect("gpu time");
    assert_eq!(
        r.gpu.queue_op(r.s, QueueOp::Query(end)).expect("query"),
        QueueReply::Ready(true)
    );
    r.op(QueueOp::SyncEvent(end));
    r.op(QueueOp::SyncStream(compute));

    let elapsed = match r.gpu.queue_op(r.s, QueueOp::Elapsed { start, end }) {
        Ok(QueueReply::Elapsed(d)) => d,
        other => panic!("elapsed, got {other:?}"),
    };
    assert!(
        elapsed > std::time::Duration::ZERO,
        "three launches took no time"
    );
    assert_eq!(
        elapsed,
        after - before,
        "the time between the events is the device time charged to the lease between them"
    );
    refused(
        r.gpu.queue_op(
            r.s,
            QueueOp::Elapsed {
                start: end,
                end: start,
            },
        ),
        "recorded before",
    );
    let unrecorded = r.event();
    refused(
        r.gpu.queue_op(
            r.s,
            QueueOp::Elapsed {
                start,
                end: unrecorded,
            },
        ),
        "must be recorded",
    );

    let got = r.gpu.mem_read(r.s, x, 0, 4 * u64::from(N)).expect("read");
    let want: Vec<u8> = (0..N)
        .flat_map(|i| (((i * 3 + 5) * 3 + 5) * 3 + 5).to_le_bytes())
        .collect();
    assert!(
        got == want,
        "the launches did not see the write before them"
    );
    r.op(QueueOp::DropStream(copies));
    r.op(QueueOp::DropEvent(written));
    drop(r);
    assert_baseline(&host);
}

/// A kernel fault of a launch queued on a stream surfaces at that stream's synchronize (and the
/// lease's worker is poisoned as for any fault): streams add no way around containment.
#[test]
fn a_fault_on_a_stream_surfaces_at_its_synchronize() {
    let host = test_host!();
    let mut r = rig(&host);
    let faults = r.gpu.module_load(r.s, FAULTS_PTX).expect("faults loads");
    let stream = r.stream();
    let b = r.gpu.mem_alloc(r.s, 64).expect("alloc");
    let one = LaunchConfig {
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_mem_bytes: 0,
    };
    let launched = r
        .gpu
        .stream_launch(
            r.s,
            stream,
            faults,
            KernelRef::Named("write_out_of_bounds"),
            &one,
            &[buf(b), KernelArg::U64(1 << 40)],
        )
        .map(drop);
    // The emulator runs the kernel at once and may report the fault here already.
    let synced: Result<(), GpuError> =
        launched.and_then(
            |()| match r.gpu.queue_op(r.s, QueueOp::SyncStream(stream)) {
                Ok(reply) => panic!("the fault went unreported: {reply:?}"),
                Err(e) => Err(e),
            },
        );
    match synced {
        Err(GpuError::KernelFault(m)) => assert!(m.contains("write_out_of_bounds"), "{m}"),
        other => panic!("expected a kernel fault, got {other:?}"),
    }
    drop(r);
    assert_baseline(&host);
}

/// On a GPU a copy on one stream runs beside a kernel on another: 2 MiB written and read back
/// 32 times on one stream while a kernel that never ends spins on another (a copy that waited
/// for the kernel would wait until its deadline and fail with it); the kernel is then ended at
/// its deadline, as any runaway is. The emulator keeps every stream in one order, so there the
/// copy would wait: skipped.
#[test]
fn on_a_gpu_a_copy_on_one_stream_runs_beside_a_kernel_on_another() {
    // Within the rig's 4 MiB lease.
    const PIECE: usize = 2 << 20;
    const ROUNDS: usize = 32;
    let host = test_host!();
    if host.device().backend != "cuda" {
        eprintln!("skipped: no CUDA device: streams overlap only on the cuda backend");
        return;
    }
    let mut r = rig(&host);
    let faults = r.gpu.module_load(r.s, FAULTS_PTX).expect("faults loads");
    let (copies, compute) = (r.stream(), r.stream());
    let flag = r.gpu.mem_alloc(r.s, 64).expect("alloc");
    let data = r.gpu.mem_alloc(r.s, PIECE as u64).expect("alloc");
    let pattern: Vec<u8> = (0..PIECE).map(|i| (i % 251) as u8).collect();
    // Alone first (and new memory's zeroing done: only a sync puts it behind every copy).
    r.gpu.sync(r.s).expect("sync");
    let t = std::time::Instant::now();
    r.gpu
        .stream_write(r.s, copies, data, 0, &pattern)
        .expect("write");
    let alone = t.elapsed();

    let one = LaunchConfig {
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_mem_bytes: 0,
    };
    r.gpu
        .stream_launch(
            r.s,
            compute,
            faults,
            KernelRef::Named("spin_forever"),
            &one,
            &[buf(flag)],
        )
        .expect("launch");
    let t = std::time::Instant::now();
    for round in 0..ROUNDS {
        r.gpu
            .stream_write(r.s, copies, data, 0, &pattern)
            .unwrap_or_else(|e| panic!("write {round} beside the kernel: {e}"));
        let back = r
            .gpu
            .stream_read(r.s, copies, data, 0, PIECE as u64)
            .unwrap_or_else(|e| panic!("read {round} beside the kernel: {e}"));
        assert!(back == pattern, "round {round} read back other bytes");
    }
    let beside = t.elapsed();
    eprintln!(
        "streams: 2 MiB write alone {alone:?}; {ROUNDS} × (2 MiB write + read) beside a spinning kernel {beside:?} ({:.2} GB/s)",
        (2 * ROUNDS * PIECE) as f64 / beside.as_secs_f64() / 1e9
    );
    // The kernel never ends: its stream's synchronize meets its deadline.
    match r.gpu.queue_op(r.s, QueueOp::SyncStream(compute)) {
        Err(GpuError::DeadlineExceeded(_)) => {}
        other => panic!("the spinning kernel should meet its deadline, got {other:?}"),
    }
    drop(r);
    assert_baseline(&host);
}

/// At most `MAX_SESSION_STREAMS` streams and `MAX_SESSION_EVENTS` events a session (a dropped
/// one makes room); a stream or event of another session is refused wherever it is named.
#[test]
fn streams_and_events_are_the_sessions_own_within_limits() {
    let host = test_host!();
    let mut r = rig(&host);
    let streams: Vec<StreamId> = (0..MAX_SESSION_STREAMS).map(|_| r.stream()).collect();
    refused(
        r.gpu.queue_op(r.s, QueueOp::NewStream),
        "at most 16 streams",
    );
    r.op(QueueOp::DropStream(streams[3]));
    let again = r.stream();
    let events: Vec<EventId> = (0..MAX_SESSION_EVENTS).map(|_| r.event()).collect();
    refused(r.gpu.queue_op(r.s, QueueOp::NewEvent), "at most 64 events");
    // A dropped stream is gone.
    refused(
        r.gpu.queue_op(r.s, QueueOp::CheckStream(streams[3])),
        "or was dropped",
    );

    // A second session under the same lease: its own streams and events only.
    let other = r.gpu.session_open(r.lease).expect("second session");
    let theirs = match r.gpu.queue_op(other, QueueOp::NewStream) {
        Ok(QueueReply::Stream(id)) => id,
        x => panic!("{x:?}"),
    };
    let foreign = [
        QueueOp::CheckStream(again),
        QueueOp::SyncStream(again),
        QueueOp::Record {
            event: events[0],
            stream: theirs,
        },
        QueueOp::Wait {
            stream: theirs,
            event: events[0],
        },
        QueueOp::Query(events[1]),
        QueueOp::SyncEvent(events[1]),
        QueueOp::Elapsed {
            start: events[0],
            end: events[1],
        },
    ];
    for op in foreign {
        refused(r.gpu.queue_op(other, op), "another session");
    }
    // Dropping another session's stream or event does nothing to it.
    r.gpu
        .queue_op(other, QueueOp::DropStream(again))
        .expect("drop");
    r.op(QueueOp::CheckStream(again));
    r.gpu.session_drop(other);
    drop(r);
    assert_baseline(&host);
}

/// The SDK's streams and events in a tasklet: a pipeline of chunk writes on one stream and
/// launches on another ordered by events, timed, and the misuses refused.
#[test]
fn a_tasklet_pipelines_chunks_over_two_streams() {
    let host = test_host!();
    let lines = run_probe(&host, "streams 8");
    let line = |i: usize| {
        let (status, what, rest) = &lines[i];
        format!("{status} {what} {rest}")
    };
    assert_eq!(lines.len(), 7, "{lines:#?}");
    assert_eq!(line(0), "ok pipelined 8 chunks");
    assert_eq!(line(1), "ok query true");
    let (status, what, ns) = &lines[2];
    assert_eq!(
        (status.as_str(), what.as_str()),
        ("ok", "elapsed"),
        "{lines:#?}"
    );
    let ns: u64 = ns.parse().expect("elapsed nanoseconds");
    assert!(ns > 0, "eight launches took no device time");
    assert_eq!(line(3), "ok matches ");
    assert_eq!(line(4), "ok stream limit 16 invalid-argument");
    assert_eq!(line(5), "ok event limit 64 invalid-argument");
    assert_eq!(line(6), "ok foreign event refused invalid-argument");
    assert_baseline(&host);
}
