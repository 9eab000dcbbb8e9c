//! The life lock: how the host tells that the worker's serving thread has ended without a
//! system call.
//!
//! A call the host answers itself (a sync with nothing sent since the last whole wait) still
//! reports a worker that died meanwhile, as the worker's own answer would. Asking the kernel
//! (`waitpid`) costs a system call, a sizeable part of such a call on a virtual machine
//! (0.38 µs on the 2-vCPU development box, against 23 ns for a clock read). Instead the serving
//! thread takes a process-shared *robust* mutex in the header page as the worker becomes ready
//! and holds it for good. The kernel knows of it through the thread's robust list (which the C
//! library registers for every thread): when the thread ends, however it ends — the process
//! exiting or killed — the kernel marks the mutex's word owner-died before the process is
//! reaped. The host only reads that word: the owner's thread id while the worker serves, the
//! owner-died bit once it has gone.
//!
//! The word is the mutex's first 32 bits, as the C library (glibc) lays a mutex out and the
//! kernel's robust-futex ABI defines its bits. Elsewhere, or where the lock could not be taken,
//! the word stays 0 and the host asks the kernel as before.

use std::sync::atomic::{AtomicU32, Ordering::Acquire};

/// The kernel's robust-futex ABI: the owner-died bit and the owner's thread id.
const FUTEX_OWNER_DIED: u32 = 0x4000_0000;
const FUTEX_TID_MASK: u32 = 0x3fff_ffff;

/// Bytes the lock takes in the header page (a cache line of its own).
pub(super) const LIFE_BYTES: usize = 64;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
const _: () = assert!(std::mem::size_of::<libc::pthread_mutex_t>() <= LIFE_BYTES);

/// Worker side: makes the lock at `at` and takes it on this thread, for as long as it lives.
/// False where it could not (the host then asks the kernel).
///
/// # Safety
///
/// `at` points to [`LIFE_BYTES`] of the shared header page, 8-byte aligned, that nothing else in
/// this process uses, and this is called once.
pub(super) unsafe fn hold(at: *mut u8) -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let mutex = at.cast::<libc::pthread_mutex_t>();
        let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
        if libc::pthread_mutexattr_init(&mut attr) != 0 {
            return false;
        }
        let made = libc::pthread_mutexattr_setpshared(&mut attr, libc::PTHREAD_PROCESS_SHARED) == 0
            && libc::pthread_mutexattr_setrobust(&mut attr, libc::PTHREAD_MUTEX_ROBUST) == 0
            && libc::pthread_mutex_init(mutex, &attr) == 0;
        libc::pthread_mutexattr_destroy(&mut attr);
        made && libc::pthread_mutex_lock(mutex) == 0
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = at;
        false
    }
}

/// Host side: what the lock's word says. `Some(true)`: the holding thread has ended;
/// `Some(false)`: it is held; `None`: not known (not taken yet, or not on this platform).
pub(super) fn ended(word: &AtomicU32) -> Option<bool> {
    let w = word.load(Acquire);
    if w & FUTEX_OWNER_DIED != 0 {
        Some(true)
    } else if w & FUTEX_TID_MASK != 0 {
        Some(false)
    } else {
        None
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    /// A 64-byte, cache-line-aligned block standing in for the header page's lock.
    #[repr(C, align(64))]
    struct Block([u8; LIFE_BYTES]);

    #[test]
    fn the_word_says_held_while_the_thread_lives_and_ended_once_it_has() {
        let block = Box::new(Block([0; LIFE_BYTES]));
        let at = Box::into_raw(block).cast::<u8>() as usize;
        // SAFETY: aligned, and the first 4 bytes of the live block, which outlives every use.
        let word = || unsafe { &*(at as *const AtomicU32) };
        assert_eq!(ended(word()), None, "not taken yet");
        let (taken_tx, taken_rx) = std::sync::mpsc::channel();
        let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            // SAFETY: the block is ours, aligned, and taken once.
            taken_tx.send(unsafe { hold(at as *mut u8) }).unwrap();
            let _ = end_rx.recv();
        });
        assert!(taken_rx.recv().unwrap(), "the lock was taken");
        assert_eq!(ended(word()), Some(false), "held while its thread lives");
        end_tx.send(()).unwrap();
        holder.join().unwrap();
        // The kernel marked it as the thread ended (before join returned: the C library waits
        // for the kernel to clear the thread's id, which comes after the robust list is walked).
        assert_eq!(ended(word()), Some(true), "ended with its thread");
        // SAFETY: made by Box::into_raw above; no one uses it any more.
        drop(unsafe { Box::from_raw(at as *mut Block) });
    }
}
