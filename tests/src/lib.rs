//! Shared support for the integration tests: hosts wired to the test worker binary, the built
//! tasklets, and the baseline check every test ends with.

pub mod guest_build;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tasklet_runtime::config::DeviceSelector;
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

/// Whether the GPU tests (tests/tests/gpu.rs) run here: the CUDA device a probe worker found, or why
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

/// The probe tasklet's grant on `host` as a GPU service of its own, with a lease of 1 MiB and a
/// session on it: where a test drives the service directly, as a tasklet's calls would.
pub fn probe_session(
    host: &Host,
) -> (
    tasklet_runtime::gpu::LocalGpu,
    tasklet_runtime::gpu::SessionId,
) {
    let (gpu, _, session) = probe_lease_session(host, 1 << 20);
    (gpu, session)
}

/// [`probe_session`] on a lease of `min_vram` bytes (for 60 s), with the lease's id.
pub fn probe_lease_session(
    host: &Host,
    min_vram: u64,
) -> (
    tasklet_runtime::gpu::LocalGpu,
    tasklet_runtime::gpu::LeaseId,
    tasklet_runtime::gpu::SessionId,
) {
    use tasklet_runtime::gpu::{GpuService, LeaseRequest, LocalGpu};
    let grant = host.policy().grant(&manifest("testing/probe"));
    let mut gpu = LocalGpu::new(grant, Arc::clone(host.leases()));
    let lease = gpu
        .lease_acquire(LeaseRequest {
            min_vram,
            secs: 60,
            device: None,
        })
        .expect("lease");
    let session = gpu.session_open(lease).expect("session");
    (gpu, lease, session)
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

/// One line of the probe tasklet's output, split at its first two spaces: `ok <what> <detail>` or
/// `error <kind> <message>` (see tasklets/testing/probe).
pub type ProbeLine = (String, String, String);

/// The probe tasklet's output as lines: `ok alloc 4096` → ("ok", "alloc", "4096"),
/// `error quota-exceeded lease has …` → ("error", "quota-exceeded", "lease has …").
pub fn probe_lines(output: &str) -> Vec<ProbeLine> {
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

/// Runs the probe tasklet (its own manifest) with `command` on `host`, and splits its output.
pub fn run_probe(host: &Host, command: &str) -> Vec<ProbeLine> {
    let probe = load(host, manifest("testing/probe"));
    probe_lines(&run_ok(host, &probe, command))
}

/// Asserts that line `index` of a probe's output is `error <kind> …` and that its message contains
/// `needle` (any message for `""`); a failure shows every line.
#[track_caller]
pub fn assert_gpu_error(lines: &[ProbeLine], index: usize, kind: &str, needle: &str) {
    check_gpu_error(
        lines,
        lines.get(index),
        kind,
        needle,
        &format!("line {index}"),
    );
}

/// [`assert_gpu_error`] for the first `error` line, wherever it is (a fault may surface at the
/// launch or at the next sync).
#[track_caller]
pub fn assert_first_gpu_error(lines: &[ProbeLine], kind: &str, needle: &str) {
    let first = lines.iter().find(|l| l.0 == "error");
    check_gpu_error(lines, first, kind, needle, "the first error line");
}

#[track_caller]
fn check_gpu_error(
    lines: &[ProbeLine],
    line: Option<&ProbeLine>,
    kind: &str,
    needle: &str,
    which: &str,
) {
    let Some((status, got, message)) = line else {
        panic!("no {which} (expected error {kind}) in {lines:?}");
    };
    assert_eq!(
        (status.as_str(), got.as_str()),
        ("error", kind),
        "{which} of {lines:?}"
    );
    assert!(
        message.contains(needle),
        "{which}: the {kind} message does not name {needle:?}: {lines:?}"
    );
}

/// Runs `tasklet` with `input` on a thread of its own: its output (panicking on an error) and the
/// moment it ended.
pub fn spawn_run(
    host: &Arc<Host>,
    tasklet: &Arc<Tasklet>,
    input: &str,
) -> JoinHandle<(String, Instant)> {
    let (host, tasklet, input) = (host.clone(), tasklet.clone(), input.to_owned());
    std::thread::spawn(move || {
        let out = run_ok(&host, &tasklet, &input);
        (out, Instant::now())
    })
}

/// Polls `f` every 10 ms until it holds or `timeout` passes; whether it held.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    f()
}

/// `policy`, lending only the GPU `info` describes when it lists no CUDA devices itself (and
/// NVML named that GPU by UUID).
pub fn on_the_probed_gpu(mut policy: Policy, info: &WorkerInfo) -> Policy {
    if policy.devices.cuda.is_none() && info.uuid.starts_with("GPU-") {
        policy.devices.cuda = Some(vec![DeviceSelector::Uuid(info.uuid.clone())]);
    }
    policy
}

/// The CPU's model name, from /proc/cpuinfo (`unknown` where it says none): what benchmarks
/// print about the machine they ran on.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, name)| name.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Whether a process with this id exists (a worker the test's host started, or its zombie).
pub fn pid_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks whether the process exists.
    unsafe { libc::kill(pid as i32, 0) == 0 }
}

/// A CUDA host for a GPU test (with the device's probe report), or — printing `skipped: no CUDA
/// device` and why — a `return` from the test. The host lends the one GPU the probe found (the
/// tests measure that device: its memory through NVML, its capacity), unless the policy lists
/// devices itself; on a machine with several GPUs it would otherwise lend them all.
#[macro_export]
macro_rules! gpu_host_or_skip {
    ($test:expr, $policy:expr) => {
        match $crate::gpu_for_tests(env!("CARGO_BIN_EXE_tasklet-test-worker")) {
            Ok(info) => (
                $crate::host_on(
                    $crate::on_the_probed_gpu($policy, &info),
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
