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

/// The fake driver's folder, built once per process: tests run at once, and one building the
/// library while another's workers load it would hand them a half-written file.
pub(crate) fn fake_driver_dir() -> Option<PathBuf> {
    static BUILT: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    let dir = BUILT.get_or_init(build_fake_driver).clone();
    if dir.is_none() {
        eprintln!("skipped: no C compiler for the fake libcuda");
    }
    dir
}

fn build_fake_driver() -> Option<PathBuf> {
    // Under cargo's scratch folder for tests, not the machine's /tmp.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("fake-cuda-{}", std::process::id()));
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
        Err(_) => return None,
    }
    let _ = std::os::unix::fs::symlink(&lib, dir.join("libcuda.so"));
    Some(dir)
}

/// The test worker on the fake driver in `dir`, with `env` (`NAME=value`, the fake's switches)
/// set for it.
pub(crate) fn fake_worker(dir: &std::path::Path, env: &[String]) -> WorkerCommand {
    let mut args = vec![format!("LD_LIBRARY_PATH={}", dir.display())];
    args.extend(env.iter().cloned());
    args.push(env!("CARGO_BIN_EXE_tasklet-test-worker").into());
    WorkerCommand {
        program: "env".into(),
        args,
    }
}

#[test]
fn tasklets_run_on_the_cuda_backend_over_a_fake_driver() {
    let Some(dir) = fake_driver_dir() else { return };
    let mut policy = test_policy();
    policy.workers.kernel_deadline = Duration::from_millis(500);
    // The fake device has 1 GiB: a small context reserve keeps most of it lendable.
    policy.workers.context_reserve = 16 << 20;
    let host = Host::new(HostConfig {
        policy,
        worker: fake_worker(&dir, &[]),
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

/// A copy between the two leases of a group, on the cuda backend over the fake driver, which
/// shares `cuMemAlloc` memory between processes as the driver does (CUDA IPC): two device slots
/// (UUIDs the fake ignores, so each worker sees the other's "GPU" as a peer), a group across
/// them, a copy each way. With peer access the bytes go worker to worker — the source's worker
/// exports its buffer, the destination's maps it — and are counted; with the fake refusing every
/// handle (`FAKE_CUDA_NO_PEER`, GPUs without peer access) the same copies are staged, land
/// alike, and the host keeps the driver's reason.
#[test]
fn a_groups_copy_goes_worker_to_worker_where_the_driver_shares_memory() {
    use std::sync::Arc;
    use tasklet_runtime::config::DeviceSelector;
    use tasklet_runtime::gpu::{GpuService, LeaseRequest, LocalGpu};
    use tasklet_runtime::DeviceRequirement;

    let Some(dir) = fake_driver_dir() else { return };
    for peer_access in [true, false] {
        let mut policy = test_policy();
        policy.workers.context_reserve = 16 << 20;
        policy.devices.cuda = Some(vec![
            DeviceSelector::Uuid("GPU-fake0000-aaaa".into()),
            DeviceSelector::Uuid("GPU-fake0000-bbbb".into()),
        ]);
        let env: &[String] = if peer_access {
            &[]
        } else {
            &["FAKE_CUDA_NO_PEER=1".into()]
        };
        let host = match Host::new(HostConfig {
            policy,
            worker: fake_worker(&dir, env),
            backend: BackendKind::Cuda,
        }) {
            Ok(host) => host,
            // A machine whose NVML lists its GPUs places slots on them only, and the fake's are
            // not among them; there the real driver's path is multi_devices' test.
            Err(tasklet_runtime::HostError::Devices(
                tasklet_runtime::devices::PlanError::NotFound(u),
            )) => {
                eprintln!(
                    "skipped: this machine's NVML lists its GPUs, and the fake driver's {u} is not one of them"
                );
                return;
            }
            Err(e) => panic!("a host of two slots on the fake driver: {e}"),
        };
        assert_eq!(host.devices().len(), 2);
        let mut grant = host.policy().grant(&manifest("testing/probe"));
        grant.gpu.max_leases = 2;
        grant.gpu.max_vram = 64 << 20;
        let mut gpu = LocalGpu::new(grant, Arc::clone(host.leases()));
        let request = LeaseRequest {
            min_vram: 8 << 20,
            secs: 60,
            device: None,
        };
        let group = gpu
            .lease_acquire_group(request, &DeviceRequirement::default(), 2)
            .expect("a group across the two slots");
        let a = gpu.session_open(group[0]).expect("session");
        let b = gpu.session_open(group[1]).expect("session");
        let size: u64 = 1 << 20;
        let ba = gpu.mem_alloc(a, size).expect("alloc");
        let bb = gpu.mem_alloc(b, size).expect("alloc");
        let data: Vec<u8> = (0..size).map(|i| (i * 5 + 1) as u8).collect();
        gpu.mem_write(a, ba, 0, &data).expect("write");
        let before = host.leases().peer_copy_bytes();
        gpu.mem_copy_between((b, bb, 512), (a, ba, 0), size - 512)
            .expect("copy to the second");
        let back = gpu.mem_read(b, bb, 0, size).expect("read");
        assert!(back[..512].iter().all(|&x| x == 0));
        assert!(back[512..] == data[..(size - 512) as usize]);
        gpu.mem_copy_between((a, ba, 0), (b, bb, 512), 4096)
            .expect("copy to the first");
        let first = gpu.mem_read(a, ba, 0, 4096).expect("read");
        assert!(first[..] == data[..4096]);
        let peer = host.leases().peer_copy_bytes() - before;
        let refusal = host.leases().peer_copy_refusal();
        if peer_access {
            assert_eq!(peer, size - 512 + 4096, "staged: {refusal:?}");
        } else {
            assert_eq!(peer, 0);
            let why = refusal.expect("a reason kept");
            assert!(
                why.contains("cuIpcOpenMemHandle") && why.contains("PEER_ACCESS_UNSUPPORTED"),
                "{why}"
            );
        }
        drop(gpu);
        assert_baseline(&host);
    }
}

/// Copies on a stream wait only for the work that stream depends on, so on the cuda backend a
/// copy runs beside a kernel of another stream; a copy on the kernel's own stream, on a stream
/// that waited on an event recorded after it, or after a launch outside any stream waits for it.
/// The fake driver's events read not-ready for 300 ms after they are recorded
/// (`FAKE_CUDA_EVENT_LAG_US`), as the completion of a kernel that long would, so waiting for the
/// kernel shows as time.
#[test]
fn a_copy_on_one_stream_runs_beside_a_kernel_on_another() {
    use tasklet_runtime::gpu::{
        GpuService, KernelArg, KernelRef, LaunchConfig, QueueOp, QueueReply, StreamId,
    };
    const IOTA_PTX: &str = include_str!("../../../kernels/iota.ptx");
    const LAG: Duration = Duration::from_millis(300);

    let Some(dir) = fake_driver_dir() else { return };
    let mut policy = test_policy();
    policy.workers.context_reserve = 16 << 20;
    policy.workers.kernel_deadline = Duration::from_secs(5);
    let host = Host::new(HostConfig {
        policy,
        worker: fake_worker(&dir, &["FAKE_CUDA_EVENT_LAG_US=300000".into()]),
        backend: BackendKind::Cuda,
    })
    .expect("a host on the fake driver");
    let (mut gpu, _lease, s) = tasklet_tests::probe_lease_session(&host, 4 << 20);
    let m = gpu.module_load(s, IOTA_PTX).expect("iota loads");
    let x = gpu.mem_alloc(s, 64).expect("alloc");
    let y = gpu.mem_alloc(s, 64).expect("alloc");
    let mut stream = || match gpu.queue_op(s, QueueOp::NewStream) {
        Ok(QueueReply::Stream(id)) => id,
        other => panic!("a new stream, got {other:?}"),
    };
    let (copies, compute, other): (StreamId, StreamId, StreamId) = (stream(), stream(), stream());
    // New memory is zeroed on the worker's stream, which only a sync puts behind every copy.
    gpu.sync(s).expect("sync");
    gpu.stream_write(s, copies, y, 0, &[7; 64]).expect("write");
    let config = LaunchConfig {
        grid: [1, 1, 1],
        block: [16, 1, 1],
        shared_mem_bytes: 0,
    };
    let args = [
        KernelArg::Buffer {
            buffer: x,
            offset: 0,
        },
        KernelArg::U32(16),
    ];
    let timed = |f: &mut dyn FnMut()| {
        let t = Instant::now();
        f();
        t.elapsed()
    };

    gpu.stream_launch(s, compute, m, KernelRef::At(0), &config, &args)
        .expect("launch on compute");
    let beside = timed(&mut || {
        assert_eq!(gpu.stream_read(s, copies, y, 0, 64).expect("read"), [7; 64]);
        gpu.stream_write(s, copies, y, 0, &[9; 64]).expect("write");
    });
    assert!(
        beside < LAG / 2,
        "copies on another stream waited {beside:?} for the kernel"
    );
    let on_its_stream = timed(&mut || {
        let got = gpu.stream_read(s, compute, x, 0, 64).expect("read");
        assert_eq!(&got[..8], &[1, 0, 0, 0, 2, 0, 0, 0]);
    });
    assert!(
        on_its_stream >= LAG * 2 / 3,
        "a read on the kernel's stream returned after {on_its_stream:?}, before the kernel was done"
    );

    // An event recorded after the kernel, then waited on: the waiting stream's copies come
    // after the kernel. (The record's own wait is over at once here: the fake stores the sync's
    // completion word when it is queued, ahead of the lagging event.)
    gpu.stream_launch(s, compute, m, KernelRef::At(0), &config, &args)
        .expect("launch on compute");
    let event = match gpu.queue_op(s, QueueOp::NewEvent) {
        Ok(QueueReply::Event(id)) => id,
        other => panic!("a new event, got {other:?}"),
    };
    gpu.queue_op(
        s,
        QueueOp::Record {
            event,
            stream: compute,
        },
    )
    .expect("record");
    gpu.queue_op(
        s,
        QueueOp::Wait {
            stream: other,
            event,
        },
    )
    .expect("wait");
    let after_event = timed(&mut || {
        gpu.stream_read(s, other, x, 0, 64).expect("read");
    });
    assert!(
        after_event >= LAG / 2,
        "a read on a stream that waited on an event after the kernel returned after {after_event:?}"
    );

    // A launch outside any stream: every stream's later copies wait for it.
    gpu.launch_kernel(s, m, KernelRef::At(0), &config, &args)
        .expect("launch");
    let after_default = timed(&mut || {
        gpu.stream_read(s, copies, y, 0, 64).expect("read");
    });
    assert!(
        after_default >= LAG * 2 / 3,
        "a stream's read returned after {after_default:?}, before the session's launch was done"
    );
    // A stream is the session's own.
    let foreign = StreamId(u64::MAX);
    assert!(matches!(
        gpu.stream_read(s, foreign, y, 0, 64),
        Err(tasklet_runtime::GpuError::InvalidArgument(_))
    ));
    gpu.sync(s).expect("sync");
    drop(gpu);
    assert_baseline(&host);
}
