//! What a launch and a module are checked against, through a tasklet's GPU service on this node
//! (`LocalGpu`, as a tasklet or a remote client uses it) on the suite's backend: a launch past the
//! device's limits fails at once naming the limit; an error found after a launch returned names
//! that launch, not the call that reported it; and modules a GPU refuses are refused on every
//! backend, in the same words.

use tasklet_runtime::gpu::{GpuService, KernelArg, LaunchConfig, LocalGpu, ModuleId, SessionId};
use tasklet_runtime::GpuError;
use tasklet_tests::{assert_baseline, probe_session, test_host};

const IOTA_PTX: &str = include_str!("../../../kernels/iota.ptx");
const FAULTS_PTX: &str = include_str!("../../../kernels/faults.ptx");

fn config(grid: [u32; 3], block: [u32; 3], shared_mem_bytes: u32) -> LaunchConfig {
    LaunchConfig {
        grid,
        block,
        shared_mem_bytes,
    }
}

/// `iota(buffer, n)` on `grid` × `block`.
fn iota(
    gpu: &mut LocalGpu,
    s: SessionId,
    m: ModuleId,
    buffer: tasklet_runtime::gpu::BufferId,
    c: LaunchConfig,
) -> Result<(), GpuError> {
    let args = [KernelArg::Buffer { buffer, offset: 0 }, KernelArg::U32(16)];
    gpu.launch(s, m, "iota", &c, &args)
}

#[track_caller]
fn assert_error(r: Result<impl std::fmt::Debug, GpuError>, name: &str, says: &[&str]) -> String {
    let e = r.expect_err("an error");
    assert_eq!(e.name(), name, "{e}");
    for s in says {
        assert!(e.message().contains(s), "{s:?} not in: {e}");
    }
    e.message().to_owned()
}

#[test]
fn a_launch_past_the_devices_limits_fails_at_once_naming_the_limit_and_the_value() {
    let host = test_host!();
    let limits = host.device().launch_limits;
    assert!(limits.max_threads_per_block >= 1024, "{limits:?}");
    let (mut gpu, s) = probe_session(&host);
    let m = gpu.module_load(s, IOTA_PTX).expect("iota loads");
    let buf = gpu.mem_alloc(s, 4096).expect("alloc");
    let max_grid_y = limits.max_grid[1];
    let cases = [
        (
            config([1, 1, 1], [limits.max_block[0] * 2, 1, 1], 0),
            format!(
                "block dimension x is {}, over this device's limit of {} (max block dimension x)",
                limits.max_block[0] * 2,
                limits.max_block[0]
            ),
        ),
        (
            config([1, 1, 1], [limits.max_block[0], 2, 1], 0),
            format!(
                "has {} threads, over this device's limit of {} (max threads per block)",
                limits.max_block[0] * 2,
                limits.max_threads_per_block
            ),
        ),
        (
            config([1, max_grid_y + 1, 1], [32, 1, 1], 0),
            format!(
                "grid dimension y is {}, over this device's limit of {max_grid_y} (max grid dimension y)",
                max_grid_y + 1
            ),
        ),
        (
            config([1, 1, 1], [32, 1, 1], 1 << 30),
            format!(
                "1073741824 bytes of dynamic shared memory, over this device's limit of {} (max shared memory per block)",
                limits.max_shared_per_block
            ),
        ),
        (
            config([0, 1, 1], [32, 1, 1], 0),
            "must have every dimension at least 1".to_owned(),
        ),
    ];
    for (c, says) in &cases {
        let r = iota(&mut gpu, s, m, buf, *c);
        let message = assert_error(r, "launch-failed", &[says, "kernel \"iota\""]);
        // Refused here, not later: the next calls are not blamed for it, and none of them fails.
        gpu.mem_write(s, buf, 0, &[1, 2, 3, 4])
            .unwrap_or_else(|e| panic!("after {message:?}, a write failed: {e}"));
        gpu.sync(s)
            .unwrap_or_else(|e| panic!("after {message:?}, sync failed: {e}"));
    }
    // A launch within the limits still runs.
    iota(&mut gpu, s, m, buf, config([1, 1, 1], [16, 1, 1], 0)).expect("a good launch");
    gpu.sync(s).expect("sync");
    let out = gpu.mem_read(s, buf, 60, 4).expect("read");
    assert_eq!(out, 16u32.to_le_bytes());
    drop(gpu);
    assert_baseline(&host);
}

#[test]
fn an_error_found_after_a_launch_names_that_launch_not_the_call_that_reports_it() {
    let host = test_host!();
    let (mut gpu, s) = probe_session(&host);
    let iota_module = gpu.module_load(s, IOTA_PTX).expect("iota loads");
    let faults = gpu.module_load(s, FAULTS_PTX).expect("faults loads");
    let buf = gpu.mem_alloc(s, 4096).expect("alloc");
    for _ in 0..2 {
        iota(
            &mut gpu,
            s,
            iota_module,
            buf,
            config([1, 1, 1], [16, 1, 1], 0),
        )
        .expect("launch");
    }
    gpu.sync(s).expect("sync");
    // Launch #3 writes 4 TiB past its buffer. On the emulator it faults in the worker after the
    // launch returned; on a GPU, on the device. Either way the next call that waits says so.
    let args = [
        KernelArg::Buffer {
            buffer: buf,
            offset: 0,
        },
        KernelArg::U64(1 << 40),
    ];
    let launched = gpu.launch(
        s,
        faults,
        "write_out_of_bounds",
        &config([1, 1, 1], [1, 1, 1], 0),
        &args,
    );
    let r = launched.and_then(|()| gpu.mem_alloc(s, 16));
    let message = assert_error(r, "kernel-fault", &[]);
    assert!(
        message.starts_with("launch #3 of kernel `write_out_of_bounds`"),
        "the launch is named, not the allocation that reported it: {message}"
    );
    drop(gpu);
    assert_baseline(&host);
}

#[test]
fn modules_a_gpu_refuses_are_refused_on_every_backend_with_the_same_fix() {
    let host = test_host!();
    let (major, minor) = host.device().compute_capability;
    let (mut gpu, s) = probe_session(&host);
    for empty in ["", "\n// nothing but a comment\n"] {
        assert_error(
            gpu.module_load(s, empty),
            "load-failed",
            &[
                "the module is empty",
                "a PTX module begins with `.version` and `.target`",
            ],
        );
    }
    let too_new = IOTA_PTX.replacen(".version 9.0", ".version 99.0", 1);
    assert_ne!(too_new, IOTA_PTX, "iota.ptx is ISA 9.0");
    assert_error(
        gpu.module_load(s, &too_new),
        "load-failed",
        &[
            "the PTX is ISA version 99.0 (its `.version`), newer than this driver compiles (PTX ISA up to",
            "compile it with a CUDA toolkit or NVRTC of CUDA",
        ],
    );
    let beyond = format!("sm_{}0", major + 1);
    let newer_arch = IOTA_PTX.replacen(".target sm_80", &format!(".target {beyond}"), 1);
    assert_error(
        gpu.module_load(s, &newer_arch),
        "load-failed",
        &[
            &format!(
                "the PTX targets {beyond} (its `.target`), which this device (sm_{major}{minor}) cannot run"
            ),
            &format!(
                "nvcc -arch=compute_{major}{minor} --ptx, or NVRTC's --gpu-architecture=compute_{major}{minor}"
            ),
        ],
    );
    // None of them costs the lease anything.
    gpu.module_load(s, IOTA_PTX).expect("iota still loads");
    drop(gpu);
    assert_baseline(&host);
}
