//! Time limits while the host waits, and nothing waiting on a running kernel, through real
//! components on the suite's backend (the probe's `spin-then <step>`: a kernel that never ends,
//! then one step while it runs).
//!
//! - The earliest of the tasklet's wall-time and the kernel's deadline ends a call blocked on the
//!   kernel on time, whichever call it is: the wall-time within 0.5 s of its limit (the run ends
//!   as `RunError::WallTime`), the deadline within 250 ms (`deadline-exceeded`).
//! - Dropping a buffer, module, session or lease, trapping or returning while the kernel runs
//!   does not wait for it: the host gives the busy worker up (killed and replaced), the drop
//!   returns within 50 ms, and the books return to baseline exactly.

use std::time::{Duration, Instant};

use tasklet_runtime::{Host, Policy, RunError, Tasklet};
use tasklet_tests::{
    assert_baseline, assert_gpu_error, load, manifest, probe_lines, run_ok, test_host, test_policy,
    ProbeLine,
};

/// How late past its wall-time limit a blocked run may end.
const WALL_TIME_SLACK: Duration = Duration::from_millis(500);
/// How late past its deadline a runaway kernel may be reported.
const DEADLINE_SLACK: Duration = Duration::from_millis(250);
/// How long a drop may take while a kernel runs.
const DROP_BOUND: Duration = Duration::from_millis(50);

/// The steps of `spin-then` that wait for the device (each is a host call the kernel blocks).
/// A small write does not: it is queued behind the kernel, as a launch is.
const BLOCKING_STEPS: [&str; 5] = ["sync", "read", "alloc", "copy", "load"];
/// The steps of `spin-then` that drop a handle.
const DROP_STEPS: [&str; 4] = ["buffer", "module", "session", "lease"];

/// The test policy with `deadline` for kernels.
fn policy_with_deadline(deadline: Duration) -> Policy {
    let mut p = test_policy();
    p.workers.kernel_deadline = deadline;
    p
}

/// A host whose kernels have `deadline`, the probe with `wall_time`, and `iota` to show the host
/// still serves (each compiled once: compiling takes longer than most tests here).
struct Fixture {
    host: Host,
    probe: Tasklet,
    iota: Tasklet,
}

impl Fixture {
    fn new(deadline: Duration, wall_time: Duration) -> Fixture {
        let host = test_host!(policy_with_deadline(deadline));
        let mut m = manifest("testing/probe");
        m.limits.wall_time = wall_time;
        let probe = load(&host, m);
        let iota = load(&host, manifest("iota"));
        Fixture { host, probe, iota }
    }

    /// Runs the probe's `spin-then <step>`: the run's result and how long it took.
    fn spin_then(&self, step: &str) -> (Result<Vec<u8>, RunError>, Duration) {
        let started = Instant::now();
        let r = self
            .host
            .run(&self.probe, format!("spin-then {step}").as_bytes());
        (r, started.elapsed())
    }

    /// The node still serves a tasklet after `step`, and is back at its baseline.
    #[track_caller]
    fn still_serves(&self, step: &str) {
        assert_baseline(&self.host);
        assert_eq!(
            run_ok(&self.host, &self.iota, "3"),
            "1\n2\n3\n",
            "after {step}"
        );
        assert_baseline(&self.host);
    }
}

/// The output lines of a run that must have succeeded.
#[track_caller]
fn lines_of(r: Result<Vec<u8>, RunError>) -> Vec<ProbeLine> {
    let out = r.unwrap_or_else(|e| panic!("run failed: {e}"));
    probe_lines(&String::from_utf8(out).expect("utf-8 output"))
}

/// The milliseconds of the last line, `ok took <ms>`.
#[track_caller]
fn took(lines: &[ProbeLine]) -> Duration {
    match lines.last() {
        Some((ok, took, ms)) if ok == "ok" && took == "took" => {
            Duration::from_millis(ms.parse().expect("whole milliseconds"))
        }
        _ => panic!("no `ok took <ms>` line last: {lines:?}"),
    }
}

#[test]
fn a_call_blocked_on_a_runaway_kernel_ends_at_the_wall_time_limit() {
    // The kernel's deadline is far off: only the wall-time can end these calls in time.
    let wall = Duration::from_secs(1);
    let f = Fixture::new(Duration::from_secs(10), wall);
    for step in BLOCKING_STEPS {
        let (r, elapsed) = f.spin_then(step);
        eprintln!("time_limits: a run with a wall-time of {wall:?} blocked in {step} ended after {elapsed:?}");
        match r {
            Err(RunError::WallTime(limit)) => assert_eq!(limit, wall, "{step}"),
            other => panic!("{step}: expected the wall-time limit, got {other:?}"),
        }
        assert!(
            elapsed >= wall && elapsed < wall + WALL_TIME_SLACK,
            "{step}: a run with a wall-time of {wall:?} blocked in `{step}` took {elapsed:?}"
        );
        f.still_serves(step);
    }
}

#[test]
fn a_call_blocked_on_a_runaway_kernel_ends_within_250ms_of_its_deadline() {
    let deadline = Duration::from_secs(1);
    let f = Fixture::new(deadline, Duration::from_secs(30));
    for step in BLOCKING_STEPS {
        let (r, elapsed) = f.spin_then(step);
        let lines = lines_of(r);
        assert_gpu_error(&lines, 1, "deadline-exceeded", "spin_forever");
        // The step began just after the launch returned: it waited out the rest of the deadline.
        let waited = took(&lines);
        eprintln!(
            "time_limits: {step} on a runaway with a {deadline:?} deadline ended after {waited:?}"
        );
        assert!(
            waited + Duration::from_millis(50) >= deadline && waited <= deadline + DEADLINE_SLACK,
            "{step}: a runaway with a {deadline:?} deadline was reported after {waited:?}: {lines:?}"
        );
        assert!(elapsed < Duration::from_secs(10), "{step}: {elapsed:?}");
        f.still_serves(step);
    }
}

#[test]
fn a_small_write_behind_a_runaway_kernel_returns_at_once() {
    let deadline = Duration::from_secs(2);
    let f = Fixture::new(deadline, Duration::from_secs(30));
    let (r, elapsed) = f.spin_then("write");
    let lines = lines_of(r);
    assert_eq!(
        lines
            .get(1)
            .map(|l| (l.0.as_str(), l.1.as_str(), l.2.as_str())),
        Some(("ok", "write", "4")),
        "{lines:?}"
    );
    let waited = took(&lines);
    assert!(
        waited < deadline / 4,
        "the write waited {waited:?}: {lines:?}"
    );
    // The run ended with its kernel still spinning: its lease's end gave the worker up.
    assert!(elapsed < deadline, "{elapsed:?}");
    f.still_serves("write");
}

#[test]
fn dropping_a_handle_while_a_kernel_runs_returns_at_once() {
    let f = Fixture::new(Duration::from_secs(10), Duration::from_secs(30));
    for step in DROP_STEPS {
        let (r, elapsed) = f.spin_then(step);
        let lines = lines_of(r);
        assert_eq!(lines[1].1, "dropped", "{step}: {lines:?}");
        let waited = took(&lines);
        eprintln!("time_limits: dropping the {step} while a kernel ran took {waited:?} (the run {elapsed:?})");
        assert!(
            waited <= DROP_BOUND,
            "{step}: dropping it while a kernel ran took {waited:?}"
        );
        // Nor does the run's end wait for the kernel.
        assert!(
            elapsed < Duration::from_secs(3),
            "{step}: the run took {elapsed:?}"
        );
        f.still_serves(step);
    }
}

#[test]
fn trapping_or_returning_while_a_kernel_runs_ends_the_run_at_once() {
    let f = Fixture::new(Duration::from_secs(10), Duration::from_secs(30));
    for step in ["trap", "return"] {
        let (r, elapsed) = f.spin_then(step);
        eprintln!("time_limits: a run that did `{step}` while a kernel ran took {elapsed:?}");
        match (step, r) {
            ("trap", Err(RunError::Trapped(_))) => {}
            ("return", Ok(out)) => assert_eq!(
                probe_lines(&String::from_utf8(out).expect("utf-8 output")).len(),
                1,
                "only the launch's line"
            ),
            (_, other) => panic!("{step}: {other:?}"),
        }
        assert!(
            elapsed < Duration::from_secs(3),
            "{step}: the run took {elapsed:?}"
        );
        f.still_serves(step);
    }
}

/// Through the GPU service itself (`LocalGpu`, as a run or a remote client uses it): a session
/// on a 1 MiB lease with `faults.ptx` loaded, a spare 4 KiB buffer, and `spin_forever` launched.
mod service {
    use super::*;
    use std::sync::Arc;
    use tasklet_runtime::gpu::{
        BufferId, GpuService, KernelArg, LaunchConfig, LeaseId, LeaseRequest, LocalGpu, ModuleId,
        SessionId,
    };
    use tasklet_runtime::GpuError;
    use tasklet_tests::{eventually, pid_alive};

    const FAULTS_PTX: &str = include_str!("../../../kernels/faults.ptx");

    struct Spinning {
        /// Taken to drop it.
        gpu: Option<LocalGpu>,
        lease: LeaseId,
        session: SessionId,
        module: ModuleId,
        spare: BufferId,
        /// The lease's worker process.
        pid: u32,
    }

    fn spinning(host: &Host) -> Spinning {
        let grant = host.policy().grant(&manifest("testing/probe"));
        let mut gpu = LocalGpu::new(grant, Arc::clone(host.leases()));
        let lease = gpu
            .lease_acquire(LeaseRequest {
                min_vram: 1 << 20,
                secs: 60,
                device: None,
            })
            .expect("lease");
        let pids = host.lease_worker_pids();
        assert_eq!(pids.len(), 1, "{pids:?}");
        let session = gpu.session_open(lease).expect("session");
        let module = gpu.module_load(session, FAULTS_PTX).expect("faults.ptx");
        let flag = gpu.mem_alloc(session, 4).expect("alloc");
        let spare = gpu.mem_alloc(session, 4096).expect("alloc");
        let config = LaunchConfig {
            grid: [1, 1, 1],
            block: [32, 1, 1],
            shared_mem_bytes: 0,
        };
        let args = [KernelArg::Buffer {
            buffer: flag,
            offset: 0,
        }];
        gpu.launch(session, module, "spin_forever", &config, &args)
            .expect("launch");
        // Running on the device (or the emulator), not merely queued.
        std::thread::sleep(Duration::from_millis(20));
        Spinning {
            gpu: Some(gpu),
            lease,
            session,
            module,
            spare,
            pid: pids[0],
        }
    }

    impl Spinning {
        fn gpu(&mut self) -> &mut LocalGpu {
            self.gpu.as_mut().expect("the service is not dropped yet")
        }
    }

    /// The worker given up dies, the books are back at baseline, and the host serves on.
    #[track_caller]
    fn given_up(host: &Host, pid: u32, what: &str) {
        assert_baseline(host);
        assert!(
            eventually(Duration::from_secs(10), || !pid_alive(pid)),
            "{what}: the busy worker {pid} was not killed"
        );
        let iota = load(host, manifest("iota"));
        assert_eq!(run_ok(host, &iota, "2"), "1\n2\n", "after {what}");
        assert_baseline(host);
    }

    #[track_caller]
    fn assert_error(r: Result<impl std::fmt::Debug, GpuError>, name: &str, says: &[&str]) {
        let e = r.expect_err("an error");
        assert_eq!(e.name(), name, "{e}");
        for s in says {
            assert!(e.message().contains(s), "{s:?} not in: {e}");
        }
    }

    /// Each drop, by how it is done to a [`Spinning`] session.
    type DropIt = fn(&mut Spinning);
    const DROPS: [(&str, DropIt); 5] = [
        ("mem-free", |s| {
            let (session, spare) = (s.session, s.spare);
            s.gpu().mem_free(session, spare)
        }),
        ("module-unload", |s| {
            let (session, module) = (s.session, s.module);
            s.gpu().module_unload(session, module)
        }),
        ("session-drop", |s| {
            let session = s.session;
            s.gpu().session_drop(session)
        }),
        ("lease-drop", |s| {
            let lease = s.lease;
            s.gpu().lease_drop(lease)
        }),
        // How a run's trap or return ends its leases.
        ("the service's drop", |s| drop(s.gpu.take())),
    ];

    /// Runs `f` while another thread sleeps 1 ms at a time; returns what `f` returned and the
    /// machine's share of its time: the worst that thread woke late, plus the time the calling
    /// thread itself spent ready to run but not running (its run-queue delay, from
    /// `/proc/thread-self/schedstat`; none counted where that cannot be read). On a machine busy
    /// with other tests (the GPU suite runs one per core, beside their workers, which spin), a
    /// timer's wake-up can come tens of milliseconds late, or the caller be kept off its core as
    /// long, which is the machine's and no drop's.
    fn with_lateness<T>(f: impl FnOnce() -> T) -> (T, Duration) {
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            let watcher = scope.spawn(|| {
                let mut worst = Duration::ZERO;
                while !done.load(std::sync::atomic::Ordering::Acquire) {
                    let t = Instant::now();
                    std::thread::sleep(Duration::from_millis(1));
                    worst = worst.max(t.elapsed().saturating_sub(Duration::from_millis(1)));
                }
                worst
            });
            let queued = run_queue_delay();
            let out = f();
            let queued = run_queue_delay().saturating_sub(queued);
            done.store(true, std::sync::atomic::Ordering::Release);
            (out, watcher.join().unwrap_or_default() + queued)
        })
    }

    /// The calling thread's time spent waiting for a CPU so far (the second field of
    /// `/proc/thread-self/schedstat`, in nanoseconds); zero where it cannot be read.
    fn run_queue_delay() -> Duration {
        std::fs::read_to_string("/proc/thread-self/schedstat")
            .ok()
            .and_then(|s| s.split_whitespace().nth(1)?.parse().ok())
            .map_or(Duration::ZERO, Duration::from_nanos)
    }

    /// A sync waiting on one tenant's runaway kernel holds its lease for as long as the kernel's
    /// deadline; the node's books (what inventory and metrics read, and placement of others'
    /// leases) answer meanwhile without waiting for it.
    #[test]
    fn a_sync_waiting_on_a_runaway_holds_up_no_one_reading_the_books() {
        let host = test_host!(policy_with_deadline(Duration::from_secs(3)));
        let mut s = spinning(&host);
        let mut gpu = s.gpu.take().expect("the service");
        let session = s.session;
        let waiting = std::thread::spawn(move || {
            let r = gpu.sync(session);
            (gpu, r)
        });
        // The sync is now waiting on the kernel.
        std::thread::sleep(Duration::from_millis(300));
        let (took, late) = with_lateness(|| {
            let t = Instant::now();
            let books = host.leases().accounting();
            let devices = host.leases().device_usage();
            assert_eq!(books.leases, 1, "{books:?}");
            assert!(books.used_bytes >= 4096, "{books:?}");
            assert_eq!(
                devices.iter().map(|d| d.used_bytes).sum::<u64>(),
                books.used_bytes
            );
            t.elapsed()
        });
        assert!(
            took <= DROP_BOUND + late,
            "reading the books took {took:?} while another lease's sync waited on its kernel"
        );
        let (gpu, r) = waiting.join().expect("the syncing thread");
        assert_error(r, "deadline-exceeded", &["spin_forever"]);
        drop(gpu);
        given_up(&host, s.pid, "the runaway's lease");
    }

    #[test]
    fn a_drop_while_a_kernel_runs_returns_within_50ms_and_gives_the_worker_up() {
        let host = test_host!(policy_with_deadline(Duration::from_secs(10)));
        for (what, drop_it) in DROPS {
            let mut s = spinning(&host);
            let (took, late) = with_lateness(|| {
                let t = Instant::now();
                drop_it(&mut s);
                t.elapsed()
            });
            eprintln!(
                "time_limits: {what} while a kernel runs returned after {took:?} (the machine's share: {late:?}, timer wake-ups late and time kept off the CPU)"
            );
            assert!(
                took <= DROP_BOUND + late,
                "{what} took {took:?}, of which the machine's share (wake-ups late, time kept off the CPU) at most {late:?}"
            );
            if what == "mem-free" {
                // Freeing waits for the kernels (on the device too): the session's lease ended
                // with the worker, saying why. (An unload may be done at once, from the worker's
                // module cache, leaving the kernel running and the lease live.)
                let session = s.session;
                assert_error(
                    s.gpu().mem_alloc(session, 16),
                    "lease-expired",
                    &["dropped while its kernels", "sync before dropping"],
                );
            }
            // Whatever is left ends at once too.
            let t = Instant::now();
            drop(s.gpu.take());
            assert!(t.elapsed() <= DROP_BOUND, "after {what}: {:?}", t.elapsed());
            given_up(&host, s.pid, what);
        }
    }

    #[test]
    fn a_drop_after_the_kernels_finished_keeps_the_lease() {
        let host = test_host!();
        let grant = host.policy().grant(&manifest("testing/probe"));
        let mut gpu = LocalGpu::new(grant, Arc::clone(host.leases()));
        let lease = gpu
            .lease_acquire(LeaseRequest {
                min_vram: 1 << 20,
                secs: 60,
                device: None,
            })
            .expect("lease");
        let pid = host.lease_worker_pids()[0];
        let session = gpu.session_open(lease).expect("session");
        let module = gpu
            .module_load(session, include_str!("../../../kernels/iota.ptx"))
            .expect("iota");
        let buf = gpu.mem_alloc(session, 64).expect("alloc");
        let config = LaunchConfig {
            grid: [1, 1, 1],
            block: [16, 1, 1],
            shared_mem_bytes: 0,
        };
        let args = [
            KernelArg::Buffer {
                buffer: buf,
                offset: 0,
            },
            KernelArg::U32(16),
        ];
        gpu.launch(session, module, "iota", &config, &args)
            .expect("launch");
        // Not synced: the kernel has long finished, and the free waits for it only briefly.
        std::thread::sleep(Duration::from_millis(200));
        gpu.mem_free(session, buf);
        gpu.module_unload(session, module);
        let again = gpu.mem_alloc(session, 64).expect("the lease lives on");
        gpu.sync(session).expect("sync");
        gpu.mem_free(session, again);
        assert_eq!(host.lease_worker_pids(), vec![pid], "the same worker");
        drop(gpu);
        assert_baseline(&host);
    }

    #[test]
    fn a_run_limit_ends_a_blocked_call_and_the_lease_naming_the_wall_time() {
        let host = test_host!(policy_with_deadline(Duration::from_secs(10)));
        let mut s = spinning(&host);
        let limit = Duration::from_millis(500);
        let t = Instant::now();
        // Told after the lease was acquired: it binds the lease anyway.
        s.gpu().run_ends_at(t + limit);
        let session = s.session;
        let r = s.gpu().sync(session);
        let took = t.elapsed();
        eprintln!("time_limits: a sync with {limit:?} of wall-time left ended after {took:?}");
        assert_error(r, "deadline-exceeded", &["wall-time", "[limits]"]);
        assert!(
            took >= limit && took < limit + Duration::from_millis(100),
            "{took:?}"
        );
        assert_error(
            s.gpu().mem_alloc(session, 16),
            "lease-expired",
            &["wall-time limit"],
        );
        drop(s.gpu.take());
        given_up(&host, s.pid, "the run's end");
    }

    #[test]
    fn a_lease_that_would_wait_for_a_worker_past_the_runs_end_fails_naming_the_wall_time() {
        // No warm worker: a lease waits for one to start.
        let mut policy = test_policy();
        policy.workers.warm = 0;
        let host = test_host!(policy);
        let grant = host.policy().grant(&manifest("testing/probe"));
        let mut gpu = LocalGpu::new(grant, Arc::clone(host.leases()));
        gpu.run_ends_at(Instant::now());
        let t = Instant::now();
        let r = gpu.lease_acquire(LeaseRequest {
            min_vram: 1 << 20,
            secs: 60,
            device: None,
        });
        assert_error(r, "deadline-exceeded", &["wall-time"]);
        assert!(t.elapsed() < Duration::from_millis(50), "{:?}", t.elapsed());
        drop(gpu);
        assert_baseline(&host);
    }
}

/// A tasklet asleep (`std::thread::sleep`: a wait on the WASI clock, a host call that epoch
/// interruption cannot cut short) ends at its wall-time limit as one that computes does, and
/// one stopped from outside within a tick or so of the stop, not when its sleep is over.
#[test]
fn a_sleeping_tasklet_ends_at_its_wall_time_limit_and_when_stopped() {
    use std::sync::Arc;
    use tasklet_runtime::{gpu::LocalGpu, GuestOutput, RunStop};
    let host = test_host!();
    let wall = Duration::from_millis(500);
    let mut m = manifest("testing/probe");
    m.limits.wall_time = wall;
    let probe = load(&host, m);
    let started = Instant::now();
    let r = host.run(&probe, b"sleep 30");
    let took = started.elapsed();
    assert!(
        matches!(r, Err(RunError::WallTime(limit)) if limit == wall),
        "{r:?}"
    );
    assert!(took < wall + WALL_TIME_SLACK, "a 30 s sleep ran {took:?}");

    // A sleep well within the limit (the manifest's 30 s) sleeps its time, no less.
    let probe = load(&host, manifest("testing/probe"));
    let lines = lines_of(host.run(&probe, b"sleep 0.1"));
    let slept: u64 = match lines.first() {
        Some((ok, slept, ms)) if ok == "ok" && slept == "slept" => ms.parse().unwrap(),
        other => panic!("{other:?}"),
    };
    assert!((100..5_000).contains(&slept), "slept {slept} ms");

    let stop = RunStop::new();
    let stopper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            stop.stop();
            Instant::now()
        })
    };
    let gpu = LocalGpu::new(probe.grant, Arc::clone(host.leases()));
    let r = host.runner().run_until(
        &probe,
        b"sleep 30",
        Box::new(gpu),
        &stop,
        &GuestOutput::Inherit,
    );
    let late = stopper.join().unwrap().elapsed();
    assert!(matches!(r, Err(RunError::Stopped)), "{r:?}");
    assert!(
        late < Duration::from_millis(200),
        "ended {late:?} after its stop"
    );
    assert_baseline(&host);
}
