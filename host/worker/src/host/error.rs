//! What the host's operations on workers and on the pool fail with.

use crate::contract::ErrorKind;

/// What a host-side operation on a worker (or the pool) can fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkerError {
    /// The backend refused or failed the op. The worker is still usable unless
    /// `kind.poisons_worker()`; then every later op fails the same way and `Pool::release` kills it.
    #[error("{kind}: {message}")]
    Op { kind: ErrorKind, message: String },
    /// The worker died, was killed, stopped answering or broke the protocol; it is unusable.
    #[error("worker lost: {0}")]
    Lost(String),
    /// A worker process could not be started.
    #[error("cannot start worker: {0}")]
    Spawn(String),
    /// Every worker the pool may run is leased out (or the pool is shut down).
    #[error("no worker capacity: {0}")]
    NoCapacity(String),
}

impl WorkerError {
    pub fn op(kind: ErrorKind, message: impl Into<String>) -> WorkerError {
        WorkerError::Op {
            kind,
            message: message.into(),
        }
    }

    /// The error kind when this is an [`WorkerError::Op`].
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            WorkerError::Op { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}
