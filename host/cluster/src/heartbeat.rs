//! How often a node writes its record, and how long a record lives without being rewritten.

use std::time::Duration;

use crate::error::{Error, Result};

/// A registrar's timings and a registry's idea of fresh.
///
/// The defaults give the registry's promise: a node that stops refreshing (killed, cut off
/// from NATS) is gone within 10 s. The server removes its record `ttl` after the last write
/// (expiry is checked about once a second); readers also ignore a record older than
/// `stale_after` by their own clock, in case a record was written without expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heartbeat {
    /// Time between two writes of a node's record.
    pub interval: Duration,
    /// How long the server keeps a record after its last write. Whole seconds (the server's
    /// per-message TTL resolution); at least two intervals, so one lost write does not drop
    /// the node.
    pub ttl: Duration,
    /// Age beyond which a reader treats a record as gone; at least `ttl`. Ages compare the
    /// reader's clock with the server's, so this also bounds the clock skew tolerated.
    pub stale_after: Duration,
}

impl Default for Heartbeat {
    fn default() -> Heartbeat {
        Heartbeat {
            interval: Duration::from_secs(2),
            ttl: Duration::from_secs(6),
            stale_after: Duration::from_secs(10),
        }
    }
}

/// Shortest interval accepted: below it the heartbeats are load, not information.
const MIN_INTERVAL: Duration = Duration::from_millis(50);

impl Heartbeat {
    /// Checks that the timings can work together.
    pub fn validate(&self) -> Result<()> {
        let fail = |what: String| Err(Error::Timings(what));
        if self.interval < MIN_INTERVAL {
            return fail(format!(
                "interval {:?} is below the minimum {MIN_INTERVAL:?}",
                self.interval
            ));
        }
        if self.ttl.subsec_nanos() != 0 || self.ttl < Duration::from_secs(1) {
            return fail(format!(
                "ttl {:?} is not a whole number of seconds, at least 1",
                self.ttl
            ));
        }
        if self.ttl < self.interval * 2 {
            return fail(format!(
                "ttl {:?} is less than two intervals ({:?}): one late write would drop the node",
                self.ttl, self.interval
            ));
        }
        if self.stale_after < self.ttl {
            return fail(format!(
                "stale_after {:?} is less than ttl {:?}",
                self.stale_after, self.ttl
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_keep_the_ten_second_promise() {
        let h = Heartbeat::default();
        h.validate().unwrap();
        // Removal is ttl after the last write plus the server's expiry tick.
        assert!(h.ttl + Duration::from_secs(1) <= Duration::from_secs(10));
        assert!(h.stale_after <= Duration::from_secs(10));
    }

    #[test]
    fn refusals() {
        let s = Duration::from_secs;
        for bad in [
            Heartbeat {
                interval: Duration::from_millis(10),
                ..Heartbeat::default()
            },
            Heartbeat {
                ttl: Duration::from_millis(6500),
                ..Heartbeat::default()
            },
            Heartbeat {
                ttl: s(0),
                ..Heartbeat::default()
            },
            Heartbeat {
                interval: s(4),
                ttl: s(6),
                stale_after: s(10),
            },
            Heartbeat {
                stale_after: s(5),
                ..Heartbeat::default()
            },
        ] {
            assert!(matches!(bad.validate(), Err(Error::Timings(_))), "{bad:?}");
        }
    }
}
