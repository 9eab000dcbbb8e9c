//! How the calling thread waits for a reply: it polls the read itself for a while before
//! parking, when replies have been coming within that while and the machine has cores to spare.
//!
//! A thread parked in the runtime is woken by the runtime's thread when the reply's datagram has
//! been read (a futex wake; on a virtual machine, a vCPU's wake-up too), and that wake-up is part
//! of every call's round trip. Polling instead, the runtime's thread only sets a flag. Bounded
//! three ways, like the node's GPU thread and the GPU workers: by a budget that grows while
//! replies come within it and shrinks when they do not (a call that takes long, a kernel's sync,
//! goes back to parking at once), by a ceiling ([`DEFAULT_SPIN_US`], or
//! `TASKLET_CLIENT_SPIN_US`; 0 turns it off), and by the count of threads spinning at once in
//! this process, every kind of hot wait together, at most a quarter of the cores
//! (`tasklet_spin::SPINNERS`; none on a machine of fewer than 4).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use tasklet_spin::Budget;
use tokio::runtime::Runtime;

/// The polling ceiling when `TASKLET_CLIENT_SPIN_US` does not say: long enough for the sync
/// after a thousand pipelined launches (about a millisecond of GPU work), as CUDA's own default
/// sync spins before it yields.
pub const DEFAULT_SPIN_US: u64 = 2000;

fn ceiling() -> Duration {
    static CEILING: OnceLock<Duration> = OnceLock::new();
    *CEILING
        .get_or_init(|| tasklet_spin::ceiling_from_env("TASKLET_CLIENT_SPIN_US", DEFAULT_SPIN_US))
}

/// One channel's polling budget.
pub(crate) struct Spin {
    budget: Budget,
}

impl Spin {
    pub fn new() -> Spin {
        Spin {
            budget: Budget::new(ceiling(), Duration::ZERO),
        }
    }

    /// Polls `future` on this thread for up to the budget (if a polling slot is free): its
    /// output, or `None` if it was not ready by then (then the caller waits for it as usual, and
    /// says how that went with [`Spin::parked`]).
    pub fn poll<F: Future>(&mut self, runtime: &Runtime, future: Pin<&mut F>) -> Option<F::Output> {
        self.poll_within(runtime, future, tasklet_spin::spinners_allowed())
    }

    fn poll_within<F: Future>(
        &mut self,
        runtime: &Runtime,
        mut future: Pin<&mut F>,
        allowed: usize,
    ) -> Option<F::Output> {
        let budget = self.budget.get();
        if budget.is_zero() {
            return None;
        }
        let Some(_slot) = tasklet_spin::SPINNERS.take(allowed) else {
            tracing::trace!(name: "spin-refused", target: crate::TIMELINE, "");
            return None;
        };
        let _runtime = runtime.enter();
        let woken = Arc::new(Flag(AtomicBool::new(true)));
        let waker = Waker::from(Arc::clone(&woken));
        let mut cx = Context::from_waker(&waker);
        let start = Instant::now();
        let mut turns = 0u32;
        loop {
            if woken.0.swap(false, Ordering::AcqRel) {
                if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
                    return Some(out);
                }
            }
            std::hint::spin_loop();
            turns = turns.wrapping_add(1);
            if turns.is_multiple_of(64) {
                if start.elapsed() >= budget {
                    tracing::trace!(name: "spin-ended", target: crate::TIMELINE, "");
                    return None;
                }
                // Let the runtime's thread have this core if it needs it.
                if turns.is_multiple_of(1024) {
                    std::thread::yield_now();
                }
            }
        }
    }

    /// Whether the next wait polls at all (its budget has not shrunk to nothing).
    pub fn polls(&self) -> bool {
        !self.budget.get().is_zero()
    }

    /// After polling gave up: the reply came `waited` after the polling began. Within the
    /// ceiling, polling the whole ceiling would have caught it; past it (a long call, an idle
    /// stream), the budget halves, down to nothing.
    pub fn parked(&mut self, waited: Duration) {
        self.budget.waited(waited);
    }
}

/// Set by the runtime's thread when the polled future can make progress.
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_follows_how_soon_replies_come() {
        let max = Duration::from_micros(300);
        let mut spin = Spin {
            budget: Budget::new(max, Duration::ZERO),
        };
        // Long calls: the budget halves down to nothing.
        for _ in 0..8 {
            spin.parked(Duration::from_millis(5));
        }
        assert_eq!(spin.budget.get(), Duration::ZERO);
        // A reply soon after the wait began: the whole ceiling next time.
        spin.parked(Duration::from_micros(120));
        assert_eq!(spin.budget.get(), max);
    }

    #[test]
    fn a_ready_future_is_taken_at_once_where_polling_is_allowed() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut spin = Spin::new();
        let ready = std::pin::pin!(std::future::ready(7));
        match spin.poll(&runtime, ready) {
            Some(out) => assert_eq!(out, 7),
            // Polling off (TASKLET_CLIENT_SPIN_US=0) or a machine of fewer than 4 cores.
            None => assert!(ceiling().is_zero() || tasklet_spin::spinners_allowed() == 0),
        }
    }
}
