//! Modules cached by content across leases: a stateless module one lease loaded is, on a GPU,
//! loaded by the next lease on the same warm worker by a lookup (no JIT); a module with state is
//! loaded afresh, so no lease sees another's variables.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tasklet_runtime::gpu::{GpuService, LeaseRequest, LocalGpu};
use tasklet_tests::{assert_baseline, backend, manifest, say_skipped, test_host, CUDA};

const IOTA_PTX: &str = include_str!("../../../kernels/iota.ptx");

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
