//! What a connection's replies may hold of the node's memory while they wait for the client:
//! bytes queued for its streams' writers count here until written, and a sender (the GPU
//! thread, a deployment's thread) waits while they are past [`MAX_QUEUED_REPLY_BYTES`]. A
//! client that stops reading (grants no more flow-control credit) then holds at most that much
//! in the node's queues, besides what QUIC itself keeps in flight (its send window).

use std::sync::{Arc, Condvar, Mutex, PoisonError};

/// Reply bytes one connection may have queued for its writers at once. One reply larger than
/// this is queued alone.
pub(crate) const MAX_QUEUED_REPLY_BYTES: usize = 16 << 20;

/// One connection's queued reply bytes.
#[derive(Default)]
pub(crate) struct ReplyBudget {
    queued: Mutex<usize>,
    room: Condvar,
}

/// Reply bytes counted as queued until dropped (with the queued bytes, once written).
pub(crate) struct QueuedReply {
    budget: Arc<ReplyBudget>,
    bytes: usize,
}

impl ReplyBudget {
    /// Counts `bytes` more as queued, first waiting (blocking the thread) while what is queued
    /// leaves no room for them. Called from the node's own threads, never from an async task.
    pub fn hold(self: &Arc<Self>, bytes: usize) -> QueuedReply {
        let mut queued = self.queued.lock().unwrap_or_else(PoisonError::into_inner);
        while *queued > 0 && queued.saturating_add(bytes) > MAX_QUEUED_REPLY_BYTES {
            queued = self
                .room
                .wait(queued)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *queued += bytes;
        QueuedReply {
            budget: Arc::clone(self),
            bytes,
        }
    }

    /// Bytes queued now.
    pub fn queued(&self) -> usize {
        *self.queued.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for QueuedReply {
    fn drop(&mut self) {
        let mut queued = self
            .budget
            .queued
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *queued -= self.bytes;
        self.budget.room.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_sender_waits_while_the_queue_is_full_and_goes_on_when_it_is_written() {
        let budget = Arc::new(ReplyBudget::default());
        let first = budget.hold(MAX_QUEUED_REPLY_BYTES - 10);
        let small = budget.hold(10);
        assert_eq!(budget.queued(), MAX_QUEUED_REPLY_BYTES);
        let waiting = {
            let budget = Arc::clone(&budget);
            std::thread::spawn(move || budget.hold(1).bytes)
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiting.is_finished(), "no room: the sender waits");
        drop(first);
        assert_eq!(waiting.join().unwrap(), 1);
        drop(small);
        assert_eq!(budget.queued(), 0, "all written");
        // One reply past the bound goes when nothing else is queued.
        let big = budget.hold(3 * MAX_QUEUED_REPLY_BYTES);
        assert_eq!(budget.queued(), 3 * MAX_QUEUED_REPLY_BYTES);
        drop(big);
    }
}
