//! Host memory made visible to kernels (`Backend::map_device`): mapped memory, the rings and
//! control blocks persistent kernels share with the host, page-locked with
//! `CU_MEMHOSTREGISTER_DEVICEMAP` so that kernels reach it through a device address while the
//! host reads and writes it in place.
//!
//! The driver registers whole pages and refuses to register any page twice, so a range is
//! registered rounded out to pages, and a range whose pages overlap another mapping for kernels,
//! or a chunk of guest memory page-locked for copies (`host_memory`), is refused with the reason
//! rather than with the driver's bare `CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED`. Mapped memory
//! comes from a memfd of its own that is never used for copies, so the second case is a host bug.

use std::collections::BTreeMap;

use super::driver::*;
use super::host_memory::HostMemory;
use crate::contract::ErrorKind;
use crate::worker::backend::BackendError;

/// `CU_MEMHOSTREGISTER_PORTABLE`: the registration holds for every context, not only the one
/// current when it was made.
const REGISTER_PORTABLE: std::ffi::c_uint = 1;
/// `CU_MEMHOSTREGISTER_DEVICEMAP`.
const REGISTER_DEVICEMAP: std::ffi::c_uint = super::memory::REGISTER_DEVICEMAP;

/// One mapping for kernels: the pages registered.
#[derive(Debug, Clone, Copy)]
struct Mapping {
    /// First page registered (an address of this process).
    start: usize,
    /// Bytes registered from `start` (whole pages).
    len: usize,
}

/// The worker's mappings for kernels, by the device address `map` answered.
#[derive(Debug, Default)]
pub struct DeviceMaps {
    by_addr: BTreeMap<u64, Mapping>,
}

fn page_size() -> usize {
    // SAFETY: plain sysconf.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p)
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096)
}

fn invalid(message: String) -> BackendError {
    BackendError::new(ErrorKind::InvalidArgument, message)
}

impl DeviceMaps {
    /// Registers `base..base+len` (pages of a live mapping the caller keeps until `unmap`) for
    /// kernels; the device address of `base`.
    pub fn map(
        &mut self,
        drv: &Driver,
        host: &mut HostMemory,
        base: *mut u8,
        len: usize,
    ) -> Result<u64, BackendError> {
        if len == 0 {
            return Err(invalid("cannot map 0 bytes for kernels".into()));
        }
        let page = page_size();
        let addr = base as usize;
        // Both ends' pages hold valid bytes of the mapping (the caller checked the range), so
        // the pages rounded out to are backed.
        let start = addr & !(page - 1);
        let end = addr
            .checked_add(len)
            .and_then(|e| e.checked_next_multiple_of(page))
            .ok_or_else(|| invalid(format!("{len} bytes at {addr:#x} wrap the address space")))?;
        if let Some(other) = self
            .by_addr
            .iter()
            .find(|(_, m)| m.start < end && start < m.start + m.len)
        {
            return Err(invalid(format!(
                "bytes {addr:#x}..+{len} share pages with the memory already mapped for kernels at device \
                 address {:#x}; map each area once, whole, and cut rings and control blocks from it",
                other.0
            )));
        }
        if host.registered_overlaps(start, end) {
            return Err(invalid(format!(
                "bytes {addr:#x}..+{len} of a guest memory were page-locked for copies already; map \
                 memory for kernels from a mapped area of its own, never used for copies"
            )));
        }
        // SAFETY: `start..end` are whole pages of a live, backed mapping (see above) that stays
        // mapped until `unmap`, which unregisters it first.
        let r = unsafe {
            (drv.mem_host_register)(
                start as *mut _,
                end - start,
                REGISTER_DEVICEMAP | REGISTER_PORTABLE,
            )
        };
        if r != CUDA_SUCCESS {
            let kind = if r == CUDA_ERROR_OUT_OF_MEMORY {
                ErrorKind::OutOfMemory
            } else {
                ErrorKind::InvalidArgument
            };
            return Err(BackendError::new(
                kind,
                format!(
                    "cannot page-lock {} bytes for kernels (cuMemHostRegister: {}); the node may limit \
                     locked memory (ulimit -l) or the device may not map host memory",
                    end - start,
                    drv.describe(r)
                ),
            ));
        }
        let mut dev: CuDevicePtr = 0;
        // SAFETY: `base` lies in the registration just made; valid out-pointer; flags must be 0.
        let r = unsafe { (drv.mem_host_get_device_pointer)(&mut dev, base.cast(), 0) };
        if r != CUDA_SUCCESS {
            // SAFETY: the registration just made, unused.
            unsafe { (drv.mem_host_unregister)(start as *mut _) };
            return Err(BackendError::new(
                ErrorKind::Unsupported,
                format!(
                    "this device cannot reach page-locked host memory (cuMemHostGetDevicePointer: {})",
                    drv.describe(r)
                ),
            ));
        }
        host.add_device(start, end);
        self.by_addr.insert(
            dev,
            Mapping {
                start,
                len: end - start,
            },
        );
        Ok(dev)
    }

    /// Forgets the mapping `map` answered with `addr`, unregistering it when `unregister` (the
    /// caller skips that on a poisoned context). No queued kernel may still use it.
    pub fn unmap(
        &mut self,
        drv: &Driver,
        host: &mut HostMemory,
        addr: u64,
        unregister: bool,
    ) -> Result<(), BackendError> {
        let m = self
            .by_addr
            .remove(&addr)
            .ok_or_else(|| invalid(format!("{addr:#x} is not mapped for kernels")))?;
        host.remove_device(m.start);
        if unregister {
            // SAFETY: a registration of ours; failure only means it is already gone.
            unsafe { (drv.mem_host_unregister)(m.start as *mut _) };
        }
        Ok(())
    }

    /// Forgets every mapping (reset, or the backend going away), unregistering when
    /// `unregister`.
    pub fn clear(&mut self, drv: &Driver, host: &mut HostMemory, unregister: bool) {
        let addrs: Vec<u64> = self.by_addr.keys().copied().collect();
        for addr in addrs {
            let _ = self.unmap(drv, host, addr, unregister);
        }
    }
}
