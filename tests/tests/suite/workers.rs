//! Worker supervision: faults, runaway kernels and killed workers stay within their lease.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tasklet_tests::{
    assert_baseline, assert_first_gpu_error, assert_gpu_error, eventually, load, manifest,
    pid_alive, probe_lines, run_ok, spawn_run, test_host,
};

#[test]
fn a_faulting_kernel_is_kernel_fault_and_the_node_keeps_serving() {
    let host = test_host!();
    let probe = load(&host, manifest("testing/probe"));
    let lines = probe_lines(&run_ok(&host, &probe, "fault"));
    // The emulator names the faulting PTX line; the GPU reports the driver's error.
    let names = match tasklet_tests::backend() {
        tasklet_runtime::BackendKind::Emu => "line",
        tasklet_runtime::BackendKind::Cuda => "CUDA_ERROR_",
    };
    assert_first_gpu_error(&lines, "kernel-fault", names);
    assert_baseline(&host);
    let iota = load(&host, manifest("iota"));
    assert_eq!(run_ok(&host, &iota, "4"), "1\n2\n3\n4\n");
    assert_baseline(&host);
}

#[test]
fn a_runaway_kernel_is_deadline_exceeded() {
    let host = test_host!();
    let probe = load(&host, manifest("testing/probe"));
    let started = Instant::now();
    let lines = probe_lines(&run_ok(&host, &probe, "spin"));
    let deadline = host.policy().workers.kernel_deadline;
    assert!(
        started.elapsed() < deadline + Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert_first_gpu_error(&lines, "deadline-exceeded", "");
    assert_baseline(&host);
}

#[test]
fn a_killed_worker_is_device_lost_and_the_next_lease_works() {
    let host = Arc::new(test_host!());
    let probe = Arc::new(load(&host, manifest("testing/probe")));
    let run = spawn_run(&host, &probe, "hold 20");
    let started = Instant::now();
    let pid = loop {
        if let Some(&pid) = host.lease_worker_pids().first() {
            break pid;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the probe never took a lease"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    // SAFETY: plain kill(2) on a process this test's host started.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    let lines = probe_lines(&run.join().unwrap().0);
    assert_gpu_error(&lines, 0, "device-lost", "");
    assert!(started.elapsed() < Duration::from_secs(15));
    assert_baseline(&host);
    let iota = load(&host, manifest("iota"));
    assert_eq!(run_ok(&host, &iota, "5"), "1\n2\n3\n4\n5\n");
    assert_baseline(&host);
}

#[test]
fn a_worker_holding_other_than_its_lease_accounts_for_is_replaced_not_reused() {
    use tasklet_runtime::lease::EndReason;
    let host = test_host!();
    let leases = host.leases();
    // A worker that holds 4 KiB the lease never accounted for (as a host bug or a lying worker
    // would leave it): the mismatch is counted and the worker killed, not reused.
    let lease = leases
        .acquire(1 << 20, Duration::from_secs(60))
        .expect("lease");
    let pid = lease.worker_pid().expect("pid");
    leases
        .with_worker(&lease, |w| w.alloc(4096).map(drop))
        .expect("alloc");
    leases.end(&lease, EndReason::Dropped);
    assert_eq!(host.accounting().mismatches, 1);
    // Killed at once; a GPU's driver may take seconds to tear a killed process's context down
    // before it is gone (seen once on an H200: more than 2 s).
    let gone = eventually(Duration::from_secs(10), || !pid_alive(pid));
    assert!(gone, "the mismatched worker {pid} is still alive");
    // Books that match: reconciled, and the worker is reused by the next lease.
    let lease = leases
        .acquire(1 << 20, Duration::from_secs(60))
        .expect("lease");
    let pid = lease.worker_pid().expect("pid");
    leases.alloc(&lease, 4096).expect("alloc");
    leases.end(&lease, EndReason::Dropped);
    assert_eq!(host.accounting().mismatches, 1);
    let next = leases
        .acquire(1 << 20, Duration::from_secs(60))
        .expect("lease");
    assert_eq!(
        next.worker_pid(),
        Some(pid),
        "the reconciled worker is reused"
    );
    let info = leases.with_worker(&next, |w| w.info()).expect("info");
    assert_eq!(
        (info.allocations, info.memory_requested),
        (0, 0),
        "and was reset"
    );
    leases.end(&next, EndReason::Dropped);
    let a = host.accounting();
    assert_eq!((a.leases, a.granted_bytes, a.used_bytes), (0, 0, 0));
}

/// A release answered with an earlier launch's failure (the worker holds it for its next call)
/// is made all the same, and the failure is owed to the holder's next operation: an unload
/// after a launch the worker refused unloads the module, the host's own calls leave the failure
/// owed, and the holder's next call reports the launch, once.
#[test]
fn an_unload_answered_with_a_launchs_failure_unloads_and_the_next_call_reports_it() {
    let host = test_host!();
    let leases = host.leases();
    let lease = leases
        .acquire(1 << 20, Duration::from_secs(60))
        .expect("lease");
    let iota = include_str!("../../../kernels/iota.ptx");
    // The launch still pending at the unload (the sync before it takes the failure), and taken
    // by the worker by then (the unload is answered with it).
    for pause in [Duration::ZERO, Duration::from_millis(50)] {
        let module = leases
            .with_worker(&lease, |w| w.load_module(iota))
            .expect("load");
        // A launch of a kernel the module lacks: the worker refuses it and holds the failure,
        // which answers the next call but a free (here the unload, whether the launch is still
        // pending, when the sync before the unload takes it, or not).
        leases
            .with_worker(&lease, |w| post_refused_launch(w, &module))
            .expect("posted");
        std::thread::sleep(pause);
        leases
            .unload(&lease, module.id)
            .expect("the unload is made");
        leases
            .with_worker(&lease, |w| w.ping())
            .expect("a host's call leaves it owed");
        assert_owed_refused_launch(leases, &lease);
        let info = leases
            .with_worker_owing(&lease, |w| w.info())
            .expect("reported once");
        assert_eq!(info.modules, 0, "{info:?}");
    }
    leases.end(&lease, tasklet_runtime::lease::EndReason::Dropped);
    assert_baseline(&host);
}

/// The host's own release of a graph's worker form (a graph dropped, or its session) answered
/// with an earlier launch's failure is made all the same, and the failure is owed to the
/// holder's next operation; a release that fails on its own (a graph the worker does not hold)
/// is owed nothing.
#[test]
fn a_graph_destroyed_beside_a_launchs_failure_is_destroyed_and_the_next_call_reports_it() {
    use tasklet_worker::contract::messages::GraphOp;
    let host = test_host!();
    let leases = host.leases();
    let lease = leases
        .acquire(1 << 20, Duration::from_secs(60))
        .expect("lease");
    let iota = include_str!("../../../kernels/iota.ptx");
    let module = leases
        .with_worker(&lease, |w| w.load_module(iota))
        .expect("load");
    let buffer = leases.alloc(&lease, 4096).expect("alloc");
    let graph = leases
        .with_worker(&lease, |w| {
            w.graph_create(&[GraphOp::Fill {
                addr: buffer,
                len: 4096,
                value: 7,
            }])
        })
        .expect("graph");
    // A launch the worker refuses (its module has no kernel 99): the failure is held for the
    // next call, which the graph's destroy is.
    leases
        .with_worker(&lease, |w| post_refused_launch(w, &module))
        .expect("posted");
    leases
        .release_with(&lease, |w| w.graph_destroy(graph))
        .expect("the graph is destroyed");
    assert_owed_refused_launch(leases, &lease);
    let replay = leases.with_worker_owing(&lease, |w| {
        w.graph_replay(graph, 1, &[], Duration::from_secs(10))
    });
    assert!(
        replay.is_err(),
        "the destroyed graph replayed: it was not destroyed"
    );
    // Its own failure (destroyed already): an error, and nothing owed for it.
    assert!(leases
        .release_with(&lease, |w| w.graph_destroy(graph))
        .is_err());
    leases
        .with_worker_owing(&lease, |w| w.info())
        .expect("nothing owed");
    leases.free(&lease, buffer, 4096).expect("free");
    leases.end(&lease, tasklet_runtime::lease::EndReason::Dropped);
    assert_baseline(&host);
}

/// Posts a launch the worker refuses (its module has no kernel 99): the worker holds the
/// failure for its next call.
fn post_refused_launch(
    w: &mut tasklet_worker::Worker,
    module: &tasklet_worker::LoadedModule,
) -> Result<(), tasklet_worker::WorkerError> {
    w.launch(&tasklet_worker::Launch {
        module: module.id,
        kernel: 99,
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_mem_bytes: 0,
        args: &[],
        deadline: Duration::from_secs(10),
    })
}

/// The holder's next call reports the launch [`post_refused_launch`] posted, in its place.
#[track_caller]
fn assert_owed_refused_launch(
    leases: &tasklet_runtime::lease::LeaseManager,
    lease: &tasklet_runtime::lease::Lease,
) {
    let info = leases.with_worker_owing(lease, |w| w.info());
    let failure = info
        .as_ref()
        .err()
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(failure.contains("of kernel 99 of module"), "{info:?}");
}
