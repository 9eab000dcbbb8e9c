//! Modules cached by content across leases: a stateless module one lease loaded is, on a GPU,
//! loaded by the next lease on the same warm worker by a lookup (no JIT); a module with state is
//! loaded afresh, so no lease sees another's variables. Across workers, the host's node-wide
//! module cache: a lease whose worker never saw the text loads the code another lease's worker
//! compiled (cuda: the cubin, no JIT; CUDA C: the PTX, no NVRTC).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tasklet_runtime::gpu::{
    BufferId, GpuService, KernelArg, LaunchConfig, LeaseRequest, LocalGpu, ModuleId, SessionId,
};
use tasklet_runtime::module_cache::ModuleCacheStats;
use tasklet_runtime::{BackendKind, Host, HostConfig};
use tasklet_tests::{
    assert_baseline, backend, host_on, manifest, probe_session, say_skipped, test_host,
    test_policy, CUDA,
};

const IOTA_PTX: &str = include_str!("../../../kernels/iota.ptx");
const IOTA_CU: &str = include_str!("../../../kernels/iota.cu");

/// Leases one after another, each loading `ptx` once: the load's time in each.
fn loads_in_successive_leases(
    host: &tasklet_runtime::Host,
    ptx: &str,
    leases: usize,
) -> Vec<Duration> {
    let grant = host.policy().grant(&manifest("testing/probe"));
    let mut gpu = LocalGpu::new(grant, Arc::clone(host.leases()));
    (0..leases)
        .map(|_| {
            let lease = gpu
                .lease_acquire(LeaseRequest {
                    min_vram: 1 << 20,
                    secs: 30,
                    device: None,
                })
                .expect("lease");
            let s = gpu.session_open(lease).expect("session");
            let t = Instant::now();
            gpu.module_load(s, ptx).expect("load");
            let took = t.elapsed();
            gpu.session_drop(s);
            gpu.lease_drop(lease);
            took
        })
        .collect()
}

#[test]
fn a_module_an_earlier_lease_loaded_loads_by_lookup() {
    let host = test_host!();
    if backend() != CUDA {
        say_skipped(
            "module_cache::a_module_an_earlier_lease_loaded_loads_by_lookup",
            "the emulator parses every load; the cache by content is the cuda worker's",
        );
        return;
    }
    // Text no earlier run loaded (nor the driver's JIT cache on disk saw): the first load JITs.
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let ptx = format!("{IOTA_PTX}\n// module_cache test {nonce}\n");
    let times = loads_in_successive_leases(&host, &ptx, 6);
    let first = times[0];
    let cached = *times[1..].iter().min().expect("later leases");
    eprintln!("module load: first (JIT) {first:?}, in a later lease {cached:?} (all: {times:?})");
    assert!(
        cached * 3 < first,
        "a later lease's load ({cached:?}) should be a lookup, far below the first's JIT ({first:?})"
    );
    assert_baseline(&host);
}

/// A service of two leases (two worker processes, both live), a session on each.
fn two_sessions(host: &Host) -> (LocalGpu, SessionId, SessionId) {
    let mut grant = host.policy().grant(&manifest("testing/probe"));
    grant.gpu.max_leases = 2;
    grant.gpu.max_vram = 64 << 20;
    let mut gpu = LocalGpu::new(grant, Arc::clone(host.leases()));
    let request = LeaseRequest {
        min_vram: 8 << 20,
        secs: 60,
        device: None,
    };
    let a = gpu.lease_acquire(request).expect("lease");
    let b = gpu.lease_acquire(request).expect("lease");
    let sa = gpu.session_open(a).expect("session");
    let sb = gpu.session_open(b).expect("session");
    (gpu, sa, sb)
}

/// Runs `iota` of `module` over 64 elements in session `s` and checks every one.
fn iota_runs(gpu: &mut LocalGpu, s: SessionId, module: ModuleId) {
    let out: BufferId = gpu.mem_alloc(s, 4 * 64).expect("alloc");
    let config = LaunchConfig {
        grid: [1, 1, 1],
        block: [64, 1, 1],
        shared_mem_bytes: 0,
    };
    let args = [
        KernelArg::Buffer {
            buffer: out,
            offset: 0,
        },
        KernelArg::U32(64),
    ];
    gpu.launch(s, module, "iota", &config, &args)
        .expect("launch");
    gpu.sync(s).expect("sync");
    let data = gpu.mem_read(s, out, 0, 4 * 64).expect("read");
    let vals: Vec<u32> = data
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(vals, (1..=64).collect::<Vec<u32>>());
}

/// `b - a` of the counters, and `b`'s entries.
fn moved(a: ModuleCacheStats, b: ModuleCacheStats) -> (u64, u64, usize) {
    (b.hits - a.hits, b.misses - a.misses, b.entries)
}

/// On a GPU: two leases at once (two worker processes) load a PTX text no earlier run loaded; the
/// first compiles it (the driver's JIT, through its linker), the second loads that cubin from
/// the host's cache (a hit; the device took the image, so the entry stays) and its kernel runs
/// right; three texts. The times are printed, not compared: alone on an H200 a new text took
/// 8.5-13.5 ms and the cached cubin 0.32-0.50 ms, but under the whole suite every load on the
/// machine took 64-92 ms alike. That the cached load compiles nothing is the fake driver's test
/// below (it logs every JIT).
#[test]
fn on_a_gpu_a_second_worker_loads_the_first_ones_cubin() {
    if backend() != CUDA {
        say_skipped(
            "module_cache::on_a_gpu_a_second_worker_loads_the_first_ones_cubin",
            "PTX loads on the emulator compile nothing to cache",
        );
        return;
    }
    let host = test_host!();
    let (mut gpu, sa, sb) = two_sessions(&host);
    let (mut compiled, mut cached) = (Vec::new(), Vec::new());
    for round in 0..3 {
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let ptx = format!("{IOTA_PTX}\n// module_cache across workers {nonce} {round}\n");
        let start = host.leases().module_cache_stats();
        let t = Instant::now();
        gpu.module_load(sa, &ptx).expect("load in a");
        compiled.push(t.elapsed());
        let after_a = host.leases().module_cache_stats();
        let (hits, misses, _) = moved(start, after_a);
        assert_eq!((hits, misses), (0, 1), "the first load is a miss");
        let t = Instant::now();
        let mb = gpu.module_load(sb, &ptx).expect("load in b");
        cached.push(t.elapsed());
        let after_b = host.leases().module_cache_stats();
        assert_eq!(
            moved(after_a, after_b),
            (1, 0, after_a.entries),
            "the second worker's load is a hit, and its image was taken (a refused one is dropped)"
        );
        iota_runs(&mut gpu, sb, mb);
    }
    eprintln!(
        "module_cache: a new text's load (JIT to a cubin) {compiled:?}; the same text in another worker, from the node's cache {cached:?}"
    );
    drop(gpu);
    assert_baseline(&host);
}

/// On the cuda backend over the fake driver, which logs each JIT and each compiled image loaded
/// with the pid of the worker that did it: two leases at once, hence two worker processes, load
/// the same PTX; the second lease's worker loads the cubin the first's compiled — a hit on the
/// host, no JIT in that worker — and its kernel runs right; a different text misses and compiles.
#[test]
fn a_second_worker_loads_the_cubin_the_first_compiled_without_jit() {
    let Some(dir) = crate::fake_cuda::fake_driver_dir() else {
        return;
    };
    let log = dir.join(format!("jit-log-{:?}", std::thread::current().id()));
    let _ = std::fs::remove_file(&log);
    let events = || -> Vec<(String, u32)> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (what, pid) = l.split_once(' ')?;
                Some((what.to_owned(), pid.parse().ok()?))
            })
            .collect()
    };
    let mut policy = test_policy();
    policy.workers.context_reserve = 16 << 20;
    let host = Host::new(HostConfig {
        policy,
        worker: crate::fake_cuda::fake_worker(
            &dir,
            &[format!("FAKE_CUDA_JIT_LOG={}", log.display())],
        ),
        backend: BackendKind::Cuda,
    })
    .expect("a host on the fake driver");
    let (mut gpu, sa, sb) = two_sessions(&host);
    let pids = host.leases().worker_pids();
    assert_eq!(pids.len(), 2, "two workers: {pids:?}");
    let ours = |e: &Vec<(String, u32)>| -> Vec<(String, u32)> {
        e.iter()
            .filter(|(_, p)| pids.contains(p))
            .cloned()
            .collect()
    };
    let start = host.leases().module_cache_stats();

    gpu.module_load(sa, IOTA_PTX).expect("load in a");
    let after_a = host.leases().module_cache_stats();
    assert_eq!(moved(start, after_a), (0, 1, 1), "a miss, kept");
    let first = ours(&events());
    assert_eq!(first.len(), 2, "a compiled, loaded its image: {first:?}");
    assert_eq!(first[0].0, "jit");
    let a_pid = first[0].1;

    let mb = gpu.module_load(sb, IOTA_PTX).expect("load in b");
    let after_b = host.leases().module_cache_stats();
    assert_eq!(moved(after_a, after_b), (1, 0, 1), "a hit");
    let second = ours(&events())[2..].to_vec();
    let b_pid = *pids.iter().find(|p| **p != a_pid).expect("b's worker");
    assert_eq!(
        second,
        vec![("image".to_owned(), b_pid)],
        "b's worker loaded the image and compiled nothing"
    );
    iota_runs(&mut gpu, sb, mb);

    gpu.module_load(sb, &format!("{IOTA_PTX}\n// another text\n"))
        .expect("another text");
    let after_other = host.leases().module_cache_stats();
    assert_eq!(moved(after_b, after_other), (0, 1, 2), "a miss");
    let third = ours(&events())[3..].to_vec();
    assert_eq!(
        third,
        vec![("jit".to_owned(), b_pid), ("image".to_owned(), b_pid)]
    );
    drop(gpu);
    assert_baseline(&host);
    let _ = std::fs::remove_file(&log);
}

/// CUDA C on the emulator: two leases at once (two workers) load the same source; NVRTC runs
/// once, in the first, and the second loads the PTX it produced (a hit) and runs it right.
/// Other options are another key: a miss.
#[test]
fn cuda_c_compiles_once_across_two_leases() {
    if let Err(e) = tasklet_worker::nvrtc::library() {
        eprintln!("skipped: NVRTC not found ({e})");
        return;
    }
    let host = host_on(
        test_policy(),
        env!("CARGO_BIN_EXE_tasklet-test-worker"),
        BackendKind::Emu,
    );
    let (mut gpu, sa, sb) = two_sessions(&host);
    let start = host.leases().module_cache_stats();
    let ma = gpu.module_load_source(sa, IOTA_CU, &[]).expect("compile");
    let after_a = host.leases().module_cache_stats();
    assert_eq!(moved(start, after_a), (0, 1, 1), "compiled, kept");
    let t = Instant::now();
    let mb = gpu.module_load_source(sb, IOTA_CU, &[]).expect("cached");
    let cached = t.elapsed();
    let after_b = host.leases().module_cache_stats();
    assert_eq!(moved(after_a, after_b), (1, 0, 1), "a hit: no NVRTC");
    eprintln!("CUDA C load in the second lease: {cached:?}");
    iota_runs(&mut gpu, sa, ma);
    iota_runs(&mut gpu, sb, mb);
    gpu.module_load_source(sb, IOTA_CU, &["-DUNUSED=1".to_owned()])
        .expect("other options");
    let after_other = host.leases().module_cache_stats();
    assert_eq!(
        moved(after_b, after_other),
        (0, 1, 2),
        "other options: a miss"
    );
    assert!(after_other.bytes > 0);
    drop(gpu);
    assert_baseline(&host);
}

/// In one session, repeated loads of the same text are modules of their own (each unloads on
/// its own) that share the first load's kernels: whichever is unloaded, the others still
/// launch and list the same kernels, and a load after the last unload starts afresh.
#[test]
fn repeated_loads_in_a_session_launch_after_any_of_them_is_unloaded() {
    let host = test_host!();
    let (mut gpu, s) = probe_session(&host);
    let loads: Vec<ModuleId> = (0..3)
        .map(|_| gpu.module_load(s, IOTA_PTX).expect("load"))
        .collect();
    let kernels = gpu.module_kernels(s, loads[0]);
    assert!(kernels.iter().any(|k| k == "iota"), "{kernels:?}");
    gpu.module_unload(s, loads[0]);
    for &m in &loads[1..] {
        assert_eq!(gpu.module_kernels(s, m), kernels);
        iota_runs(&mut gpu, s, m);
    }
    gpu.module_unload(s, loads[2]);
    iota_runs(&mut gpu, s, loads[1]);
    gpu.module_unload(s, loads[1]);
    let err = gpu
        .launch(
            s,
            loads[1],
            "iota",
            &LaunchConfig {
                grid: [1, 1, 1],
                block: [1, 1, 1],
                shared_mem_bytes: 0,
            },
            &[],
        )
        .expect_err("an unloaded module does not launch");
    assert!(err.to_string().contains("unloaded"), "{err}");
    let fresh = gpu
        .module_load(s, IOTA_PTX)
        .expect("load after the last unload");
    assert_eq!(gpu.module_kernels(s, fresh), kernels);
    iota_runs(&mut gpu, s, fresh);
    drop(gpu);
    assert_baseline(&host);
}
