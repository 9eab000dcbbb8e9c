//! Figures: `name value` pairs (times in ns, rates in messages per second), as gpubench prints
//! them, and how the native and host-runtime paths make the same ones from their timings.

/// `name value` pairs of one path.
pub type Lines = Vec<(String, f64)>;

/// The nearest-rank percentile `p` of sorted values, as gpubench computes it.
pub fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64
}

/// The median of sorted values (the mean of the middle two for an even count).
pub fn median(sorted: &[u64]) -> f64 {
    let n = sorted.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => sorted[n / 2] as f64,
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) as f64 / 2.0,
    }
}

/// The lines of gpubench's `actor-rtt`, `actor-batch` and `handler-launch` from times in ns
/// (each list unsorted; `batch` messages a batch).
pub fn lines(
    rtt: Vec<u64>,
    batches: Vec<u64>,
    batch: u32,
    mut launch_sync: Vec<u64>,
    mut handler_rtt: Vec<u64>,
) -> Lines {
    for v in [&mut launch_sync, &mut handler_rtt] {
        v.sort_unstable();
    }
    let mut out = ring_lines("", rtt, batches, batch);
    out.extend([
        ("handler_launch_sync_ns".into(), median(&launch_sync)),
        (
            "handler_launch_sync_p99_ns".into(),
            percentile(&launch_sync, 99.0),
        ),
        ("handler_rtt_ns".into(), median(&handler_rtt)),
    ]);
    out
}

/// The round-trip and batch lines alone, their names after `prefix` (gpubench's `seq_` for
/// sequenced rings).
pub fn ring_lines(prefix: &str, mut rtt: Vec<u64>, mut batches: Vec<u64>, batch: u32) -> Lines {
    rtt.sort_unstable();
    batches.sort_unstable();
    let per_batch = median(&batches);
    vec![
        (format!("{prefix}actor_rtt_ns"), median(&rtt)),
        (format!("{prefix}actor_rtt_p99_ns"), percentile(&rtt, 99.0)),
        (format!("{prefix}actor_batch_ns"), per_batch),
        (
            format!("{prefix}actor_batch_p99_ns"),
            percentile(&batches, 99.0),
        ),
        (
            format!("{prefix}actor_msgs_per_s"),
            (f64::from(batch) * 1e9 / per_batch).round(),
        ),
    ]
}

/// Parses gpubench's `name value` lines; an `error …` line (or one that is not a figure) makes
/// it an `Err` naming it.
pub fn parse(text: &str) -> Result<Lines, String> {
    let mut lines = Lines::new();
    for l in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (name, value) = l.split_once(' ').unwrap_or((l, ""));
        match value.trim().parse::<f64>() {
            Ok(v) if name != "error" => lines.push((name.to_string(), v)),
            _ => return Err(l.to_string()),
        }
    }
    Ok(lines)
}
