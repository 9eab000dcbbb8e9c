//! Rights, quotas and handle ownership: every limit shown biting, through real components.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tasklet_runtime::config::{DeviceSelector, Right, Rights};
use tasklet_runtime::{BackendKind, RunError};
use tasklet_tests::{
    assert_baseline, assert_gpu_error, backend, load, manifest, probe_lines, run_ok, run_probe,
    spawn_run, test_host, test_policy,
};

#[test]
fn missing_launch_right_is_unauthorized_naming_launch() {
    let host = test_host!();
    let mut m = manifest("iota");
    m.gpu.rights = Rights::ALL.iter().filter(|r| *r != Right::Launch).collect();
    let iota = load(&host, m);
    let err = host.run(&iota, b"8").unwrap_err().to_string();
    assert!(
        err.contains("unauthorized") && err.contains("`launch`"),
        "{err}"
    );
    assert_baseline(&host);
}

#[test]
fn policy_can_withhold_a_right_the_manifest_asks_for() {
    let mut policy = test_policy();
    policy.gpu.rights = Rights::ALL.iter().filter(|r| *r != Right::Read).collect();
    let host = test_host!(policy);
    let iota = load(&host, manifest("iota"));
    let err = host.run(&iota, b"8").unwrap_err().to_string();
    assert!(
        err.contains("unauthorized") && err.contains("`read`"),
        "{err}"
    );
    assert_baseline(&host);
}

#[test]
fn allocation_past_the_lease_is_quota_exceeded() {
    let host = test_host!();
    let lines = run_probe(&host, "alloc-past-lease");
    assert_gpu_error(&lines, 0, "quota-exceeded", "");
    assert_baseline(&host);
}

#[test]
fn leases_past_the_grant_are_quota_exceeded() {
    let host = test_host!();
    // The probe's manifest grants two leases.
    let lines = run_probe(&host, "leases 3");
    assert_eq!(
        lines[..2].iter().filter(|l| l.0 == "ok").count(),
        2,
        "{lines:?}"
    );
    assert_gpu_error(&lines, 2, "quota-exceeded", "");
    assert_baseline(&host);
}

#[test]
fn leases_past_the_device_are_capacity_exceeded() {
    let mut policy = test_policy();
    policy.workers.max_device_memory = Some(1 << 20); // room for exactly one 1 MiB lease, on any backend
                                                      // One device, whatever the machine has: on a node of two GPUs the second lease would go to
                                                      // the other (devices:: tests that).
    if backend() == BackendKind::Cuda {
        policy.devices.cuda = Some(vec![DeviceSelector::Index(0)]);
    }
    let host = test_host!(policy);
    let lines = run_probe(&host, "leases 2");
    assert_eq!(lines[0].0, "ok", "{lines:?}");
    assert_gpu_error(&lines, 1, "capacity-exceeded", "");
    assert_baseline(&host);
}

#[test]
fn a_foreign_buffer_is_rejected() {
    let host = test_host!();
    let lines = run_probe(&host, "foreign-buffer");
    assert_eq!(lines.len(), 3, "{lines:?}");
    for i in 0..lines.len() {
        assert_gpu_error(&lines, i, "invalid-argument", "another session");
    }
    assert_baseline(&host);
}

#[test]
fn out_of_range_read_is_out_of_bounds() {
    let host = test_host!();
    let lines = run_probe(&host, "oob-read");
    assert_gpu_error(&lines, 0, "out-of-bounds", "");
    assert_baseline(&host);
}

#[test]
fn malformed_ptx_is_load_failed_naming_the_line() {
    let host = test_host!();
    let lines = run_probe(&host, "bad-ptx");
    assert_gpu_error(&lines, 0, "load-failed", "line 7");
    assert_baseline(&host);
}

#[test]
fn an_expiring_lease_frees_its_memory_mid_session() {
    let host = Arc::new(test_host!());
    let probe = Arc::new(load(&host, manifest("testing/probe")));
    let started = Instant::now();
    let run = spawn_run(&host, &probe, "expire");
    // The probe holds a 1 s lease, then sleeps 1.5 s: the reaper must free the lease while the
    // tasklet is still running, not when it ends.
    let mut freed_while_running = false;
    while !run.is_finished() {
        if started.elapsed() > Duration::from_millis(300) && host.accounting().leases == 0 {
            freed_while_running = !run.is_finished();
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let lines = probe_lines(&run.join().unwrap().0);
    assert!(
        freed_while_running,
        "the expired lease was not freed while the tasklet ran"
    );
    assert_eq!(lines[0].0, "ok", "{lines:?}");
    assert_gpu_error(&lines, 1, "lease-expired", "");
    assert_gpu_error(&lines, 2, "lease-expired", "");
    assert_baseline(&host);
}

#[test]
fn a_trapping_tasklet_releases_its_leases() {
    let host = test_host!();
    let probe = load(&host, manifest("testing/probe"));
    let err = host.run(&probe, b"trap").unwrap_err();
    assert!(matches!(err, RunError::Trapped(_)), "{err}");
    assert_baseline(&host);
    // And the node still serves.
    let iota = load(&host, manifest("iota"));
    assert_eq!(run_ok(&host, &iota, "3"), "1\n2\n3\n");
    assert_baseline(&host);
}

#[test]
fn wall_time_limit_stops_a_tasklet_and_releases_its_leases() {
    let host = test_host!();
    let mut m = manifest("testing/probe");
    m.limits.wall_time = Duration::from_millis(300);
    let probe = load(&host, m);
    let started = Instant::now();
    let err = host.run(&probe, b"hold 20").unwrap_err();
    assert!(matches!(err, RunError::WallTime(_)), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    assert_baseline(&host);
}

#[test]
fn memory_limit_stops_a_tasklet_that_grows_past_it() {
    let host = test_host!();
    let mut m = manifest("testing/probe");
    m.limits.memory = 16 << 20;
    let probe = load(&host, m);
    assert_eq!(run_ok(&host, &probe, "grow 4"), "ok grew 4\n");
    let err = host.run(&probe, b"grow 32").unwrap_err();
    assert!(matches!(err, RunError::Trapped(_)), "{err}");
    assert_baseline(&host);
}

#[test]
fn many_tiny_allocations_are_charged_in_whole_units() {
    let host = test_host!();
    let lines = run_probe(&host, "tiny-allocs");
    // A 1 MiB lease holds exactly 1 MiB / ALLOC_GRANULE one-byte buffers, not a million.
    let expected = (1u64 << 20) / tasklet_worker::ALLOC_GRANULE;
    assert_eq!(
        lines[0],
        ("ok".into(), "allocs".into(), expected.to_string()),
        "{lines:?}"
    );
    assert_gpu_error(&lines, 1, "quota-exceeded", "");
    assert_baseline(&host);
}

#[test]
fn a_read_larger_than_the_tasklets_memory_is_refused_before_the_host_allocates_it() {
    let host = test_host!();
    let mut m = manifest("testing/probe");
    m.limits.memory = 8 << 20;
    let probe = load(&host, m);
    let lines = probe_lines(&run_ok(&host, &probe, "big-read 16"));
    assert_gpu_error(&lines, 0, "out-of-bounds", "memory limit");
    assert_baseline(&host);
}

/// A module whose `.global` variables take `bytes`, with a kernel that writes their last byte.
fn module_with_variables(bytes: u64) -> String {
    format!(
        ".version 8.0\n.target sm_80\n.address_size 64\n\
         .global .align 8 .b8 state[{bytes}];\n\
         .visible .entry touch()\n{{\n\t.reg .b64 %rd<2>;\n\t.reg .b16 %rs<2>;\n\
         \tmov.u64 %rd1, state;\n\tmov.u16 %rs1, 7;\n\tst.global.u8 [%rd1+{last}], %rs1;\n\tret;\n}}\n",
        last = bytes - 1
    )
}

/// A module's `.global` variables take device memory in each loaded copy, so they are charged
/// to the lease like an allocation: a load past the lease's grant is refused (and holds
/// nothing), an allocation that no longer fits beside them is refused, unloading gives their
/// charge back, and a lease that ends with them loaded reconciles with its worker.
#[test]
fn module_variables_are_charged_to_the_lease() {
    use tasklet_runtime::gpu::{GpuService, LaunchConfig, LocalGpu};
    use tasklet_runtime::GpuError;
    let host = test_host!();
    let (mut gpu, lease, s) = tasklet_tests::probe_lease_session(&host, 4 << 20);
    let used = |gpu: &mut LocalGpu| gpu.lease_info(lease).expect("lease info").used_bytes;

    let two = gpu
        .module_load(s, &module_with_variables(2 << 20))
        .expect("2 MiB of variables on a 4 MiB lease");
    assert_eq!(used(&mut gpu), 2 << 20);
    let one_block = LaunchConfig {
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_mem_bytes: 0,
    };
    gpu.launch(s, two, "touch", &one_block, &[])
        .expect("launch");
    gpu.sync(s)
        .expect("the kernel writes its module's last byte");
    match gpu.mem_alloc(s, 3 << 20) {
        Err(GpuError::QuotaExceeded(_)) => {}
        other => panic!("3 MiB beside 2 MiB of variables on 4 MiB: {other:?}"),
    }
    gpu.module_unload(s, two);
    assert_eq!(used(&mut gpu), 0, "unloading gives the charge back");
    let buffer = gpu.mem_alloc(s, 3 << 20).expect("3 MiB once they are gone");

    match gpu.module_load(s, &module_with_variables(2 << 20)) {
        Err(GpuError::QuotaExceeded(why)) => {
            assert!(why.contains(".global variables"), "{why}")
        }
        other => panic!("2 MiB of variables beside 3 MiB: {other:?}"),
    }
    assert_eq!(used(&mut gpu), 3 << 20, "a refused load holds nothing");
    gpu.module_load(s, &module_with_variables(1 << 20))
        .expect("1 MiB fits beside 3 MiB");
    assert_eq!(used(&mut gpu), 4 << 20);
    // The lease ends holding a buffer and a module with variables: its worker reports the
    // buffer alone, and that reconciles (no mismatch in the accounting).
    let _ = buffer;
    drop(gpu);
    assert_baseline(&host);
}
