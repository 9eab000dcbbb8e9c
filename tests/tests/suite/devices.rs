//! Every device of a node: a host lends each device the policy lists from a warm pool of its own,
//! with books of its own; a lease goes to the device with the most memory free (then the fewest
//! leases) among those that meet its requirements; a worker lost on one device is replaced on
//! that device while the other's leases and workers notice nothing.
//!
//! On the emulator the policy lists two emulated devices of different sizes (`[emu] devices`);
//! with `TASKLET_TEST_BACKEND=cuda` it lends the one GPU as two slots (`[cuda] devices = ["0",
//! "0"]`), which share its memory equally and run separate pools, or, on a machine with two
//! GPUs and `TASKLET_TEST_CUDA_DEVICES=0,1`, the two GPUs those indices name.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tasklet_runtime::config::DeviceSelector;
use tasklet_runtime::lease::{EndReason, GpuAccount, Lease};
use tasklet_runtime::{BackendKind, DeviceRequirement, GpuError, Host, Policy};
use tasklet_tests::{
    assert_baseline, assert_gpu_error, backend, load, manifest, probe_lines, run_ok, test_host,
    test_policy,
};

const MIB: u64 = 1 << 20;

/// Two devices: 64 MiB and 32 MiB emulated, or two slots of GPU 0, or the two GPUs
/// `TASKLET_TEST_CUDA_DEVICES` names.
fn two_device_policy() -> Policy {
    let mut p = test_policy();
    match backend() {
        BackendKind::Emu => p.devices.emu = Some(vec![64 * MIB, 32 * MIB]),
        BackendKind::Cuda => {
            let [a, b] = cuda_indices();
            p.devices.cuda = Some(vec![DeviceSelector::Index(a), DeviceSelector::Index(b)])
        }
    }
    p
}

/// The two GPU indices the cuda pass lends: `TASKLET_TEST_CUDA_DEVICES=A,B`, or GPU 0 twice.
fn cuda_indices() -> [u32; 2] {
    let Ok(named) = std::env::var("TASKLET_TEST_CUDA_DEVICES") else {
        return [0, 0];
    };
    let indices: Vec<u32> = named
        .split(',')
        .map(|i| {
            i.trim()
                .parse()
                .unwrap_or_else(|_| panic!("TASKLET_TEST_CUDA_DEVICES={named:?}: want A,B"))
        })
        .collect();
    match indices[..] {
        [a, b] => [a, b],
        _ => panic!("TASKLET_TEST_CUDA_DEVICES={named:?}: want two indices, A,B"),
    }
}

/// Whether the two devices are slots of one GPU (the cuda pass's default).
fn slots_of_one_gpu() -> bool {
    backend() == BackendKind::Cuda && cuda_indices()[0] == cuda_indices()[1]
}

fn acquire(host: &Host, bytes: u64, requires: &DeviceRequirement) -> Result<Arc<Lease>, GpuError> {
    host.leases().acquire_placed(
        bytes,
        Duration::from_secs(60),
        None,
        &GpuAccount::new("devices-test"),
        requires,
    )
}

/// The error of an acquire that must fail.
#[track_caller]
fn refused(r: Result<Arc<Lease>, GpuError>) -> GpuError {
    match r {
        Ok(l) => panic!("a lease was granted on device {}", l.device),
        Err(e) => e,
    }
}

fn on_device(index: u32) -> DeviceRequirement {
    DeviceRequirement {
        index: Some(index),
        ..DeviceRequirement::default()
    }
}

#[test]
fn each_device_has_its_own_pool_books_and_placement() {
    let host = test_host!(two_device_policy());
    let d = host.devices();
    assert_eq!(d.len(), 2, "{d:?}");
    assert_eq!((d[0].index, d[1].index), (0, 1));
    assert_eq!(host.pools().len(), 2);
    match backend() {
        BackendKind::Emu => {
            assert_eq!((d[0].total_memory, d[1].total_memory), (64 * MIB, 32 * MIB));
            assert_eq!((d[0].uuid.as_str(), d[1].uuid.as_str()), ("emu-0", "emu-1"));
            let sizes: Vec<u64> = host
                .pools()
                .iter()
                .map(|p| p.config().device_memory)
                .collect();
            assert_eq!(
                sizes,
                [64 * MIB, 32 * MIB],
                "each pool's workers emulate their device"
            );
        }
        BackendKind::Cuda => {
            // Two slots of one GPU share its UUID, each lending at most half of it; two GPUs
            // have a UUID each, and each pool is bound to its own.
            assert!(d[0].uuid.starts_with("GPU-"), "{d:?}");
            assert_eq!(d[0].uuid == d[1].uuid, slots_of_one_gpu(), "{d:?}");
            for slot in d {
                assert!(slot.total_memory <= slot.device_memory, "{slot:?}");
                assert!(slot.total_memory > 0, "{slot:?}");
            }
            for (pool, slot) in host.pools().iter().zip(d) {
                assert_eq!(pool.binding().uuid.as_deref(), Some(slot.uuid.as_str()));
            }
        }
    }
    let any = DeviceRequirement::default();

    // Most free first, ties to the lowest index.
    let a = acquire(&host, MIB, &any).expect("lease a");
    assert_eq!(a.device, 0, "most free (or tied, lowest index)");
    let b = acquire(&host, MIB, &any).expect("lease b");
    let b_on = match backend() {
        // 63 MiB free on device 0 against 32 on device 1.
        BackendKind::Emu => 0,
        // Equal slots (or two GPUs of one model, as free): device 1 now has more free.
        BackendKind::Cuda => 1,
    };
    assert_eq!(b.device, b_on);
    let c = acquire(&host, 2 * MIB, &on_device(1)).expect("lease c on device 1");
    assert_eq!(c.device, 1);

    // Per-device books.
    let usage = host.device_usage();
    let granted = |i: u32| -> u64 {
        [&a, &b, &c]
            .iter()
            .filter(|l| l.device == i)
            .map(|l| l.granted)
            .sum()
    };
    for u in &usage {
        assert_eq!(u.granted_bytes, granted(u.index), "{usage:?}");
        assert_eq!(
            host.free_memory_on(u.index),
            d[u.index as usize].total_memory - granted(u.index)
        );
    }
    assert_eq!(usage.iter().map(|u| u.leases).sum::<usize>(), 3);

    // Nothing fits: the refusal names each device and what it lacked.
    let too_big = d[0].total_memory.max(d[1].total_memory) + MIB;
    let e = refused(acquire(&host, too_big, &any));
    assert_eq!(e.name(), "capacity-exceeded", "{e}");
    assert!(
        e.message().contains("device 0 (") && e.message().contains("device 1 ("),
        "{e}"
    );
    assert!(e.message().contains("free"), "{e}");
    assert!(e.message().contains("ask for less"), "{e}");
    let future = DeviceRequirement {
        min_compute_capability: Some((99, 0)),
        ..DeviceRequirement::default()
    };
    let e = refused(acquire(&host, MIB, &future));
    assert_eq!(e.name(), "capacity-exceeded", "{e}");
    assert!(e.message().contains("99.0 required"), "{e}");
    let e = refused(acquire(&host, MIB, &on_device(2)));
    assert!(e.message().contains("it is not device 2"), "{e}");
    if backend() == BackendKind::Emu {
        let by_uuid = DeviceRequirement {
            uuid: Some("emu-1".into()),
            ..DeviceRequirement::default()
        };
        let l = acquire(&host, MIB, &by_uuid).expect("by UUID");
        assert_eq!(l.device, 1);
        host.leases().end(&l, EndReason::Dropped);
    }

    for l in [a, b, c] {
        host.leases().end(&l, EndReason::Dropped);
    }
    assert_baseline(&host);
    assert!(host
        .device_usage()
        .iter()
        .all(|u| u.leases == 0 && u.granted_bytes == 0));
}

#[test]
fn a_lost_worker_is_replaced_on_its_own_device_and_the_other_notices_nothing() {
    let host = test_host!(two_device_policy());
    let healthy = acquire(&host, 4 * MIB, &on_device(0)).expect("lease on device 0");
    let doomed = acquire(&host, 4 * MIB, &on_device(1)).expect("lease on device 1");
    let m = host.leases();
    let addr = m.alloc(&healthy, MIB).expect("alloc on device 0");
    m.alloc(&doomed, MIB).expect("alloc on device 1");
    let healthy_pid = healthy.worker_pid().expect("a worker");
    let doomed_pid = doomed.worker_pid().expect("a worker");

    // SAFETY: the pid is a worker process this host started and has not reaped.
    assert_eq!(unsafe { libc::kill(doomed_pid as i32, libc::SIGKILL) }, 0);
    let e = m
        .with_worker(&doomed, |w| w.ping())
        .expect_err("its worker is gone");
    assert_eq!(e.name(), "device-lost", "{e}");
    assert!(!doomed.is_live());

    // Device 0: the same worker, its memory and books untouched.
    m.with_worker(&healthy, |w| w.ping())
        .expect("device 0 still serves");
    assert_eq!(healthy.worker_pid(), Some(healthy_pid));
    assert_eq!(healthy.used(), tasklet_worker::charged_bytes(MIB));
    m.free(&healthy, addr, MIB).expect("free on device 0");
    assert_eq!(host.pools()[0].busy(), 1, "device 0's pool lost nothing");
    let usage = host.device_usage();
    assert_eq!((usage[0].leases, usage[1].leases), (1, 0), "{usage:?}");
    assert_eq!(usage[1].granted_bytes, 0);

    // Device 1's pool starts a replacement of its own, and serves the next lease with it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while host.pools()[1].idle() == 0 {
        assert!(
            Instant::now() < deadline,
            "no replacement on device 1 within 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let next = acquire(&host, 4 * MIB, &on_device(1)).expect("device 1 serves again");
    assert_eq!(next.device, 1);
    assert_ne!(next.worker_pid(), Some(doomed_pid));
    m.with_worker(&next, |w| w.ping())
        .expect("the replacement answers");

    for l in [healthy, next] {
        m.end(&l, EndReason::Dropped);
    }
    assert_baseline(&host);
}

/// A tasklet sees every device (`inventory.devices`, with UUIDs and lease counts), acquires a
/// lease by UUID (`lease.acquire-with` through the SDK's builder), and is refused
/// `capacity-exceeded` naming what no device had; a one-shot that would drop a requirement is
/// refused by the SDK.
#[test]
fn a_tasklet_lists_every_device_and_leases_by_requirement() {
    let host = test_host!(two_device_policy());
    let tasklet = load(&host, manifest("testing/sdk-check"));
    let lines = probe_lines(&run_ok(&host, &tasklet, "devices"));
    let (status, what, listed) = &lines[0];
    assert_eq!(
        (status.as_str(), what.as_str()),
        ("ok", "devices"),
        "{lines:?}"
    );
    let d = host.devices();
    let expected: Vec<String> = d
        .iter()
        .map(|d| format!("{}:{}:0", d.uuid, d.total_memory))
        .collect();
    assert_eq!(listed, &format!("2 {}", expected.join(" ")), "{lines:?}");
    // By UUID: device 1's; two slots of one GPU share theirs, and the lease goes to the first
    // of them with the most free.
    let by_uuid = if slots_of_one_gpu() {
        "device=0"
    } else {
        "device=1"
    };
    assert_eq!(
        lines[1],
        ("ok".into(), "by-uuid".into(), by_uuid.into()),
        "{lines:?}"
    );
    assert_gpu_error(&lines, 2, "capacity-exceeded", "compute capability");
    assert_gpu_error(&lines, 2, "capacity-exceeded", "99.0 required");
    assert_gpu_error(
        &lines,
        3,
        "capacity-exceeded",
        "does not contain \"no-such-gpu\"",
    );
    assert_gpu_error(&lines, 4, "invalid-input", "acquire a Lease with");
    assert_eq!(lines.len(), 5, "{lines:?}");
    assert_baseline(&host);
}

/// A tasklet's service places a lease on the device it names; its launch is checked against that
/// device's limits and its GPU time is charged to that device alone.
#[test]
fn gpu_time_is_charged_to_the_device_that_ran_the_kernel() {
    use tasklet_runtime::gpu::{GpuService, KernelArg, LaunchConfig, LeaseRequest, LocalGpu};
    const IOTA_PTX: &str = include_str!("../../../kernels/iota.ptx");
    let host = test_host!(two_device_policy());
    let grant = host.policy().grant(&manifest("testing/probe"));
    let mut gpu = LocalGpu::new(grant, Arc::clone(host.leases()));
    let blocks = 64u32;
    let lease = gpu
        .lease_acquire(LeaseRequest {
            min_vram: 4 * MIB,
            secs: 60,
            device: Some(1),
        })
        .expect("a lease on device 1");
    assert_eq!(gpu.lease_info(lease).expect("info").device, 1);
    let s = gpu.session_open(lease).expect("session");
    let m = gpu.module_load(s, IOTA_PTX).expect("iota loads");
    let out = gpu
        .mem_alloc(s, 4 * u64::from(blocks * 256))
        .expect("alloc");
    let config = LaunchConfig {
        grid: [blocks, 1, 1],
        block: [256, 1, 1],
        shared_mem_bytes: 0,
    };
    let args = [
        KernelArg::Buffer {
            buffer: out,
            offset: 0,
        },
        KernelArg::U32(blocks * 256),
    ];
    gpu.launch(s, m, "iota", &config, &args).expect("launch");
    gpu.sync(s).expect("sync");
    let took = gpu.gpu_time(lease).expect("gpu time");
    assert!(took > Duration::ZERO, "the launch was charged nothing");
    let usage = host.device_usage();
    assert_eq!(usage[1].gpu_time, took, "{usage:?}");
    assert_eq!(usage[0].gpu_time, Duration::ZERO, "{usage:?}");
    // A launch past the device's limits is refused before it reaches the worker.
    let too_wide = LaunchConfig {
        block: [1 << 20, 1, 1],
        ..config
    };
    let e = gpu
        .launch(s, m, "iota", &too_wide, &args)
        .expect_err("a block wider than the device allows");
    assert_eq!(e.name(), "launch-failed", "{e}");
    drop(gpu);
    assert_baseline(&host);
}

/// A kernel that faults on device 1 ends its own lease only: device 0's lease, mid-session,
/// goes on launching and reading correct results, and device 1's pool serves the next lease
/// with a fresh worker.
#[test]
fn a_kernel_fault_on_one_device_leaves_the_other_serving() {
    use tasklet_runtime::gpu::{GpuService, KernelArg, LaunchConfig, LeaseRequest, LocalGpu};
    const IOTA_PTX: &str = include_str!("../../../kernels/iota.ptx");
    const FAULTS_PTX: &str = include_str!("../../../kernels/faults.ptx");
    let host = test_host!(two_device_policy());
    let grant = host.policy().grant(&manifest("testing/probe"));
    let on = |gpu: &mut LocalGpu, device| {
        gpu.lease_acquire(LeaseRequest {
            min_vram: 4 * MIB,
            secs: 60,
            device: Some(device),
        })
        .expect("lease")
    };
    let one_block = LaunchConfig {
        grid: [1, 1, 1],
        block: [64, 1, 1],
        shared_mem_bytes: 0,
    };
    // Device 0: a healthy tenant's session, iota loaded.
    let mut healthy = LocalGpu::new(grant, Arc::clone(host.leases()));
    let h_lease = on(&mut healthy, 0);
    let hs = healthy.session_open(h_lease).expect("session");
    let hm = healthy.module_load(hs, IOTA_PTX).expect("iota");
    let out = healthy.mem_alloc(hs, 4 * 64).expect("alloc");
    let iota_args = [
        KernelArg::Buffer {
            buffer: out,
            offset: 0,
        },
        KernelArg::U32(64),
    ];
    let healthy_pid = host.leases().worker_pids();
    // Device 1: a faulting one.
    let mut faulty = LocalGpu::new(grant, Arc::clone(host.leases()));
    let f_lease = on(&mut faulty, 1);
    let fs = faulty.session_open(f_lease).expect("session");
    let fm = faulty.module_load(fs, FAULTS_PTX).expect("faults");
    let flag = faulty.mem_alloc(fs, 4).expect("alloc");
    let far = [
        KernelArg::Buffer {
            buffer: flag,
            offset: 0,
        },
        KernelArg::U64(1 << 40),
    ];
    let fault = faulty
        .launch(fs, fm, "write_out_of_bounds", &one_block, &far)
        .and_then(|()| faulty.sync(fs))
        .expect_err("a write 4 TiB past the buffer faults");
    assert_eq!(fault.name(), "kernel-fault", "{fault}");
    let after = faulty
        .lease_info(f_lease)
        .expect_err("the lease ended with its worker");
    assert_eq!(after.name(), "lease-expired", "{after}");
    let usage = host.device_usage();
    assert_eq!((usage[0].leases, usage[1].leases), (1, 0), "{usage:?}");

    // Device 0 never noticed: same worker, and its kernels run and read back right.
    healthy
        .launch(hs, hm, "iota", &one_block, &iota_args)
        .expect("launch on device 0");
    healthy.sync(hs).expect("sync on device 0");
    let bytes = healthy.mem_read(hs, out, 0, 4 * 64).expect("read");
    let got: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let want: Vec<u32> = (1..=64).collect();
    assert_eq!(got, want);
    assert!(host
        .leases()
        .worker_pids()
        .iter()
        .all(|p| healthy_pid.contains(p)));

    // Device 1 serves again, from a fresh worker of its own pool.
    let again = on(&mut faulty, 1);
    assert_eq!(faulty.lease_info(again).expect("info").device, 1);
    drop((healthy, faulty));
    assert_baseline(&host);
}

/// A tasklet copies between its sessions on two devices (`session.mem-copy-from`, the SDK's
/// `Session::copy_from`).
#[test]
fn a_tasklet_copies_between_its_sessions_on_two_devices() {
    let host = test_host!(two_device_policy());
    let tasklet = load(&host, manifest("testing/sdk-check"));
    let lines = probe_lines(&run_ok(&host, &tasklet, "copy-between"));
    assert_eq!(
        lines,
        [("ok".into(), "copy-between".into(), "2 3 4 0".into())],
        "{lines:?}"
    );
    assert_baseline(&host);
}

/// A copy between buffers of two sessions under leases on different devices lands byte for
/// byte (in pieces larger than one staging piece), is checked as a copy within a session is
/// (bounds, ownership), and a session of another holder is not the tasklet's to copy from.
#[test]
fn a_copy_between_devices_moves_the_bytes_and_is_checked() {
    use tasklet_runtime::gpu::{GpuService, LeaseRequest, LocalGpu};
    let host = test_host!(two_device_policy());
    let grant = host.policy().grant(&manifest("testing/probe"));
    let mut gpu = LocalGpu::new(grant, Arc::clone(host.leases()));
    let on = |gpu: &mut LocalGpu, device| {
        let lease = gpu
            .lease_acquire(LeaseRequest {
                min_vram: 16 * MIB,
                secs: 60,
                device: Some(device),
            })
            .expect("lease");
        gpu.session_open(lease).expect("session")
    };
    let (s0, s1) = (on(&mut gpu, 0), on(&mut gpu, 1));
    // 9 MiB + 3 bytes: three pieces of the host's staging, the last a short one.
    let len = 9 * MIB + 3;
    let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4096) as u8).collect();
    let src = gpu.mem_alloc(s0, len).expect("alloc on device 0");
    gpu.mem_write(s0, src, 0, &data).expect("write");
    let dst = gpu.mem_alloc(s1, len + 5).expect("alloc on device 1");
    gpu.mem_copy_between((s1, dst, 5), (s0, src, 0), len)
        .expect("copy device 0 -> device 1");
    let back = gpu.mem_read(s1, dst, 0, len + 5).expect("read on device 1");
    assert_eq!(
        &back[..5],
        &[0; 5],
        "the bytes before the offset are untouched"
    );
    assert!(back[5..] == data[..], "the copy differs");

    // Checked as within a session: bounds, and the buffer must be of the session named.
    let e = gpu
        .mem_copy_between((s1, dst, 6), (s0, src, 0), len)
        .expect_err("one byte past dst");
    assert_eq!(e.name(), "out-of-bounds", "{e}");
    let e = gpu
        .mem_copy_between((s1, dst, 0), (s1, src, 0), 4)
        .expect_err("src is not s1's");
    assert_eq!(e.name(), "invalid-argument", "{e}");
    // Another holder's session is not this one's.
    let mut other = LocalGpu::new(grant, Arc::clone(host.leases()));
    let theirs = on(&mut other, 0);
    let e = gpu
        .mem_copy_between((s1, dst, 0), (theirs, src, 0), 4)
        .expect_err("another holder's session");
    assert_eq!(e.name(), "invalid-argument", "{e}");
    drop((gpu, other));
    assert_baseline(&host);
}

/// A lease past the pool's workers (the suite's policy: 4 a device) is refused at once, saying
/// to retry once a lease ends, not to ask for less (which would not help); one comes free when
/// a lease ends.
#[test]
fn a_lease_past_every_worker_says_to_retry_when_one_ends() {
    let host = test_host!();
    let any = DeviceRequirement::default();
    let max = host.policy().workers.max;
    let held: Vec<Arc<Lease>> = (0..max)
        .map(|_| acquire(&host, MIB, &any).expect("a worker of the pool"))
        .collect();
    let e = refused(acquire(&host, MIB, &any));
    assert_eq!(e.name(), "capacity-exceeded", "{e}");
    assert!(
        e.message().contains("has no free GPU worker")
            && e.message()
                .contains("retry later: a worker comes free when a lease ends")
            && !e.message().contains("ask for less"),
        "{e}"
    );
    for lease in &held {
        host.leases().end(lease, EndReason::Dropped);
    }
    drop(held);
    assert_baseline(&host);
}
