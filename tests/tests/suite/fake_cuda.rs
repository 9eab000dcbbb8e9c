//! The whole path — component → host → worker process → `cuda` backend — against the fake
//! `libcuda` of host/worker/tests/fake_cuda/libcuda.c, so the cuda backend's wiring (device
//! description and sizing from a worker, asynchronous launches, faults and deadlines as tenants
//! see them, the probe commands the GPU suite relies on) is exercised on every machine. The real
//! driver's behaviour is tests/tests/gpu.rs's job. Without `cc` it prints a skip line and returns.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tasklet_runtime::{BackendKind, Host, HostConfig, WorkerCommand};
use tasklet_tests::{
    assert_baseline, assert_gpu_error, load, manifest, probe_lines, run_ok, test_policy,
};

fn fake_driver_dir() -> Option<PathBuf> {
    let dir = std::env::temp_dir().join(format!("tasklet-fake-cuda-rt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let src = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../host/worker/tests/fake_cuda/libcuda.c"
    );
    let lib = dir.join("libcuda.so.1");
    match std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&lib)
        .arg(src)
        .status()
    {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("building the fake libcuda failed: {s}"),
        Err(_) => {
            eprintln!("skipped: no C compiler for the fake libcuda");
            return None;
        }
    }
    let _ = std::os::unix::fs::symlink(&lib, dir.join("libcuda.so"));
    Some(dir)
}

#[test]
fn tasklets_run_on_the_cuda_backend_over_a_fake_driver() {
    let Some(dir) = fake_driver_dir() else { return };
    let mut policy = test_policy();
    policy.workers.kernel_deadline = Duration::from_millis(500);
    // The fake device has 1 GiB: a small context reserve keeps most of it lendable.
    policy.workers.context_reserve = 16 << 20;
    let worker = WorkerCommand {
        program: "env".into(),
        args: vec![
            format!("LD_LIBRARY_PATH={}", dir.display()),
            env!("CARGO_BIN_EXE_tasklet-test-worker").into(),
        ],
    };
    let host = Host::new(HostConfig {
        policy,
        worker,
        backend: BackendKind::Cuda,
    })
    .expect("a host on the fake driver");
    let d = host.device().clone();
    assert_eq!(
        (
            d.backend,
            d.name.as_str(),
            d.compute_capability,
            d.driver_version
        ),
        ("cuda", "Fake GPU", (9, 0), 13000)
    );
    // Its launch limits, from its device attributes (a CUDA 13.0 driver on compute capability
    // 9.0 passes 32 KiB of parameters).
    assert_eq!(
        d.launch_limits,
        tasklet_worker::LaunchLimits {
            max_threads_per_block: 1024,
            max_block: [1024, 1024, 64],
            max_grid: [2_147_483_647, 65535, 65535],
            max_shared_per_block: 232_448,
            max_param_bytes: 32_764,
        }
    );
    assert_eq!(d.device_memory, 1 << 30);
    assert_eq!(
        d.total_memory,
        (1 << 30) - 5 * (16 << 20),
        "the device less warm + max context reserves"
    );
    assert!(d.pinned_data);

    let iota = load(&host, manifest("iota"));
    let expected: String = (1..=37).map(|i| format!("{i}\n")).collect();
    assert_eq!(run_ok(&host, &iota, "37"), expected);

    let mut m = manifest("testing/probe");
    m.gpu.max_vram = 64 << 20;
    let probe = load(&host, m);
    let out = run_ok(&host, &probe, "verify 0.3");
    assert!(out.starts_with("ok verified "), "{out}");
    assert_eq!(
        run_ok(&host, &probe, "pattern 4"),
        format!("ok pattern {}\n", 4 << 20)
    );
    assert_eq!(
        run_ok(&host, &probe, "zeros 4"),
        format!("ok zeros {}\n", 4 << 20)
    );

    let lines = probe_lines(&run_ok(&host, &probe, "fault"));
    assert_eq!(lines[0].0, "ok", "the launch itself is accepted: {lines:?}");
    assert_gpu_error(&lines, 1, "kernel-fault", "CUDA_ERROR_ILLEGAL_ADDRESS");

    let t = Instant::now();
    let lines = probe_lines(&run_ok(&host, &probe, "spin"));
    assert_gpu_error(&lines, 1, "deadline-exceeded", "");
    assert!(
        t.elapsed() < Duration::from_millis(500) + Duration::from_secs(1),
        "took {:?}",
        t.elapsed()
    );

    let lines = probe_lines(&run_ok(&host, &probe, "alloc-past-lease"));
    assert_gpu_error(&lines, 0, "quota-exceeded", "");
    let lines = probe_lines(&run_ok(&host, &probe, "bad-ptx"));
    assert_gpu_error(&lines, 0, "load-failed", "line 7");
    assert_baseline(&host);
}
