//! A bound on how often a kind of log line is written: anyone who can reach the port can make
//! the node refuse a handshake, and a line for each would let them fill its logs. Past the
//! bound the lines are counted, and the next line written says how many were left out (the
//! metrics count every one).

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

pub(crate) struct LogLimit {
    /// Lines written at most per `every`.
    lines: u32,
    every: Duration,
    window: Mutex<Window>,
}

struct Window {
    /// When the current window began (none before the first line).
    start: Option<Instant>,
    written: u32,
    /// Lines left out since the last one written.
    left_out: u64,
}

impl LogLimit {
    pub fn new(lines: u32, every: Duration) -> LogLimit {
        LogLimit {
            lines,
            every,
            window: Mutex::new(Window {
                start: None,
                written: 0,
                left_out: 0,
            }),
        }
    }

    /// Whether to write a line now: `Some(n)` with the lines left out since the last one
    /// written (to say so), `None` to leave this one out.
    pub fn admit(&self) -> Option<u64> {
        self.admit_at(Instant::now())
    }

    fn admit_at(&self, now: Instant) -> Option<u64> {
        let mut w = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        if w.start
            .is_none_or(|start| now.saturating_duration_since(start) >= self.every)
        {
            w.start = Some(now);
            w.written = 0;
        }
        if w.written >= self.lines {
            w.left_out += 1;
            return None;
        }
        w.written += 1;
        Some(std::mem::take(&mut w.left_out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_bound_lines_are_counted_and_the_next_window_says_how_many() {
        let limit = LogLimit::new(3, Duration::from_secs(10));
        let t0 = Instant::now();
        let first: Vec<_> = (0..3).map(|_| limit.admit_at(t0)).collect();
        assert_eq!(first, [Some(0), Some(0), Some(0)]);
        for _ in 0..1000 {
            assert_eq!(limit.admit_at(t0 + Duration::from_secs(5)), None);
        }
        assert_eq!(
            limit.admit_at(t0 + Duration::from_secs(11)),
            Some(1000),
            "the next window's first line says how many were left out"
        );
        assert_eq!(limit.admit_at(t0 + Duration::from_secs(11)), Some(0));
    }
}
