//! How long the host waits on a worker whose kernel never ends (the emulator running
//! `spin_forever`): a caller's wait limit ends any op at that limit and gives the worker up (killed,
//! not waited for); the emulator's deadline bites within 250 ms; releasing a busy worker to its
//! pool returns at once; and a pool's acquire waits no longer than the caller's limit.

use std::time::{Duration, Instant};

use crate::support::*;
use tasklet_worker::{ErrorKind, Launch, LoadedModule, Pool, Worker, WorkerCommand, WorkerError};

const FAULTS_PTX: &str = include_str!("../../../../kernels/faults.ptx");
const IOTA_PTX: &str = include_str!("../../../../kernels/iota.ptx");

/// An emulator worker with `spin_forever` launched (with `deadline`) on a flag nobody sets, and a
/// spare 4 KiB allocation: (worker, module, spare's address).
fn spinning(deadline: Duration) -> (Worker, LoadedModule, u64) {
    let mut w = emu_worker(64 << 20);
    let m = w.load_module(FAULTS_PTX).expect("faults.ptx loads");
    let flag = w.alloc(4).expect("alloc");
    let spare = w.alloc(16 << 10).expect("alloc");
    w.launch(&Launch {
        module: m.id,
        kernel: kernel_index(&m, "spin_forever"),
        grid: [1, 1, 1],
        block: [32, 1, 1],
        shared_mem_bytes: 0,
        args: &flag.to_le_bytes(),
        deadline,
    })
    .expect("posted");
    assert!(w.has_pending_launches());
    (w, m, spare)
}

/// Every op that waits, as (name, op) for a worker set up by [`spinning`].
type Op = fn(&mut Worker, &LoadedModule, u64) -> Result<(), WorkerError>;
const WAITING_OPS: [(&str, Op); 9] = [
    ("sync", |w, _, _| w.sync()),
    ("read", |w, _, a| w.read(a, &mut [0; 4])),
    // Over 8 KiB: a smaller write is posted, and waits for nothing.
    ("write", |w, _, a| w.write(a, &[1; 9 << 10])),
    ("alloc", |w, _, _| w.alloc(64).map(drop)),
    ("free", |w, _, a| w.free(a)),
    ("copy", |w, _, a| w.copy(a, a + 8, 4)),
    ("load", |w, _, _| w.load_module(IOTA_PTX).map(drop)),
    ("unload", |w, m, _| w.unload_module(m.id)),
    ("info", |w, _, _| w.info().map(drop)),
];

#[test]
fn a_wait_limit_ends_every_waiting_op_on_time_and_gives_the_worker_up() {
    let limit = Duration::from_millis(300);
    for (name, op) in WAITING_OPS {
        let (mut w, m, spare) = spinning(Duration::from_secs(60));
        let pid = w.pid();
        let t = Instant::now();
        w.set_wait_limit(Some(t + limit));
        let (kind, message) = op_error(op(&mut w, &m, spare));
        let took = t.elapsed();
        assert_eq!(kind, ErrorKind::DeadlineExceeded, "{name}: {message}");
        assert!(
            message.contains("time limit") && message.contains("spin_forever"),
            "{name}: {message}"
        );
        assert!(
            took >= limit && took < limit + Duration::from_millis(100),
            "{name}: a {limit:?} limit ended the wait after {took:?}"
        );
        assert!(w.gave_up() && w.is_lost(), "{name}");
        assert!(matches!(w.ping(), Err(WorkerError::Lost(_))), "{name}");
        // Killed, not waited for: it dies on its own, and is reaped when dropped.
        wait_dead(pid);
        drop(w);
        assert!(!pid_exists(pid), "{name}: reaped");
    }
}

#[test]
fn a_wait_limit_that_has_passed_ends_the_next_wait_at_once() {
    let (mut w, _, _) = spinning(Duration::from_secs(60));
    w.set_wait_limit(Some(Instant::now()));
    let t = Instant::now();
    assert_eq!(op_kind(w.sync()), ErrorKind::DeadlineExceeded);
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn a_wait_limit_leaves_ops_that_answer_in_time_alone() {
    let mut w = null_worker(Duration::from_secs(5));
    w.set_wait_limit(Some(Instant::now() + Duration::from_secs(5)));
    for _ in 0..100 {
        w.ping().unwrap();
    }
    assert!(!w.gave_up() && !w.is_lost());
    w.set_wait_limit(None);
    assert_eq!(w.wait_limit(), None);
    w.ping().unwrap();
}

#[test]
fn the_emulators_runaway_is_reported_within_250ms_of_its_deadline() {
    let deadline = Duration::from_secs(1);
    for (name, op) in WAITING_OPS {
        let (mut w, m, spare) = spinning(deadline);
        // The deadline runs from the launch, just before.
        let t = Instant::now();
        let (kind, message) = op_error(op(&mut w, &m, spare));
        let took = t.elapsed();
        assert_eq!(kind, ErrorKind::DeadlineExceeded, "{name}: {message}");
        assert!(message.contains("spin_forever"), "{name}: {message}");
        assert!(
            took + Duration::from_millis(50) >= deadline
                && took <= deadline + Duration::from_millis(250),
            "{name}: a runaway with a {deadline:?} deadline was reported after {took:?}"
        );
        assert!(!w.gave_up(), "{name}: the deadline, not a caller's limit");
    }
}

#[test]
fn releasing_a_busy_worker_returns_at_once_and_the_pool_replaces_it() {
    let pool = Pool::start(pool_config(false, 1, 1)).unwrap();
    let mut w = pool.acquire().unwrap();
    let pid = w.pid();
    let m = w.load_module(FAULTS_PTX).unwrap();
    let flag = w.alloc(4).unwrap();
    w.launch(&Launch {
        module: m.id,
        kernel: kernel_index(&m, "spin_forever"),
        grid: [1, 1, 1],
        block: [32, 1, 1],
        shared_mem_bytes: 0,
        args: &flag.to_le_bytes(),
        deadline: Duration::from_secs(60),
    })
    .unwrap();
    // The worker is busy with the kernel, not just behind on requests.
    std::thread::sleep(Duration::from_millis(20));
    let t = Instant::now();
    pool.release(w);
    // "At once": far below the kernel's 60 s, with room for a loaded machine's scheduling.
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "releasing a busy worker took {:?}",
        t.elapsed()
    );
    // Killed at once and reaped by the pool, which gives its slot back then: an acquire at once
    // (of the one slot) waits for that rather than failing, and a fresh worker serves.
    let mut w = pool.acquire().expect("the given-up worker's slot");
    assert_ne!(w.pid(), pid);
    assert!(!pid_exists(pid), "the busy worker {pid} was not reaped");
    w.ping().unwrap();
    assert_eq!(w.wait_limit(), None);
}

#[test]
fn discarding_a_worker_kills_it_without_waiting_and_frees_its_slot() {
    let pool = Pool::start(pool_config(true, 0, 1)).unwrap();
    let w = pool.acquire().unwrap();
    let pid = w.pid();
    w.signal_for_test(libc::SIGSTOP);
    let t = Instant::now();
    pool.discard(w);
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    assert!(eventually(Duration::from_secs(5), || !pid_exists(pid)));
    assert!(eventually(Duration::from_secs(5), || pool.busy() == 0));
    pool.acquire().unwrap().ping().unwrap();
}

#[test]
fn acquire_waits_for_a_starting_worker_no_later_than_the_callers_limit() {
    let mut cfg = pool_config(true, 0, 1);
    // Starts, and never says it is ready (the worker's arguments become the script's own).
    cfg.command = WorkerCommand {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), "sleep 30".into()],
    };
    let pool = Pool::start(cfg).unwrap();
    let limit = Duration::from_millis(300);
    let t = Instant::now();
    match pool.acquire_by(Some(t + limit)) {
        Err(WorkerError::Op {
            kind: ErrorKind::DeadlineExceeded,
            message,
        }) => assert!(message.contains("time limit"), "{message}"),
        other => panic!("{other:?}"),
    }
    let took = t.elapsed();
    assert!(
        took >= limit && took < limit + Duration::from_millis(100),
        "{took:?}"
    );
    assert_eq!(pool.busy(), 0);
}

#[test]
fn on_cuda_a_module_load_or_unload_answered_from_the_cache_leaves_the_kernel_pending() {
    let Some(mut w) = crate::fake_cuda::fake_worker() else {
        return;
    };
    let m = w.load_module(FAULTS_PTX).unwrap();
    // A second reference to the same (cached) module.
    let again = w.load_module(FAULTS_PTX).unwrap();
    let flag = w.alloc(4).unwrap().to_le_bytes();
    w.launch(&crate::fake_cuda::launch(
        &m,
        "spin_forever",
        32,
        &flag,
        Duration::from_secs(30),
    ))
    .unwrap();
    let t = Instant::now();
    w.unload_module(again.id).unwrap();
    w.load_module(FAULTS_PTX).unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "the cache answered, without waiting for the kernel: {:?}",
        t.elapsed()
    );
    // Those answers say nothing of the kernel: it may still run, so a release must not wait on
    // it and a wait limit still bites.
    assert!(w.has_pending_launches());
    w.set_wait_limit(Some(Instant::now() + Duration::from_millis(200)));
    assert_eq!(op_kind(w.sync()), ErrorKind::DeadlineExceeded);
    assert!(w.gave_up());
}

/// A sync right after a sync or a read that waited for everything asks the worker nothing: it
/// returns while the worker is stopped. Anything sent since (a write here) makes the next sync a
/// real one, and a worker that died meanwhile is still reported.
#[test]
fn a_sync_with_nothing_sent_since_the_last_wait_asks_the_worker_nothing() {
    let mut w = emu_worker(64 << 20);
    let buf = w.alloc(64).unwrap();
    w.write(buf, &[3; 64]).unwrap();
    let mut back = [0u8; 64];
    w.read(buf, &mut back).unwrap();
    assert_eq!(back, [3; 64]);
    w.signal_for_test(libc::SIGSTOP);
    let t = Instant::now();
    w.sync().expect("answered without the worker");
    w.sync().expect("and again");
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    w.signal_for_test(libc::SIGCONT);

    // A write since: the sync goes to the worker, which answers once it runs again.
    w.write(buf, &[4; 64]).unwrap();
    w.signal_for_test(libc::SIGSTOP);
    w.set_wait_limit(Some(Instant::now() + Duration::from_millis(300)));
    assert!(
        w.sync().is_err(),
        "a sync after a write was answered without the worker"
    );
    w.set_wait_limit(None);

    // Settled again, then killed: the sync reports the lost worker. Its life lock tells so with
    // no system call: the process is not reaped by that look (still a zombie), only by the sync.
    let mut w = emu_worker(64 << 20);
    w.sync().unwrap();
    assert!(w.still_serving());
    let pid = w.pid();
    kill9(pid);
    wait_dead(pid);
    assert!(
        !w.still_serving(),
        "the life lock did not say the worker ended"
    );
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        "told by reaping it, not by its life lock: {stat:?}"
    );
    assert!(
        matches!(w.sync(), Err(WorkerError::Lost(_))),
        "a dead worker's sync succeeded"
    );
}

/// An empty read copies nothing, so the worker waits for nothing before it answers: a sync after
/// it still goes to the worker (which checks the stream's copies and zeroing).
#[test]
fn a_sync_after_an_empty_read_still_asks_the_worker() {
    let mut w = emu_worker(64 << 20);
    let buf = w.alloc(64).unwrap();
    w.write(buf, &[3; 64]).unwrap();
    w.read(buf, &mut []).unwrap();
    w.signal_for_test(libc::SIGSTOP);
    w.set_wait_limit(Some(Instant::now() + Duration::from_millis(300)));
    assert!(
        w.sync().is_err(),
        "a sync after an empty read was answered without the worker"
    );
}
