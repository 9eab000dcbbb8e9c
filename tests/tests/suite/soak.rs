//! The soak (tests/src/bin/soak.rs) as a test: 2,000 cycles of random tenant lives against a host
//! with real worker processes on the emulator, every batch checked for leaks; it must say PASS.
//! On cuda (the GPU suite's cuda pass) a short run of 200 cycles, without the NVML device-memory
//! checks (the other tests share the GPU): `run.sh soak` runs the long one, with them.

use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn the_soak_passes() {
    let (backend, cycles) = match tasklet_tests::backend() {
        tasklet_runtime::BackendKind::Emu => ("emu", 2000),
        tasklet_runtime::BackendKind::Cuda => ("cuda", 200),
    };
    // A fixed seed unless SOAK_SEED names one: a failure here replays with the seed it prints.
    let seed = std::env::var("SOAK_SEED").unwrap_or_else(|_| "2026".to_owned());
    let worker = std::env::var("TASKLET_TEST_WORKER")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_tasklet-test-worker").to_owned());
    let started = Instant::now();
    // On cuda the suite's other tests use the GPU at the same time, so NVML's device total cannot
    // show this soak's leaks: `run.sh soak` checks it, with the GPU to itself.
    let nvml = match backend {
        "cuda" => &["--no-nvml"][..],
        _ => &[][..],
    };
    let out = Command::new(env!("CARGO_BIN_EXE_soak"))
        .args(["--cycles", &cycles.to_string(), "--seed", &seed])
        .args(["--backend", backend, "--worker", &worker])
        .args(nvml)
        .output()
        .expect("the soak binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let took = started.elapsed();
    // Its figures, for the log (cargo shows them with --nocapture, and on failure).
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("soak: PASS"),
        "the soak failed ({}, after {took:?}):\n{stdout}\n{}",
        out.status,
        &stderr[stderr.len().saturating_sub(4000)..]
    );
    assert!(
        stdout.contains(&format!("soak: {cycles} cycles in")),
        "the soak did not run its {cycles} cycles:\n{stdout}"
    );
    // CI runs on 2 cores: the soak must stay a few minutes at most.
    assert!(took < Duration::from_secs(300), "the soak took {took:?}");
}
