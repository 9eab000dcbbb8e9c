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

use super::driver::*;
use crate::contract::{ErrorKind, Launch};
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
/// it comes from the device's execution, so it is a fault whatever the code. `work` says what
/// was running, e.g. "kernel `iota` (or work queued before it)".
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
        format!("{work} faulted: {words}; {FAULT_CONSEQUENCE}"),
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

/// Limits of the device that a launch configuration is checked against (for messages).
#[derive(Debug, Clone, Copy)]
pub struct LaunchLimits {
    pub max_threads_per_block: u32,
    pub max_block: [u32; 3],
    pub max_grid: [u32; 3],
    pub max_shared_optin: u32,
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
                m.max_threads_per_block, m.max_block[0], m.max_block[1], m.max_block[2], m.max_grid[0], m.max_grid[1], m.max_grid[2], m.max_shared_optin
            ),
        ),
        c if is_sticky(c) => return BackendError::new(
            ErrorKind::KernelFault,
            format!("launching kernel `{kernel}` failed because of an earlier fault: {words}; {FAULT_CONSEQUENCE}"),
        ),
        _ => (ErrorKind::LaunchFailed, "the driver refused this launch".to_owned()),
    };
    BackendError::new(
        kind,
        format!("cannot launch kernel `{kernel}` with {cfg}: {words}; {fix}"),
    )
}

/// What the PTX says about itself in its header, for load-error messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PtxHeader {
    /// `.version` (e.g. "8.7").
    pub version: Option<String>,
    /// `.target` (e.g. "sm_90a").
    pub target: Option<String>,
}

impl PtxHeader {
    pub fn parse(ptx: &str) -> PtxHeader {
        let mut h = PtxHeader::default();
        for line in ptx.lines().take(200) {
            let line = line.split("//").next().unwrap_or("").trim();
            let mut words = line.split_whitespace();
            match words.next() {
                Some(".version") => h.version = words.next().map(str::to_owned),
                Some(".target") => {
                    h.target = words.next().map(|t| t.trim_end_matches(',').to_owned())
                }
                _ => {}
            }
            if h.version.is_some() && h.target.is_some() {
                break;
            }
        }
        h
    }
}

/// The device and driver a module was loaded for (for load-error messages).
pub struct LoadTarget {
    pub compute_capability: (u32, u32),
    /// `cuDriverGetVersion`, e.g. 12080.
    pub driver_version: u32,
}

fn cuda_version(v: u32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// A refused `cuModuleLoadDataEx`, with the JIT's error log.
pub fn load_error(
    drv: &Driver,
    code: CuResult,
    log: &str,
    ptx: &PtxHeader,
    t: &LoadTarget,
) -> BackendError {
    let words = drv.describe(code);
    let (ccmaj, ccmin) = t.compute_capability;
    let sm = format!("sm_{ccmaj}{ccmin}");
    let isa = ptx.version.as_deref().unwrap_or("(no .version)");
    let target = ptx.target.as_deref().unwrap_or("(no .target)");
    let driver = cuda_version(t.driver_version);
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
        format!("\nJIT log:\n{}", log.trim_end())
    };
    let (kind, explain) = if code == CUDA_ERROR_OUT_OF_MEMORY {
        (
            ErrorKind::OutOfMemory,
            "the device has no memory left for the module's code and data".to_owned(),
        )
    } else if too_new_isa {
        (
            ErrorKind::LoadFailed,
            format!(
                "the PTX is ISA version {isa} (its `.version`), newer than this driver (CUDA {driver}) can compile; \
                 regenerate it with a CUDA toolkit or NVRTC no newer than {driver}, or update the NVIDIA driver on this node"
            ),
        )
    } else if wrong_arch {
        (
            ErrorKind::LoadFailed,
            format!(
                "the PTX targets {target} (its `.target`), which this GPU ({sm}) cannot run; compile for {sm} or an older \
                 architecture (nvcc -arch=compute_{ccmaj}{ccmin}, or `.target sm_XY` with XY ≤ {ccmaj}{ccmin})"
            ),
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
    fn ptx_header_is_read_past_comments() {
        let h = PtxHeader::parse("//\n// Generated by NVIDIA NVVM Compiler\n.version 8.7\n.target sm_90a, debug\n.address_size 64\n");
        assert_eq!(h.version.as_deref(), Some("8.7"));
        assert_eq!(h.target.as_deref(), Some("sm_90a"));
        assert_eq!(PtxHeader::parse("garbage"), PtxHeader::default());
    }

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
