//! The memory a bulk write's data frames are built in, reused from one frame to the next.
//!
//! A frame is a data chunk (up to `MAX_CHUNK`, 1 MiB) behind its header, copied out of the
//! caller's bytes because quinn keeps what it sends until the node acknowledges it. Built in
//! fresh allocations, every frame's pages fault as they are first written (the allocator hands
//! memory of that size back to the kernel and takes new memory for the next), and on the virtual
//! machines GPUs are rented as that ran at about 2 GB/s: the copy, not the network, bounded a
//! large write. A frame's memory goes back to its pool once quinn lets go of it, and the next
//! frame is built there.

use bytes::Bytes;
use std::sync::{Arc, Mutex};

/// Buffers a pool keeps for reuse at most. Frames are let go in the order they were sent, as
/// their acknowledgements come, and the next ones taken as they are built, so a few cover a
/// steady transfer; more are allocated while quinn holds many, and freed beyond this.
const KEPT: usize = 16;

#[derive(Default)]
pub(crate) struct FramePool {
    free: Mutex<Vec<Vec<u8>>>,
}

impl FramePool {
    /// A frame of `header` then `chunk`, in memory of the pool's when it has some.
    pub fn frame(self: &Arc<Self>, header: &[u8], chunk: &[u8]) -> Bytes {
        let reused = self.free.lock().ok().and_then(|mut free| free.pop());
        let mut buffer = reused.unwrap_or_default();
        buffer.clear();
        buffer.reserve_exact(header.len() + chunk.len());
        buffer.extend_from_slice(header);
        buffer.extend_from_slice(chunk);
        Bytes::from_owner(Pooled {
            buffer,
            pool: Arc::clone(self),
        })
    }

    /// Buffers waiting to be reused.
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.free.lock().map_or(0, |free| free.len())
    }
}

/// A frame's memory, back to its pool when dropped.
struct Pooled {
    buffer: Vec<u8>,
    pool: Arc<FramePool>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buffer
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Ok(mut free) = self.pool.free.lock() {
            if free.len() < KEPT {
                free.push(std::mem::take(&mut self.buffer));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_its_header_then_its_chunk_and_its_memory_is_reused() {
        let pool = Arc::new(FramePool::default());
        let first = pool.frame(b"head", &[7; 1000]);
        assert_eq!(&first[..4], b"head");
        assert!(first[4..].iter().all(|&b| b == 7));
        assert_eq!(first.len(), 1004);
        let at = first.as_ptr();
        drop(first);
        assert_eq!(pool.kept(), 1);
        let second = pool.frame(b"h", &[1; 10]);
        assert_eq!(
            second.as_ptr(),
            at,
            "the second frame is built in the first's memory"
        );
        assert_eq!(&second[..], &[b'h', 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]);
        assert_eq!(pool.kept(), 0);
    }

    #[test]
    fn the_pool_keeps_only_so_many() {
        let pool = Arc::new(FramePool::default());
        let frames: Vec<Bytes> = (0..KEPT + 5).map(|_| pool.frame(b"", &[0; 64])).collect();
        drop(frames);
        assert_eq!(pool.kept(), KEPT);
    }
}
