//! Device allocations: bookkeeping for the cap, `info`, `free` and the bounds of every copy, and
//! the registration of the host/worker data region with the driver.

use std::collections::BTreeMap;
use std::ffi::c_uint;

use super::driver::*;
use crate::contract::ErrorKind;
use crate::worker::backend::BackendError;

/// Granularity allocations are accounted in (as the emulator does), so that a lease granted in
/// these units can allocate what it was granted.

#[derive(Debug, Clone, Copy)]
pub struct Alloc {
    /// Bytes asked for.
    pub requested: u64,
    /// Bytes counted against the cap (`requested` rounded up to [`crate::contract::ALLOC_GRANULE`]).
    pub accounted: u64,
    /// Made to be exported to other workers (`cuMemAlloc`, never from a pool).
    pub shareable: bool,
}

/// The worker's live allocations, by start address.
#[derive(Debug, Default)]
pub struct Allocations {
    map: BTreeMap<u64, Alloc>,
    pub used: u64,
    pub requested: u64,
    /// Most bytes this worker may hold (min of the host's cap and the device's memory).
    pub cap: u64,
}

impl Allocations {
    pub fn new(cap: u64) -> Allocations {
        Allocations {
            cap,
            ..Allocations::default()
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// The accounted size of a new allocation, or why it does not fit the cap.
    pub fn admit(&self, bytes: u64) -> Result<u64, BackendError> {
        if bytes == 0 {
            return Err(BackendError::new(
                ErrorKind::InvalidArgument,
                "cannot allocate 0 bytes",
            ));
        }
        let accounted = crate::contract::charged_bytes(bytes);
        if accounted > self.cap.saturating_sub(self.used) {
            return Err(BackendError::new(
                ErrorKind::OutOfMemory,
                format!(
                    "cannot allocate {bytes} bytes: {} of this worker's {} bytes in use",
                    self.used, self.cap
                ),
            ));
        }
        Ok(accounted)
    }

    pub fn insert(&mut self, addr: u64, requested: u64, accounted: u64, shareable: bool) {
        self.map.insert(
            addr,
            Alloc {
                requested,
                accounted,
                shareable,
            },
        );
        self.used += accounted;
        self.requested += requested;
    }

    pub fn get(&self, addr: u64) -> Option<Alloc> {
        self.map.get(&addr).copied()
    }

    pub fn remove(&mut self, addr: u64) -> Option<Alloc> {
        let a = self.map.remove(&addr)?;
        self.used -= a.accounted;
        self.requested -= a.requested;
        Some(a)
    }

    /// Takes every allocation out (for reset), leaving the books empty.
    pub fn drain(&mut self) -> Vec<(u64, Alloc)> {
        let all = std::mem::take(&mut self.map).into_iter().collect();
        self.used = 0;
        self.requested = 0;
        all
    }

    /// Checks that `addr..addr+len` lies inside one live allocation (as the emulator does), so a
    /// copy can never touch memory this worker did not hand out.
    pub fn check_range(&self, addr: u64, len: u64) -> Result<(), BackendError> {
        let oob = || {
            BackendError::new(
                ErrorKind::OutOfBounds,
                format!("no allocation covers device address {addr:#x}..+{len}"),
            )
        };
        let (&base, a) = self.map.range(..=addr).next_back().ok_or_else(oob)?;
        let off = addr - base;
        match off.checked_add(len) {
            Some(end) if end <= a.requested => Ok(()),
            _ => Err(oob()),
        }
    }
}

/// Host memory of the shared channel (the data region; the header page with the completion
/// word), page-locked for the device while this lives.
pub struct Pinned {
    ptr: *mut u8,
}

/// `CU_MEMHOSTREGISTER_DEVICEMAP`: kernels and stream memory operations may address it.
pub const REGISTER_DEVICEMAP: c_uint = 2;

impl Pinned {
    /// Registers `len` bytes at `ptr` (`what`, for the error) with the driver, with
    /// `cuMemHostRegister`'s `flags`. On failure the caller goes on without (slower, still
    /// correct); the error says why.
    pub fn register(
        drv: &Driver,
        ptr: *mut u8,
        len: usize,
        flags: c_uint,
        what: &str,
    ) -> Result<Pinned, String> {
        if ptr.is_null() || len == 0 {
            return Err(format!("no {what}"));
        }
        // SAFETY: `ptr..ptr+len` is a live, page-aligned mapping owned by this process for as long
        // as the backend lives (the serve loop's `WorkerEnd` outlives it).
        let r = unsafe { (drv.mem_host_register)(ptr.cast(), len, flags) };
        if r != CUDA_SUCCESS && r != CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED {
            return Err(format!(
                "cuMemHostRegister of the {len}-byte {what} failed: {}",
                drv.describe(r)
            ));
        }
        Ok(Pinned { ptr })
    }

    pub fn unregister(self, drv: &Driver) {
        // SAFETY: registered by `register`; failure only means it is already gone.
        unsafe { (drv.mem_host_unregister)(self.ptr.cast()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_must_lie_inside_one_allocation() {
        let mut a = Allocations::new(1 << 20);
        let acc = a.admit(100).unwrap();
        assert_eq!(acc, 512);
        a.insert(0x1000, 100, acc, false);
        a.insert(0x2000, 16, a.admit(16).unwrap(), true);
        assert!(a.check_range(0x1000, 100).is_ok());
        assert!(a.check_range(0x1010, 10).is_ok());
        assert!(
            a.check_range(0x1000, 101).is_err(),
            "past the requested size"
        );
        assert!(
            a.check_range(0x0fff, 1).is_err(),
            "before the first allocation"
        );
        assert!(a.check_range(0x1064, 1).is_err(), "in the accounting slack");
        assert!(a.check_range(0x2000, 16).is_ok());
        assert!(a.check_range(u64::MAX, 2).is_err());
        assert_eq!((a.used, a.requested, a.len()), (1024, 116, 2));
        assert_eq!(a.remove(0x1000).map(|x| x.requested), Some(100));
        assert_eq!((a.used, a.requested), (512, 16));
        assert!(a.admit(0).is_err());
        assert_eq!(a.admit(1 << 21).unwrap_err().kind, ErrorKind::OutOfMemory);
        let left = a.drain();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].0, 0x2000);
        assert!(
            left[0].1.shareable,
            "a drained allocation says how to free it"
        );
        assert_eq!((a.used, a.requested, a.len()), (0, 0, 0));
    }
}
