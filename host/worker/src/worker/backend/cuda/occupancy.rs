//! Whether a grid can be resident on the device all at once: what a persistent kernel (and a
//! cooperative launch, whose blocks synchronise grid-wide) needs. A block that is never scheduled
//! because the others never finish would leave the kernel waiting for it forever, so such a grid
//! is refused at once, naming the limit, instead of hanging.
//!
//! The limit is the driver's occupancy for the kernel at this block size and dynamic shared
//! memory (`cuOccupancyMaxActiveBlocksPerMultiprocessor`, which accounts for its registers and
//! static shared memory) times the device's multiprocessors. Other work of the same context may
//! hold some of them for a while; that only delays the grid's last blocks until it ends.

use std::ffi::c_int;

use super::driver::*;
use crate::contract::{quote, ErrorKind};
use crate::worker::backend::BackendError;

/// Refuses (`LaunchFailed`) a grid of `grid` blocks of `block` threads and `shared_mem_bytes` of
/// dynamic shared memory of `function` (kernel `kernel`, for the message) that cannot be resident
/// all at once on a device of `multiprocessors`; `what` says which launch needs it ("a persistent
/// kernel").
#[allow(clippy::too_many_arguments)]
pub fn check_co_resident(
    drv: &Driver,
    function: CuFunction,
    kernel: &str,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem_bytes: u32,
    multiprocessors: u32,
    what: &str,
) -> Result<(), BackendError> {
    let threads = count(block);
    let mut per_multiprocessor: c_int = 0;
    // SAFETY: a function of a loaded module; valid out-pointer. A block size past what a c_int
    // holds is past every device's limit: the driver refuses it as it refuses any too large.
    let r = unsafe {
        (drv.occupancy_max_active_blocks)(
            &mut per_multiprocessor,
            function,
            c_int::try_from(threads).unwrap_or(c_int::MAX),
            shared_mem_bytes as usize,
        )
    };
    if r != CUDA_SUCCESS {
        return Err(BackendError::new(
            ErrorKind::LaunchFailed,
            format!(
                "{what} of kernel {}: the driver cannot say how many blocks of {threads} threads \
                 with {shared_mem_bytes} bytes of dynamic shared memory fit a multiprocessor \
                 (cuOccupancyMaxActiveBlocksPerMultiprocessor: {}); check the block size and \
                 shared memory against the device's launch limits",
                quote::name(kernel),
                drv.describe(r)
            ),
        ));
    }
    verdict(
        kernel,
        grid,
        threads,
        shared_mem_bytes,
        per_multiprocessor.max(0) as u32,
        multiprocessors,
        what,
    )
}

/// Blocks of a grid or threads of a block, saturating (three u32 factors overflow a u64).
fn count(dims: [u32; 3]) -> u64 {
    dims.iter()
        .fold(1u64, |n, &d| n.saturating_mul(u64::from(d)))
}

/// The check itself, on the driver's answers.
fn verdict(
    kernel: &str,
    grid: [u32; 3],
    threads: u64,
    shared_mem_bytes: u32,
    per_multiprocessor: u32,
    multiprocessors: u32,
    what: &str,
) -> Result<(), BackendError> {
    let blocks = count(grid);
    let limit = u64::from(per_multiprocessor) * u64::from(multiprocessors);
    if blocks <= limit {
        return Ok(());
    }
    Err(BackendError::new(
        ErrorKind::LaunchFailed,
        format!(
            "{what} of kernel {} needs all its {blocks} blocks resident at once, and at most \
             {limit} blocks of {threads} threads with {shared_mem_bytes} bytes of dynamic shared \
             memory fit this device at once ({per_multiprocessor} per multiprocessor x \
             {multiprocessors} multiprocessors); launch at most {limit} blocks (and loop over the \
             work inside the kernel), or use smaller blocks or less shared memory",
            quote::name(kernel)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grid_is_refused_past_what_fits_at_once_naming_both_numbers() {
        let what = "a persistent kernel";
        assert!(verdict("k", [1056, 1, 1], 256, 0, 8, 132, what).is_ok());
        assert!(verdict("k", [33, 32, 1], 256, 0, 8, 132, what).is_ok());
        let e = verdict("k", [1057, 1, 1], 256, 0, 8, 132, what).unwrap_err();
        assert_eq!(e.kind, ErrorKind::LaunchFailed);
        assert!(
            e.message.contains("all its 1057 blocks")
                && e.message.contains("at most 1056 blocks of 256 threads")
                && e.message
                    .contains("8 per multiprocessor x 132 multiprocessors"),
            "{}",
            e.message
        );
        // A block that fits nowhere: nothing can run at once.
        let e = verdict("k", [1, 1, 1], 1024, 1 << 20, 0, 132, what).unwrap_err();
        assert!(e.message.contains("at most 0 blocks"), "{}", e.message);
        // Products past u32 do not wrap.
        let big = [u32::MAX, u32::MAX, u32::MAX];
        assert!(verdict("k", big, 1, 0, u32::MAX, u32::MAX, what).is_err());
    }
}
