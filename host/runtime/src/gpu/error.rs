//! The host's side of `gpu-error`: a failure either becomes a typed error the guest sees, or a trap.

use crate::bindings::tasklet::gpu::types::GpuError;
use tasklet_worker::{ErrorKind, WorkerError};

/// What a host function of `tasklet:gpu` fails with.
#[derive(Debug)]
pub enum GpuFailure {
    /// Returned to the guest as `gpu-error`.
    Gpu(GpuError),
    /// Traps the guest: a host invariant broke (e.g. a handle the component model vouched for is
    /// missing from the table). Never caused by guest input alone.
    Trap(wasmtime::Error),
}

pub type GpuResult<T> = Result<T, GpuFailure>;

impl From<GpuError> for GpuFailure {
    fn from(e: GpuError) -> Self {
        GpuFailure::Gpu(e)
    }
}

impl From<wasmtime::component::ResourceTableError> for GpuFailure {
    fn from(e: wasmtime::component::ResourceTableError) -> Self {
        GpuFailure::Trap(e.into())
    }
}

/// Shorthands for building errors with a formatted cause.
pub fn unauthorized(m: impl Into<String>) -> GpuFailure {
    GpuError::Unauthorized(m.into()).into()
}
pub fn invalid(m: impl Into<String>) -> GpuFailure {
    GpuError::InvalidArgument(m.into()).into()
}
pub fn out_of_bounds(m: impl Into<String>) -> GpuFailure {
    GpuError::OutOfBounds(m.into()).into()
}
pub fn quota(m: impl Into<String>) -> GpuFailure {
    GpuError::QuotaExceeded(m.into()).into()
}
pub fn unsupported(m: impl Into<String>) -> GpuFailure {
    GpuError::Unsupported(m.into()).into()
}

/// Maps a worker's failure to the guest's error. `Lost` means the lease is gone with its worker.
pub fn from_worker(e: WorkerError) -> GpuError {
    match e {
        WorkerError::Op { kind, message } => match kind {
            ErrorKind::OutOfMemory => {
                GpuError::CapacityExceeded(format!("device out of memory: {message}"))
            }
            ErrorKind::OutOfBounds => GpuError::OutOfBounds(message),
            ErrorKind::InvalidArgument => GpuError::InvalidArgument(message),
            ErrorKind::LoadFailed => GpuError::LoadFailed(message),
            ErrorKind::LaunchFailed => GpuError::LaunchFailed(message),
            ErrorKind::KernelFault => GpuError::KernelFault(message),
            ErrorKind::DeadlineExceeded => GpuError::DeadlineExceeded(message),
            ErrorKind::Unsupported => GpuError::Unsupported(message),
        },
        WorkerError::Lost(m) => {
            GpuError::DeviceLost(format!("the GPU worker for this lease was lost: {m}"))
        }
        WorkerError::Spawn(m) => GpuError::DeviceLost(format!("could not start a GPU worker: {m}")),
        WorkerError::NoCapacity(m) => GpuError::CapacityExceeded(m),
    }
}

/// The kebab-case WIT name of an error's case, as users and logs see it.
pub fn kind_name(e: &GpuError) -> &'static str {
    match e {
        GpuError::Unauthorized(_) => "unauthorized",
        GpuError::LeaseExpired(_) => "lease-expired",
        GpuError::CapacityExceeded(_) => "capacity-exceeded",
        GpuError::QuotaExceeded(_) => "quota-exceeded",
        GpuError::OutOfBounds(_) => "out-of-bounds",
        GpuError::InvalidArgument(_) => "invalid-argument",
        GpuError::LoadFailed(_) => "load-failed",
        GpuError::LaunchFailed(_) => "launch-failed",
        GpuError::KernelFault(_) => "kernel-fault",
        GpuError::DeadlineExceeded(_) => "deadline-exceeded",
        GpuError::DeviceLost(_) => "device-lost",
        GpuError::Unsupported(_) => "unsupported",
    }
}
