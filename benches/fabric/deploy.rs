//! Warm runs of a deployed tiny tasklet: the probe tasklet told `grow 0`, which touches no GPU
//! and allocates nothing, so that a run is the node's instantiate + call and the round trip
//! (the node tears the instance down after it has answered). The node reports each run's own
//! time (DEPLOY_RUN's `elapsed_us`, from just before instantiation to the run's leases given
//! back).

use crate::stats::Samples;
use std::time::{Duration, Instant};
use tasklet_remote::{DeployExit, Digest, NodeClient};
use tasklet_runtime::gpu::GpuService;
use tasklet_runtime::{GuestOutput, Manifest, Policy, RunStop, Runner};

/// The tasklet (under `tasklets/`) and the input of a tiny run, and what it answers.
pub const TINY_TASKLET: &str = "testing/probe";
pub const TINY_INPUT: &[u8] = b"grow 0";
const TINY_OUTPUT: &[u8] = b"ok grew 0\n";

/// What a series of runs measured.
#[derive(Debug, Default)]
pub struct Runs {
    /// Each run's time on the node (instantiate + call).
    pub node: Samples,
    /// Each run's time at the client (request to the end of the reply's output).
    pub client: Samples,
    /// The series' wall time, warm-up excluded.
    pub wall: Duration,
}

impl Runs {
    pub fn per_second(&self) -> f64 {
        self.client.len() as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// Pushes the tiny tasklet (a no-op when the node has it); its digest.
pub fn push(client: &mut NodeClient) -> Result<Digest, String> {
    let dir = tasklet_tests::tasklet_dir(TINY_TASKLET);
    let manifest_path = dir.join("tasklet.toml");
    let manifest_text = std::fs::read(&manifest_path)
        .map_err(|e| format!("cannot read {}: {e}", manifest_path.display()))?;
    let manifest = Manifest::load(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let component = std::fs::read(&manifest.component).map_err(|e| {
        format!(
            "cannot read {} (the tasklets are built by `cargo build -p tasklet-tests`): {e}",
            manifest.component.display()
        )
    })?;
    let pushed = client
        .deploy_push(&manifest_text, &component)
        .map_err(|e| format!("deploy push: {e}"))?;
    Ok(pushed.digest)
}

/// Checks that a run did what the tiny run does.
pub fn check(exit: DeployExit, output: &[u8]) -> Result<(), String> {
    if exit != DeployExit::Ok || output != TINY_OUTPUT {
        return Err(format!(
            "the tiny run ended {exit}: {:?}",
            String::from_utf8_lossy(output)
        ));
    }
    Ok(())
}

/// Runs one after another through `NodeClient::deploy_run` (what `tasklet deploy run` does):
/// `warmup` untimed, then up to `count`, for at most `budget`.
pub fn one_at_a_time(
    client: &mut NodeClient,
    digest: &Digest,
    warmup: usize,
    count: usize,
    budget: Duration,
) -> Result<Runs, String> {
    let mut runs = Runs {
        node: Samples::with_capacity(count),
        client: Samples::with_capacity(count),
        wall: Duration::ZERO,
    };
    for _ in 0..warmup {
        let run = client
            .deploy_run(digest, TINY_INPUT)
            .map_err(|e| format!("deploy run: {e}"))?;
        check(run.exit, &run.output)?;
    }
    let start = Instant::now();
    for _ in 0..count {
        let t = Instant::now();
        let run = client
            .deploy_run(digest, TINY_INPUT)
            .map_err(|e| format!("deploy run: {e}"))?;
        runs.client.push(t.elapsed());
        check(run.exit, &run.output)?;
        runs.node.push(run.elapsed);
        if start.elapsed() > budget {
            break;
        }
    }
    runs.wall = start.elapsed();
    Ok(runs)
}

/// The same tiny run without a node, each run's two parts timed apart.
#[derive(Debug, Default)]
pub struct InProcess {
    /// Instantiate + call: what the node's figure times.
    pub run: Samples,
    /// The instance's teardown, which the node does after it has answered.
    pub teardown: Samples,
}

/// The same tiny run without a node: `Runner::run_leaving_teardown` in this process (a new
/// store, instantiate, call), then its teardown, each run's GPU service from `gpu`, as the node
/// makes one per run. `warmup` untimed, then up to `count`, for at most `budget`.
pub fn in_process(
    gpu: impl Fn() -> Box<dyn GpuService>,
    warmup: usize,
    count: usize,
    budget: Duration,
) -> Result<InProcess, String> {
    let dir = tasklet_tests::tasklet_dir(TINY_TASKLET);
    let manifest = Manifest::load(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let runner = Runner::new().map_err(|e| format!("the runner: {e}"))?;
    let grant = Policy::default().grant(&manifest);
    let tasklet = runner
        .load(manifest, grant)
        .map_err(|e| format!("loading the tiny tasklet: {e}"))?;
    let mut samples = InProcess {
        run: Samples::with_capacity(count),
        teardown: Samples::with_capacity(count),
    };
    let start = Instant::now();
    for i in 0..warmup + count {
        let t = Instant::now();
        let (output, teardown) = runner.run_leaving_teardown(
            &tasklet,
            TINY_INPUT,
            gpu(),
            &RunStop::new(),
            &GuestOutput::Inherit,
        );
        let ran = t.elapsed();
        let t = Instant::now();
        drop(teardown);
        let torn_down = t.elapsed();
        let output = output.map_err(|e| format!("the tiny run: {e}"))?;
        check(DeployExit::Ok, &output)?;
        if i >= warmup {
            samples.run.push(ran);
            samples.teardown.push(torn_down);
        }
        if start.elapsed() > budget {
            break;
        }
    }
    Ok(samples)
}
