//! `gpu-error` at the edge: the service's [`crate::GpuError`] becomes the generated type the guest
//! sees, in whichever contract version it imports; a broken host invariant becomes a trap.

use crate::error::GpuError;

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

/// The service's error as version `$v`'s generated `gpu-error` (the cases are the same in every
/// version).
macro_rules! wit_error {
    ($v:ident) => {
        impl From<GpuError> for super::bindings::$v::tasklet::gpu::types::GpuError {
            fn from(e: GpuError) -> Self {
                use super::bindings::$v::tasklet::gpu::types::GpuError as W;
                match e {
                    GpuError::Unauthorized(m) => W::Unauthorized(m),
                    GpuError::LeaseExpired(m) => W::LeaseExpired(m),
                    GpuError::CapacityExceeded(m) => W::CapacityExceeded(m),
                    GpuError::QuotaExceeded(m) => W::QuotaExceeded(m),
                    GpuError::OutOfBounds(m) => W::OutOfBounds(m),
                    GpuError::InvalidArgument(m) => W::InvalidArgument(m),
                    GpuError::LoadFailed(m) => W::LoadFailed(m),
                    GpuError::LaunchFailed(m) => W::LaunchFailed(m),
                    GpuError::KernelFault(m) => W::KernelFault(m),
                    GpuError::DeadlineExceeded(m) => W::DeadlineExceeded(m),
                    GpuError::DeviceLost(m) => W::DeviceLost(m),
                    GpuError::Unsupported(m) => W::Unsupported(m),
                }
            }
        }

        impl super::bindings::$v::tasklet::gpu::types::Host for super::GpuState<'_> {
            fn convert_gpu_error(
                &mut self,
                err: GpuFailure,
            ) -> wasmtime::Result<super::bindings::$v::tasklet::gpu::types::GpuError> {
                match err {
                    GpuFailure::Gpu(e) => Ok(e.into()),
                    GpuFailure::Trap(t) => Err(t),
                }
            }
        }
    };
}

wit_error!(v01);
wit_error!(v02);
