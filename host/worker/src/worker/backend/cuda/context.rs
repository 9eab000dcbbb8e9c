//! The device and the one CUDA context of this worker process.
//!
//! The worker uses the device's *primary* context (the one the runtime API and cudarc use), made
//! current on the serving thread and on the watchdog thread. Device ordinal 0 of what the process
//! sees: a node operator picks the GPU with `CUDA_VISIBLE_DEVICES` (a UUID or MIG UUID works too).

use std::ffi::{c_char, c_int, CStr};

use cudarc::driver::sys::CUdevice_attribute as A;

use super::driver::*;
use crate::contract::LaunchLimits;

/// What the worker knows about its device, read once at start.
pub struct Device {
    pub ctx: CuContext,
    /// The one stream every kernel, copy and memset of this worker goes on, in request order.
    /// Non-blocking: the legacy default stream's implicit synchronisation costs each launch time
    /// (`benches/probes/sync_paths.rs` shows how much), and nothing of ours uses that stream.
    pub stream: WorkStream,
    pub name: String,
    pub total_memory: u64,
    pub compute_capability: (u32, u32),
    /// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as nvidia-smi and NVML print it.
    pub uuid: String,
    /// `cuDriverGetVersion`, e.g. 12080 for CUDA 12.8.
    pub driver_version: u32,
    /// What one launch may ask of the device, from its attributes.
    pub limits: LaunchLimits,
    /// Streaming multiprocessors: how many blocks can be resident at once is this times what one
    /// holds (`occupancy`).
    pub multiprocessors: u32,
    /// Whether the device launches cooperative kernels (`CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH`),
    /// as every persistent kernel is launched. A driver that cannot say counts as no.
    pub cooperative_launch: bool,
    /// Whether device memory comes from the stream-ordered allocator (the driver has it and the
    /// device supports memory pools, `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED`): allocations
    /// and frees are then queued on [`Device::stream`] and never wait for a kernel on another.
    pub pooled: bool,
}

/// Opens device 0 and makes its primary context current on this thread. Errors are for people
/// (the host shows them when a worker cannot start).
pub fn open(drv: &'static Driver) -> Result<Device, String> {
    let fail = |call: &str, r: CuResult| format!("{call} failed: {}", drv.describe(r));
    let mut version: c_int = 0;
    // SAFETY: plain driver calls with valid out-pointers, on an initialised driver.
    unsafe {
        let r = (drv.driver_get_version)(&mut version);
        if r != CUDA_SUCCESS {
            return Err(fail("cuDriverGetVersion", r));
        }
        let mut count: c_int = 0;
        let r = (drv.device_get_count)(&mut count);
        if r != CUDA_SUCCESS {
            return Err(fail("cuDeviceGetCount", r));
        }
        if count < 1 {
            return Err("no CUDA device is visible to this process (check CUDA_VISIBLE_DEVICES and `nvidia-smi`)".into());
        }
        let mut dev: CuDevice = 0;
        let r = (drv.device_get)(&mut dev, 0);
        if r != CUDA_SUCCESS {
            return Err(fail("cuDeviceGet(0)", r));
        }
        let mut name = [0 as c_char; 256];
        let r = (drv.device_get_name)(name.as_mut_ptr(), name.len() as c_int, dev);
        if r != CUDA_SUCCESS {
            return Err(fail("cuDeviceGetName", r));
        }
        name[name.len() - 1] = 0;
        let name = CStr::from_ptr(name.as_ptr())
            .to_string_lossy()
            .trim()
            .to_owned();
        let mut total: usize = 0;
        let r = (drv.device_total_mem)(&mut total, dev);
        if r != CUDA_SUCCESS {
            return Err(fail("cuDeviceTotalMem", r));
        }
        let attr = |a: A| -> Result<u32, String> {
            let mut v: c_int = 0;
            let r = (drv.device_get_attribute)(&mut v, a as c_int, dev);
            if r != CUDA_SUCCESS {
                return Err(fail(&format!("cuDeviceGetAttribute({a:?})"), r));
            }
            Ok(v.max(0) as u32)
        };
        let compute_capability = (
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        );
        let limits = LaunchLimits {
            max_threads_per_block: attr(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            max_block: [
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
            ],
            max_grid: [
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
            ],
            max_shared_per_block: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
            max_param_bytes: max_param_bytes(version.max(0) as u32, compute_capability),
        };
        let multiprocessors = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        // Only persistent kernels need it: a device without it still serves everything else.
        let cooperative_launch = attr(A::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH).unwrap_or(0) != 0;
        let pooled = drv.pools.is_some()
            && attr(A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED).unwrap_or(0) != 0;
        let mut raw = [0u8; 16];
        let r = (drv.device_get_uuid)(&mut raw, dev);
        if r != CUDA_SUCCESS {
            return Err(fail("cuDeviceGetUuid", r));
        }
        let mut ctx: CuContext = std::ptr::null_mut();
        let r = (drv.primary_ctx_retain)(&mut ctx, dev);
        if r != CUDA_SUCCESS {
            return Err(fail(
                "creating the CUDA context (cuDevicePrimaryCtxRetain)",
                r,
            ));
        }
        let r = (drv.ctx_set_current)(ctx);
        if r != CUDA_SUCCESS {
            return Err(fail("cuCtxSetCurrent", r));
        }
        let mut stream: CuStream = std::ptr::null_mut();
        let r = (drv.stream_create)(&mut stream, CU_STREAM_NON_BLOCKING);
        if r != CUDA_SUCCESS {
            return Err(fail("cuStreamCreate", r));
        }
        Ok(Device {
            ctx,
            stream: WorkStream(stream),
            name,
            total_memory: total as u64,
            compute_capability,
            uuid: format_uuid(&raw),
            driver_version: version.max(0) as u32,
            limits,
            multiprocessors,
            cooperative_launch,
            pooled,
        })
    }
}

/// The largest argument block a launch may pass. No device attribute says it: CUDA 12.1 raised
/// it from 4 KiB to 32 KiB (less 4 bytes) for Volta (7.0) and later.
fn max_param_bytes(driver_version: u32, (major, _): (u32, u32)) -> u32 {
    if driver_version >= 12010 && major >= 7 {
        tasklet_ptx::MAX_PARAM_BYTES
    } else {
        4096
    }
}

/// NVML's spelling of a device UUID.
pub fn format_uuid(b: &[u8; 16]) -> String {
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn parameter_space_grew_with_cuda_12_1_on_volta_and_later() {
        assert_eq!(super::max_param_bytes(12010, (7, 0)), 32_764);
        assert_eq!(super::max_param_bytes(13000, (9, 0)), 32_764);
        assert_eq!(super::max_param_bytes(12000, (9, 0)), 4096);
        assert_eq!(super::max_param_bytes(12080, (6, 1)), 4096);
    }

    #[test]
    fn uuid_is_spelled_like_nvml() {
        let b = [
            0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0, 1, 2, 3, 4, 5, 6, 7,
        ];
        assert_eq!(
            super::format_uuid(&b),
            "GPU-01234567-89ab-cdef-0001-020304050607"
        );
    }
}
