//! How a connection's GPU thread waits for its next batch: it looks at its queue for a while
//! before parking, when the last batch came soon after the one before and the machine has cores
//! to spare.
//!
//! A parked thread pays a wake-up for the next batch (on a virtual machine, a vCPU's wake-up
//! too), and a remote client's launch + sync pairs come a network round trip apart, each finding
//! the thread parked. Polling is bounded three ways: by a budget that grows while batches come
//! within it and shrinks when two in a row do not (an idle connection soon goes back to parking
//! at once), by a ceiling ([`DEFAULT_POLL_US`], or `TASKLET_NODE_POLL_US`; 0 turns polling off),
//! and by the count of threads spinning at once in this process, every kind of hot wait together
//! (`tasklet_spin::SPINNERS`), at most a quarter of the cores (none on a machine of fewer than
//! 4), so that many busy connections never spin against each other.

use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tasklet_spin::Budget;
use tokio::sync::mpsc::{self, error::TryRecvError};

/// The poll ceiling when `TASKLET_NODE_POLL_US` does not say: a client's next batch after a
/// millisecond or two of its own work. Shorter polls leave such a batch to find every thread on
/// its way parked (on an H200 machine, a batch after a local one: 1.76 ms against 1.19 back to
/// back, the wake-ups after a millisecond's idle far slower than after a round trip's); the
/// budget halves while batches come further apart, so a quiet connection soon parks at once.
pub const DEFAULT_POLL_US: u64 = 2000;

fn ceiling() -> Duration {
    static CEILING: OnceLock<Duration> = OnceLock::new();
    *CEILING.get_or_init(|| tasklet_spin::ceiling_from_env("TASKLET_NODE_POLL_US", DEFAULT_POLL_US))
}

/// One GPU thread's wait for its queue.
pub(super) struct Waiter {
    budget: Budget,
    /// Whether the last wait came after more than the ceiling. One such pause (a client that
    /// works a while between batches) leaves the budget whole; the second in a row halves it.
    /// Halving at the first made the batch after a pause pay a parked thread's wake-up too:
    /// after a 35 ms pause the poll was 1 ms, and the next batch came 1.2 ms later (on an
    /// H200 machine, 3 batches in 20 of the fabric benchmark's timeline).
    missed: bool,
}

impl Waiter {
    pub fn new() -> Waiter {
        Waiter {
            budget: Budget::new(ceiling(), Duration::ZERO),
            missed: false,
        }
    }

    /// The next batch; `None` once every sender is gone.
    pub fn next<Batch>(&mut self, queue: &mut mpsc::Receiver<Batch>) -> Option<Batch> {
        match queue.try_recv() {
            Ok(batch) => {
                self.missed = false;
                return Some(batch);
            }
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) => {}
        }
        let began = Instant::now();
        if let Some(polled) = self.poll(queue) {
            self.missed = false;
            return polled;
        }
        let batch = queue.blocking_recv();
        let waited = began.elapsed();
        let late = waited > self.budget.max();
        if !late || self.missed {
            self.budget.waited(waited);
        }
        self.missed = late;
        batch
    }

    /// Polls the queue for up to the budget, if a polling slot is free: `Some` with what it
    /// found (a batch, or `None` for a closed queue), `None` if nothing came.
    fn poll<Batch>(&mut self, queue: &mut mpsc::Receiver<Batch>) -> Option<Option<Batch>> {
        let budget = self.budget.get();
        if budget.is_zero() {
            return None;
        }
        let Some(_slot) = tasklet_spin::SPINNERS.take(tasklet_spin::spinners_allowed()) else {
            tracing::trace!(name: "poll-refused", target: crate::TIMELINE, "");
            return None;
        };
        tracing::trace!(name: "poll-began", target: crate::TIMELINE, "");
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
                if start.elapsed() >= budget {
                    tracing::trace!(name: "poll-ended", target: crate::TIMELINE, "");
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

#[cfg(test)]
mod tests {
    use super::*;

    // Any batch will do: the wait does not look into it.
    type Queue = (mpsc::Sender<Vec<()>>, mpsc::Receiver<Vec<()>>);

    fn waiter(max: Duration) -> Waiter {
        Waiter {
            budget: Budget::new(max, Duration::ZERO),
            missed: false,
        }
    }

    /// The waiter's next batch, sent 3 ms after it starts waiting (past every ceiling here).
    fn after_a_pause(waiter: &mut Waiter, (send, queue): &mut Queue) {
        let send = send.clone();
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(3));
            send.blocking_send(Vec::new())
        });
        assert!(waiter.next(queue).is_some());
        late.join().unwrap().unwrap();
    }

    #[test]
    fn an_idle_queue_stops_the_polling_and_a_chatty_one_restores_it() {
        let mut q: Queue = mpsc::channel(4);
        let mut waiter = waiter(Duration::from_micros(200));
        // Batches far apart (an idle connection): the budget halves from the second on, down to
        // nothing.
        for _ in 0..8 {
            after_a_pause(&mut waiter, &mut q);
        }
        assert_eq!(waiter.budget.get(), Duration::ZERO);
        // One that was already there: taken at once, the budget left alone.
        q.0.blocking_send(Vec::new()).unwrap();
        assert!(waiter.next(&mut q.1).is_some());
        assert_eq!(waiter.budget.get(), Duration::ZERO);
        drop(q.0);
        assert!(waiter.next(&mut q.1).is_none(), "every sender gone");
    }

    #[test]
    fn one_pause_leaves_the_poll_whole_and_a_second_in_a_row_halves_it() {
        let mut q: Queue = mpsc::channel(4);
        let max = Duration::from_micros(200);
        let mut waiter = waiter(max);
        // A pause: the next batch still finds the poll at its ceiling.
        after_a_pause(&mut waiter, &mut q);
        assert_eq!(waiter.budget.get(), max);
        // A batch waiting already between two pauses: they are not in a row.
        q.0.blocking_send(Vec::new()).unwrap();
        assert!(waiter.next(&mut q.1).is_some());
        after_a_pause(&mut waiter, &mut q);
        assert_eq!(waiter.budget.get(), max);
        // A second pause in a row: halved.
        after_a_pause(&mut waiter, &mut q);
        assert_eq!(waiter.budget.get(), max / 2);
    }
}
