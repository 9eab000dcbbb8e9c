//! Driver results → the worker's typed error kinds, with the driver's words and, where there is
//! one, the fix.
//!
//! The split that matters to a tenant and to the host:
//! - `KernelFault` (poisons the worker): anything reported by asynchronous execution, and every
//!   *sticky* error (illegal address, misaligned address, illegal instruction, device assert,
//!   `LAUNCH_FAILED`, hardware stack error, ECC…), after which the context is unusable;
//! - `LaunchFailed`: the driver refused the launch itself (bad configuration, too many
//!   resources); nothing ran and the worker stays usable;
//! - `LoadFailed`: the JIT refused the module, told apart into "too new for this driver/GPU" and
//!   "malformed", both with the JIT's log;
//! - `OutOfMemory`: `CUDA_ERROR_OUT_OF_MEMORY` anywhere.

use tasklet_ptx::PtxHeader;

use super::driver::*;
use crate::contract::{quote, ErrorKind, Launch, LaunchLimits};
use crate::worker::backend::module_check::{self, Loader};
use crate::worker::backend::BackendError;

/// Errors after which the context is unusable: every later call in it fails the same way.
pub fn is_sticky(code: CuResult) -> bool {
    matches!(
        code,
        CUDA_ERROR_ILLEGAL_ADDRESS
            | CUDA_ERROR_ASSERT
            | CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUDA_ERROR_MISALIGNED_ADDRESS
            | CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUDA_ERROR_INVALID_PC
            | CUDA_ERROR_LAUNCH_FAILED
            | CUDA_ERROR_LAUNCH_TIMEOUT
            | CUDA_ERROR_ECC_UNCORRECTABLE
            | CUDA_ERROR_NVLINK_UNCORRECTABLE
            | CUDA_ERROR_TENSOR_MEMORY_LEAK
            | CUDA_ERROR_CONTEXT_IS_DESTROYED
            | CUDA_ERROR_DEINITIALIZED
            | CUDA_ERROR_NOT_INITIALIZED
            | CUDA_ERROR_INVALID_CONTEXT
            | CUDA_ERROR_ILLEGAL_STATE
            | CUDA_ERROR_UNKNOWN
    )
}

/// What a kernel fault means for the tenant, appended to every `KernelFault` message.
const FAULT_CONSEQUENCE: &str =
    "the GPU context of this lease is lost: the lease ends and its worker is replaced";

/// An error reported while waiting for queued work (sync, or an op that waits for the queue):
/// it comes from the device's execution, so it is a fault whatever the code. `work` names what
/// was running, e.g. "launch #3 of kernel `iota` (or work queued before it)": the message is
/// about it, never about the op that happened to wait.
pub fn async_error(drv: &Driver, code: CuResult, work: &str) -> BackendError {
    let words = drv.describe(code);
    if code == CUDA_ERROR_LAUNCH_TIMEOUT {
        return BackendError::new(
            ErrorKind::DeadlineExceeded,
            format!("{work} was stopped by the display driver's watchdog: {words}"),
        );
    }
    BackendError::new(
        ErrorKind::KernelFault,
        format!("{work} failed: {words}; {FAULT_CONSEQUENCE}"),
    )
}

/// A failed synchronous call other than a launch or a module load (memory ops, sync).
pub fn call_error(drv: &Driver, e: CallError, what: &str) -> BackendError {
    let words = drv.describe(e.code);
    let kind = match e.code {
        CUDA_ERROR_OUT_OF_MEMORY => ErrorKind::OutOfMemory,
        c if is_sticky(c) => ErrorKind::KernelFault,
        CUDA_ERROR_INVALID_VALUE | CUDA_ERROR_INVALID_HANDLE | CUDA_ERROR_NOT_FOUND => {
            ErrorKind::InvalidArgument
        }
        // Anything else from the driver leaves the context in an unknown state: do not reuse it.
        _ => ErrorKind::KernelFault,
    };
    let tail = if kind == ErrorKind::KernelFault {
        format!("; {FAULT_CONSEQUENCE}")
    } else {
        String::new()
    };
    BackendError::new(kind, format!("{what}: {} failed: {words}{tail}", e.call))
}

/// A refused `cuLaunchKernel` of the kernel named `kernel`, launched as `l` says: the driver's
/// words, and what to change, from the device's `limits` and, where known, the kernel's own limit
/// on threads per block (`kernel_max_threads`: registers, `__launch_bounds__`).
pub fn launch_error(
    drv: &Driver,
    code: CuResult,
    kernel: &str,
    l: &Launch<'_>,
    kernel_max_threads: Option<u32>,
    limits: &LaunchLimits,
) -> BackendError {
    let words = drv.describe(code);
    let cfg = format!(
        "grid ({}, {}, {}) × block ({}, {}, {}), {} bytes of dynamic shared memory",
        l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2], l.shared_mem_bytes
    );
    let m = limits;
    let (kind, fix) = match code {
        CUDA_ERROR_OUT_OF_MEMORY => (ErrorKind::OutOfMemory, "free device memory or launch a smaller kernel".to_owned()),
        CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES => (
            ErrorKind::LaunchFailed,
            match kernel_max_threads {
                Some(k) => format!("the kernel's registers allow at most {k} threads per block on this device: launch smaller blocks"),
                None => "use smaller blocks or less shared memory".to_owned(),
            },
        ),
        CUDA_ERROR_INVALID_VALUE | CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE => (
            ErrorKind::LaunchFailed,
            format!(
                "on this device a block has at most {} threads ({} × {} × {} per dimension), a grid at most {} × {} × {} blocks, and dynamic shared memory is at most {} bytes",
                m.max_threads_per_block, m.max_block[0], m.max_block[1], m.max_block[2], m.max_grid[0], m.max_grid[1], m.max_grid[2], m.max_shared_per_block
            ),
        ),
        c if is_sticky(c) => return BackendError::new(
            ErrorKind::KernelFault,
            format!("launching kernel {} failed because of an earlier fault: {words}; {FAULT_CONSEQUENCE}", quote::name(kernel)),
        ),
        _ => (ErrorKind::LaunchFailed, "the driver refused this launch".to_owned()),
    };
    BackendError::new(
        kind,
        format!(
            "cannot launch kernel {} with {cfg}: {words}; {fix}",
            quote::name(kernel)
        ),
    )
}

/// What modules are loaded by here: checked against before the driver sees them, and named in
/// load errors.
pub struct LoadTarget {
    pub loader: Loader,
    /// `cuDriverGetVersion`, e.g. 13000.
    pub driver_version: u32,
}

impl LoadTarget {
    pub fn new(compute_capability: (u32, u32), driver_version: u32) -> LoadTarget {
        LoadTarget {
            loader: Loader {
                compute_capability,
                isa: module_check::IsaSupport::of_driver(driver_version),
            },
            driver_version,
        }
    }
}

/// A refused `cuModuleLoadDataEx` of a module with header `ptx` (which passed
/// [`module_check::check`]), with the JIT's error log. Where the driver refuses the module's ISA
/// or target after all (a driver this worker does not know), the words and the fix are the
/// check's.
pub fn load_error(
    drv: &Driver,
    code: CuResult,
    log: &str,
    ptx: &PtxHeader,
    loader: &Loader,
    driver_version: u32,
) -> BackendError {
    let words = drv.describe(code);
    let (ccmaj, ccmin) = loader.compute_capability;
    let sm = format!("sm_{ccmaj}{ccmin}");
    let (major, minor) = ptx.version;
    let isa = format!("{major}.{minor}");
    let target = ptx.target;
    let log_lower = log.to_ascii_lowercase();
    let too_new_isa = code == CUDA_ERROR_UNSUPPORTED_PTX_VERSION
        || (code == CUDA_ERROR_INVALID_PTX
            && (log_lower.contains("unsupported .version")
                || (log_lower.contains(".version") && log_lower.contains("not supported"))
                || log_lower.contains("newer than")));
    let wrong_arch = code == CUDA_ERROR_NO_BINARY_FOR_GPU
        || (code == CUDA_ERROR_INVALID_PTX
            && (log_lower.contains("unsupported .target")
                || (log_lower.contains(".target")
                    && (log_lower.contains("not supported")
                        || log_lower.contains("higher than")))
                || log_lower.contains("is not defined for option 'gpu-name'")
                || (log_lower.contains("not supported on") && log_lower.contains("target"))));
    let log_part = if log.trim().is_empty() {
        String::new()
    } else {
        // The log quotes the tenant's PTX: only its start.
        format!("\nJIT log:\n{}", quote::text(log.trim_end()))
    };
    let (kind, explain) = if code == CUDA_ERROR_OUT_OF_MEMORY {
        (
            ErrorKind::OutOfMemory,
            "the device has no memory left for the module's code and data".to_owned(),
        )
    } else if too_new_isa {
        // The check passed it, so the driver compiles less than its release is known to (or is
        // a release this worker does not know): the fix is the same either way.
        let newest = loader.isa.map(|i| i.newest).filter(|&n| ptx.version > n);
        (
            ErrorKind::LoadFailed,
            module_check::isa_too_new(ptx.version, newest, driver_version),
        )
    } else if wrong_arch {
        (
            ErrorKind::LoadFailed,
            module_check::target_not_run(&target, loader.compute_capability),
        )
    } else if matches!(
        code,
        CUDA_ERROR_JIT_COMPILER_NOT_FOUND | CUDA_ERROR_JIT_COMPILATION_DISABLED
    ) {
        (
            ErrorKind::LoadFailed,
            "the driver's PTX JIT compiler is unavailable on this node (a driver installed without it, or JIT disabled by \
             CUDA_DISABLE_PTX_JIT); the node operator must fix the driver install"
                .to_owned(),
        )
    } else if is_sticky(code) {
        return BackendError::new(
            ErrorKind::KernelFault,
            format!("loading the module failed because of an earlier fault: {words}; {FAULT_CONSEQUENCE}"),
        );
    } else {
        (
            ErrorKind::LoadFailed,
            format!("the driver's PTX compiler rejected the module (PTX {isa}, {target}, on {sm}); fix the PTX at the line the log names"),
        )
    };
    BackendError::new(kind, format!("{explain}: {words}{log_part}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sticky_errors_are_the_context_killers() {
        for c in [700, 710, 714, 715, 716, 717, 718, 719, 214, 999] {
            assert!(is_sticky(c), "{c}");
        }
        for c in [1, 2, 200, 209, 218, 222, 400, 500, 600, 701] {
            assert!(!is_sticky(c), "{c}");
        }
    }
}
