//! Small writes answered before their copy has run: the bytes are copied into page-locked memory
//! of the worker's own, so the channel's data region is free again the moment the write is
//! answered, and the copy to the device runs on the worker's stream behind the answer.
//!
//! A write waited for its copy to finish, so a tenant's write + read + sync paid the device's
//! copy latency twice, where native code pays it once. Now the copy is ordered by the stream: every
//! later op on the worker's stream (kernels, reads, device-to-device copies, graph replays) runs
//! after it. What does not go through that stream waits for the event recorded after the latest
//! staged copy (the copy stream, see `CudaBackend::copy_ready`), or for the stream itself (a
//! free, a sync, a persistent kernel's start, an export to another worker). A failed copy is
//! reported by the next op that waits, as an asynchronous error is.

use std::ffi::c_void;

use super::driver::{CuEvent, CuResult, CuStream, Driver, CUDA_SUCCESS};
use super::memory::Pinned;

/// How much the staging memory holds: past that, a write first waits for the copies queued
/// before it (which frees the whole of it).
pub const STAGING_BYTES: usize = 1 << 20;

/// The largest write that is staged. A larger one waits for its copy: staging it would cost a
/// host copy as long as the wait it saves.
pub const STAGED_WRITE_MAX: usize = 64 << 10;

/// Where staged copies start: whole cache lines, so that neighbouring copies share none.
const ALIGN: usize = 64;

const CU_EVENT_DISABLE_TIMING: std::ffi::c_uint = 2;

pub struct Staging {
    base: *mut u8,
    /// Bytes handed out since the stream was last seen idle.
    used: usize,
    pinned: Option<Pinned>,
    /// Recorded on the worker's stream after each staged copy.
    done: CuEvent,
}

impl Staging {
    /// Maps and page-locks the staging memory and makes its event. On failure the caller goes on
    /// waiting for every write (slower, still correct); the error says why.
    pub fn open(drv: &Driver) -> Result<Staging, String> {
        // SAFETY: an anonymous private mapping, owned by the returned value and unmapped by
        // `close`.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                STAGING_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(format!(
                "cannot map {STAGING_BYTES} bytes for staging writes: {}",
                std::io::Error::last_os_error()
            ));
        }
        let base = base.cast::<u8>();
        let unmap = || {
            // SAFETY: the mapping made above, used by nothing.
            unsafe { libc::munmap(base.cast(), STAGING_BYTES) };
        };
        let pinned = match Pinned::register(drv, base, STAGING_BYTES, 0, "staging memory") {
            Ok(p) => p,
            Err(why) => {
                unmap();
                return Err(why);
            }
        };
        let mut done: CuEvent = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; this process's current context.
        let r = unsafe { (drv.event_create)(&mut done, CU_EVENT_DISABLE_TIMING) };
        if r != CUDA_SUCCESS {
            pinned.unregister(drv);
            unmap();
            return Err(format!(
                "cannot create the staging event: {}",
                drv.describe(r)
            ));
        }
        Ok(Staging {
            base,
            used: 0,
            pinned: Some(pinned),
            done,
        })
    }

    /// Whether `len` more bytes fit before the stream must be waited for.
    pub fn has_room(&self, len: usize) -> bool {
        self.used.next_multiple_of(ALIGN).saturating_add(len) <= STAGING_BYTES
    }

    /// Copies `data` into the staging memory (the caller checked [`Staging::has_room`]) and
    /// returns where, valid until the stream is next seen idle ([`Staging::stream_idle`]).
    pub fn stage(&mut self, data: &[u8]) -> *const c_void {
        let at = self.used.next_multiple_of(ALIGN);
        debug_assert!(at + data.len() <= STAGING_BYTES);
        // SAFETY: `at + data.len()` ≤ the mapping's length (`has_room`); no queued copy reads
        // this range (it lies past every byte handed out since the stream was last idle).
        let dst = unsafe { self.base.add(at) };
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        self.used = at + data.len();
        dst.cast()
    }

    /// Records the event after the copies queued so far on `stream`.
    pub fn mark(&self, drv: &Driver, stream: CuStream) -> CuResult {
        // SAFETY: our event and the worker's stream, both of this context.
        unsafe { (drv.event_record)(self.done, stream) }
    }

    /// Makes `stream` wait (on the device) for every staged copy.
    pub fn wait_on(&self, drv: &Driver, stream: CuStream) -> CuResult {
        // SAFETY: as in `mark`.
        unsafe { (drv.stream_wait_event)(stream, self.done, 0) }
    }

    /// The worker's stream has been seen idle: every staged copy ran, the memory is free.
    pub fn stream_idle(&mut self) {
        self.used = 0;
    }

    /// Gives the memory and the event back (only once no copy may use them).
    pub fn close(mut self, drv: &Driver) {
        if let Some(p) = self.pinned.take() {
            p.unregister(drv);
        }
        // SAFETY: our event, no longer waited on; the mapping made by `open`.
        unsafe {
            (drv.event_destroy)(self.done);
            libc::munmap(self.base.cast(), STAGING_BYTES);
        }
    }
}
