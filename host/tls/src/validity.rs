//! When a certificate is valid.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use time::OffsetDateTime;

use crate::Error;

/// How long `init` makes the CA valid.
pub const CA_DAYS: u32 = 3650;
/// How long `init` makes the node's and the first tenant's certificates valid, and the usual
/// choice for [`issue`](crate::issue).
pub const LEAF_DAYS: u32 = 365;

/// How far into the past a new certificate's validity starts: a certificate issued on one
/// machine is then already valid on another whose clock runs a little behind.
const BACKDATE: Duration = Duration::from_secs(5 * 60);

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// The period a certificate is valid in: from `not_before` to `not_after`, both included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    not_before: SystemTime,
    not_after: SystemTime,
}

impl Validity {
    /// Valid from now (less a few minutes for clock skew) for `days` days.
    pub fn days(days: u32) -> Result<Self, Error> {
        let now = SystemTime::now();
        let not_before = now.checked_sub(BACKDATE).unwrap_or(now);
        let not_after =
            now.checked_add(DAY.saturating_mul(days))
                .ok_or(Error::InvalidValidity {
                    reason: "it ends too far in the future",
                })?;
        Self::between(not_before, not_after)
    }

    /// Valid from `not_before` to `not_after`, which may both lie in the past (an expired
    /// certificate, for tests) or in the future.
    pub fn between(not_before: SystemTime, not_after: SystemTime) -> Result<Self, Error> {
        if not_after <= not_before {
            return Err(Error::InvalidValidity {
                reason: "it ends before it starts",
            });
        }
        // Checked here rather than when signing, so the error says what is wrong.
        x509_time(not_before)?;
        x509_time(not_after)?;
        Ok(Self {
            not_before,
            not_after,
        })
    }

    /// The first instant the certificate is valid.
    pub fn not_before(&self) -> SystemTime {
        self.not_before
    }

    /// The last instant the certificate is valid.
    pub fn not_after(&self) -> SystemTime {
        self.not_after
    }

    /// Both ends as the certificate generator takes them.
    pub(crate) fn x509_times(&self) -> Result<(OffsetDateTime, OffsetDateTime), Error> {
        Ok((x509_time(self.not_before)?, x509_time(self.not_after)?))
    }
}

/// An instant as a certificate time: whole seconds from 1950 through 9999, the span of X.509's
/// UTCTime and GeneralizedTime.
fn x509_time(at: SystemTime) -> Result<OffsetDateTime, Error> {
    let out_of_range = || Error::InvalidValidity {
        reason: "a certificate's dates must lie between 1950 and 9999",
    };
    let seconds = match at.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_secs()).ok(),
        Err(before) => i64::try_from(before.duration().as_secs()).ok().map(|s| -s),
    };
    let time = seconds
        .and_then(|s| OffsetDateTime::from_unix_timestamp(s).ok())
        .ok_or_else(out_of_range)?;
    if !(1950..=9999).contains(&time.year()) {
        return Err(out_of_range());
    }
    Ok(time)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_starts_just_before_now() {
        let validity = Validity::days(2).unwrap();
        let now = SystemTime::now();
        assert!(validity.not_before() < now);
        assert!(validity.not_after() > now + DAY);
    }

    #[test]
    fn refuses_empty_and_unrepresentable_periods() {
        let now = SystemTime::now();
        assert!(Validity::between(now, now).is_err());
        assert!(Validity::between(now, now - DAY).is_err());
        assert!(Validity::days(u32::MAX).is_err());
        assert!(Validity::between(UNIX_EPOCH - DAY * 365 * 30, now).is_err());
    }
}
