//! Bounded hot waiting: the rules a thread follows when it spins for what it awaits instead of
//! parking.
//!
//! A remote launch + sync comes one network round trip after the last. Each thread on its path
//! that parked in between pays a wake-up (on a virtual machine, a vCPU's wake-up too), and
//! those wake-ups cost as much as the GPU work. So the node's GPU threads, the node's runtime
//! threads and the clients' calling threads may spin for a while first. Spinning burns a core,
//! so every such wait is bounded three ways, by the pieces of this crate:
//!
//! - a **ceiling** per kind of wait, set by an environment variable (0 turns that wait off):
//!   [`ceiling_from_env`];
//! - a **budget** that adapts: back to the ceiling when the awaited thing came within it,
//!   halved when it did not, so that a quiet connection stops spinning after a few requests:
//!   [`Budget`];
//! - a **count** of the threads of a process spinning at once, every kind of wait together
//!   ([`SPINNERS`]), at most a quarter of the cores (none on a machine of fewer than 4), so that
//!   many busy connections never spin against each other, and the kinds together never take
//!   more (a process may serve a node and its clients at once, as the tests and the fabric
//!   benchmark do): [`Slots`].
//!
//! The GPU workers' own spin (host/worker's channel) follows the same idea with its own rules,
//! since it is set by the host through shared memory rather than in this process.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// The ceiling a wait reads from the environment variable `var` (microseconds), or `default_us`
/// when it is unset or not a number. Read on every call: callers keep it (a `OnceLock`).
pub fn ceiling_from_env(var: &str, default_us: u64) -> Duration {
    let micros = std::env::var(var)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default_us);
    Duration::from_micros(micros)
}

/// How many threads of this process may spin at once, every kind of wait together:
/// `TASKLET_SPIN_THREADS` when it is set to a number (0: none), else a quarter of the cores this
/// process may use, none on a machine of fewer than 4.
pub fn spinners_allowed() -> usize {
    static ALLOWED: OnceLock<usize> = OnceLock::new();
    *ALLOWED.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        allowed_from(std::env::var("TASKLET_SPIN_THREADS").ok().as_deref(), cores)
    })
}

/// The count of spinning threads allowed: `setting` when it is a number, else a quarter of
/// `cores`.
fn allowed_from(setting: Option<&str>, cores: usize) -> usize {
    setting
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(cores / 4)
}

/// The threads of this process spinning now, every kind of wait together: each takes a slot of
/// these, at most [`spinners_allowed`] at once.
pub static SPINNERS: Slots = Slots::new();

/// A count of threads spinning now ([`SPINNERS`]; tests make their own).
pub struct Slots(AtomicUsize);

impl Slots {
    pub const fn new() -> Slots {
        Slots(AtomicUsize::new(0))
    }

    /// A slot to spin in, if fewer than `allowed` are taken; given back when dropped.
    pub fn take(&'static self, allowed: usize) -> Option<Slot> {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < allowed).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(self))
    }

    /// Slots taken now.
    pub fn taken(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

impl Default for Slots {
    fn default() -> Slots {
        Slots::new()
    }
}

/// A slot held while spinning.
pub struct Slot(&'static Slots);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How long one waiter spins next time, learnt from how soon the awaited thing came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    now: Duration,
    max: Duration,
    floor: Duration,
}

impl Budget {
    /// A budget that starts at its ceiling `max`. Halving never takes it below `floor`; a
    /// budget that would fall under 5 µs with a zero floor becomes zero (no spinning at all).
    pub fn new(max: Duration, floor: Duration) -> Budget {
        Budget {
            now: max,
            max,
            floor: floor.min(max),
        }
    }

    /// How long to spin now.
    pub fn get(&self) -> Duration {
        self.now
    }

    /// The ceiling.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// What was awaited came `waited` after the wait began. Within the ceiling, spinning the
    /// whole ceiling would have caught it: spin that long next time. Later (a long call, an idle
    /// connection), the budget halves.
    pub fn waited(&mut self, waited: Duration) {
        if waited <= self.max {
            self.now = self.max;
        } else {
            self.now = (self.now / 2).max(self.floor);
            if self.now < Duration::from_micros(5) && self.floor.is_zero() {
                self.now = Duration::ZERO;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_halves_down_to_nothing_and_comes_back_whole() {
        let max = Duration::from_micros(300);
        let mut budget = Budget::new(max, Duration::ZERO);
        for _ in 0..8 {
            budget.waited(Duration::from_millis(5));
        }
        assert_eq!(budget.get(), Duration::ZERO);
        budget.waited(Duration::from_micros(120));
        assert_eq!(budget.get(), max);
    }

    #[test]
    fn a_budget_with_a_floor_keeps_it() {
        let max = Duration::from_micros(100);
        let mut budget = Budget::new(max, Duration::from_micros(10));
        for _ in 0..8 {
            budget.waited(Duration::from_millis(1));
        }
        assert_eq!(budget.get(), Duration::from_micros(10));
    }

    #[test]
    fn slots_bite_at_the_count_allowed_and_come_back() {
        static SLOTS: Slots = Slots::new();
        let first = SLOTS.take(2).expect("one of two");
        let second = SLOTS.take(2).expect("two of two");
        assert!(SLOTS.take(2).is_none(), "a third is refused");
        drop(first);
        assert!(SLOTS.take(2).is_some(), "a slot given back is free again");
        drop(second);
        assert_eq!(SLOTS.taken(), 0);
        assert!(SLOTS.take(0).is_none(), "none allowed: none taken");
    }

    #[test]
    fn the_spinner_count_is_a_quarter_of_the_cores_unless_set() {
        assert_eq!(allowed_from(None, 16), 4);
        assert_eq!(allowed_from(None, 3), 0, "none below 4 cores");
        assert_eq!(allowed_from(Some("8"), 16), 8);
        assert_eq!(allowed_from(Some("0"), 16), 0, "0 turns every hot wait off");
        assert_eq!(
            allowed_from(Some("many"), 16),
            4,
            "not a number: the default"
        );
    }

    #[test]
    fn the_ceiling_reads_its_variable_or_the_default() {
        assert_eq!(
            ceiling_from_env("TASKLET_SPIN_TEST_UNSET_VARIABLE", 300),
            Duration::from_micros(300)
        );
    }
}
