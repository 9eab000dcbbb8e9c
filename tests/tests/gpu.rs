//! GPU containment: what the cuda backend must guarantee between tenants on a real device.
//!
//! Each test runs when a CUDA device is usable (`TASKLET_TEST_BACKEND=cuda`, or unset and a probe
//! worker finds one) and otherwise prints `skipped: no CUDA device: <test>: <why>` past the test
//! harness's capture and returns. With `TASKLET_TEST_BACKEND=cuda` and no usable device they
//! fail. Two tenants are two tasklet runs on two threads of one host (the probe tasklet), or a
//! lease driven through the worker API where a tasklet cannot express it (latency sampling,
//! per-launch deadlines). Every test logs what it measured (`--nocapture` shows it; a failure
//! shows it anyway), so a failing run on the GPU machine explains itself.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tasklet_runtime::Host;
use tasklet_tests::{
    assert_baseline, assert_first_gpu_error, assert_gpu_error, eventually, gpu_host_or_skip, load,
    manifest, pid_alive, probe_lines, run_ok, spawn_run, test_policy,
};
use tasklet_worker::{nvml, ErrorKind, Launch, LoadedModule, WorkerError};

const MIB: u64 = 1 << 20;
const IOTA_PTX: &str = include_str!("../../kernels/iota.ptx");
const FAULTS_PTX: &str = include_str!("../../kernels/faults.ptx");

/// The tests share one GPU and some time latencies or spin kernels: one at a time, whatever
/// `--test-threads` says.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

fn log(what: impl AsRef<str>) {
    eprintln!("[gpu] {}", what.as_ref());
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// Timed samples cut into 50 ms slices: (slice start after `origin`, median of the slice).
fn median_slices(samples: &[(Instant, Duration)], origin: Instant) -> Vec<(Duration, Duration)> {
    let slice = Duration::from_millis(50);
    let mut slices = Vec::new();
    let mut i = 0;
    while i < samples.len() {
        let start = samples[i].0;
        let j = samples[i..]
            .iter()
            .position(|s| s.0 >= start + slice)
            .map_or(samples.len(), |k| i + k);
        slices.push((
            start.saturating_duration_since(origin),
            median(samples[i..j].iter().map(|s| s.1).collect()),
        ));
        i = j;
    }
    slices
}

/// How many slices have a median over `bound`.
fn over_bound(slices: &[(Duration, Duration)], bound: Duration) -> usize {
    slices.iter().filter(|s| s.1 > bound).count()
}

/// A lease driven through the worker API, with the iota kernel loaded and a 16 KiB buffer.
struct Direct {
    host: Arc<Host>,
    lease: Arc<tasklet_runtime::lease::Lease>,
    module: LoadedModule,
    buf: u64,
}

impl Direct {
    fn new(host: &Arc<Host>) -> Direct {
        let lease = host
            .leases()
            .acquire(MIB, Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("lease: {e:?}"));
        let (module, buf) = host
            .leases()
            .with_worker(&lease, |w| w.load_module(IOTA_PTX))
            .and_then(|m| Ok((m, host.leases().alloc(&lease, 16 * 1024)?)))
            .unwrap_or_else(|e| panic!("setup: {e:?}"));
        Direct {
            host: host.clone(),
            lease,
            module,
            buf,
        }
    }

    /// One iota launch of 4096 elements and a sync; how long it took.
    fn launch_sync(&self) -> Duration {
        let args: Vec<u8> = self
            .buf
            .to_le_bytes()
            .into_iter()
            .chain(4096u32.to_le_bytes())
            .collect();
        let t = Instant::now();
        self.host
            .leases()
            .with_worker(&self.lease, |w| {
                w.launch(&Launch {
                    module: self.module.id,
                    kernel: kernel(&self.module, "iota"),
                    grid: [32, 1, 1],
                    block: [128, 1, 1],
                    shared_mem_bytes: 0,
                    args: &args,
                    deadline: Duration::from_secs(10),
                })?;
                w.sync()
            })
            .unwrap_or_else(|e| panic!("B's launch+sync failed: {e:?}"));
        t.elapsed()
    }

    fn pid(&self) -> u32 {
        self.lease.worker_pid().expect("B's lease has a worker")
    }

    fn end(self) {
        self.host
            .leases()
            .end(&self.lease, tasklet_runtime::lease::EndReason::Dropped);
    }
}

#[test]
fn a_faulting_tenant_gets_kernel_fault_and_the_other_keeps_correct_results() {
    let _gpu = serial();
    let (host, info) = gpu_host_or_skip!("kernel fault containment", test_policy());
    log(format!(
        "device: {} ({}), cc {}.{}",
        info.device, info.uuid, info.compute_capability.0, info.compute_capability.1
    ));
    let host = Arc::new(host);
    let probe = Arc::new(load(&host, manifest("testing/probe")));
    let b_started = Instant::now();
    let b = spawn_run(&host, &probe, "verify 4");
    assert!(
        eventually(Duration::from_secs(10), || host.accounting().leases >= 1),
        "B never took its lease"
    );
    // B's ops before A.
    std::thread::sleep(Duration::from_millis(500));
    let a_out = run_ok(&host, &probe, "fault");
    let a_done = Instant::now();
    log(format!(
        "A (fault) after {:?}: {a_out:?}",
        a_done - b_started
    ));
    // The fault carries the driver's words.
    assert_first_gpu_error(&probe_lines(&a_out), "kernel-fault", "CUDA_ERROR_");
    let (b_out, b_done) = b.join().expect("B's thread");
    log(format!(
        "B (verify 4 s) ended {:?} after A: {b_out:?}",
        b_done - a_done
    ));
    let lines = probe_lines(&b_out);
    assert_eq!(lines.len(), 1, "B: {b_out}");
    assert_eq!(
        (lines[0].0.as_str(), lines[0].1.as_str()),
        ("ok", "verified"),
        "B: {b_out}"
    );
    let rounds: u32 = lines[0].2.parse().expect("round count");
    assert!(rounds >= 50, "B made only {rounds} verified rounds in 4 s");
    assert!(
        b_done.duration_since(a_done) >= Duration::from_secs(1),
        "B's ops must also run after A's fault"
    );
    assert_baseline(&host);
}

#[test]
fn a_runaway_tenant_is_killed_within_its_deadline_and_the_other_recovers() {
    let _gpu = serial();
    let (host, info) = gpu_host_or_skip!("runaway kernel containment", test_policy());
    let host = Arc::new(host);
    let deadline = host.policy().workers.kernel_deadline;
    let b = Direct::new(&host);
    let b_pid = b.pid();
    for _ in 0..20 {
        b.launch_sync();
    }
    let baseline = median((0..100).map(|_| b.launch_sync()).collect());
    // B's lease took a worker from the warm set, and the pool starts its replacement in the
    // background: the memory baseline must include that one's context (it is there after A).
    let pool = host.pool();
    let (warm, max) = pool.limits();
    let settled = eventually(Duration::from_secs(10), || {
        pool.idle() >= warm.min(max.saturating_sub(pool.busy()))
    });
    assert!(
        settled,
        "the pool did not top its warm set up: {} idle, {} busy, limits {warm}/{max}",
        pool.idle(),
        pool.busy()
    );
    let mem_before = nvml::memory_used(Some(&info.uuid));
    log(format!(
        "B's launch+sync baseline: {baseline:?}; NVML memory in use before A: {mem_before:?} ({} workers idle, {} leased)",
        pool.idle(),
        pool.busy()
    ));
    // A control for the recovery check below: B alone, sliced the same way. Stalls of B with no
    // A around are the machine's, not A's.
    let control_start = Instant::now();
    let mut control = Vec::new();
    while control_start.elapsed() < Duration::from_secs(1) {
        control.push((Instant::now(), b.launch_sync()));
    }
    let control = median_slices(&control, control_start);
    log(format!(
        "B alone, 50 ms slices over 2x baseline: {} of {}",
        over_bound(&control, baseline * 2),
        control.len()
    ));

    let mut m = manifest("testing/probe");
    m.gpu.max_vram = 2 << 30;
    let probe = Arc::new(load(&host, m));
    let a_started = Instant::now();
    let a = spawn_run(&host, &probe, "spin-big 1024");
    // A's worker, and the device memory in use while A spins.
    let mut a_pid = None;
    let mut mem_during = None;
    let mut samples: Vec<(Instant, Duration)> = Vec::new();
    while !a.is_finished() {
        if a_pid.is_none() {
            a_pid = host.lease_worker_pids().into_iter().find(|&p| p != b_pid);
        }
        if mem_during.is_none() && a_started.elapsed() > Duration::from_millis(1200) {
            mem_during = Some(nvml::memory_used(Some(&info.uuid)));
        }
        samples.push((Instant::now(), b.launch_sync()));
    }
    let (a_out, a_done) = a.join().expect("A's thread");
    let a_took = a_done - a_started;
    log(format!("A (spin-big 1024) took {a_took:?} (deadline {deadline:?}), worker pid {a_pid:?}: {a_out:?}"));
    let during: Vec<Duration> = samples.iter().map(|s| s.1).collect();
    log(format!(
        "B's launch+sync while A spun: {} samples, median {:?}, max {:?}",
        during.len(),
        median(during.clone()),
        during.iter().max()
    ));

    assert_first_gpu_error(&probe_lines(&a_out), "deadline-exceeded", "");
    assert!(
        a_took < deadline + Duration::from_secs(1),
        "A's deadline-exceeded took {a_took:?}, deadline {deadline:?}"
    );
    let a_pid = a_pid.expect("A's worker pid was seen");
    assert!(
        eventually(Duration::from_secs(2), || !pid_alive(a_pid)),
        "A's worker {a_pid} is still alive"
    );
    log(format!(
        "A's worker {a_pid} gone {:?} after A ended",
        a_done.elapsed()
    ));

    // B's latency is back within 2× its baseline within 2 s of A's end, and stays back: cut the
    // next 3 s of samples into 50 ms slices; B has recovered from the first slice that is within
    // 2× the baseline and after which slices over it are no more frequent than the machine's own
    // stalls (the control above, at least 1 in 10): a lone stall later is the machine's, not A's.
    let mut after: Vec<(Instant, Duration)> = Vec::new();
    let watch_until = a_done + Duration::from_secs(3);
    while Instant::now() < watch_until {
        after.push((Instant::now(), b.launch_sync()));
    }
    let slices = median_slices(&after, a_done);
    let stall_rate =
        (over_bound(&control, baseline * 2) as f64 / control.len().max(1) as f64).max(0.1);
    let recovered = (0..slices.len())
        .find(|&k| {
            let rest = &slices[k..];
            rest[0].1 <= baseline * 2
                && over_bound(rest, baseline * 2) as f64 <= stall_rate * rest.len() as f64
        })
        .map(|k| slices[k].0);
    let timeline: Vec<String> = slices
        .iter()
        .step_by(4)
        .map(|(t, m)| format!("+{t:.2?}: {m:?}"))
        .collect();
    log(format!(
        "B's launch+sync after A ended (median per 50 ms, every 4th): {}",
        timeline.join(", ")
    ));
    log(format!(
        "slices over 2x baseline: {} of {}: {}",
        over_bound(&slices, baseline * 2),
        slices.len(),
        {
            let over: Vec<String> = slices
                .iter()
                .filter(|s| s.1 > baseline * 2)
                .map(|(t, m)| format!("+{t:.2?}: {m:?}"))
                .collect();
            over.join(", ")
        }
    ));
    log(format!(
        "B back within 2x baseline ({:?}), stalls no more often than {stall_rate:.2}, after: {recovered:?}",
        baseline * 2
    ));
    let recovered = recovered.unwrap_or_else(|| {
        panic!("B's latency did not come back within 2x its baseline {baseline:?} for good")
    });
    assert!(
        recovered <= Duration::from_secs(2),
        "B's latency came back only {recovered:?} after A ended"
    );

    // Device memory in use returns to its baseline (A's 1 GiB and its context are gone; the pool's
    // replacement worker takes the context A's worker had taken from the warm set).
    if let (Ok(before), Some(Ok(during))) = (&mem_before, &mem_during) {
        assert!(
            during >= &(before + (1 << 30)),
            "NVML did not see A's 1 GiB: before {before}, during {during}"
        );
        let mut last = 0;
        let back = eventually(Duration::from_secs(5), || {
            last = nvml::memory_used(Some(&info.uuid)).unwrap_or(u64::MAX);
            last <= before + 128 * MIB
        });
        log(format!(
            "NVML memory in use: before {before}, during {during}, after {last} ({} workers idle, {} leased)",
            pool.idle(),
            pool.busy()
        ));
        assert!(
            back,
            "device memory in use did not return to its baseline: before {before}, now {last}"
        );
    } else {
        log(format!("NVML not usable here, memory check skipped: before {mem_before:?}, during {mem_during:?}"));
        assert!(
            std::env::var_os("TASKLET_TEST_BACKEND").is_none(),
            "the GPU suite needs NVML: {mem_before:?}"
        );
    }
    b.end();
    assert_baseline(&host);
}

#[test]
fn memory_a_tenant_leaves_behind_reads_as_zeros() {
    let _gpu = serial();
    // One worker, reused: B gets A's worker (reset) and very likely A's very addresses.
    let mut policy = test_policy();
    policy.workers.warm = 1;
    policy.workers.max = 1;
    let (host, _) = gpu_host_or_skip!("zeroed memory between tenants", policy);
    let host = Arc::new(host);
    let mut m = manifest("testing/probe");
    m.gpu.max_vram = 256 * MIB;
    let probe = Arc::new(load(&host, m));
    let (a_out, _) = spawn_run(&host, &probe, "pattern 64")
        .join()
        .expect("A's thread");
    assert_eq!(a_out, format!("ok pattern {}\n", 64 * MIB), "A: {a_out}");
    let (b_out, _) = spawn_run(&host, &probe, "zeros 64")
        .join()
        .expect("B's thread");
    log(format!("A: {a_out:?}; B: {b_out:?}"));
    assert_eq!(b_out, format!("ok zeros {}\n", 64 * MIB), "B: {b_out}");
    assert_baseline(&host);
}

#[test]
fn allocation_past_a_lease_is_quota_exceeded_on_the_gpu() {
    let _gpu = serial();
    let (host, _) = gpu_host_or_skip!("lease quota", test_policy());
    let probe = load(&host, manifest("testing/probe"));
    let lines = probe_lines(&run_ok(&host, &probe, "alloc-past-lease"));
    assert_gpu_error(&lines, 0, "quota-exceeded", "");
    assert_baseline(&host);
}

#[test]
fn leases_past_the_device_are_capacity_exceeded_on_the_gpu() {
    let _gpu = serial();
    let (host, info) = gpu_host_or_skip!("device capacity", test_policy());
    let d = host.device().clone();
    log(format!(
        "device {:?}: {} bytes, lent {} ({} reserved for contexts), cc {:?}, driver {}, pinned {}",
        d.name,
        d.device_memory,
        d.total_memory,
        d.device_memory - d.total_memory,
        d.compute_capability,
        d.driver_version,
        d.pinned_data
    ));
    assert_eq!(
        (d.backend, d.name.as_str(), d.device_memory),
        ("cuda", info.device.as_str(), info.device_memory)
    );
    assert!(
        d.total_memory < d.device_memory,
        "a context reserve is kept back"
    );
    assert!(
        d.pinned_data,
        "the data region is page-locked (cuMemHostRegister)"
    );
    let mut m = manifest("testing/probe");
    m.gpu.max_vram = u64::MAX;
    let probe = load(&host, m);
    let over = d.total_memory / MIB + 1;
    let lines = probe_lines(&run_ok(&host, &probe, &format!("lease {over}")));
    assert_gpu_error(&lines, 0, "capacity-exceeded", "");
    let lines = probe_lines(&run_ok(&host, &probe, "lease 1"));
    assert_eq!(lines[0].0, "ok", "{lines:?}");
    assert_baseline(&host);
    drop(host);

    // Capped by the policy.
    let mut policy = test_policy();
    policy.workers.max_device_memory = Some(MIB);
    let (host, _) = gpu_host_or_skip!("device capacity (policy cap)", policy);
    assert_eq!(host.device().total_memory, MIB);
    let probe = load(&host, manifest("testing/probe"));
    let lines = probe_lines(&run_ok(&host, &probe, "leases 2"));
    assert_eq!(lines[0].0, "ok", "{lines:?}");
    assert_gpu_error(&lines, 1, "capacity-exceeded", "");
    assert_baseline(&host);
}

#[test]
fn launches_are_asynchronous_and_deadlines_hold_with_or_without_sync() {
    let _gpu = serial();
    let (host, _) = gpu_host_or_skip!("asynchronous launches and deadlines", test_policy());
    let host = Arc::new(host);
    let spin = |deadline: Duration| {
        let lease = host
            .leases()
            .acquire(MIB, Duration::from_secs(60))
            .expect("lease");
        let (module, flag) = host
            .leases()
            .with_worker(&lease, |w| w.load_module(FAULTS_PTX))
            .and_then(|m| Ok((m, host.leases().alloc(&lease, 4)?)))
            .expect("setup");
        let args = flag.to_le_bytes();
        let t = Instant::now();
        host.leases()
            .with_worker(&lease, |w| {
                w.launch(&Launch {
                    module: module.id,
                    kernel: kernel(&module, "spin_forever"),
                    grid: [1, 1, 1],
                    block: [32, 1, 1],
                    shared_mem_bytes: 0,
                    args: &args,
                    deadline,
                })
            })
            .expect("the launch itself succeeds");
        (lease, t.elapsed(), t)
    };

    // Synced: the launch returns at once; sync reports the missed deadline at the deadline.
    let (lease, launch_took, t) = spin(Duration::from_millis(1000));
    let r = host.leases().with_worker(&lease, |w| w.sync());
    let took = t.elapsed();
    log(format!(
        "spin with sync: launch returned in {launch_took:?}, sync answered after {took:?}: {r:?}"
    ));
    assert!(
        launch_took < Duration::from_millis(100),
        "a launch is asynchronous ({launch_took:?})"
    );
    let e = r.expect_err("sync fails");
    assert_eq!(e.name(), "deadline-exceeded", "{e:?}");
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_millis(1900),
        "sync answered after {took:?}"
    );
    assert!(!lease.is_live(), "the lease ended with its worker");

    // Not synced: the worker's watchdog ends the process shortly after the deadline; the next op
    // says deadline-exceeded.
    let (lease, _, t) = spin(Duration::from_millis(500));
    let pid = lease.worker_pid().expect("pid");
    let gone = eventually(Duration::from_secs(3), || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
    });
    let ended_after = t.elapsed();
    let r = host.leases().with_worker(&lease, |w| w.sync());
    log(format!(
        "spin without sync: worker {pid} gone after {ended_after:?} (gone: {gone}); next op: {r:?}"
    ));
    assert!(gone, "the watchdog did not end worker {pid}");
    assert!(
        ended_after < Duration::from_millis(500) + Duration::from_secs(1),
        "ended only after {ended_after:?}"
    );
    let e = r.expect_err("the next op fails");
    assert_eq!(e.name(), "deadline-exceeded", "{e:?}");
    assert_baseline(&host);
}

#[test]
fn driver_errors_are_typed_with_the_drivers_words() {
    let _gpu = serial();
    let (host, info) = gpu_host_or_skip!("typed driver errors", test_policy());
    let lease = host
        .leases()
        .acquire(MIB, Duration::from_secs(60))
        .expect("lease");
    let (cc0, cc1) = info.compute_capability;
    let mut errors = Vec::new();
    let _ = host.leases().with_worker(&lease, |w| {
        // PTX too new for this driver.
        let too_new = IOTA_PTX.replacen(".version ", ".version 99.9 //", 1);
        errors.push(("ptx isa 99.9", w.load_module(&too_new).map(|_| ())));
        // PTX for a newer architecture than this GPU.
        let newer_arch = IOTA_PTX.replacen(".target sm_80", &format!(".target sm_{}", (cc0 + 1) * 10), 1);
        assert_ne!(newer_arch, IOTA_PTX, "iota.ptx targets sm_80");
        errors.push(("newer .target", w.load_module(&newer_arch).map(|_| ())));
        // Malformed PTX: the driver names the line.
        let bad = ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry bad()\n{\n\t.reg .b32 %r<2>;\n\tbogus.instr %r1;\n\tret;\n}\n";
        errors.push(("malformed", w.load_module(bad).map(|_| ())));
        // A block larger than the device allows.
        let m = w.load_module(IOTA_PTX)?;
        let buf = w.alloc(4096)?;
        let args: Vec<u8> = buf.to_le_bytes().into_iter().chain(16u32.to_le_bytes()).collect();
        let big_block = Launch {
            module: m.id,
            kernel: kernel(&m, "iota"),
            grid: [1, 1, 1],
            block: [4096, 1, 1],
            shared_mem_bytes: 0,
            args: &args,
            deadline: Duration::from_secs(5),
        };
        // Launches are posted: a refused one surfaces at the next op that waits, as in CUDA.
        errors.push(("block 4096", w.launch(&big_block).and_then(|()| w.sync())));
        // More memory than the device has.
        errors.push(("alloc past the device", w.alloc(info.device_memory - MIB).map(|_| ())));
        // The module cache: the same PTX again is a lookup, under a new id, and works.
        let t = Instant::now();
        let again = w.load_module(IOTA_PTX)?;
        log(format!("cached module load: {:?}", t.elapsed()));
        assert_ne!(again.id, m.id);
        w.unload_module(m.id)?;
        let ok = Launch { module: again.id, block: [16, 1, 1], ..big_block };
        w.launch(&ok)?;
        w.sync()?;
        let mut out = [0u8; 64];
        w.read(buf, &mut out)?;
        assert_eq!(u32::from_le_bytes([out[60], out[61], out[62], out[63]]), 16);
        // CUDA C through NVRTC, when the node has it.
        let src = "extern \"C\" __global__ void twice(unsigned int* p) { p[threadIdx.x] *= 2; }";
        match w.load_source(src, &[]) {
            Ok(m) => {
                let one = Launch { module: m.id, kernel: kernel(&m, "twice"), block: [16, 1, 1], args: &buf.to_le_bytes(), ..big_block };
                w.launch(&one)?;
                w.read(buf, &mut out)?;
                assert_eq!(u32::from_le_bytes([out[60], out[61], out[62], out[63]]), 32);
                log("NVRTC: compiled and ran");
            }
            Err(e) => {
                log(format!("NVRTC: {e}"));
                // Where this machine has NVRTC the worker finds it too: then CUDA C must work.
                assert!(!tasklet_worker::nvrtc::available(), "NVRTC is installed here, yet: {e}");
                assert_eq!(e.kind(), Some(ErrorKind::Unsupported), "{e}");
            }
        }
        w.free(buf)?;
        Ok(())
    });
    for (what, r) in &errors {
        log(format!("{what}: {r:?}"));
    }
    let kind = |i: usize| match &errors[i].1 {
        Err(WorkerError::Op { kind, message }) => (*kind, message.clone()),
        other => panic!("{}: expected an error, got {other:?}", errors[i].0),
    };
    let (k, m) = kind(0);
    assert_eq!(k, ErrorKind::LoadFailed);
    assert!(
        m.contains("99.9") && m.contains("newer than this driver"),
        "{m}"
    );
    let (k, m) = kind(1);
    assert_eq!(k, ErrorKind::LoadFailed);
    assert!(m.contains(&format!("sm_{cc0}{cc1}")), "{m}");
    let (k, m) = kind(2);
    assert_eq!(k, ErrorKind::LoadFailed);
    assert!(m.contains("line 7"), "{m}");
    let (k, m) = kind(3);
    assert_eq!(k, ErrorKind::LaunchFailed);
    assert!(m.contains("CUDA_ERROR_"), "{m}");
    let (k, _) = kind(4);
    assert_eq!(k, ErrorKind::OutOfMemory);
    assert!(lease.is_live(), "none of these poisons the worker");
    host.leases()
        .end(&lease, tasklet_runtime::lease::EndReason::Dropped);
    assert_baseline(&host);
}

#[test]
fn gpu_and_emulator_agree_on_the_examples() {
    let _gpu = serial();
    let (gpu, _) = gpu_host_or_skip!("GPU vs emulator outputs", test_policy());
    let emu = tasklet_tests::host_on(
        test_policy(),
        env!("CARGO_BIN_EXE_tasklet-test-worker"),
        tasklet_runtime::BackendKind::Emu,
    );
    for (name, input) in [
        ("iota", "1000"),
        ("vector-add", "100000"),
        ("scale", "1.5 1 2.25 -3 0.1 1e30 16777217 3.4e38"),
    ] {
        let on_gpu = run_ok(&gpu, &load(&gpu, manifest(name)), input);
        let on_emu = run_ok(&emu, &load(&emu, manifest(name)), input);
        assert_eq!(on_gpu, on_emu, "{name} {input}");
        log(format!(
            "{name} {input}: {} output bytes agree",
            on_gpu.len()
        ));
    }
    assert_baseline(&gpu);
    assert_baseline(&emu);
}

/// A kernel's index in a loaded module, as launches name it.
fn kernel(module: &LoadedModule, name: &str) -> u32 {
    let at = module.kernels.iter().position(|k| k.name == name);
    at.unwrap_or_else(|| panic!("no kernel {name} in the module")) as u32
}

#[test]
fn gpu_time_is_measured_by_the_device_and_never_exceeds_the_wall_time() {
    use tasklet_runtime::gpu::{GpuService, KernelArg, LaunchConfig, LeaseRequest, LocalGpu};
    let _gpu = serial();
    let (host, _info) = gpu_host_or_skip!("GPU time", test_policy());
    let grant = host.policy().grant(&manifest("testing/probe"));
    let mut gpu = LocalGpu::new(grant, Arc::clone(host.leases()));
    let lease = gpu
        .lease_acquire(LeaseRequest {
            min_vram: 32 * MIB,
            secs: 60,
            device: None,
        })
        .expect("lease");
    let s = gpu.session_open(lease).expect("session");
    let m = gpu.module_load(s, IOTA_PTX).expect("iota");
    let n: u32 = 8 << 20;
    let out = gpu.mem_alloc(s, 4 * u64::from(n)).expect("alloc");
    let args = [
        KernelArg::Buffer {
            buffer: out,
            offset: 0,
        },
        KernelArg::U32(n),
    ];
    let config = LaunchConfig {
        grid: [n / 256, 1, 1],
        block: [256, 1, 1],
        shared_mem_bytes: 0,
    };
    // One launch (one group), then bursts of 8 and 20 (one and three groups).
    for launches in [1u32, 8, 20] {
        let before = gpu.gpu_time(lease).expect("gpu time");
        let t = Instant::now();
        for _ in 0..launches {
            gpu.launch(s, m, "iota", &config, &args).expect("launch");
        }
        gpu.sync(s).expect("sync");
        let wall = t.elapsed();
        let used = gpu.gpu_time(lease).expect("gpu time") - before;
        log(format!(
            "{launches} iota launch(es) of {n} elements: GPU time {used:?}, wall time {wall:?}"
        ));
        assert!(used > Duration::ZERO, "{launches} launches: no GPU time");
        assert!(
            used <= wall,
            "{launches} launches: GPU time {used:?} past the wall time {wall:?}"
        );
    }
    let read = gpu.mem_read(s, out, 4 * u64::from(n - 1), 4).expect("read");
    assert_eq!(read, n.to_le_bytes());
    drop(gpu);
    assert_baseline(&host);
}
