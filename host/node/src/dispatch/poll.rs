//! How a connection's GPU thread waits for its next batch: it looks at its queue for a while
//! before parking, when the last batch came soon after the one before and the machine has cores
//! to spare.
//!
//! A parked thread pays a wake-up for the next batch (on a virtual machine, a vCPU's wake-up
//! too), and a remote client's launch + sync pairs come a network round trip apart, each finding
//! the thread parked. Polling is bounded three ways: by a budget that grows while batches come
//! within it and shrinks when they do not (an idle connection goes back to parking at once), by
//! a ceiling ([`DEFAULT_POLL_US`], or `TASKLET_NODE_POLL_US`; 0 turns polling off), and by the
//! count of GPU threads polling at once in this process, at most a quarter of the cores (none on
//! a machine of fewer than 4), so that many busy connections never spin against each other.

use crate::job::Batch;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{self, error::TryRecvError};

/// The poll ceiling when `TASKLET_NODE_POLL_US` does not say.
pub const DEFAULT_POLL_US: u64 = 300;

/// GPU threads polling now, in this process.
static POLLING: AtomicUsize = AtomicUsize::new(0);

fn ceiling() -> Duration {
    static CEILING: OnceLock<Duration> = OnceLock::new();
    *CEILING.get_or_init(|| {
        let micros = std::env::var("TASKLET_NODE_POLL_US")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(DEFAULT_POLL_US);
        Duration::from_micros(micros)
    })
}

fn pollers_allowed() -> usize {
    static ALLOWED: OnceLock<usize> = OnceLock::new();
    *ALLOWED.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()) / 4)
}

/// One GPU thread's wait for its queue.
pub(super) struct Waiter {
    budget: Duration,
    max: Duration,
}

impl Waiter {
    pub fn new() -> Waiter {
        let max = ceiling();
        Waiter { budget: max, max }
    }

    /// The next batch; `None` once every sender is gone.
    pub fn next(&mut self, queue: &mut mpsc::Receiver<Batch>) -> Option<Batch> {
        match queue.try_recv() {
            Ok(batch) => return Some(batch),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) => {}
        }
        let began = Instant::now();
        if let Some(polled) = self.poll(queue) {
            return polled;
        }
        let batch = queue.blocking_recv();
        // A batch that came within the ceiling would have been caught by polling the whole
        // ceiling: poll that long next time. One that came later (an idle connection) halves the
        // budget, down to nothing.
        if began.elapsed() <= self.max {
            self.budget = self.max;
        } else {
            self.budget /= 2;
            if self.budget < Duration::from_micros(5) {
                self.budget = Duration::ZERO;
            }
        }
        batch
    }

    /// Polls the queue for up to the budget, if a polling slot is free: `Some` with what it
    /// found (a batch, or `None` for a closed queue), `None` if nothing came.
    fn poll(&mut self, queue: &mut mpsc::Receiver<Batch>) -> Option<Option<Batch>> {
        if self.budget.is_zero() {
            return None;
        }
        let _slot = Slot::take()?;
        let start = Instant::now();
        let mut turns = 0u32;
        loop {
            match queue.try_recv() {
                Ok(batch) => return Some(Some(batch)),
                Err(TryRecvError::Disconnected) => return Some(None),
                Err(TryRecvError::Empty) => {}
            }
            std::hint::spin_loop();
            turns = turns.wrapping_add(1);
            if turns.is_multiple_of(64) {
                if start.elapsed() >= self.budget {
                    return None;
                }
                // Let whatever else wants this core (the runtime's threads, a worker) have it.
                if turns.is_multiple_of(1024) {
                    std::thread::yield_now();
                }
            }
        }
    }
}

/// A polling slot, held while polling.
struct Slot(());

impl Slot {
    fn take() -> Option<Slot> {
        POLLING
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < pollers_allowed()).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        POLLING.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_queue_stops_the_polling_and_a_chatty_one_restores_it() {
        let (send, mut queue) = mpsc::channel::<Batch>(4);
        let max = Duration::from_micros(200);
        let mut waiter = Waiter { budget: max, max };
        // Batches far apart (an idle connection): the budget halves each time, down to nothing.
        for _ in 0..8 {
            let send = send.clone();
            let late = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(3));
                send.blocking_send(Vec::new())
            });
            assert!(waiter.next(&mut queue).is_some());
            late.join().unwrap().unwrap();
        }
        assert_eq!(waiter.budget, Duration::ZERO);
        // One that was already there: taken at once, the budget left alone.
        send.blocking_send(Vec::new()).unwrap();
        assert!(waiter.next(&mut queue).is_some());
        assert_eq!(waiter.budget, Duration::ZERO);
        drop(send);
        assert!(waiter.next(&mut queue).is_none(), "every sender gone");
    }
}
