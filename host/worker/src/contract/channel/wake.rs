//! How a waiting side waits: spin for a short, adaptive while, then sleep on a futex.
//!
//! A side that goes to sleep announces it through its sleeping flag, so the other side only pays
//! for a `FUTEX_WAKE` syscall when someone is actually asleep. The flag protocol is Dekker-style:
//! the sleeper stores its flag then re-reads the word, the publisher stores the word then reads
//! the flag, all `SeqCst`, so at least one of them sees the other and no wake-up is lost. The
//! pairs of words and flags, and who waits on which, are the ends' business ([`super::host_end`],
//! [`super::worker_end`]); this module is the mechanism.

use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

pub(super) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT on a valid, aligned, mapped word (shared, so not FUTEX_PRIVATE).
    // EAGAIN/EINTR/ETIMEDOUT all just mean "look again".
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            0usize,
            0u32,
        );
    }
}

pub(super) fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a valid, aligned, mapped word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            0usize,
            0usize,
            0u32,
        );
    }
}

/// Adaptive spin budget: grows while the other side keeps answering within it, shrinks when it
/// had to sleep anyway, so a chatty peer gets sub-microsecond hand-offs and an idle one costs no
/// CPU beyond `min`.
///
/// A wait that missed the budget but still ended within `max` restores the full budget
/// ([`Spin::late`]): without that, a peer whose answers take a little longer than the current
/// budget (a GPU kernel launch + sync) would make every wait miss, shrink the budget to `min`,
/// and pay a futex sleep and wake-up, far slower than the answer itself, from then on — seen as
/// launch + sync alternating between a fast and a much slower round.
#[derive(Debug, Clone)]
pub(super) struct Spin {
    budget: Duration,
    min: Duration,
    max: Duration,
}

impl Spin {
    pub(super) fn new(min: Duration, max: Duration) -> Spin {
        Spin {
            budget: max,
            min,
            max,
        }
    }

    /// Spins until `done()` or the budget runs out; says whether `done()` was seen.
    #[inline]
    pub(super) fn run(&mut self, mut done: impl FnMut() -> bool) -> bool {
        let start = Instant::now();
        let mut i = 0u32;
        loop {
            if done() {
                return true;
            }
            std::hint::spin_loop();
            i = i.wrapping_add(1);
            // Reading the clock costs far more than a turn: do it every 64.
            if i.is_multiple_of(64) {
                let spent = start.elapsed();
                if spent >= self.budget {
                    return false;
                }
                // On a busy machine the peer may be waiting for *our* core: after a few µs of
                // spinning, let the scheduler run it.
                if spent > Duration::from_micros(4) && i.is_multiple_of(1024) {
                    // SAFETY: plain syscall.
                    unsafe { libc::sched_yield() };
                }
            }
        }
    }

    /// Sets the ceiling the budget grows to (at least the floor); a budget above it is cut.
    pub(super) fn set_max(&mut self, max: Duration) {
        if max != self.max {
            self.max = max.max(self.min);
            self.budget = self.budget.min(self.max);
        }
    }

    pub(super) fn hit(&mut self) {
        self.budget = (self.budget * 2).min(self.max).max(self.min);
    }

    pub(super) fn miss(&mut self) {
        self.budget = (self.budget / 2).max(self.min);
    }

    /// After a miss: the wait ended `waited` after it began. Within `max`, spinning the whole
    /// budget would have caught it, so the next wait spins that long.
    pub(super) fn late(&mut self, waited: Duration) {
        if waited <= self.max {
            self.budget = self.max;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_that_ends_soon_after_the_spin_gave_up_restores_the_budget() {
        let (min, max) = (Duration::from_micros(5), Duration::from_micros(100));
        let mut s = Spin::new(min, max);
        for _ in 0..10 {
            s.miss();
        }
        assert_eq!(s.budget, min);
        // An answer (a kernel launch + sync) that missed the shrunk budget but came within the
        // ceiling: spin the whole ceiling next.
        s.late(Duration::from_micros(9));
        assert_eq!(s.budget, max);
        // An answer long after the ceiling (an idle peer) leaves the shrunk budget alone.
        s.miss();
        s.late(Duration::from_millis(3));
        assert_eq!(s.budget, max / 2);
    }

    #[test]
    fn a_raised_ceiling_is_spun_after_a_late_answer_and_a_lowered_one_cuts_the_budget() {
        let (min, max) = (Duration::from_micros(2), Duration::from_micros(50));
        let mut s = Spin::new(min, max);
        // A remote client's request, 180 us after the last: past the worker's own ceiling.
        s.miss();
        s.late(Duration::from_micros(180));
        assert_eq!(s.budget, max / 2, "no linger: the budget keeps shrinking");
        s.set_max(Duration::from_micros(300));
        s.miss();
        s.late(Duration::from_micros(180));
        assert_eq!(
            s.budget,
            Duration::from_micros(300),
            "lingering: spin the whole linger"
        );
        s.set_max(max);
        assert_eq!(s.budget, max, "the host took the linger back");
        s.set_max(Duration::ZERO);
        assert_eq!(s.max, min, "never below the floor");
    }
}
