//! Guest linear memories that a worker can reach without a copy through the host.
//!
//! A [`SharedMemory`] is a memfd mapped `MAP_SHARED` at a fixed reservation in the host; the
//! runtime hands it to wasmtime as a tasklet's linear memory. A worker maps the same memfd (passed
//! over the control socket, see [`crate::contract::control_socket`]) so that a `mem-write` is one copy (one DMA on
//! cuda, where the worker page-locks its mapping) straight out of linear memory, and a `mem-read`
//! one copy straight into it.
//!
//! Layout of the reservation (all page multiples):
//!
//! ```text
//! base                 base+size           base+reserve           base+reserve+guard
//! | memfd, read/write  | PROT_NONE (room)  | PROT_NONE (guard)    |
//! ```
//!
//! The memory never moves (growth maps more of the memfd in place), so wasmtime may keep raw
//! pointers into it. The memfd is sealed against shrinking: a worker holds the fd too and is
//! untrusted, and a shrunk file would turn guest accesses into SIGBUS in the host.
//!
//! [`locate`] finds the memory behind a host address range (the runtime has a pointer into linear
//! memory, not a handle) through a process-wide registry keyed by base address.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, Weak};

use crate::contract::control_socket::file_size;

/// What a memory shares with the spans cut from it and with the workers it is attached to: its
/// identity, its fd and how much of it is valid. Outlives the mapping when spans do; a span never
/// dereferences host addresses, so that is safe.
pub(crate) struct Shared {
    pub(crate) id: u64,
    pub(crate) fd: OwnedFd,
    /// Bytes of the memfd (and of the host mapping) that are valid: only grows, unless the host
    /// shrinks an exclusive memory to hand it to another user.
    size: AtomicUsize,
    pub(crate) capacity: usize,
}

/// Host side: a linear memory backed by a memfd, mapped `MAP_SHARED` at a fixed reservation so it
/// never moves. See the module docs.
pub struct SharedMemory {
    shared: Arc<Shared>,
    base: *mut u8,
    /// `reserve + guard`: the whole reservation, unmapped at drop.
    mapped: usize,
}

// SAFETY: the struct only owns the mapping (a raw pointer to process-wide memory) and an fd; it
// hands out no references, and `grow_to` takes `&mut self`.
unsafe impl Send for SharedMemory {}
unsafe impl Sync for SharedMemory {}

/// A byte range of a live [`SharedMemory`], found by address with [`locate`]. Cheap to clone;
/// keeps the memory's fd (not its host mapping) alive, which is all a worker needs.
#[derive(Clone)]
pub struct GuestSpan {
    pub(crate) shared: Arc<Shared>,
    offset: usize,
    len: usize,
}

impl GuestSpan {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memory's id: unique in this process for its lifetime, never reused.
    pub fn memory_id(&self) -> u64 {
        self.shared.id
    }

    /// Where the span starts, in bytes from the memory's base.
    pub fn offset(&self) -> usize {
        self.offset
    }
}

impl std::fmt::Debug for GuestSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuestSpan")
            .field("memory", &self.shared.id)
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish()
    }
}

impl std::fmt::Debug for SharedMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedMemory")
            .field("id", &self.shared.id)
            .field("base", &self.base)
            .field("size", &self.size())
            .field("capacity", &self.capacity())
            .finish()
    }
}

struct Entry {
    capacity: usize,
    shared: Weak<Shared>,
}

/// Live memories by base address. A `Weak` so that the registry never keeps a memory alive; the
/// entry is removed by `SharedMemory::drop` before the mapping goes.
static REGISTRY: RwLock<BTreeMap<usize, Entry>> = RwLock::new(BTreeMap::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn page_size() -> usize {
    // SAFETY: plain sysconf.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl SharedMemory {
    /// `size` accessible zero bytes now, room to grow in place up to `reserve` bytes, then `guard`
    /// bytes that fault. All three are multiples of the page size; `size <= reserve`. Everything
    /// past `size` is `PROT_NONE`.
    pub fn create(size: usize, reserve: usize, guard: usize) -> io::Result<SharedMemory> {
        let page = page_size();
        if !size.is_multiple_of(page)
            || !reserve.is_multiple_of(page)
            || !guard.is_multiple_of(page)
        {
            return Err(invalid(format!(
                "size {size}, reserve {reserve} and guard {guard} must be multiples of the page size {page}"
            )));
        }
        if size > reserve {
            return Err(invalid(format!(
                "size {size} exceeds the reservation {reserve}"
            )));
        }
        let mapped = reserve
            .checked_add(guard)
            .filter(|&m| m > 0 && m <= isize::MAX as usize)
            .ok_or_else(|| invalid(format!("a reservation of {reserve} + {guard} bytes")))?;
        let fd = new_memfd()?;
        // SAFETY: a fresh anonymous reservation; nothing can be accessed through it yet.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let shared = Arc::new(Shared {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            fd,
            size: AtomicUsize::new(0),
            capacity: reserve,
        });
        // From here on `drop` undoes everything (unmapping `mapped`, which the registry does not
        // know yet: removal of a missing entry is a no-op).
        let mut mem = SharedMemory {
            shared,
            base: p.cast(),
            mapped,
        };
        mem.grow_to(size)?;
        REGISTRY.write().unwrap_or_else(|e| e.into_inner()).insert(
            mem.base as usize,
            Entry {
                capacity: reserve,
                shared: Arc::downgrade(&mem.shared),
            },
        );
        Ok(mem)
    }

    /// Grows the accessible part in place to `new_size` bytes (a page multiple, at most the
    /// capacity): the memfd is extended and the new pages mapped read/write. Never moves; the new
    /// bytes read as zeros. Shrinking is refused.
    pub fn grow_to(&mut self, new_size: usize) -> io::Result<()> {
        let old = self.size();
        if new_size == old {
            return Ok(());
        }
        if new_size < old || new_size > self.capacity() || !new_size.is_multiple_of(page_size()) {
            return Err(invalid(format!(
                "cannot grow a {old}-byte shared memory of capacity {} to {new_size} bytes",
                self.capacity()
            )));
        }
        let fd = self.shared.fd.as_raw_fd();
        let file_len = file_size(self.shared.fd.as_fd())?;
        if file_len < new_size {
            // SAFETY: plain syscall on our fd.
            if unsafe { libc::ftruncate(fd, new_size as libc::off_t) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        // SAFETY: `old..new_size` lies inside our own PROT_NONE reservation (new_size <= reserve),
        // so MAP_FIXED replaces only pages of ours that nothing references; the file now covers
        // the whole range, so no access through it can SIGBUS.
        let p = unsafe {
            libc::mmap(
                self.base.add(old).cast(),
                new_size - old,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd,
                old as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        if file_len > old {
            // The file holds bytes past our old size: a worker holding the fd may have extended
            // it and written there, or this memory served an earlier user and was shrunk. New
            // memory must read as zeros, and they are written in place, never punched out: a
            // worker that has this memory attached may have pinned those very pages for DMA, and
            // a punched page would leave its pinned copy apart from what the guest then reads.
            zero_data(fd, self.base, old, file_len.min(new_size))?;
        }
        // Release: a `locate` that sees the new size also sees the mapping.
        self.shared.size.store(new_size, Ordering::Release);
        Ok(())
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.base
    }

    /// Accessible bytes now.
    pub fn size(&self) -> usize {
        self.shared.size.load(Ordering::Acquire)
    }

    /// Most bytes it can grow to in place (the `reserve` it was created with).
    pub fn capacity(&self) -> usize {
        self.shared.capacity
    }

    /// Its id (what [`GuestSpan::memory_id`] reports).
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// Whether this handle is all that refers to the memory: no span cut from it is alive and no
    /// worker client has it attached (a client holds a weak reference from attaching it until it
    /// detaches it, resets or is reaped; a worker given up keeps it until reaped). Only such a
    /// memory can be [cleared](SharedMemory::clear) for another user: a worker that maps it could
    /// write into it after it was zeroed.
    pub fn is_exclusive(&self) -> bool {
        // The one weak reference is the registry's.
        Arc::strong_count(&self.shared) == 1 && Arc::weak_count(&self.shared) == 1
    }

    /// Makes every byte of the memory read as zero again, so that it can serve another user.
    /// Pages holding data are found with `SEEK_DATA` (swapped-out pages count as data); up to
    /// `keep_resident` bytes of them are zeroed in place (kept: the next user does not fault them
    /// in again), the rest are punched out of the memfd (freed).
    ///
    /// Refused unless [`SharedMemory::is_exclusive`]. The caller guarantees that nothing reads or
    /// writes the memory meanwhile (whoever used it is done with it).
    pub fn clear(&mut self, keep_resident: usize) -> io::Result<()> {
        if !self.is_exclusive() {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                "a shared memory still referred to elsewhere (a span or a worker) cannot be cleared",
            ));
        }
        let fd = self.shared.fd.as_raw_fd();
        let size = self.size();
        let mut budget = keep_resident;
        let mut at: libc::off_t = 0;
        loop {
            // SAFETY: plain syscalls on our fd; nothing else uses its file offset (exclusive).
            let start = unsafe { libc::lseek(fd, at, libc::SEEK_DATA) };
            if start < 0 {
                let e = io::Error::last_os_error();
                // ENXIO: no data at or after `at`.
                return match e.raw_os_error() {
                    Some(libc::ENXIO) => Ok(()),
                    _ => Err(e),
                };
            }
            // SAFETY: as above.
            let end = unsafe { libc::lseek(fd, start, libc::SEEK_HOLE) };
            if end < 0 {
                return Err(io::Error::last_os_error());
            }
            let (a, b) = (start as usize, end as usize);
            // Past our mapping lies only what a worker wrote (it may extend the file): punched.
            let len = b - a;
            if b <= size && len <= budget {
                // SAFETY: `a..b` lies within the accessible, read/write part of our own mapping,
                // and the caller guarantees nobody else touches it meanwhile.
                unsafe { std::ptr::write_bytes(self.base.add(a), 0, len) };
                budget -= len;
            } else {
                // SAFETY: plain syscall on our fd; the pages read as zeros afterwards, through
                // every mapping of the file.
                let r = unsafe {
                    libc::fallocate(
                        fd,
                        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                        start,
                        end - start,
                    )
                };
                if r != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            at = end;
        }
    }

    /// Shrinks the accessible part to `new_size` bytes (a page multiple, at most the current
    /// size): everything past it is `PROT_NONE` again, as after [`SharedMemory::create`]. What
    /// it held stays in the memfd (which cannot shrink), so [`SharedMemory::grow_to`] zeroes it
    /// when it is mapped again. Never moves the memory.
    pub fn shrink_to(&mut self, new_size: usize) -> io::Result<()> {
        let old = self.size();
        if new_size > old || !new_size.is_multiple_of(page_size()) {
            return Err(invalid(format!(
                "cannot shrink a {old}-byte shared memory to {new_size} bytes"
            )));
        }
        if new_size == old {
            return Ok(());
        }
        // Smaller first: a `locate` racing with this never reports bytes about to go.
        self.shared.size.store(new_size, Ordering::Release);
        // SAFETY: `new_size..old` lies within our own reservation; the caller's `&mut` means
        // nothing of ours uses those pages. They become the inaccessible reservation they were.
        let p = unsafe {
            libc::mmap(
                self.base.add(new_size).cast(),
                old - new_size,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // Out of the registry first: from then on no new span can be cut from the mapping.
        REGISTRY
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(self.base as usize));
        // SAFETY: the whole reservation is ours; the owner of a SharedMemory (wasmtime) does not
        // use the memory past its drop. Spans hold the fd, not the mapping.
        unsafe { libc::munmap(self.base.cast(), self.mapped) };
    }
}

/// Zeroes, through the mapping at `base`, every byte of the file's data (not its holes, which
/// read as zeros already) in `from..to`; the range must be mapped read/write at `base`.
fn zero_data(fd: libc::c_int, base: *mut u8, from: usize, to: usize) -> io::Result<()> {
    let mut at = from;
    while at < to {
        // SAFETY: plain syscall on our fd; the caller holds `&mut` of the memory, so nothing else
        // of ours uses its file offset.
        let start = unsafe { libc::lseek(fd, at as libc::off_t, libc::SEEK_DATA) };
        if start < 0 {
            let e = io::Error::last_os_error();
            // ENXIO: no data at or after `at`.
            return match e.raw_os_error() {
                Some(libc::ENXIO) => Ok(()),
                _ => Err(e),
            };
        }
        let start = (start as usize).min(to);
        // SAFETY: as above.
        let end = unsafe { libc::lseek(fd, start as libc::off_t, libc::SEEK_HOLE) };
        if end < 0 {
            return Err(io::Error::last_os_error());
        }
        let end = (end as usize).min(to);
        // SAFETY: `start..end` lies within `from..to`, mapped read/write at `base` (caller).
        unsafe { std::ptr::write_bytes(base.add(start), 0, end - start) };
        at = end.max(start + 1);
    }
    Ok(())
}

/// A close-on-exec memfd, sealed against shrinking (and against changing the seals), above fd 2.
fn new_memfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscalls; each fd is owned right after it is made.
    unsafe {
        let raw = libc::memfd_create(
            c"tasklet-guest-memory".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        );
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut fd = OwnedFd::from_raw_fd(raw);
        // A host with closed stdio gets fd 0-2 here; a child's stdio setup would clobber it.
        if raw < 3 {
            let high = libc::fcntl(raw, libc::F_DUPFD_CLOEXEC, 3);
            if high < 0 {
                return Err(io::Error::last_os_error());
            }
            fd = OwnedFd::from_raw_fd(high);
        }
        if libc::fcntl(
            fd.as_raw_fd(),
            libc::F_ADD_SEALS,
            libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL,
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
        Ok(fd)
    }
}

/// The live [`SharedMemory`] of this process that holds `ptr..ptr+len` entirely within its current
/// size, if any. An empty range is located when `ptr` lies within (or at the end of) the size.
pub fn locate(ptr: *const u8, len: usize) -> Option<GuestSpan> {
    let addr = ptr as usize;
    let end = addr.checked_add(len)?;
    let reg = REGISTRY.read().unwrap_or_else(|e| e.into_inner());
    let (&base, entry) = reg.range(..=addr).next_back()?;
    let offset = addr - base;
    if offset > entry.capacity {
        return None;
    }
    let shared = entry.shared.upgrade()?;
    let size = shared.size.load(Ordering::Acquire);
    if end - base > size {
        return None;
    }
    Some(GuestSpan {
        shared,
        offset,
        len,
    })
}
