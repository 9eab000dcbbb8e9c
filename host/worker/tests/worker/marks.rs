//! Marks (a tenant's stream events): a record is posted, like a launch, and waits for nothing —
//! not even a kernel that never ends; the time between two marks is the device time between
//! them, in order; a question about a mark waits for the work before it only; a worker holds
//! `MAX_MARKS` of them. On the emulator, and on the cuda backend against the fake driver.

use std::time::{Duration, Instant};

use crate::fake_cuda::{counting_worker, fake_worker, launch};
use crate::support::*;
use tasklet_worker::{ErrorKind, Launch, LoadedModule, Worker, MAX_MARKS};

const FAULTS_PTX: &str = include_str!("../../../../kernels/faults.ptx");
const IOTA_PTX: &str = include_str!("../../../../kernels/iota.ptx");

/// `spin_forever` on a flag nobody sets, launched with `deadline`.
fn spin(w: &mut Worker, deadline: Duration) -> LoadedModule {
    let m = w.load_module(FAULTS_PTX).expect("faults.ptx loads");
    let flag = w.alloc(4).expect("alloc");
    w.launch(&launch(
        &m,
        "spin_forever",
        32,
        &flag.to_le_bytes(),
        deadline,
    ))
    .expect("posted");
    m
}

/// `iota` over `n` words at `out`: grid of 256-thread blocks.
fn iota<'a>(m: &LoadedModule, args: &'a [u8], n: u32) -> Launch<'a> {
    Launch {
        module: m.id,
        kernel: kernel_index(m, "iota"),
        grid: [n.div_ceil(256), 1, 1],
        block: [256, 1, 1],
        shared_mem_bytes: 0,
        args,
        deadline: Duration::from_secs(20),
    }
}

fn iota_args(out: u64, n: u32) -> Vec<u8> {
    out.to_le_bytes()
        .into_iter()
        .chain(n.to_le_bytes())
        .collect()
}

/// Behind a kernel that runs until its deadline, a record returns at once (it used to be a
/// sync: the whole deadline); the kernel's overrun is then reported by the next wait, which is
/// the sync's, not the record's.
#[test]
fn a_record_behind_a_spinning_kernel_returns_at_once_on_the_emulator() {
    let deadline = Duration::from_millis(1500);
    let mut w = emu_worker(64 << 20);
    spin(&mut w, deadline);
    let mark = w.new_mark().expect("a mark");
    let t = Instant::now();
    w.record_mark(mark).expect("posted");
    let took = t.elapsed();
    assert!(
        took < Duration::from_millis(100),
        "a record behind a {deadline:?} kernel took {took:?}"
    );
    let (kind, message) = op_error(w.sync());
    assert_eq!(kind, ErrorKind::DeadlineExceeded, "{message}");
    assert!(message.contains("spin_forever"), "{message}");
}

/// The time between marks is the emulator's device time between them: exactly what the
/// launches between them were charged, more across more launches, and additive.
#[test]
fn the_time_between_marks_is_the_device_time_between_them_in_order() {
    const N: u32 = 1 << 14;
    let mut w = emu_worker(64 << 20);
    let m = w.load_module(IOTA_PTX).expect("iota loads");
    let out = w.alloc(4 * u64::from(N)).expect("alloc");
    let args = iota_args(out, N);
    let (a, b, c) = (
        w.new_mark().unwrap(),
        w.new_mark().unwrap(),
        w.new_mark().unwrap(),
    );
    assert_eq!((a, b, c), (0, 1, 2), "slots are handed out from 0");
    w.sync().unwrap();
    let before = w.gpu_time();
    w.record_mark(a).unwrap();
    w.launch(&iota(&m, &args, N)).unwrap();
    w.record_mark(b).unwrap();
    for _ in 0..2 {
        w.launch(&iota(&m, &args, N)).unwrap();
    }
    w.record_mark(c).unwrap();
    let ab = w.mark_elapsed(a, b).expect("a to b");
    let ac = w.mark_elapsed(a, c).expect("a to c");
    let bc = w.mark_elapsed(b, c).expect("b to c");
    w.sync().unwrap();
    let charged = w.gpu_time() - before;
    assert!(
        ab > Duration::ZERO,
        "a launch between the marks took no time"
    );
    assert!(bc > ab / 4, "two launches took {bc:?}, one {ab:?}");
    assert_eq!(ac, ab + bc, "the time between marks adds up");
    assert_eq!(
        ac, charged,
        "the time between the first and last mark is what the launches between them were charged"
    );
    assert!(
        w.mark_done(c).unwrap(),
        "the emulator has run every launch before a record"
    );
    w.wait_mark(c).unwrap();
    // Recorded again, a mark moves: nothing between b and its new record.
    w.record_mark(b).unwrap();
    w.record_mark(c).unwrap();
    assert_eq!(w.mark_elapsed(b, c).unwrap(), Duration::ZERO);
}

/// A worker holds `MAX_MARKS` marks: the host hands out no more (until one is given back), and
/// the worker refuses a record past them, reported by the next call; a mark never recorded has
/// no time to measure from, and is complete.
#[test]
fn the_mark_limit_bites_and_a_mark_never_recorded_is_refused_for_timing() {
    let mut w = emu_worker(64 << 20);
    let held: Vec<u32> = (0..MAX_MARKS)
        .map(|_| w.new_mark().expect("a mark"))
        .collect();
    assert_eq!(w.marks_held(), MAX_MARKS as usize);
    let (kind, message) = op_error(w.new_mark());
    assert_eq!(kind, ErrorKind::InvalidArgument);
    assert!(
        message.contains(&MAX_MARKS.to_string()) && message.contains("drop an event"),
        "{message}"
    );
    w.drop_mark(held[7]);
    assert_eq!(w.new_mark().expect("a slot given back"), 7);

    // Past the limit, straight to the worker: posted, then reported by the next call.
    w.record_mark(MAX_MARKS).expect("posted");
    let (kind, message) = op_error(w.ping());
    assert_eq!(kind, ErrorKind::InvalidArgument);
    assert!(
        message.contains("earlier record of mark") && message.contains("past the"),
        "{message}"
    );
    assert_eq!(op_kind(w.mark_done(MAX_MARKS)), ErrorKind::InvalidArgument);

    assert!(w.mark_done(3).unwrap(), "never recorded: complete");
    w.wait_mark(3).unwrap();
    w.record_mark(4).unwrap();
    let (kind, message) = op_error(w.mark_elapsed(3, 4));
    assert_eq!(kind, ErrorKind::InvalidArgument);
    assert!(message.contains("never recorded"), "{message}");
    // Reset forgets every mark, on both sides.
    w.reset().unwrap();
    assert_eq!(w.marks_held(), 0);
    assert_eq!(op_kind(w.mark_elapsed(4, 4)), ErrorKind::InvalidArgument);
}

/// Records are not launches: a failed launch after some is still named by its own ordinal.
#[test]
fn records_do_not_count_as_launches() {
    let mut w = emu_worker(64 << 20);
    let m = w.load_module(IOTA_PTX).expect("iota loads");
    let out = w.alloc(4 * 256).expect("alloc");
    let args = iota_args(out, 256);
    let mark = w.new_mark().unwrap();
    w.record_mark(mark).unwrap();
    w.launch(&iota(&m, &args, 256)).unwrap();
    w.record_mark(mark).unwrap();
    let mut bad = iota(&m, &args, 256);
    bad.kernel = 99;
    let (kind, message) = posted_error(&mut w, &bad);
    assert_eq!(kind, ErrorKind::InvalidArgument);
    assert!(message.contains("launch #2"), "{message}");
}

/// On the cuda backend (the fake driver): a record behind a kernel that never ends returns at
/// once, and its mark is not done; a mark recorded before that kernel is done and waited for
/// without waiting for the kernel; a wait for the later mark meets the kernel's deadline.
#[test]
fn on_cuda_a_record_waits_for_nothing_and_a_wait_for_only_its_work() {
    let Some(mut w) = fake_worker() else { return };
    let before = w.new_mark().unwrap();
    let after = w.new_mark().unwrap();
    w.record_mark(before).unwrap();
    let t = Instant::now();
    spin(&mut w, Duration::from_millis(400));
    w.record_mark(after).expect("posted");
    let took = t.elapsed();
    assert!(took < Duration::from_millis(100), "a record took {took:?}");
    assert!(!w.mark_done(after).unwrap(), "behind a running kernel");
    assert!(w.mark_done(before).unwrap(), "before the kernel");
    let t = Instant::now();
    w.wait_mark(before).unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(100),
        "a wait for work before the kernel took {:?}",
        t.elapsed()
    );
    let (kind, message) = op_error(w.wait_mark(after));
    assert_eq!(kind, ErrorKind::DeadlineExceeded, "{message}");
    assert!(message.contains("spin_forever"), "{message}");
}

/// On the cuda backend (the fake driver, whose events read done 200 ms after their record): the
/// time between marks is the driver's between their events, host time between the records
/// included (as CUDA's events count idle time); a query before the end mark's work is done says
/// so, and the time waits for it.
#[test]
fn on_cuda_the_time_between_marks_is_the_events_and_waits_for_the_end() {
    const LAG: Duration = Duration::from_millis(200);
    let Some((mut w, _file)) = counting_worker(&["FAKE_CUDA_EVENT_LAG_US=200000"]) else {
        return;
    };
    let m = w.load_module(IOTA_PTX).unwrap();
    let out = w.alloc(4 * 16).unwrap();
    let args = iota_args(out, 16);
    let (a, b) = (w.new_mark().unwrap(), w.new_mark().unwrap());
    w.record_mark(a).unwrap();
    // A query is answered after the record before it: the worker has stamped `a` before the
    // 50 ms start (a record alone may still be on its way to it).
    w.mark_done(a).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    w.launch(&launch(&m, "iota", 16, &args, Duration::from_secs(5)))
        .unwrap();
    let t = Instant::now();
    w.record_mark(b).unwrap();
    assert!(!w.mark_done(b).unwrap(), "read before the event is done");
    let elapsed = w.mark_elapsed(a, b).expect("elapsed");
    let waited = t.elapsed();
    assert!(
        waited >= LAG * 2 / 3,
        "answered after {waited:?}, before the end mark was done"
    );
    assert!(
        elapsed >= Duration::from_millis(50) && elapsed < Duration::from_secs(2),
        "{elapsed:?} between records 50 ms apart"
    );
    assert!(w.mark_done(b).unwrap(), "done once waited for");
    w.sync().unwrap();
}
