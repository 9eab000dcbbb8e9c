//! Mapped memory: host memory a lease's kernels see too, for the rings and control blocks of
//! persistent kernels (`crate::contract::actor`).
//!
//! A [`MappedArea`] is a memfd ([`SharedMemory`]) of fixed size, mapped here; the lease's worker
//! attaches it like a guest memory and makes it visible to kernels once
//! ([`crate::Worker::map_device`]). Rings and control blocks are cut from it ([`MappedArea::take`],
//! first fit, 256-byte aligned) and given back when dropped; the host reads and writes them
//! through its own mapping while the kernels do through the device's.

use std::io;
use std::sync::{Arc, Mutex, PoisonError};

use crate::contract::actor::ControlBlock;

use super::guest_memory::{locate, GuestSpan, SharedMemory};

/// Bytes of a worker's status area: the status blocks of its persistent kernels.
pub const STATUS_AREA_BYTES: usize = 64 << 10;

/// Every piece cut from an area starts at a multiple of this (a ring's head and tail each get a
/// cache line of their own inside it).
pub const PIECE_ALIGN: usize = 256;

/// A lease's mapped memory. See the module docs.
pub struct MappedArea {
    memory: SharedMemory,
    /// Free ranges (offset, length), sorted by offset, never adjacent.
    free: Mutex<Vec<(usize, usize)>>,
}

impl MappedArea {
    /// An area of `bytes` (rounded up to whole pages), all free, reading as zeros.
    pub fn create(bytes: usize) -> io::Result<MappedArea> {
        let page = page_size();
        let size = bytes
            .max(1)
            .checked_next_multiple_of(page)
            .ok_or_else(|| io::Error::other(format!("a mapped area of {bytes} bytes")))?;
        let memory = SharedMemory::create(size, size, 0)?;
        Ok(MappedArea {
            memory,
            free: Mutex::new(vec![(0, size)]),
        })
    }

    /// Bytes of the area.
    pub fn size(&self) -> usize {
        self.memory.size()
    }

    /// The whole area, as the worker attaches and maps it.
    pub fn whole(&self) -> GuestSpan {
        self.span(0, self.size())
            .expect("a live area locates itself")
    }

    /// `len` bytes at `offset` of the area, for the worker.
    pub fn span(&self, offset: usize, len: usize) -> Option<GuestSpan> {
        let end = offset.checked_add(len)?;
        if end > self.size() {
            return None;
        }
        // SAFETY: offset <= size, inside the mapping.
        locate(unsafe { self.memory.as_ptr().add(offset) }, len)
    }

    /// This process's address of byte `offset` of the area (in range: the caller took it).
    pub fn host_ptr(&self, offset: usize) -> *mut u8 {
        debug_assert!(offset < self.size());
        // SAFETY: offset is inside the mapping (pieces come from `take`).
        unsafe { self.memory.as_ptr().add(offset) }
    }

    /// Cuts `len` bytes (rounded up to the alignment) from the free space, zeroed; its offset,
    /// or `None` when no free range is that large.
    pub fn take(&self, len: usize) -> Option<usize> {
        let len = len.max(1).checked_next_multiple_of(PIECE_ALIGN)?;
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        let i = free.iter().position(|&(_, l)| l >= len)?;
        let (offset, l) = free[i];
        if l == len {
            free.remove(i);
        } else {
            free[i] = (offset + len, l - len);
        }
        drop(free);
        // What a piece held before it was given back is not the next holder's to read.
        // SAFETY: offset..offset+len is inside the mapping and free; nobody else writes it.
        unsafe { std::ptr::write_bytes(self.host_ptr(offset), 0, len) };
        Some(offset)
    }

    /// Gives back a piece cut by [`MappedArea::take`] with the same `len`.
    pub fn give_back(&self, offset: usize, len: usize) {
        let Some(len) = len.max(1).checked_next_multiple_of(PIECE_ALIGN) else {
            return;
        };
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        let i = free.partition_point(|&(o, _)| o < offset);
        free.insert(i, (offset, len));
        // Merge with the neighbours, so the space comes back whole.
        if i + 1 < free.len() && free[i].0 + free[i].1 == free[i + 1].0 {
            free[i].1 += free[i + 1].1;
            free.remove(i + 1);
        }
        if i > 0 && free[i - 1].0 + free[i - 1].1 == free[i].0 {
            free[i - 1].1 += free[i].1;
            free.remove(i);
        }
    }

    /// Bytes free now.
    pub fn free_bytes(&self) -> usize {
        let free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        free.iter().map(|&(_, l)| l).sum()
    }
}

/// A piece cut from an area, given back when the last holder drops it.
pub(crate) struct Piece {
    area: Arc<MappedArea>,
    offset: usize,
    len: usize,
}

impl Piece {
    /// Cuts `len` bytes from `area`, zeroed; `None` when it has no room.
    pub(crate) fn take(area: &Arc<MappedArea>, len: usize) -> Option<Piece> {
        let offset = area.take(len)?;
        Some(Piece {
            area: Arc::clone(area),
            offset,
            len,
        })
    }

    pub(crate) fn offset(&self) -> usize {
        self.offset
    }

    fn host_ptr(&self) -> *mut u8 {
        self.area.host_ptr(self.offset)
    }
}

impl Drop for Piece {
    fn drop(&mut self) {
        self.area.give_back(self.offset, self.len);
    }
}

/// The host's view of a persistent kernel's control block and status block (see
/// `crate::contract::actor::ControlBlock`), keeping both mapped while it is held.
#[derive(Clone)]
pub struct ActorView {
    view: ControlBlock,
    _control: Arc<MappedArea>,
    _status: Arc<Piece>,
}

impl ActorView {
    pub(crate) fn new(
        control_area: Arc<MappedArea>,
        control: usize,
        status: Arc<Piece>,
    ) -> ActorView {
        // SAFETY: the control block was cut from its area with CONTROL_BYTES (256-aligned), the
        // status piece is CONTROL_BYTES of its own, and the Arcs held here keep both mapped (and
        // the status piece from being given to another kernel) as long as the view.
        let view =
            unsafe { ControlBlock::split(control_area.host_ptr(control), status.host_ptr()) };
        ActorView {
            view,
            _control: control_area,
            _status: status,
        }
    }

    /// The blocks, read and asked through.
    pub fn block(&self) -> &ControlBlock {
        &self.view
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_cut_aligned_and_come_back_whole() {
        let area = MappedArea::create(64 << 10).unwrap();
        let size = area.size();
        let a = area.take(100).unwrap();
        let b = area.take(300).unwrap();
        let c = area.take(256).unwrap();
        assert_eq!((a, b, c), (0, 256, 768), "first fit, 256-aligned");
        // SAFETY: inside piece b.
        unsafe { *area.host_ptr(b) = 7 };
        area.give_back(b, 300);
        assert_eq!(area.take(512).unwrap(), b, "b's space is reused");
        // SAFETY: as above.
        assert_eq!(unsafe { *area.host_ptr(b) }, 0, "and zeroed");
        area.give_back(a, 100);
        area.give_back(b, 512);
        area.give_back(c, 256);
        assert_eq!(area.free_bytes(), size);
        assert_eq!(area.take(size).unwrap(), 0, "merged back into one range");
        assert!(area.take(1).is_none(), "full");
        assert!(area.span(size, 1).is_none());
        assert_eq!(area.whole().len(), size);
    }
}
