//! Attached guest memories, page-locked for the device lazily and in chunks, so that a copy to or
//! from linear memory is DMA at pinned speed.
//!
//! Why chunks: a guest memory is a large reservation of which only the memfd's current size is
//! backed, and it grows. `cuMemHostRegister` pins every page it is given (so it must never be
//! given pages past the file's end, which would fault) and refuses ranges that overlap an earlier
//! registration. Registering [`CHUNK`]-sized pieces as transfers first touch them keeps the cost
//! proportional to what is used, and a chunk registered while the memory was smaller is simply
//! unregistered and registered again, whole, when a transfer needs more of it.
//!
//! A transfer is split at chunk boundaries ([`HostMemory::pieces`]) so that each piece lies inside
//! one registration: the driver treats a copy that spans two registrations as pageable.

use std::collections::BTreeMap;

use super::driver::*;

/// Bytes per registration (the last chunk of a memory may be shorter).
pub const CHUNK: usize = 64 << 20;

/// One piece of a transfer: `len` bytes at `offset` into it, inside one registration (or, where
/// registering failed, pageable: slower, still correct).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub offset: usize,
    pub len: usize,
}

/// The host mappings the serve loop told the backend about, by base address.
#[derive(Debug, Default)]
pub struct HostMemory {
    maps: BTreeMap<usize, Mapping>,
    /// Ranges of guest memory registered for kernels (`device_map`), start → end: the driver
    /// refuses a second registration of any page of them, so chunks are not registered over
    /// them, and a copy inside one is already pinned.
    device: BTreeMap<usize, usize>,
}

#[derive(Debug)]
struct Mapping {
    /// Bytes backed and valid (from `map_host`; only grows).
    len: usize,
    /// Chunk index → its registration.
    chunks: BTreeMap<usize, Chunk>,
}

#[derive(Debug, Clone, Copy)]
enum Chunk {
    /// Registered, this many bytes from the chunk's start.
    Registered(usize),
    /// Registering this many bytes failed; tried again only once more of the chunk is valid.
    Failed(usize),
}

impl HostMemory {
    /// `base..base+len` is mapped and valid (again, with a larger `len`, after growth).
    pub fn map(&mut self, base: *mut u8, len: usize) {
        let m = self.maps.entry(base as usize).or_insert(Mapping {
            len: 0,
            chunks: BTreeMap::new(),
        });
        m.len = m.len.max(len);
    }

    /// Forgets the mapping at `base`, unregistering its chunks when `unregister` (the caller
    /// skips that on a poisoned context, whose process is about to end).
    pub fn unmap(&mut self, drv: &Driver, base: *mut u8, unregister: bool) {
        if let Some(m) = self.maps.remove(&(base as usize)) {
            if unregister {
                unregister_all(drv, base as usize, &m);
            }
        }
    }

    /// Unregisters everything (the backend is going away).
    pub fn clear(&mut self, drv: &Driver) {
        for (base, m) in std::mem::take(&mut self.maps) {
            unregister_all(drv, base, &m);
        }
    }

    /// Whether any chunk registered for copies overlaps `start..end` (addresses).
    pub fn registered_overlaps(&self, start: usize, end: usize) -> bool {
        self.maps.iter().any(|(&base, m)| {
            m.chunks.iter().any(|(&index, c)| {
                let from = base + index * CHUNK;
                matches!(c, Chunk::Registered(n) if from < end && start < from + n)
            })
        })
    }

    /// `start..end` was registered for kernels (see [`HostMemory::device`]).
    pub fn add_device(&mut self, start: usize, end: usize) {
        self.device.insert(start, end);
    }

    /// The registration for kernels at `start` is gone.
    pub fn remove_device(&mut self, start: usize) {
        self.device.remove(&start);
    }

    /// The registration for kernels that holds all of `addr..end`, if one does.
    fn inside_device(&self, addr: usize, end: usize) -> bool {
        self.device
            .range(..=addr)
            .next_back()
            .is_some_and(|(_, &e)| end <= e)
    }

    /// Splits the host range `p..p+n` into pieces that each lie inside one registration,
    /// registering chunks as needed where `may_register` (else a chunk not yet registered is
    /// copied pageable: `cuMemHostRegister` waits for every running kernel of the context, so
    /// while a persistent kernel runs nothing is page-locked). A range outside every mapping (the
    /// data region, registered on its own) is one piece.
    pub fn pieces(
        &mut self,
        drv: &Driver,
        p: *const u8,
        n: usize,
        may_register: bool,
    ) -> Vec<Piece> {
        let addr = p as usize;
        let whole = vec![Piece { offset: 0, len: n }];
        // Inside a registration for kernels: already pinned, one piece.
        if addr
            .checked_add(n)
            .is_some_and(|end| self.inside_device(addr, end))
        {
            return whole;
        }
        let device = &self.device;
        let Some((&base, m)) = self.maps.range_mut(..=addr).next_back() else {
            return whole;
        };
        let Some(end) = addr.checked_add(n) else {
            return whole;
        };
        if end > base + m.len || n == 0 {
            return whole;
        }
        let mut out = Vec::with_capacity(n / CHUNK + 2);
        let mut at = addr;
        while at < end {
            let index = (at - base) / CHUNK;
            let chunk_start = base + index * CHUNK;
            let chunk_end = (chunk_start + CHUNK).min(base + m.len);
            let piece_end = end.min(chunk_end);
            if !m.chunks.contains_key(&index)
                && device.range(..chunk_end).any(|(_, &e)| chunk_start < e)
            {
                // The driver would refuse the overlap: this chunk's copies go pageable (slower,
                // still correct). Mapped memory is never used for copies, so this is not reached
                // by a well-behaved host.
                eprintln!(
                    "tasklet worker {}: part of a guest memory chunk is registered for kernels; copies through the \
                     rest of it go through pageable memory (slower)",
                    std::process::id()
                );
                m.chunks
                    .insert(index, Chunk::Failed(chunk_end - chunk_start));
            }
            if may_register {
                ensure_registered(drv, m, index, chunk_start, chunk_end, piece_end);
            }
            out.push(Piece {
                offset: at - addr,
                len: piece_end - at,
            });
            at = piece_end;
        }
        out
    }
}

/// Makes chunk `index` registered at least up to `need` (an address), registering it up to
/// `chunk_end`, all that is valid of it now (once a registration failed for as much, it is not
/// tried again).
fn ensure_registered(
    drv: &Driver,
    m: &mut Mapping,
    index: usize,
    chunk_start: usize,
    chunk_end: usize,
    need: usize,
) {
    let want = chunk_end - chunk_start;
    match m.chunks.get(&index) {
        Some(Chunk::Registered(n)) if chunk_start + n >= need => return,
        Some(Chunk::Failed(n)) if *n >= want => return,
        Some(Chunk::Registered(_)) => {
            // Registered while the memory was smaller; the driver refuses overlapping ranges.
            // SAFETY: a registration of ours; no copy from it is in flight (copies are synchronous).
            unsafe { (drv.mem_host_unregister)(chunk_start as *mut _) };
        }
        _ => {}
    }
    // SAFETY: `chunk_start..chunk_end` lies inside a live mapping whose pages are all backed by
    // the memfd (the serve loop checked its size, which never shrinks); it stays mapped until
    // `unmap`, which unregisters first.
    let r = unsafe { (drv.mem_host_register)(chunk_start as *mut _, want, 0) };
    if r == CUDA_SUCCESS {
        m.chunks.insert(index, Chunk::Registered(want));
    } else {
        eprintln!(
            "tasklet worker {}: cuMemHostRegister of {want} bytes of guest memory failed: {}; copies from it go through \
             pageable memory (slower)",
            std::process::id(),
            drv.describe(r)
        );
        m.chunks.insert(index, Chunk::Failed(want));
    }
}

fn unregister_all(drv: &Driver, base: usize, m: &Mapping) {
    for (&index, c) in &m.chunks {
        if let Chunk::Registered(_) = c {
            // SAFETY: a registration of ours; failure only means it is already gone.
            unsafe { (drv.mem_host_unregister)((base + index * CHUNK) as *mut _) };
        }
    }
}
