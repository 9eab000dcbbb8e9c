//! How long a leased worker may keep spinning for its next request after activity, instead of
//! sleeping after its own short budget.
//!
//! A worker that sleeps pays a wake-up (on a virtual machine, the vCPU's wake-up too) on its next
//! request: nothing for a local loop, which keeps it busy, but a remote client's requests come a
//! network round trip apart, and every one of them found the worker asleep. Like a GPU driver's
//! spin-or-yield scheduling, a worker lingers only while the machine has cores to spare for it:
//! while this process has leased out at most half as many workers as there are cores (the other
//! half for the threads that feed them). Past that, workers keep their own short budget, so many
//! concurrent leases never spin against each other. Even lingering, a worker's spin budget shrinks
//! back when requests stop coming within it (see the channel's `Spin`), so an idle lease costs no
//! CPU.
//!
//! `TASKLET_WORKER_LINGER_US` sets the linger in microseconds (0 turns it off), read once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The linger when `TASKLET_WORKER_LINGER_US` does not say.
pub const DEFAULT_LINGER_US: u32 = 300;

/// Workers this process has leased out now.
static LEASED: AtomicUsize = AtomicUsize::new(0);

/// Counts a leased worker while it lives.
#[derive(Debug)]
pub(crate) struct Leased(());

impl Leased {
    pub(crate) fn new() -> Leased {
        LEASED.fetch_add(1, Ordering::Relaxed);
        Leased(())
    }
}

impl Drop for Leased {
    fn drop(&mut self) {
        LEASED.fetch_sub(1, Ordering::Relaxed);
    }
}

fn configured() -> u32 {
    static LINGER: OnceLock<u32> = OnceLock::new();
    *LINGER.get_or_init(|| {
        std::env::var("TASKLET_WORKER_LINGER_US")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(DEFAULT_LINGER_US)
    })
}

fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The linger, in microseconds, a leased worker may have now (0: none).
pub(crate) fn linger_micros() -> u32 {
    allowed(configured(), LEASED.load(Ordering::Relaxed), cores())
}

fn allowed(linger: u32, leased: usize, cores: usize) -> u32 {
    if leased.saturating_mul(2) <= cores {
        linger
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_linger_only_while_half_the_cores_are_left() {
        assert_eq!(allowed(300, 1, 16), 300);
        assert_eq!(allowed(300, 8, 16), 300);
        assert_eq!(allowed(300, 9, 16), 0, "more leases than half the cores");
        assert_eq!(allowed(300, 64, 16), 0);
        assert_eq!(allowed(300, 1, 2), 300);
        assert_eq!(allowed(300, 2, 2), 0);
        assert_eq!(allowed(0, 1, 16), 0, "turned off");
    }
}
