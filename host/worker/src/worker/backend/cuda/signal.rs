//! The channel's completion word as the device writes it: after the kernels a `sync` waits for,
//! the stream stores the sync's seq into the page-locked header page of the channel, where the
//! host is already spinning (see [`crate::contract::channel`]). That saves the hand-off from this
//! process to the host on every launch + sync: the host sees the kernels finished as soon as the
//! device does.
//!
//! The store is ordered after all earlier work on the worker's stream and, by default, fenced
//! (`cuStreamWriteValue32` without `NO_MEMORY_BARRIER`): the kernels' own writes are visible
//! first. A faulted context executes nothing more, so a failing sync never stores its seq.

use std::ffi::c_uint;
use std::sync::atomic::AtomicU32;

use super::driver::*;
use super::memory::{Pinned, REGISTER_DEVICEMAP};

const PAGE: usize = 4096;

pub struct CompletionWord {
    page: Pinned,
    /// The word in this process (inside `page`, which the serve loop's channel keeps mapped).
    host: *const AtomicU32,
    /// The word's address as the device sees it.
    device: CuDevicePtr,
}

impl CompletionWord {
    /// Registers the page holding the word at `addr` (in this process) and finds the word's
    /// device address. On failure syncs are answered by the worker alone (slower by a hand-off).
    pub fn register(drv: &Driver, addr: usize) -> Result<CompletionWord, String> {
        let page = Pinned::register(
            drv,
            (addr & !(PAGE - 1)) as *mut u8,
            PAGE,
            REGISTER_DEVICEMAP,
            "channel header page",
        )?;
        let mut device: CuDevicePtr = 0;
        // SAFETY: `addr` lies in the page just registered; valid out-pointer.
        let r = unsafe { (drv.mem_host_get_device_pointer)(&mut device, addr as *mut _, 0) };
        if r != CUDA_SUCCESS {
            page.unregister(drv);
            return Err(format!(
                "cuMemHostGetDevicePointer of the completion word failed: {}",
                drv.describe(r)
            ));
        }
        Ok(CompletionWord {
            page,
            host: addr as *const AtomicU32,
            device,
        })
    }

    /// Queues the store of `seq` behind everything queued so far. An error means the driver
    /// refused to queue it (nothing was queued).
    pub fn store_when_done(
        &self,
        drv: &Driver,
        stream: WorkStream,
        seq: u32,
    ) -> Result<(), CuResult> {
        // SAFETY: a registered, device-mapped word of ours; the worker's stream.
        let r = unsafe { (drv.stream_write_value32)(stream.0, self.device, seq as c_uint, 0) };
        if r == CUDA_SUCCESS {
            Ok(())
        } else {
            Err(r)
        }
    }

    /// The word as this process reads it.
    pub fn word(&self) -> &AtomicU32 {
        // SAFETY: an aligned word of the channel's header page, mapped for as long as the backend
        // (and so this) lives; only ever accessed atomically.
        unsafe { &*self.host }
    }

    pub fn unregister(self, drv: &Driver) {
        self.page.unregister(drv);
    }
}
