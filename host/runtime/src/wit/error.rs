//! `gpu-error` at the edge: the service's [`crate::GpuError`] becomes the generated type the guest
//! sees; a broken host invariant becomes a trap.

use super::bindings::tasklet::gpu::types::GpuError as WitError;
use crate::error::GpuError;

/// What a host function of `tasklet:gpu` fails with.
#[derive(Debug)]
pub enum GpuFailure {
    /// Returned to the guest as `gpu-error`.
    Gpu(WitError),
    /// Traps the guest: a host invariant broke (e.g. a handle the component model vouched for is
    /// missing from the table). Never caused by guest input alone.
    Trap(wasmtime::Error),
}

pub type GpuResult<T> = Result<T, GpuFailure>;

impl From<GpuError> for GpuFailure {
    fn from(e: GpuError) -> Self {
        GpuFailure::Gpu(match e {
            GpuError::Unauthorized(m) => WitError::Unauthorized(m),
            GpuError::LeaseExpired(m) => WitError::LeaseExpired(m),
            GpuError::CapacityExceeded(m) => WitError::CapacityExceeded(m),
            GpuError::QuotaExceeded(m) => WitError::QuotaExceeded(m),
            GpuError::OutOfBounds(m) => WitError::OutOfBounds(m),
            GpuError::InvalidArgument(m) => WitError::InvalidArgument(m),
            GpuError::LoadFailed(m) => WitError::LoadFailed(m),
            GpuError::LaunchFailed(m) => WitError::LaunchFailed(m),
            GpuError::KernelFault(m) => WitError::KernelFault(m),
            GpuError::DeadlineExceeded(m) => WitError::DeadlineExceeded(m),
            GpuError::DeviceLost(m) => WitError::DeviceLost(m),
            GpuError::Unsupported(m) => WitError::Unsupported(m),
        })
    }
}

impl From<wasmtime::component::ResourceTableError> for GpuFailure {
    fn from(e: wasmtime::component::ResourceTableError) -> Self {
        GpuFailure::Trap(e.into())
    }
}
