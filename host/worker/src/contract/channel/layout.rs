//! The shared region and where everything lies in it.
//!
//! ```text
//! 0        header page: magic/sizes, then atomics on their own cache lines
//!          (ring head, worker-sleeping flag, ring tail, host-waiting-for-space flag,
//!           response seq + frame location + GPU time, host-sleeping flag, start state,
//!           closed flag, completion word, linger word, uncharged-since word, counted GPU
//!           time, life lock)
//! 4 KiB    request ring          (RING bytes)
//!          response message area (MSG_AREA bytes)
//!          data region           (data_size bytes: write payloads, read results, oversized frames)
//! ```
//!
//! Every word one side writes and the other waits on has a cache line of its own, so that a
//! write by one side never takes away a line the other is spinning on for another reason.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};

/// Bytes of the response area, and the largest frame that goes through the ring. Larger call
/// frames go to the data region instead (only frames without a payload can be that large: module
/// text, kernel lists).
pub const MSG_AREA: usize = 64 * 1024;
/// Bytes of the request ring: room for a few thousand queued launches.
pub const RING: usize = 256 * 1024;
/// Default size of the data region; writes and reads larger than this are chunked by the host.
pub const DEFAULT_DATA_SIZE: usize = 8 * 1024 * 1024;

pub(super) const MAGIC: u64 = u64::from_le_bytes(*b"TASKLETW");
/// Bumped whenever the frames in [`crate::contract::codec`] or this layout change, so a host and
/// a worker built from different sources refuse each other at start instead of misreading frames.
/// 2: launch deadline, richer info. 3: guest memory attachments (attach/detach-memory,
/// write-from, read-into). 4: the request ring. 5: stamps, inline responses. 6: the completion
/// word. 8: launches name their kernel by index, and carry no step limit (the emulator makes its
/// own from the deadline). 9: info carries the device's launch limits. 10: the GPU-time word
/// beside the response seq. 11: the linger word. 14: loads through the host's module cache.
/// 15: copies say which launches they wait for. 16: small writes posted with their bytes.
/// 17: marks (stream events) recorded posted, and asked about. 18: the uncharged-since word.
/// 19: the life lock. 20: a loaded module's variable bytes.
pub const VERSION: u32 = 20;
pub(super) const HEADER: usize = 4096;

pub(super) const OFF_MAGIC: usize = 0;
pub(super) const OFF_VERSION: usize = 8;
pub(super) const OFF_MSG_AREA: usize = 12;
pub(super) const OFF_DATA_SIZE: usize = 16;
pub(super) const OFF_RING: usize = 24;
pub(super) const OFF_HEAD: usize = 64;
pub(super) const OFF_WORKER_SLEEPING: usize = 128;
pub(super) const OFF_TAIL: usize = 192;
pub(super) const OFF_HOST_WANTS_SPACE: usize = 256;
pub(super) const OFF_RESP_SEQ: usize = 320;
pub(super) const OFF_RESP_LOC: usize = 324;
pub(super) const OFF_RESP_LEN: usize = 328;
/// A small response frame (every `Ok`, most errors' kinds…) sits right after its seq, in the same
/// cache line: the host's wait then ends with one cache-line transfer, not two.
pub(super) const OFF_RESP_INLINE: usize = 332;
pub(super) const RESP_INLINE: usize = OFF_GPU_TIME - OFF_RESP_INLINE;
/// The GPU time the worker has measured since it started, in nanoseconds (u64, only growing),
/// written with every response: in the response's cache line, so the host reads it with no
/// transfer of its own (see [`super::worker_end::WorkerEnd::set_gpu_time`]).
pub(super) const OFF_GPU_TIME: usize = 376;
pub(super) const OFF_HOST_SLEEPING: usize = 384;
pub(super) const OFF_STATE: usize = 448;
pub(super) const OFF_CLOSED: usize = 512;
/// The completion word (see [`super`]): its own cache line, since the device writes it.
pub(super) const OFF_SIGNAL: usize = 576;
/// How long, in microseconds, the worker may keep spinning for the next request after activity
/// (see [`super::worker_end`]): set by the host, which knows how many workers share the machine;
/// read by the worker before each wait. Its own cache line: written rarely, read often.
pub(super) const OFF_LINGER: usize = 640;
/// CLOCK_MONOTONIC nanoseconds (u64; 0: none) from which the device time of the worker's
/// launched-but-unfinished work is in no GPU time it reported (see
/// [`super::worker_end::publish_uncharged_since`]): what a lease that ends with the worker given
/// up is charged from. Its own cache line: the worker writes it, the host reads it only then.
pub(super) const OFF_UNCHARGED: usize = 704;
/// The GPU time (u64 nanoseconds, only growing) the worker has counted so far, published as it
/// counts (see [`super::worker_end::publish_counted_gpu_time`]), not only with responses: a lease
/// that ends with the worker given up unasked is still charged for work that finished unreported.
/// Its own cache line, out of the response's: written about once a millisecond while kernels run.
pub(super) const OFF_COUNTED: usize = 768;
/// The life lock (see [`super::life`]): a robust mutex the worker's serving thread holds while it
/// lives, whose word the kernel marks when that thread ends. Its own cache line: written by the
/// worker once, and by the kernel once, read by the host.
pub(super) const OFF_LIFE: usize = 832;

pub(super) const RING_OFF: usize = HEADER;
pub(super) const RESP_OFF: usize = HEADER + RING;
pub(super) const DATA_OFF: usize = HEADER + RING + MSG_AREA;

pub(super) const LOC_MSG: u32 = 0;
pub(super) const LOC_DATA: u32 = 1;
pub(super) const LOC_INLINE: u32 = 2;

pub(super) const STATE_STARTING: u32 = 0;
pub(super) const STATE_READY: u32 = 1;
pub(super) const STATE_FAILED: u32 = 2;
/// The worker's watchdog is ending the process over a kernel past its deadline (see
/// [`super::worker_end::announce_deadline_exit`]).
pub(super) const STATE_DEADLINE_EXIT: u32 = 3;

const _: () = assert!(OFF_RESP_INLINE % 64 + RESP_INLINE <= 64);
const _: () = assert!(
    OFF_GPU_TIME.is_multiple_of(8)
        && OFF_GPU_TIME / 64 == OFF_RESP_SEQ / 64
        && OFF_GPU_TIME + 8 <= OFF_HOST_SLEEPING
);
const _: () =
    assert!(OFF_SIGNAL.is_multiple_of(64) && OFF_SIGNAL > OFF_CLOSED && OFF_SIGNAL + 64 <= HEADER);
const _: () =
    assert!(OFF_LINGER.is_multiple_of(64) && OFF_LINGER > OFF_SIGNAL && OFF_LINGER + 64 <= HEADER);
const _: () = assert!(
    OFF_UNCHARGED.is_multiple_of(64) && OFF_UNCHARGED > OFF_LINGER && OFF_UNCHARGED + 64 <= HEADER
);
const _: () = assert!(
    OFF_COUNTED.is_multiple_of(64) && OFF_COUNTED > OFF_UNCHARGED && OFF_COUNTED + 64 <= HEADER
);
const _: () = assert!(
    OFF_LIFE.is_multiple_of(64)
        && OFF_LIFE >= OFF_COUNTED + 64
        && OFF_LIFE + super::life::LIFE_BYTES <= HEADER
);

#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("shared memory: {0}")]
    Io(#[from] io::Error),
    #[error("shared memory layout: {0}")]
    Layout(String),
    #[error("frame of {len} bytes does not fit the {cap}-byte region")]
    TooLarge { len: usize, cap: usize },
}

/// The mapping itself. Both ends hold one; only raw pointers into it are ever handed out.
pub struct SharedRegion {
    base: NonNull<u8>,
    len: usize,
    data_size: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is plain shared memory; all access goes through atomics or bounds-checked
// raw copies, and no references into it outlive a call.
unsafe impl Send for SharedRegion {}
unsafe impl Sync for SharedRegion {}

impl SharedRegion {
    /// Creates a fresh memfd of the full layout with a `data_size`-byte data region, sealed
    /// against resizing, and maps it. The fd is close-on-exec; the spawner clears that only in
    /// the child it starts.
    pub fn create(data_size: usize) -> Result<SharedRegion, TransportError> {
        if !(MSG_AREA..=1 << 30).contains(&data_size) {
            return Err(TransportError::Layout(format!(
                "data region of {data_size} bytes"
            )));
        }
        let len = DATA_OFF + data_size;
        // SAFETY: plain syscalls with valid arguments; the fd is owned right after.
        let fd = unsafe {
            let raw = libc::memfd_create(
                c"tasklet-worker".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            );
            if raw < 0 {
                return Err(io::Error::last_os_error().into());
            }
            let fd = OwnedFd::from_raw_fd(raw);
            // A host that closed its stdio would get fd 0-2 here, which the child's stdio setup
            // (before exec) overwrites: move it above them.
            if raw < 3 {
                let high = libc::fcntl(raw, libc::F_DUPFD_CLOEXEC, 3);
                if high < 0 {
                    return Err(io::Error::last_os_error().into());
                }
                OwnedFd::from_raw_fd(high)
            } else {
                fd
            }
        };
        // SAFETY: valid fd.
        unsafe {
            if libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) != 0 {
                return Err(io::Error::last_os_error().into());
            }
            let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
            if libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) != 0 {
                return Err(io::Error::last_os_error().into());
            }
        }
        let region = Self::map(fd, len, data_size)?;
        region
            .u64_at(OFF_DATA_SIZE)
            .store(data_size as u64, Relaxed);
        region.u32_at(OFF_MSG_AREA).store(MSG_AREA as u32, Relaxed);
        region.u32_at(OFF_RING).store(RING as u32, Relaxed);
        region.u32_at(OFF_VERSION).store(VERSION, Relaxed);
        region.u64_at(OFF_MAGIC).store(MAGIC, Release);
        Ok(region)
    }

    /// Maps a region created by [`SharedRegion::create`] in another process, from an inherited
    /// fd (which this takes ownership of), checking its layout.
    pub fn from_fd(fd: RawFd) -> Result<SharedRegion, TransportError> {
        // SAFETY: fstat on an arbitrary number is harmless; we only take ownership once it is
        // known to be an open fd.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if fd < 0 || unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(TransportError::Layout(format!(
                "fd {fd} is not open: {}",
                io::Error::last_os_error()
            )));
        }
        // SAFETY: the fd is open and handed to us for good.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let len = st.st_size as usize;
        if len < DATA_OFF + MSG_AREA {
            return Err(TransportError::Layout(format!(
                "region of {len} bytes is too small"
            )));
        }
        let mut region = Self::map(fd, len, 0)?;
        if region.u64_at(OFF_MAGIC).load(Acquire) != MAGIC {
            return Err(TransportError::Layout("bad magic".into()));
        }
        let version = region.u32_at(OFF_VERSION).load(Relaxed);
        if version != VERSION {
            return Err(TransportError::Layout(format!(
                "protocol version {version}, this worker speaks {VERSION}"
            )));
        }
        let msg = region.u32_at(OFF_MSG_AREA).load(Relaxed) as usize;
        let ring = region.u32_at(OFF_RING).load(Relaxed) as usize;
        let data = region.u64_at(OFF_DATA_SIZE).load(Relaxed) as usize;
        if msg != MSG_AREA || ring != RING || DATA_OFF.checked_add(data) != Some(len) {
            return Err(TransportError::Layout(format!(
                "sizes msg={msg} ring={ring} data={data} do not match a {len}-byte region"
            )));
        }
        region.data_size = data;
        Ok(region)
    }

    fn map(fd: OwnedFd, len: usize, data_size: usize) -> Result<SharedRegion, TransportError> {
        // SAFETY: mapping a file we own, whole, shared; checked for failure.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error().into());
        }
        let base = NonNull::new(p as *mut u8)
            .ok_or_else(|| TransportError::Layout("null mapping".into()))?;
        Ok(SharedRegion {
            base,
            len,
            data_size,
            fd,
        })
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub fn data_size(&self) -> usize {
        self.data_size
    }

    pub(super) fn u32_at(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off.is_multiple_of(4) && off + 4 <= HEADER);
        // SAFETY: in bounds of the (page-aligned) mapping, aligned, and only accessed atomically.
        unsafe { AtomicU32::from_ptr(self.base.as_ptr().add(off) as *mut u32) }
    }

    pub(super) fn u64_at(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= HEADER);
        // SAFETY: as above.
        unsafe { AtomicU64::from_ptr(self.base.as_ptr().add(off) as *mut u64) }
    }

    /// Copies `src` into the mapping at `off`. Bounds-checked.
    pub(super) fn put(&self, off: usize, src: &[u8]) {
        assert!(
            off.checked_add(src.len())
                .is_some_and(|end| end <= self.len),
            "shared region write out of bounds"
        );
        // SAFETY: bounds checked above; the peer may race on these bytes, which can corrupt only
        // the bytes themselves, never our memory.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.base.as_ptr().add(off), src.len())
        }
    }

    /// Copies bytes at `off` out of the mapping into `dst`. Bounds-checked.
    pub(super) fn get(&self, off: usize, dst: &mut [u8]) {
        assert!(
            off.checked_add(dst.len())
                .is_some_and(|end| end <= self.len),
            "shared region read out of bounds"
        );
        // SAFETY: as in `put`.
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.as_ptr().add(off), dst.as_mut_ptr(), dst.len())
        }
    }

    pub(super) fn data_off(&self) -> usize {
        DATA_OFF
    }

    /// Where byte `off` of the region lies in this process, for handing a part of it to a device
    /// (the data region, the completion word). In bounds or a panic, never a wild pointer.
    pub(super) fn ptr_at(&self, off: usize) -> *mut u8 {
        assert!(off <= self.len, "shared region offset {off} out of bounds");
        // SAFETY: within the mapping (checked above; one past its end at most).
        unsafe { self.base.as_ptr().add(off) }
    }
}

impl Drop for SharedRegion {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `map` mapped; no references into it survive (see above).
        unsafe {
            libc::munmap(self.base.as_ptr() as *mut libc::c_void, self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_cannot_be_resized_by_the_peer() {
        let region = SharedRegion::create(DEFAULT_DATA_SIZE).unwrap();
        // SAFETY: plain syscall on our own fd.
        let r = unsafe { libc::ftruncate(region.fd(), 4096) };
        assert_ne!(r, 0, "the memfd must be sealed against shrinking");
    }

    #[test]
    fn bad_fds_are_refused() {
        assert!(SharedRegion::from_fd(-1).is_err());
        assert!(SharedRegion::from_fd(9999).is_err());
    }
}
