//! What a device lets one launch ask for: threads per block, each block and grid dimension,
//! dynamic shared memory and the argument block's size. A worker reports them
//! (`WorkerInfo::launch_limits`) and everything that launches checks against them the same way,
//! with [`LaunchLimits::check`]: the host before a launch leaves it, each backend before it runs
//! one. So a launch the device would refuse fails at once, with the limit and the value named,
//! instead of being refused later by an asynchronous device.

use std::fmt;

/// A device's limits on one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LaunchLimits {
    /// Threads in one block, all dimensions multiplied.
    pub max_threads_per_block: u32,
    /// Each dimension of a block (x, y, z).
    pub max_block: [u32; 3],
    /// Each dimension of a grid (x, y, z).
    pub max_grid: [u32; 3],
    /// Dynamic shared memory one block may use, in bytes, with the kernel opted in to more than
    /// the default (the backends opt in as a launch needs it).
    pub max_shared_per_block: u32,
    /// Bytes of a kernel's argument block.
    pub max_param_bytes: u32,
}

impl LaunchLimits {
    /// The limits of a compute capability 8.0 device (A100) with a driver of CUDA 12.1 or later,
    /// which the emulator reports and enforces: it emulates that device.
    pub const SM_80: LaunchLimits = LaunchLimits {
        max_threads_per_block: 1024,
        max_block: [1024, 1024, 64],
        max_grid: [i32::MAX as u32, 65535, 65535],
        // 163 KiB: what an sm_80 block may opt in to.
        max_shared_per_block: 163 * 1024,
        max_param_bytes: tasklet_ptx::MAX_PARAM_BYTES,
    };

    /// Whether a launch of `grid` × `block` with `shared_mem_bytes` of dynamic shared memory and
    /// an argument block of `param_bytes` fits: a few integer comparisons, no allocation unless
    /// it does not. Every dimension must also be at least 1.
    pub fn check(
        &self,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem_bytes: u32,
        param_bytes: usize,
    ) -> Result<(), LimitExceeded> {
        if grid.contains(&0) || block.contains(&0) {
            return Err(LimitExceeded::EmptyDimension { grid, block });
        }
        for (axis, (&value, &max)) in block.iter().zip(&self.max_block).enumerate() {
            if value > max {
                return Err(LimitExceeded::BlockDimension { axis, value, max });
            }
        }
        // Saturating: only a device reporting absurd dimension limits gets that far.
        let threads = u64::from(block[0])
            .saturating_mul(u64::from(block[1]))
            .saturating_mul(u64::from(block[2]));
        if threads > u64::from(self.max_threads_per_block) {
            return Err(LimitExceeded::ThreadsPerBlock {
                block,
                threads,
                max: self.max_threads_per_block,
            });
        }
        for (axis, (&value, &max)) in grid.iter().zip(&self.max_grid).enumerate() {
            if value > max {
                return Err(LimitExceeded::GridDimension { axis, value, max });
            }
        }
        if shared_mem_bytes > self.max_shared_per_block {
            return Err(LimitExceeded::SharedMemory {
                bytes: shared_mem_bytes,
                max: self.max_shared_per_block,
            });
        }
        if param_bytes > self.max_param_bytes as usize {
            return Err(LimitExceeded::ParamBytes {
                bytes: param_bytes,
                max: self.max_param_bytes,
            });
        }
        Ok(())
    }
}

/// The device limit a launch passes, with the value that passes it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitExceeded {
    #[error(
        "grid {} and block {} must have every dimension at least 1",
        Dims(grid),
        Dims(block)
    )]
    EmptyDimension { grid: [u32; 3], block: [u32; 3] },
    #[error(
        "block dimension {} is {value}, over this device's limit of {max} (max block dimension {})",
        AXES[*axis],
        AXES[*axis]
    )]
    BlockDimension { axis: usize, value: u32, max: u32 },
    #[error(
        "block {} has {threads} threads, over this device's limit of {max} (max threads per block)",
        Dims(block)
    )]
    ThreadsPerBlock {
        block: [u32; 3],
        threads: u64,
        max: u32,
    },
    #[error(
        "grid dimension {} is {value}, over this device's limit of {max} (max grid dimension {})",
        AXES[*axis],
        AXES[*axis]
    )]
    GridDimension { axis: usize, value: u32, max: u32 },
    #[error(
        "{bytes} bytes of dynamic shared memory, over this device's limit of {max} (max shared memory per block)"
    )]
    SharedMemory { bytes: u32, max: u32 },
    #[error(
        "a {bytes}-byte argument block, over this device's limit of {max} (max parameter bytes)"
    )]
    ParamBytes { bytes: usize, max: u32 },
}

const AXES: [&str; 3] = ["x", "y", "z"];

/// `(x, y, z)`.
struct Dims<'a>(&'a [u32; 3]);

impl fmt::Display for Dims<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [x, y, z] = self.0;
        write!(f, "({x}, {y}, {z})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: LaunchLimits = LaunchLimits::SM_80;

    #[test]
    fn a_launch_within_every_limit_passes() {
        assert_eq!(L.check([1, 1, 1], [1, 1, 1], 0, 0), Ok(()));
        assert_eq!(
            L.check(
                [i32::MAX as u32, 65535, 65535],
                [1024, 1, 1],
                163 * 1024,
                32_764
            ),
            Ok(())
        );
        assert_eq!(L.check([1, 1, 1], [16, 16, 4], 0, 8), Ok(()));
    }

    #[test]
    fn each_limit_is_named_with_the_value_that_passes_it() {
        // (grid, block, dynamic shared memory, argument bytes, what the error says)
        type Case = ([u32; 3], [u32; 3], u32, usize, &'static str);
        let cases: [Case; 7] = [
            ([1, 1, 1], [2048, 1, 1], 0, 0, "block dimension x is 2048, over this device's limit of 1024"),
            ([1, 1, 1], [1024, 2, 1], 0, 0, "block (1024, 2, 1) has 2048 threads, over this device's limit of 1024 (max threads per block)"),
            ([1, 1, 1], [1, 1, 65], 0, 0, "block dimension z is 65, over this device's limit of 64"),
            ([1, 65536, 1], [32, 1, 1], 0, 0, "grid dimension y is 65536, over this device's limit of 65535 (max grid dimension y)"),
            ([1, 1, 1], [32, 1, 1], 1 << 30, 0, "1073741824 bytes of dynamic shared memory, over this device's limit of 166912"),
            ([1, 1, 1], [32, 1, 1], 0, 40_000, "a 40000-byte argument block, over this device's limit of 32764 (max parameter bytes)"),
            ([0, 1, 1], [32, 1, 1], 0, 0, "grid (0, 1, 1) and block (32, 1, 1) must have every dimension at least 1"),
        ];
        for (grid, block, shared, params, says) in cases {
            let e = L.check(grid, block, shared, params).unwrap_err();
            assert!(e.to_string().contains(says), "{e}");
        }
    }

    #[test]
    fn threads_per_block_cannot_overflow() {
        let e = L
            .check([1, 1, 1], [u32::MAX, u32::MAX, u32::MAX], 0, 0)
            .unwrap_err();
        assert!(matches!(e, LimitExceeded::BlockDimension { axis: 0, .. }));
        let wide = LaunchLimits {
            max_block: [u32::MAX; 3],
            ..L
        };
        let e = wide
            .check([1, 1, 1], [u32::MAX, u32::MAX, u32::MAX], 0, 0)
            .unwrap_err();
        assert_eq!(
            e,
            LimitExceeded::ThreadsPerBlock {
                block: [u32::MAX; 3],
                threads: u64::MAX,
                max: 1024
            }
        );
    }
}
