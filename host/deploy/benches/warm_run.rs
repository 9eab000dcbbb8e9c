//! What a deployed tasklet's run costs the node: a warm run (the linked tasklet in memory:
//! instantiate, call, tear down), a cold run from the compiled cache, and a compile.
//!
//! The tasklet is `iota`. With input `0` it returns at once without touching the GPU: the run
//! is the deployer's cost alone. With input `1` it also leases the (emulated) GPU, loads its
//! kernel, launches, syncs and reads back, for comparison.
//!
//! Run: `cargo bench -p tasklet-deploy --bench warm_run [-- RUNS]` (RUNS warm runs, 20,000 by
//! default). Prints medians and 99th percentiles in µs, and warm runs per second on one thread.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tasklet_deploy::{DeployConfig, Deployer, LoadKind, RunOutcome};
use tasklet_runtime::gpu::LocalGpu;
use tasklet_runtime::Host;
use tasklet_store::{Digest, Store, StoreConfig};
use tasklet_tests::{host_with, tasklet_dir, test_policy};

/// Cold runs measured of each kind: each needs a deployer (an engine) of its own.
const COLD_RUNS: usize = 20;
const COMPILES: usize = 5;

fn main() {
    let runs: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20_000);
    let host = host_with(
        test_policy(),
        env!("CARGO_BIN_EXE_tasklet-deploy-test-worker"),
    );
    let dir = tempfile::TempDir::new().expect("a temporary folder");
    let store = Store::open(dir.path(), StoreConfig::default()).expect("store opens");
    let deployer = Deployer::new(store.clone(), DeployConfig::default()).expect("deployer");

    let iota = tasklet_dir("iota");
    let manifest = std::fs::read(iota.join("tasklet.toml")).expect("iota's manifest");
    let component_path = tasklet_runtime::Manifest::load(&iota)
        .expect("iota's manifest parses")
        .component;
    let component = std::fs::read(&component_path).expect("iota was built");
    let pushed = deployer
        .push(&manifest, component.as_slice())
        .expect("push");
    let digest = pushed.digest;

    let cached: Vec<f64> = (0..COLD_RUNS)
        .map(|_| {
            let fresh = Deployer::new(store.clone(), DeployConfig::default()).expect("deployer");
            let outcome = run(&fresh, &host, &digest, b"0");
            assert_eq!(outcome.load, LoadKind::Cached);
            micros(outcome.load_time)
        })
        .collect();
    let compiled: Vec<f64> = (0..COMPILES)
        .map(|_| {
            store
                .compiled()
                .remove_component(&pushed.component)
                .expect("compiled entry removed");
            let fresh = Deployer::new(store.clone(), DeployConfig::default()).expect("deployer");
            let outcome = run(&fresh, &host, &digest, b"0");
            assert_eq!(outcome.load, LoadKind::Compiled);
            micros(outcome.load_time)
        })
        .collect();

    // Warm-up: page in code and let allocators settle.
    for _ in 0..runs / 10 {
        run(&deployer, &host, &digest, b"0");
    }
    let (no_gpu, no_gpu_calls, wall) = warm_runs(&deployer, &host, &digest, b"0", runs);
    let gpu_runs = (runs / 20).max(10);
    let (gpu, gpu_calls, _) = warm_runs(&deployer, &host, &digest, b"1", gpu_runs);

    println!(
        "iota ({} bytes, compiled {} bytes), deployed; {runs} warm runs on one thread",
        component.len(),
        compiled_len(&store, &pushed.component, deployer.engine_fingerprint()),
    );
    println!("{:<58} {:>10} {:>10}", "", "p50 µs", "p99 µs");
    row("warm run, no GPU: instantiate + call", &no_gpu);
    row("warm run, no GPU: whole Deployer::run", &no_gpu_calls);
    row(
        &format!("warm run, GPU (lease, load, launch, read; {gpu_runs} runs)"),
        &gpu,
    );
    row("warm run, GPU: whole Deployer::run", &gpu_calls);
    row(
        &format!("cold run from the compiled cache: load ({COLD_RUNS} runs)"),
        &cached,
    );
    row(&format!("compile + link ({COMPILES} runs)"), &compiled);
    println!(
        "warm runs per second, no GPU, one thread: {:.0}",
        runs as f64 / wall.as_secs_f64()
    );
    if let Some(took) = pushed.compiled_in {
        println!(
            "push (compile + link + store): compile took {:.1} ms",
            took.as_secs_f64() * 1e3
        );
    }
}

/// `runs` warm runs of `digest` on `input`: each run's instantiate + call time, each whole
/// `Deployer::run` call's time, and the time all took.
fn warm_runs(
    deployer: &Deployer,
    host: &Host,
    digest: &Digest,
    input: &[u8],
    runs: usize,
) -> (Vec<f64>, Vec<f64>, Duration) {
    let mut inner = Vec::with_capacity(runs);
    let mut whole = Vec::with_capacity(runs);
    let start = Instant::now();
    for _ in 0..runs {
        let t = Instant::now();
        let outcome = run(deployer, host, digest, input);
        whole.push(micros(t.elapsed()));
        assert_eq!(outcome.load, LoadKind::Warm);
        inner.push(micros(outcome.elapsed));
    }
    (inner, whole, start.elapsed())
}

fn run(deployer: &Deployer, host: &Host, digest: &Digest, input: &[u8]) -> RunOutcome {
    let leases = Arc::clone(host.leases());
    let outcome = deployer
        .run(
            digest,
            input,
            |manifest| host.policy().grant(manifest),
            |grant| Box::new(LocalGpu::new(grant, leases)),
        )
        .expect("run");
    assert!(outcome.status.is_ok(), "{}", outcome.status);
    outcome
}

fn compiled_len(store: &Store, component: &Digest, engine: &str) -> usize {
    store
        .compiled()
        .get(component, engine)
        .expect("compiled cache")
        .into_hit()
        .map_or(0, |bytes| bytes.len())
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn row(label: &str, samples: &[f64]) {
    let mut sorted = samples.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    println!("{label:<58} {:>10.1} {:>10.1}", at(0.5), at(0.99));
}
