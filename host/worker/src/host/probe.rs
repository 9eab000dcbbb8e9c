//! Whether a backend works on this machine, asked of a short-lived worker process.

use std::time::Duration;

use super::client::Worker;
use super::error::WorkerError;
use crate::contract::{BackendKind, WorkerCommand, WorkerInfo};

/// Starts a short-lived worker on `backend`, asks it what it serves, and ends it: whether the
/// backend works on this machine, and its device. The error says why not, in the worker's words
/// (e.g. [`crate::worker::backend::cuda::NO_DRIVER`]). Takes a CUDA context's start on a GPU.
pub fn probe(command: &WorkerCommand, backend: BackendKind) -> Result<WorkerInfo, String> {
    let mut w = Worker::spawn(command, backend, u64::MAX, Duration::from_secs(10)).map_err(
        |e| match e {
            WorkerError::Spawn(m) => m,
            other => other.to_string(),
        },
    )?;
    let info = w.info().map_err(|e| e.to_string());
    w.kill();
    info
}

/// [`probe`] for the cuda backend.
pub fn probe_cuda(command: &WorkerCommand) -> Result<WorkerInfo, String> {
    probe(command, BackendKind::Cuda)
}
