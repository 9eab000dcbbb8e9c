//! Shared support for the integration tests: hosts wired to the test worker binary, the built
//! tasklets, and the baseline check every test ends with.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tasklet_runtime::{
    Accounting, BackendKind, Host, HostConfig, Manifest, Policy, Tasklet, WorkerCommand, WorkerInfo,
};

/// The repository root: `TASKLET_REPO` when set (the packaged GPU suite runs its prebuilt test
/// binaries from another checkout), else where this crate was built.
pub fn repo() -> PathBuf {
    match std::env::var_os("TASKLET_REPO") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
    }
}

/// A tasklet folder under tasklets/ (e.g. "iota", "testing/probe").
pub fn tasklet_dir(name: &str) -> PathBuf {
    repo().join("tasklets").join(name)
}

pub const CUDA: BackendKind = BackendKind::Cuda;

/// The backend the suite runs on: `TASKLET_TEST_BACKEND=cuda` selects the GPU.
pub fn backend() -> BackendKind {
    match std::env::var("TASKLET_TEST_BACKEND").as_deref() {
        Ok("cuda") => BackendKind::Cuda,
        _ => BackendKind::Emu,
    }
}

/// A policy for tests: small pool, short deadlines.
pub fn test_policy() -> Policy {
    let mut p = Policy::default();
    p.workers.warm = 1;
    p.workers.max = 4;
    p.workers.kernel_deadline = Duration::from_secs(2);
    p.workers.op_timeout = Duration::from_secs(10);
    p.workers.emu_memory = 256 << 20;
    p
}

/// The worker command: `worker` (this package's test worker binary), or `TASKLET_TEST_WORKER`
/// (for the packaged suite).
pub fn worker_command(worker: &str) -> WorkerCommand {
    let program = std::env::var_os("TASKLET_TEST_WORKER")
        .map_or_else(|| PathBuf::from(worker), PathBuf::from);
    WorkerCommand {
        program,
        args: Vec::new(),
    }
}

/// A host on the suite's backend whose workers run `worker`.
pub fn host_with(policy: Policy, worker: &str) -> Host {
    host_on(policy, worker, backend())
}

/// A host on `backend` whose workers run `worker`.
pub fn host_on(policy: Policy, worker: &str, backend: BackendKind) -> Host {
    let worker = worker_command(worker);
    Host::new(HostConfig {
        policy,
        worker,
        backend,
    })
    .unwrap_or_else(|e| panic!("the host does not start on {}: {e}", backend.as_str()))
}

/// Whether the GPU tests (tests/gpu.rs) run here: the CUDA device a probe worker found, or why
/// they are skipped. `TASKLET_TEST_BACKEND=cuda` demands a device (no device is a failure, not a
/// skip); another value of it skips them; unset, a device is looked for. Probed once per process.
pub fn gpu_for_tests(worker: &str) -> Result<WorkerInfo, String> {
    static PROBE: OnceLock<Result<WorkerInfo, String>> = OnceLock::new();
    let demanded = match std::env::var("TASKLET_TEST_BACKEND") {
        Ok(v) if v == "cuda" => true,
        Ok(v) => {
            return Err(format!(
                "TASKLET_TEST_BACKEND={v} (set it to cuda, or leave it unset, to run them)"
            ))
        }
        Err(_) => false,
    };
    let found = PROBE
        .get_or_init(|| tasklet_worker::probe_cuda(&worker_command(worker)))
        .clone();
    match found {
        Ok(info) => Ok(info),
        Err(why) if demanded => {
            panic!("TASKLET_TEST_BACKEND=cuda, but the cuda backend does not start here: {why}")
        }
        Err(why) => Err(why),
    }
}

/// Says loudly (past the test harness's output capture) that a test did not run, and why.
pub fn say_skipped(test: &str, why: &str) {
    // On a line of its own: the harness has printed "test name ... " without a newline.
    let _ = writeln!(
        std::io::stderr(),
        "\nskipped: no CUDA device: {test}: {why}"
    );
}

pub fn manifest(name: &str) -> Manifest {
    Manifest::load(&tasklet_dir(name)).expect("manifest loads")
}

pub fn load(host: &Host, manifest: Manifest) -> Tasklet {
    host.load(manifest).expect("component loads")
}

/// Runs and returns stdout as text, panicking with the error otherwise.
pub fn run_ok(host: &Host, tasklet: &Tasklet, input: &str) -> String {
    let out = host
        .run(tasklet, input.as_bytes())
        .unwrap_or_else(|e| panic!("run failed: {e}"));
    String::from_utf8(out).expect("utf-8 output")
}

/// Asserts that every lease is gone and every byte returned: the invariant every test ends on.
pub fn assert_baseline(host: &Host) {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let now = host.accounting();
        if now == Accounting::default() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "accounting not back at baseline: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The probe tasklet's result lines as (status, kind) pairs: `ok …` → ("ok", ""), `error K …` → ("error", K).
pub fn probe_lines(output: &str) -> Vec<(String, String, String)> {
    output
        .lines()
        .map(|l| {
            let mut parts = l.splitn(3, ' ');
            let status = parts.next().unwrap_or("").to_string();
            let kind = parts.next().unwrap_or("").to_string();
            let rest = parts.next().unwrap_or("").to_string();
            (status, kind, rest)
        })
        .collect()
}

/// A CUDA host for a GPU test (with the device's probe report), or — printing `skipped: no CUDA
/// device` and why — a `return` from the test.
#[macro_export]
macro_rules! gpu_host_or_skip {
    ($test:expr, $policy:expr) => {
        match $crate::gpu_for_tests(env!("CARGO_BIN_EXE_tasklet-test-worker")) {
            Ok(info) => (
                $crate::host_on(
                    $policy,
                    env!("CARGO_BIN_EXE_tasklet-test-worker"),
                    $crate::CUDA,
                ),
                info,
            ),
            Err(why) => {
                $crate::say_skipped($test, &why);
                return;
            }
        }
    };
}

/// A host on the suite's backend whose workers are this package's `tasklet-test-worker` binary.
#[macro_export]
macro_rules! test_host {
    () => {
        $crate::host_with(
            $crate::test_policy(),
            env!("CARGO_BIN_EXE_tasklet-test-worker"),
        )
    };
    ($policy:expr) => {
        $crate::host_with($policy, env!("CARGO_BIN_EXE_tasklet-test-worker"))
    };
}
