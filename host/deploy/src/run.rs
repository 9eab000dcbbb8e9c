//! Running a deployment: its linked tasklet checked out (warm, cached or compiled), granted what
//! the caller decides, run once on fresh instance state, and given back to the warm set.

use std::fmt;
use std::time::{Duration, Instant};

use tasklet_runtime::config::{Grant, Manifest};
use tasklet_runtime::gpu::GpuService;
use tasklet_runtime::{Captured, CapturedOutput, GuestOutput, RunError, RunStop, Teardown};
use tasklet_store::Digest;

use crate::deployer::Deployer;
use crate::error::Error;
use crate::load::LoadKind;
use crate::run_id::RunId;

/// What one run of a deployment did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    /// This run's id: unguessable, unique.
    pub run_id: RunId,
    /// The deployment run.
    pub digest: Digest,
    /// How the run ended.
    pub status: ExitStatus,
    /// What the tasklet returned (empty unless `status` is [`ExitStatus::Ok`]).
    pub output: Vec<u8>,
    /// Where its linked tasklet came from.
    pub load: LoadKind,
    /// How long getting the linked tasklet took (finding a warm one; or reading, compiling and
    /// linking).
    pub load_time: Duration,
    /// How long the run itself took: instantiating, calling `run`, and giving back every
    /// lease it held. Not its instance's teardown, which [`Deployer::run_until`] does after
    /// (and a node after it has answered).
    pub elapsed: Duration,
    /// What the tasklet printed to stdout and stderr, as far as
    /// [`DeployConfig::printed_bytes`](crate::DeployConfig::printed_bytes): for the caller to
    /// show or log, as untrusted bytes.
    pub printed: Captured,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitStatus {
    /// `run` returned output.
    Ok,
    /// `run` returned an error: the tasklet's own message.
    Failed(String),
    /// The tasklet trapped (a panic, an out-of-bounds access, memory refused): what and where.
    Trapped(String),
    /// The run passed its wall-time limit (this one) and was stopped.
    WallTime(Duration),
    /// The tasklet could not be instantiated (e.g. its initial memory is larger than its grant).
    Instantiate(String),
    /// The run was stopped before it ended (on a node: its client went away).
    Stopped,
}

impl ExitStatus {
    /// Whether the run produced output.
    pub fn is_ok(&self) -> bool {
        matches!(self, ExitStatus::Ok)
    }

    /// A stable name for the status: `ok`, `failed`, `trapped`, `wall-time`, `instantiate`,
    /// `stopped`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ExitStatus::Ok => "ok",
            ExitStatus::Failed(_) => "failed",
            ExitStatus::Trapped(_) => "trapped",
            ExitStatus::WallTime(_) => "wall-time",
            ExitStatus::Instantiate(_) => "instantiate",
            ExitStatus::Stopped => "stopped",
        }
    }
}

impl From<RunError> for ExitStatus {
    fn from(e: RunError) -> ExitStatus {
        match e {
            RunError::Failed(message) => ExitStatus::Failed(message),
            RunError::Trapped(message) => ExitStatus::Trapped(message),
            RunError::WallTime(limit) => ExitStatus::WallTime(limit),
            RunError::Instantiate(message) => ExitStatus::Instantiate(message),
            RunError::Stopped => ExitStatus::Stopped,
        }
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitStatus::Ok => f.write_str("ok"),
            ExitStatus::Failed(message) => write!(f, "the tasklet failed: {message}"),
            ExitStatus::Trapped(message) => write!(f, "the tasklet trapped: {message}"),
            ExitStatus::WallTime(limit) => write!(
                f,
                "the tasklet ran past its wall-time limit of {limit:?} and was stopped"
            ),
            ExitStatus::Instantiate(message) => {
                write!(f, "the tasklet could not be instantiated: {message}")
            }
            ExitStatus::Stopped => f.write_str("the run was stopped before it ended"),
        }
    }
}

impl Deployer {
    /// Runs deployment `digest` once on `input`.
    ///
    /// `grant_for` decides what the run is granted from the deployment's manifest (a node
    /// intersects the manifest, its policy and the tenant's); `gpu_for` gives the service the
    /// run's GPU operations go to, under that grant (on a node, a
    /// [`LocalGpu`](tasklet_runtime::gpu::LocalGpu) over its lease manager). Whatever the
    /// outcome, the service, and with it every lease of the run, is dropped before this returns.
    ///
    /// `Err` means the run could not start (no such deployment, a store failure); how a run that
    /// started ended is its [`RunOutcome::status`]. A run blocks for as long as the tasklet
    /// runs, at most its wall time (plus, on a cold start, the load).
    pub fn run(
        &self,
        digest: &Digest,
        input: &[u8],
        grant_for: impl FnOnce(&Manifest) -> Grant,
        gpu_for: impl FnOnce(Grant) -> Box<dyn GpuService>,
    ) -> Result<RunOutcome, Error> {
        self.run_until(digest, input, grant_for, gpu_for, &RunStop::new())
    }

    /// As [`Deployer::run`], and stopped early once `stop` is (see [`RunStop`]): its status is
    /// then [`ExitStatus::Stopped`]. A node stops the runs of a client that went away.
    pub fn run_until(
        &self,
        digest: &Digest,
        input: &[u8],
        grant_for: impl FnOnce(&Manifest) -> Grant,
        gpu_for: impl FnOnce(Grant) -> Box<dyn GpuService>,
        stop: &RunStop,
    ) -> Result<RunOutcome, Error> {
        let (outcome, teardown) =
            self.run_leaving_teardown(digest, input, grant_for, gpu_for, stop)?;
        drop(teardown);
        Ok(outcome)
    }

    /// As [`Deployer::run_until`], with the run's instance left to the caller to tear down
    /// (see [`Teardown`]), as a node does once it has answered. Every lease of the run is given
    /// back by the time this returns.
    pub fn run_leaving_teardown(
        &self,
        digest: &Digest,
        input: &[u8],
        grant_for: impl FnOnce(&Manifest) -> Grant,
        gpu_for: impl FnOnce(Grant) -> Box<dyn GpuService>,
        stop: &RunStop,
    ) -> Result<(RunOutcome, Teardown), Error> {
        let inner = &self.inner;
        let run_id = RunId::random()?;
        let start = Instant::now();
        let (mut linked, load, generation) = inner.checkout(digest)?;
        let load_time = start.elapsed();

        linked.tasklet.grant = grant_for(&linked.tasklet.manifest);
        let gpu = gpu_for(linked.tasklet.grant);
        let printed = CapturedOutput::new(inner.config.printed_bytes);
        let start = Instant::now();
        let (result, teardown) = inner.runner.run_leaving_teardown(
            &linked.tasklet,
            input,
            gpu,
            stop,
            &GuestOutput::Capture(printed.clone()),
        );
        let elapsed = start.elapsed();
        inner.warm.give(*digest, linked, generation);

        let (status, output) = match result {
            Ok(output) => (ExitStatus::Ok, output),
            Err(e) => (ExitStatus::from(e), Vec::new()),
        };
        let outcome = RunOutcome {
            run_id,
            digest: *digest,
            status,
            output,
            load,
            load_time,
            elapsed,
            printed: printed.take(),
        };
        Ok((outcome, teardown))
    }
}
