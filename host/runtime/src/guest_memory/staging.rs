//! Staging memory for bulk transfers that do not start or end in a tasklet's linear memory (a
//! node moving a remote client's MEM_WRITE or MEM_READ between the network and the device).
//!
//! A [`StagingBuffer`] is a [`SharedMemory`] like a linear memory, so [`crate::gpu::LocalGpu`]
//! moves it with one copy by the worker (one DMA on cuda): `mem_write` finds it by address
//! (`locate`) and writes from it, `mem_read_into` reads into it through
//! [`StagingBuffer::guest_bytes`]. Buffers come from a [`StagingPool`] and go back to it when
//! dropped, so a worker maps (and on cuda page-locks) each buffer once, not each transfer.
//!
//! A pool belongs to one holder of GPU state (a node's connection): its buffers are attached
//! only to the workers of that holder's leases, and a buffer's old bytes are only ever seen by
//! the same holder, so they are not cleared between uses. The pool bounds the buffers that exist
//! at once; a taker finds none when all are out ([`StagingPool::try_take`]) or waits for one
//! ([`StagingPool::take`]).

use std::io;
use std::mem::ManuallyDrop;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tasklet_worker::guest_memory::SharedMemory;

use crate::gpu::GuestBytes;

/// Buffers of one size, at most `limit` of them at once (idle or out).
#[derive(Debug)]
pub struct StagingPool {
    size: usize,
    limit: usize,
    state: Mutex<State>,
    returned: Condvar,
}

#[derive(Debug, Default)]
struct State {
    idle: Vec<SharedMemory>,
    /// Buffers made and not yet dropped for good: idle ones and those out.
    made: usize,
}

impl StagingPool {
    /// A pool of buffers of `size` bytes (rounded up to whole pages), at most `limit` at once.
    pub fn new(size: usize, limit: usize) -> Arc<StagingPool> {
        let page = super::page_size();
        Arc::new(StagingPool {
            size: size.max(1).div_ceil(page) * page,
            limit,
            state: Mutex::new(State::default()),
            returned: Condvar::new(),
        })
    }

    /// Bytes each buffer holds.
    pub fn buffer_size(&self) -> usize {
        self.size
    }

    /// An idle buffer, or a new one while fewer than the limit exist; `None` when all are out.
    pub fn try_take(self: &Arc<Self>) -> io::Result<Option<StagingBuffer>> {
        let mut state = self.lock();
        self.take_locked(&mut state)
    }

    /// As [`StagingPool::try_take`], waiting up to `wait` for a buffer to come back when all are
    /// out; `None` if none did (at once for a pool of no buffers).
    pub fn take(self: &Arc<Self>, wait: Duration) -> io::Result<Option<StagingBuffer>> {
        if self.limit == 0 {
            return Ok(None);
        }
        let until = Instant::now() + wait;
        let mut state = self.lock();
        loop {
            if let Some(buffer) = self.take_locked(&mut state)? {
                return Ok(Some(buffer));
            }
            let now = Instant::now();
            if now >= until {
                return Ok(None);
            }
            state = self
                .returned
                .wait_timeout(state, until - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn take_locked(
        self: &Arc<Self>,
        state: &mut MutexGuard<'_, State>,
    ) -> io::Result<Option<StagingBuffer>> {
        let memory = match state.idle.pop() {
            Some(memory) => memory,
            None if state.made < self.limit => {
                let memory = SharedMemory::create(self.size, self.size, 0)?;
                state.made += 1;
                memory
            }
            None => return Ok(None),
        };
        Ok(Some(StagingBuffer {
            memory: ManuallyDrop::new(memory),
            len: 0,
            pool: Arc::clone(self),
        }))
    }

    /// Buffers that may exist at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Buffers that exist now, idle or out.
    pub fn buffers(&self) -> usize {
        self.lock().made
    }

    fn give(&self, memory: SharedMemory) {
        self.lock().idle.push(memory);
        self.returned.notify_one();
    }

    /// The lock guards a list and a count, consistent between statements: taken even if
    /// poisoned.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One buffer of a [`StagingPool`], out of it until dropped. Its first [`StagingBuffer::len`]
/// bytes are the ones filled (by [`StagingBuffer::fill_from`] or a read into
/// [`StagingBuffer::guest_bytes`]); [`AsRef`] gives those.
///
/// A worker the buffer is attached to maps it too and could write into it at any time, as into
/// a linear memory; this process only ever reads what it filled or what a read it asked for put
/// there, and the bytes are plain data whatever they hold.
#[derive(Debug)]
pub struct StagingBuffer {
    /// Taken out only by `drop`, which hands it back to the pool.
    memory: ManuallyDrop<SharedMemory>,
    len: usize,
    pool: Arc<StagingPool>,
}

impl StagingBuffer {
    /// Bytes filled.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes it holds at most.
    pub fn capacity(&self) -> usize {
        self.pool.size
    }

    /// Counts nothing as filled, for filling again from the start (the bytes stay until then).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Appends as much of `data` as fits; returns how many bytes that was.
    pub fn fill_from(&mut self, data: &[u8]) -> usize {
        let take = data.len().min(self.capacity() - self.len);
        // SAFETY: `len + take` is within the mapping's `size` accessible bytes, which never
        // move; `&mut self` makes this the only access from this process (see the type's docs
        // for the worker's).
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.memory.as_ptr().add(self.len), take);
        }
        self.len += take;
        take
    }

    /// The first `len` bytes (at most the capacity) as the destination of a
    /// `mem_read_into`, which fills them in place; they count as filled from now on.
    pub fn guest_bytes(&mut self, len: usize) -> GuestBytes {
        self.len = len.min(self.capacity());
        // SAFETY: the bytes lie in a live `SharedMemory` (registered, so a worker can reach it)
        // that no guest runs in, and `&mut self` keeps every other reference of this process
        // out until the read is done and the returned value is gone.
        unsafe { GuestBytes::new(self.memory.as_ptr() as usize, self.len) }
    }
}

impl AsRef<[u8]> for StagingBuffer {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the first `len` bytes are within the accessible mapping, which lives as long as
        // `self`.
        unsafe { std::slice::from_raw_parts(self.memory.as_ptr(), self.len) }
    }
}

impl Drop for StagingBuffer {
    fn drop(&mut self) {
        // SAFETY: taken once, here; `self.memory` is not used again.
        let memory = unsafe { ManuallyDrop::take(&mut self.memory) };
        self.pool.give(memory);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tasklet_worker::guest_memory::locate;

    #[test]
    fn buffers_are_bounded_reused_and_reachable_by_a_worker() {
        let pool = StagingPool::new(100_000, 2);
        assert_eq!(pool.buffer_size() % super::super::page_size(), 0);
        let mut a = pool.try_take().unwrap().expect("a first buffer");
        let b = pool.try_take().unwrap().expect("a second buffer");
        assert!(pool.try_take().unwrap().is_none(), "the limit bites");
        assert!(pool.take(Duration::from_millis(5)).unwrap().is_none());

        assert_eq!(a.fill_from(&[7u8; 40]), 40);
        let room = a.capacity() - 40;
        assert_eq!(
            a.fill_from(&vec![1u8; room + 10]),
            room,
            "fills only what fits"
        );
        assert_eq!(a.as_ref()[..40], [7u8; 40]);
        let span = locate(a.as_ref().as_ptr(), a.len()).expect("a worker can map it");
        assert_eq!(span.len(), a.len());

        let first = a.as_ref().as_ptr();
        drop(a);
        let mut again = pool
            .take(Duration::from_millis(5))
            .unwrap()
            .expect("given back");
        assert_eq!(again.as_ref().as_ptr(), first, "the same memory, reused");
        assert!(again.is_empty());
        assert_eq!(again.guest_bytes(4096).len(), 4096);
        assert_eq!(pool.buffers(), 2);
        drop((again, b));
    }

    #[test]
    fn a_waiting_taker_gets_the_buffer_given_back() {
        let pool = StagingPool::new(4096, 1);
        let held = pool.try_take().unwrap().unwrap();
        let giver = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(held);
        });
        let got = pool.take(Duration::from_secs(5)).unwrap();
        assert!(got.is_some());
        giver.join().unwrap();
    }
}
