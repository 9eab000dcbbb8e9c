//! The host's GPU errors as wire statuses. The message travels as it is, so a remote client
//! rebuilds the very error a local run would have seen.

use crate::reply::Failure;
use tasklet_runtime::GpuError;
use tasklet_wire::{ErrorCode, ErrorReply};

pub(crate) fn code_of(error: &GpuError) -> ErrorCode {
    match error {
        GpuError::Unauthorized(_) => ErrorCode::Unauthorized,
        GpuError::LeaseExpired(_) => ErrorCode::LeaseExpired,
        GpuError::CapacityExceeded(_) => ErrorCode::CapacityExceeded,
        GpuError::QuotaExceeded(_) => ErrorCode::QuotaExceeded,
        GpuError::OutOfBounds(_) => ErrorCode::OutOfBounds,
        GpuError::InvalidArgument(_) => ErrorCode::InvalidArgument,
        GpuError::LoadFailed(_) => ErrorCode::LoadFailed,
        GpuError::LaunchFailed(_) => ErrorCode::LaunchFailed,
        GpuError::KernelFault(_) => ErrorCode::KernelFault,
        GpuError::DeadlineExceeded(_) => ErrorCode::DeadlineExceeded,
        GpuError::DeviceLost(_) => ErrorCode::DeviceLost,
        GpuError::Unsupported(_) => ErrorCode::Unsupported,
    }
}

impl From<GpuError> for Failure {
    fn from(error: GpuError) -> Failure {
        Failure(ErrorReply::new(code_of(&error), error.into_message()))
    }
}
