//! Samples and the figures read from them: percentiles of latencies, medians of rates.

use std::time::Duration;

/// Which side of its bound a target wants the figure on.
#[derive(Debug, Clone, Copy)]
pub enum Want {
    AtMost,
    AtLeast,
}

/// Latencies of one measurement, in the order they were taken.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    values: Vec<Duration>,
}

impl Samples {
    pub fn with_capacity(n: usize) -> Samples {
        Samples {
            values: Vec::with_capacity(n),
        }
    }

    pub fn push(&mut self, value: Duration) {
        self.values.push(value);
    }

    pub fn extend(&mut self, other: Samples) {
        self.values.extend(other.values);
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// The `p`-th percentile (0–100), nearest rank; zero for no samples.
    pub fn percentile(&self, p: f64) -> Duration {
        if self.values.is_empty() {
            return Duration::ZERO;
        }
        let mut sorted = self.values.clone();
        sorted.sort_unstable();
        let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
        sorted[rank.clamp(1, sorted.len()) - 1]
    }

    pub fn p50(&self) -> Duration {
        self.percentile(50.0)
    }

    pub fn p99(&self) -> Duration {
        self.percentile(99.0)
    }
}

/// The median of `values` (NaN for none).
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

/// The median of durations.
pub fn median_duration(values: &[Duration]) -> Duration {
    let secs: Vec<f64> = values.iter().map(Duration::as_secs_f64).collect();
    let m = median(&secs);
    if m.is_finite() {
        Duration::from_secs_f64(m)
    } else {
        Duration::ZERO
    }
}

/// Bytes per second of `bytes` moved in `elapsed`.
pub fn rate(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / elapsed.as_secs_f64().max(1e-9)
}

pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// "median M (min A, max B; K of N rounds ≤ 1)" of per-round ratios to a bound, counting the
/// rounds on the side of it that `want` asks for.
pub fn spread(ratios: &[f64], want: Want) -> String {
    let min = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let max = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (within, side) = match want {
        Want::AtMost => (ratios.iter().filter(|r| **r <= 1.0).count(), "≤"),
        Want::AtLeast => (ratios.iter().filter(|r| **r >= 1.0).count(), "≥"),
    };
    format!(
        "median {:.2} (min {min:.2}, max {max:.2}; {within} of {} rounds {side} 1)",
        median(ratios),
        ratios.len()
    )
}
