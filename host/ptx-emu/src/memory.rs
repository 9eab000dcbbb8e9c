//! Device memory: allocations at stable addresses, backed by word-aligned atomic storage so that
//! many CTAs (on many OS threads) and the host can touch it at once without a data race.
//!
//! An allocation either owns its storage (`DeviceMemory::alloc`) or lies over host memory it was
//! given (`DeviceMemory::map_external`: memory another process may map too, such as the rings a
//! persistent kernel shares with its host). Kernels access both alike, through atomics, so what
//! they store there is what another mapping of the same pages sees.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crate::MemError;

/// Lowest device address handed out. Everything below faults, so a small integer used as a pointer
/// (or a null pointer plus an index) is caught rather than landing in an allocation.
pub(crate) const GLOBAL_BASE: u64 = 0x1_0000_0000;
/// Allocations end below this; the windows for shared, local, param and module memory sit above it.
pub(crate) const GLOBAL_LIMIT: u64 = 0x6000_0000_0000;
/// Unmapped space left after every allocation so that an overrun faults instead of reaching the
/// next allocation.
const GUARD_GAP: u64 = 1 << 20;
/// The largest single allocation; larger requests fail cleanly instead of asking the OS.
const MAX_ALLOC: u64 = 1 << 40;

/// Storage accessed only through atomics: zeroed and owned ([`Region::zeroed`]), or borrowed from
/// the host ([`Region::external`]).
pub(crate) struct Region {
    ptr: *mut u8,
    /// Bytes usable by the program (the allocation's size).
    len: u64,
    /// Bytes of storage at `ptr` (owned storage is rounded up to whole words).
    cap: u64,
    /// How owned storage was allocated; `None` for external storage, which is not freed here.
    layout: Option<Layout>,
}

// SAFETY: the storage is only ever accessed through atomic operations (see `Region::atomic_*`), so
// sharing it between threads cannot race in the Rust sense.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

impl Region {
    pub(crate) fn zeroed(len: u64) -> Result<Region, MemError> {
        let fail = |reason: &str| MemError::AllocFailed {
            bytes: len,
            reason: reason.to_string(),
        };
        if len == 0 {
            return Err(fail("size is zero"));
        }
        if len > MAX_ALLOC {
            return Err(fail("larger than the emulator's 1 TiB allocation limit"));
        }
        // Round to whole words so every access of up to 8 bytes stays inside the storage.
        let words = len.div_ceil(8);
        let bytes = usize::try_from(words * 8).map_err(|_| fail("too large for this host"))?;
        let layout =
            Layout::from_size_align(bytes, 16).map_err(|_| fail("too large for this host"))?;
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(fail("host out of memory"));
        }
        Ok(Region {
            ptr,
            len,
            cap: bytes as u64,
            layout: Some(layout),
        })
    }

    /// A region over `len` bytes of host memory at `ptr`, which it does not own.
    ///
    /// # Safety
    /// `ptr` is 8-aligned, and `len` bytes from it stay mapped, readable and writable, and are
    /// accessed by everyone else only through atomics (or by another process), for as long as
    /// this region lives.
    unsafe fn external(ptr: *mut u8, len: u64) -> Region {
        Region {
            ptr,
            len,
            cap: len,
            layout: None,
        }
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Callers guarantee `off + N <= len` (rounded up to 8) and `off % N == 0`.
    #[inline(always)]
    fn at(&self, off: u64) -> *mut u8 {
        // SAFETY (for callers): off is within the allocation, checked by the caller.
        unsafe { self.ptr.add(off as usize) }
    }

    /// Loads `size` (1, 2, 4, 8) bytes at `off`, zero-extended. Caller checked bounds and alignment.
    #[inline(always)]
    pub(crate) fn load(&self, off: u64, size: u32) -> u64 {
        debug_assert!(off + size as u64 <= self.cap && off.is_multiple_of(size as u64));
        let p = self.at(off);
        // SAFETY: in bounds and naturally aligned (checked by the caller); the storage is only
        // accessed atomically.
        unsafe {
            match size {
                1 => AtomicU8::from_ptr(p).load(Relaxed) as u64,
                2 => AtomicU16::from_ptr(p.cast()).load(Relaxed) as u64,
                4 => AtomicU32::from_ptr(p.cast()).load(Relaxed) as u64,
                _ => AtomicU64::from_ptr(p.cast()).load(Relaxed),
            }
        }
    }

    #[inline(always)]
    pub(crate) fn store(&self, off: u64, size: u32, v: u64) {
        debug_assert!(off + size as u64 <= self.cap && off.is_multiple_of(size as u64));
        let p = self.at(off);
        // SAFETY: as in `load`.
        unsafe {
            match size {
                1 => AtomicU8::from_ptr(p).store(v as u8, Relaxed),
                2 => AtomicU16::from_ptr(p.cast()).store(v as u16, Relaxed),
                4 => AtomicU32::from_ptr(p.cast()).store(v as u32, Relaxed),
                _ => AtomicU64::from_ptr(p.cast()).store(v, Relaxed),
            }
        }
    }

    /// The 4-byte atomic at `off` (caller checked bounds and alignment).
    #[inline(always)]
    pub(crate) fn atomic32(&self, off: u64) -> &AtomicU32 {
        // SAFETY: in bounds, 4-aligned, lives as long as &self.
        unsafe { AtomicU32::from_ptr(self.at(off).cast()) }
    }

    #[inline(always)]
    pub(crate) fn atomic64(&self, off: u64) -> &AtomicU64 {
        // SAFETY: in bounds, 8-aligned, lives as long as &self.
        unsafe { AtomicU64::from_ptr(self.at(off).cast()) }
    }

    /// Byte-wise copy out, using word accesses where aligned.
    pub(crate) fn read_bytes(&self, off: u64, out: &mut [u8]) {
        let mut i = 0usize;
        let n = out.len();
        while i < n {
            let o = off + i as u64;
            if o.is_multiple_of(8) && n - i >= 8 {
                out[i..i + 8].copy_from_slice(&self.load(o, 8).to_le_bytes());
                i += 8;
            } else {
                out[i] = self.load(o, 1) as u8;
                i += 1;
            }
        }
    }

    pub(crate) fn write_bytes(&self, off: u64, data: &[u8]) {
        let mut i = 0usize;
        let n = data.len();
        while i < n {
            let o = off + i as u64;
            if o.is_multiple_of(8) && n - i >= 8 {
                let mut w = [0u8; 8];
                w.copy_from_slice(&data[i..i + 8]);
                self.store(o, 8, u64::from_le_bytes(w));
                i += 8;
            } else {
                self.store(o, 1, data[i] as u64);
                i += 1;
            }
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if let Some(layout) = self.layout {
            // SAFETY: allocated in `zeroed` with this layout.
            unsafe { dealloc(self.ptr, layout) }
        }
    }
}

/// One live allocation.
#[derive(Clone)]
pub(crate) struct Alloc {
    pub(crate) base: u64,
    pub(crate) region: Arc<Region>,
}

struct State {
    /// Sorted by base; addresses only grow, so pushing keeps it sorted.
    allocs: Vec<Alloc>,
    next: u64,
}

/// Device memory: allocations at stable, distinct device addresses, zeroed when made.
///
/// Addresses are never 0 and never reused within one `DeviceMemory`, so a stale pointer faults
/// instead of reading another allocation. Safe to use from many CTAs at once.
pub struct DeviceMemory {
    state: Mutex<State>,
}

impl DeviceMemory {
    pub fn new() -> Self {
        DeviceMemory {
            state: Mutex::new(State {
                allocs: Vec::new(),
                next: GLOBAL_BASE,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave State inconsistent (every mutation is a single
        // push/remove), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Allocates `bytes` (> 0) of zeroed memory, 256-byte aligned; returns its device address.
    pub fn alloc(&self, bytes: u64) -> Result<u64, MemError> {
        let region = Region::zeroed(bytes)?;
        self.insert(region)
    }

    /// Makes `len` bytes of host memory at `ptr` an allocation: kernels (and `read`, `write`,
    /// `copy`) reach them at the device address returned, 256-byte aligned, and every access goes
    /// straight to that memory, through atomics, so another mapping of the same pages (another
    /// process's) sees kernels' stores as they make them. `free` of the address, or `clear`,
    /// forgets the memory without freeing it.
    ///
    /// Fails (`AllocFailed`) for a null or misaligned `ptr`, a `len` of zero or past the
    /// emulator's 1 TiB allocation limit.
    ///
    /// # Safety
    /// `len` bytes at `ptr` stay mapped, readable and writable, and are touched in this process
    /// only through atomics, until the allocation is freed (or the memory cleared) *and* every
    /// launch that started before that has returned: a launch sees the allocations that existed
    /// when it started, for as long as it runs.
    pub unsafe fn map_external(&self, ptr: *mut u8, len: u64) -> Result<u64, MemError> {
        let fail = |reason: &str| MemError::AllocFailed {
            bytes: len,
            reason: reason.to_string(),
        };
        if len == 0 {
            return Err(fail("size is zero"));
        }
        if len > MAX_ALLOC {
            return Err(fail("larger than the emulator's 1 TiB allocation limit"));
        }
        if ptr.is_null() || !(ptr as usize).is_multiple_of(8) {
            // Atomics of up to 8 bytes at 8-aligned device offsets must be aligned on the host too.
            return Err(fail(
                "host memory to map must start at a non-null 8-byte-aligned address",
            ));
        }
        // SAFETY: checked above; the rest is this function's contract.
        self.insert(unsafe { Region::external(ptr, len) })
    }

    /// Gives `region` the next device address.
    fn insert(&self, region: Region) -> Result<u64, MemError> {
        let bytes = region.len();
        let mut st = self.lock();
        let base = st.next;
        let end = base
            .checked_add(bytes.div_ceil(256) * 256)
            .and_then(|e| e.checked_add(GUARD_GAP))
            .filter(|&e| e <= GLOBAL_LIMIT)
            .ok_or_else(|| MemError::AllocFailed {
                bytes,
                reason: "device address space exhausted".to_string(),
            })?;
        st.next = end;
        st.allocs.push(Alloc {
            base,
            region: Arc::new(region),
        });
        Ok(base)
    }

    pub fn free(&self, addr: u64) -> Result<(), MemError> {
        let mut st = self.lock();
        match st.allocs.binary_search_by_key(&addr, |a| a.base) {
            Ok(i) => {
                st.allocs.remove(i);
                Ok(())
            }
            Err(_) => Err(MemError::NotAllocated { addr }),
        }
    }

    /// Frees every allocation.
    pub fn clear(&self) {
        self.lock().allocs.clear();
    }

    fn find(&self, addr: u64, len: u64) -> Result<(Arc<Region>, u64), MemError> {
        let st = self.lock();
        let oob = MemError::OutOfBounds { addr, len };
        let i = match st.allocs.binary_search_by_key(&addr, |a| a.base) {
            Ok(i) => i,
            Err(0) => return Err(oob),
            Err(i) => i - 1,
        };
        let a = &st.allocs[i];
        let off = addr - a.base;
        match off.checked_add(len) {
            Some(end) if end <= a.region.len() => Ok((a.region.clone(), off)),
            _ => Err(oob),
        }
    }

    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        let (r, off) = self.find(addr, data.len() as u64)?;
        r.write_bytes(off, data);
        Ok(())
    }

    pub fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), MemError> {
        let (r, off) = self.find(addr, out.len() as u64)?;
        r.read_bytes(off, out);
        Ok(())
    }

    pub fn copy(&self, dst: u64, src: u64, len: u64) -> Result<(), MemError> {
        let (s, soff) = self.find(src, len)?;
        let (d, doff) = self.find(dst, len)?;
        // Staged through a bounded buffer: source and destination may overlap (memmove semantics).
        let n = usize::try_from(len).map_err(|_| MemError::OutOfBounds { addr: src, len })?;
        let mut tmp = vec![0u8; n];
        s.read_bytes(soff, &mut tmp);
        d.write_bytes(doff, &tmp);
        Ok(())
    }

    /// The live allocations, for one launch. The Arcs keep the storage alive even if the host
    /// frees an allocation while a kernel still runs.
    pub(crate) fn snapshot(&self) -> Vec<Alloc> {
        self.lock().allocs.clone()
    }
}

impl Default for DeviceMemory {
    fn default() -> Self {
        Self::new()
    }
}

/// Bounds-checked lookup of global addresses during a launch: sorted allocations plus a last-hit
/// cache (held by each warp), since a warp's lanes nearly always hit the same allocation.
pub(crate) struct GlobalMap {
    allocs: Vec<Alloc>,
}

impl GlobalMap {
    pub(crate) fn new(allocs: Vec<Alloc>) -> Self {
        GlobalMap { allocs }
    }

    /// The region and offset holding `[addr, addr+size)`, if any; `hint` is the last hit's index.
    #[inline(always)]
    pub(crate) fn find(&self, addr: u64, size: u32, hint: &mut usize) -> Option<(&Region, u64)> {
        if let Some(a) = self.allocs.get(*hint) {
            let off = addr.wrapping_sub(a.base);
            if off < a.region.len() && a.region.len() - off >= size as u64 {
                return Some((&a.region, off));
            }
        }
        let i = match self.allocs.binary_search_by_key(&addr, |a| a.base) {
            Ok(i) => i,
            Err(0) => return None,
            Err(i) => i - 1,
        };
        let a = self.allocs.get(i)?;
        let off = addr - a.base;
        if off < a.region.len() && a.region.len() - off >= size as u64 {
            *hint = i;
            Some((&a.region, off))
        } else {
            None
        }
    }
}
