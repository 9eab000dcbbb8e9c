//! Keeping one of the node's runtime threads awake while the GPU thread makes a call's reply.
//!
//! The reply goes from the connection's GPU thread to quinn's connection task (directly, or
//! through the stream's writer task: `outlet`), which runs on the runtime; if every runtime
//! thread has parked meanwhile (a launch + sync takes the GPU thread about as long as a thread
//! takes to park), one is woken for it, and that wake-up (on a virtual machine, a vCPU's too) is
//! part of the round trip. After handing the GPU thread a batch that holds a call, the stream
//! starts a task that yields until something was written to the stream or a budget runs out, so
//! that a runtime thread is awake when the reply comes. While it waits, the stream's sends are
//! handed to it (`outlet`): it writes the reply itself, and quinn's connection task, which that
//! wakes, runs next on the same thread, where a wake from the GPU thread would go through the
//! runtime's shared queue and a parked thread's wake-up. Bounded three ways: by a budget per
//! stream that grows back to its ceiling when the reply came within it and halves when it did
//! not (down to a floor, so that it can learn again), by a ceiling (`TASKLET_NODE_HOT_US`,
//! default [`DEFAULT_HOT_US`]; 0 turns it off), and by the count of such tasks in this process,
//! at most a quarter of the cores (none on a machine of fewer than 4).

use crate::job::ReplyTo;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tasklet_spin::Slots;

/// The ceiling when `TASKLET_NODE_HOT_US` does not say.
pub const DEFAULT_HOT_US: u64 = 100;

/// The least a budget shrinks to.
const FLOOR: Duration = Duration::from_micros(10);

/// Tasks keeping a runtime thread awake now, in this process.
static HOT: Slots = Slots::new();

fn ceiling() -> Duration {
    static CEILING: OnceLock<Duration> = OnceLock::new();
    *CEILING.get_or_init(|| tasklet_spin::ceiling_from_env("TASKLET_NODE_HOT_US", DEFAULT_HOT_US))
}

/// A stream's side of it: what its writer has written, and its budget.
pub(super) struct Hot {
    /// Counted up for every piece put on the stream (by the outlet, either path).
    pub written: Arc<AtomicU64>,
    /// In nanoseconds; shared with the task of the last call, which adjusts it.
    budget: Arc<AtomicU64>,
}

impl Hot {
    pub fn new() -> Hot {
        Hot {
            written: Arc::new(AtomicU64::new(0)),
            budget: Arc::new(AtomicU64::new(ceiling().as_nanos() as u64)),
        }
    }

    /// What the writer has written so far: taken before a batch with a call is handed over.
    pub fn mark(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    /// Starts keeping a runtime thread awake until something is written past `mark`, if the
    /// budget, the ceiling and a free slot allow. Meanwhile the stream's sends are handed to
    /// that thread to write (`outlet`).
    pub fn keep_awake(&self, mark: u64, reply: &ReplyTo) {
        self.keep_awake_within(
            mark,
            Some(reply),
            ceiling(),
            tasklet_spin::spinners_allowed(),
        );
    }

    fn keep_awake_within(&self, mark: u64, reply: Option<&ReplyTo>, max: Duration, allowed: usize) {
        let budget = Duration::from_nanos(self.budget.load(Ordering::Relaxed)).min(max);
        if budget.is_zero() {
            return;
        }
        let Some(slot) = HOT.take(allowed) else {
            return;
        };
        let (written, shared_budget) = (Arc::clone(&self.written), Arc::clone(&self.budget));
        // Counted as waiting from now, before the task first runs, so that a reply that comes
        // first is handed to it.
        let wait = reply.map(ReplyTo::hot_wait);
        tokio::spawn(async move {
            let _slot = slot;
            let start = Instant::now();
            loop {
                if let Some(wait) = wait.as_ref().filter(|wait| wait.ready()) {
                    wait.write().await;
                }
                if written.load(Ordering::Acquire) != mark {
                    shared_budget.store(max.as_nanos() as u64, Ordering::Relaxed);
                    return;
                }
                if start.elapsed() >= budget {
                    let less = (budget / 2).max(FLOOR);
                    shared_budget.store(less.as_nanos() as u64, Ordering::Relaxed);
                    return;
                }
                tokio::task::yield_now().await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(hot: &Hot) -> Duration {
        Duration::from_nanos(hot.budget.load(Ordering::Relaxed))
    }

    /// Waits (at most 10 s, for a loaded machine) until the task has given its slot back.
    fn until_done() {
        let deadline = Instant::now() + Duration::from_secs(10);
        while HOT.taken() != 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(HOT.taken(), 0, "the slot is given back");
    }

    #[test]
    fn it_stops_at_the_reply_or_the_budget_and_learns_from_which() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let _in = runtime.enter();
        let max = Duration::from_millis(2);
        let hot = Hot::new();
        hot.budget.store(max.as_nanos() as u64, Ordering::Relaxed);

        // No reply: the task gives up after its budget and halves it.
        hot.keep_awake_within(hot.mark(), None, max, 1);
        until_done();
        assert_eq!(budget(&hot), max / 2);

        // The writer has written past the mark (written before the task starts, so that a
        // loaded machine cannot run the task's whole budget out first): the whole ceiling again.
        let mark = hot.mark();
        hot.written.fetch_add(1, Ordering::Release);
        hot.keep_awake_within(mark, None, max, 1);
        until_done();
        assert_eq!(budget(&hot), max);

        // No slot: nothing runs, nothing changes.
        hot.budget
            .store((max / 4).as_nanos() as u64, Ordering::Relaxed);
        hot.keep_awake_within(hot.mark(), None, max, 0);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(HOT.taken(), 0);
        assert_eq!(budget(&hot), max / 4);
    }
}
