//! Streams and events (contract 0.2) through a tasklet's GPU service on this node (`LocalGpu`)
//! and through the probe tasklet (the SDK's `Stream` and `Event`), on the suite's backend: work
//! queued on streams and ordered by events leaves what it would in order, a record waits for
//! nothing (not even a kernel that never ends), the time between two events is the device time
//! between them (on the emulator, what the lease was charged for the kernels between them), a
//! fault on a stream surfaces at its synchronize, and a stream or event is usable only in its own
//! session, within its limits (the lease's worker holds `MAX_MARKS` recorded events).

use tasklet_runtime::gpu::{
    BufferId, EventId, GpuService, KernelArg, KernelRef, LaunchConfig, LeaseId, LocalGpu, ModuleId,
    QueueOp, QueueReply, SessionId, StreamId, MAX_SESSION_EVENTS, MAX_SESSION_STREAMS,
};
use tasklet_runtime::{GpuError, Host};
use tasklet_tests::{assert_baseline, run_probe, test_host};
use tasklet_worker::MAX_MARKS;

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
    let (mut gpu, lease, s) = tasklet_tests::probe_lease_session(host, 4 << 20);
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

    /// `kernel` of `module` on one thread of `stream`.
    fn one_thread_on(
        &mut self,
        stream: StreamId,
        module: ModuleId,
        kernel: &str,
        args: &[KernelArg<'_>],
    ) -> Result<(), GpuError> {
        let one = LaunchConfig {
            grid: [1, 1, 1],
            block: [1, 1, 1],
            shared_mem_bytes: 0,
        };
        self.gpu
            .stream_launch(self.s, stream, module, KernelRef::Named(kernel), &one, args)
            .map(drop)
    }

    /// `spin_forever` of `faults` (a kernel that ends only at its deadline) on one thread of
    /// `stream`, `flag` its argument.
    fn spin_on(&mut self, stream: StreamId, faults: ModuleId, flag: BufferId) {
        self.one_thread_on(stream, faults, "spin_forever", &[buf(flag)])
            .expect("launch");
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
/// launching on what was written: the result is the ordered one; the events' elapsed time is
/// above zero, and on the emulator exactly the device time charged to the lease between their
/// records (a GPU measures it with its own clock between the events).
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
    r.op(QueueOp::SyncEvent(end));
    assert_eq!(
        r.gpu.queue_op(r.s, QueueOp::Query(end)).expect("query"),
        QueueReply::Ready(true),
        "the work before a record is done once the event is synchronized"
    );
    r.op(QueueOp::SyncStream(compute));
    let after = r.gpu.gpu_time(r.lease).expect("gpu time");

    let elapsed = match r.gpu.queue_op(r.s, QueueOp::Elapsed { start, end }) {
        Ok(QueueReply::Elapsed(d)) => d,
        other => panic!("elapsed, got {other:?}"),
    };
    assert!(
        elapsed > std::time::Duration::ZERO,
        "three launches took no time"
    );
    if host.device().backend == "emu" {
        assert_eq!(
            elapsed,
            after - before,
            "the time between the events is the device time charged to the lease between them"
        );
    }
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
    let launched = r.one_thread_on(
        stream,
        faults,
        "write_out_of_bounds",
        &[buf(b), KernelArg::U64(1 << 40)],
    );
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

/// Dropping an event recorded on a lease that has since ended (a fault ended it) succeeds, as
/// dropping a stream does: the lease took its worker's mark slots with it.
#[test]
fn an_event_recorded_on_a_lease_that_ended_drops() {
    let host = test_host!();
    let mut r = rig(&host);
    let faults = r.gpu.module_load(r.s, FAULTS_PTX).expect("faults loads");
    let stream = r.stream();
    let event = r.event();
    r.op(QueueOp::Record { event, stream });
    let b = r.gpu.mem_alloc(r.s, 64).expect("alloc");
    let faulted = r
        .one_thread_on(
            stream,
            faults,
            "write_out_of_bounds",
            &[buf(b), KernelArg::U64(1 << 40)],
        )
        .and_then(|()| r.gpu.queue_op(r.s, QueueOp::SyncStream(stream)).map(drop));
    assert!(
        matches!(faulted, Err(GpuError::KernelFault(_))),
        "{faulted:?}"
    );
    assert_eq!(
        r.gpu.queue_op(r.s, QueueOp::DropEvent(event)),
        Ok(QueueReply::Done)
    );
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

    r.spin_on(compute, faults, flag);
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

/// A record is queued like a launch: behind a kernel that runs until its deadline it returns at
/// once (it waits for nothing, where it once synchronized the lease), and the kernel's overrun
/// comes back from the event's synchronize. On a GPU an event recorded before that kernel is
/// complete, and its synchronize waits for nothing; the emulator answers every question after
/// the work queued before it, so there it would wait for the kernel too.
#[test]
fn a_record_behind_a_spinning_kernel_returns_at_once() {
    let host = test_host!();
    let mut r = rig(&host);
    let faults = r.gpu.module_load(r.s, FAULTS_PTX).expect("faults loads");
    let compute = r.stream();
    let (before, behind) = (r.event(), r.event());
    let flag = r.gpu.mem_alloc(r.s, 64).expect("alloc");
    r.op(QueueOp::Record {
        event: before,
        stream: compute,
    });
    r.spin_on(compute, faults, flag);
    let t = std::time::Instant::now();
    r.op(QueueOp::Record {
        event: behind,
        stream: compute,
    });
    let took = t.elapsed();
    // The suite's kernel deadline is 2 s: a record that waited would take that long.
    assert!(
        took < std::time::Duration::from_millis(200),
        "a record behind a spinning kernel took {took:?}"
    );
    if host.device().backend == "cuda" {
        // Done as soon as the device reaches it, which may be a few microseconds after the
        // record came back: asked again for up to a second, far less than the kernel's 2 s.
        let asked = std::time::Instant::now();
        let mut done = r.gpu.queue_op(r.s, QueueOp::Query(before)).expect("query");
        while done != QueueReply::Ready(true) && asked.elapsed() < std::time::Duration::from_secs(1)
        {
            std::thread::sleep(std::time::Duration::from_millis(1));
            done = r.gpu.queue_op(r.s, QueueOp::Query(before)).expect("query");
        }
        assert_eq!(done, QueueReply::Ready(true), "the event before the kernel");
        assert_eq!(
            r.gpu.queue_op(r.s, QueueOp::Query(behind)).expect("query"),
            QueueReply::Ready(false),
            "the kernel before the record still runs"
        );
        let t = std::time::Instant::now();
        r.op(QueueOp::SyncEvent(before));
        assert!(t.elapsed() < std::time::Duration::from_millis(200));
    }
    match r.gpu.queue_op(r.s, QueueOp::SyncEvent(behind)) {
        Err(GpuError::DeadlineExceeded(m)) => assert!(m.contains("spin_forever"), "{m}"),
        other => panic!("the spinning kernel should meet its deadline, got {other:?}"),
    }
    drop(r);
    assert_baseline(&host);
}

/// The time between events recorded around launches is above zero and ordered: from the first
/// to the last is at least from the first to the middle, and, on the emulator, exactly the sum
/// of its parts and what the lease was charged for those kernels. A query says the work before
/// an event is done once it is synchronized, and on the emulator (which runs every kernel before
/// the next question) before too.
#[test]
fn the_time_between_events_around_kernels_is_ordered() {
    let host = test_host!();
    let mut r = rig(&host);
    let compute = r.stream();
    let (a, b, c) = (r.event(), r.event(), r.event());
    let x = r.gpu.mem_alloc(r.s, 4 * u64::from(N)).expect("alloc");
    let step = r.gpu.mem_alloc(r.s, 8).expect("alloc");
    r.gpu.sync(r.s).expect("sync");
    let before = r.gpu.gpu_time(r.lease).expect("gpu time");
    r.op(QueueOp::Record {
        event: a,
        stream: compute,
    });
    r.add_step_on(compute, x, step);
    r.op(QueueOp::Record {
        event: b,
        stream: compute,
    });
    for _ in 0..3 {
        r.add_step_on(compute, x, step);
    }
    r.op(QueueOp::Record {
        event: c,
        stream: compute,
    });
    if host.device().backend == "emu" {
        assert_eq!(
            r.gpu.queue_op(r.s, QueueOp::Query(c)).expect("query"),
            QueueReply::Ready(true),
            "the emulator ran the kernels before the record"
        );
    }
    let elapsed =
        |r: &mut Rig, start, end| match r.gpu.queue_op(r.s, QueueOp::Elapsed { start, end }) {
            Ok(QueueReply::Elapsed(d)) => d,
            other => panic!("elapsed, got {other:?}"),
        };
    let ab = elapsed(&mut r, a, b);
    let ac = elapsed(&mut r, a, c);
    let bc = elapsed(&mut r, b, c);
    assert_eq!(
        r.gpu.queue_op(r.s, QueueOp::Query(c)).expect("query"),
        QueueReply::Ready(true),
        "the time to an event waits for the work before it"
    );
    assert!(ab > std::time::Duration::ZERO && bc > std::time::Duration::ZERO);
    assert!(
        ac >= ab,
        "{ac:?} from the first event to the last, {ab:?} to the middle"
    );
    r.gpu.sync(r.s).expect("sync");
    let charged = r.gpu.gpu_time(r.lease).expect("gpu time") - before;
    if host.device().backend == "emu" {
        assert_eq!(ac, ab + bc);
        assert_eq!(ac, charged, "the four kernels' device time");
    }
    drop(r);
    assert_baseline(&host);
}

/// The events a lease's sessions have recorded hold the worker's marks, `MAX_MARKS` at most: a
/// record past them is refused, saying what to do, until an event (or a session) is dropped.
#[test]
fn recorded_events_are_bounded_by_the_workers_marks() {
    let host = test_host!();
    let mut r = rig(&host);
    let stream = r.stream();
    let sessions = (MAX_MARKS as usize).div_ceil(MAX_SESSION_EVENTS);
    let mut recorded: Vec<(SessionId, EventId)> = Vec::new();
    for i in 0..sessions {
        let s = if i == 0 {
            r.s
        } else {
            r.gpu.session_open(r.lease).expect("session")
        };
        let st = match r.gpu.queue_op(s, QueueOp::NewStream) {
            Ok(QueueReply::Stream(id)) => id,
            other => panic!("{other:?}"),
        };
        for _ in 0..MAX_SESSION_EVENTS {
            let e = match r.gpu.queue_op(s, QueueOp::NewEvent) {
                Ok(QueueReply::Event(id)) => id,
                other => panic!("{other:?}"),
            };
            r.gpu
                .queue_op(
                    s,
                    QueueOp::Record {
                        event: e,
                        stream: st,
                    },
                )
                .expect("record");
            recorded.push((s, e));
        }
    }
    assert_eq!(recorded.len(), MAX_MARKS as usize);
    let extra = r.gpu.session_open(r.lease).expect("session");
    let st = match r.gpu.queue_op(extra, QueueOp::NewStream) {
        Ok(QueueReply::Stream(id)) => id,
        other => panic!("{other:?}"),
    };
    let e = match r.gpu.queue_op(extra, QueueOp::NewEvent) {
        Ok(QueueReply::Event(id)) => id,
        other => panic!("{other:?}"),
    };
    let record = QueueOp::Record {
        event: e,
        stream: st,
    };
    refused(r.gpu.queue_op(extra, record), "drop an event first");
    // Recording an event again keeps its mark.
    r.op(QueueOp::Record {
        event: recorded[0].1,
        stream,
    });
    let (s, dropped) = recorded[5];
    r.gpu
        .queue_op(s, QueueOp::DropEvent(dropped))
        .expect("drop");
    r.gpu.queue_op(extra, record).expect("a mark given back");
    r.gpu.queue_op(extra, QueueOp::SyncEvent(e)).expect("sync");
    // A dropped session gives its marks back.
    let last = recorded.last().expect("recorded").0;
    r.gpu.session_drop(last);
    let e2 = match r.gpu.queue_op(extra, QueueOp::NewEvent) {
        Ok(QueueReply::Event(id)) => id,
        other => panic!("{other:?}"),
    };
    r.gpu
        .queue_op(
            extra,
            QueueOp::Record {
                event: e2,
                stream: st,
            },
        )
        .expect("a mark of the dropped session");
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
