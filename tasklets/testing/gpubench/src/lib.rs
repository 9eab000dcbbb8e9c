//! `gpubench`: timed GPU loops run inside the guest, for the speed benchmark
//! (`benches/speed/gpu_speed.rs`), which runs the same operations natively through cudarc and
//! prints the two side by side.
//!
//! It calls the WIT bindings directly (`tasklet_gpu::raw`), so that each timed operation is exactly
//! one host call. Times are taken with `std::time::Instant` inside the guest; setup (lease, session,
//! module, buffers, filling the data) happens before the timed loops, and each loop is preceded by
//! a short untimed warm-up.
//!
//! Input: `<command> [args]`. Output: one `name value` line per figure (times in whole
//! nanoseconds, throughputs in bytes per second), or `error <kind> <message>` (the WIT
//! `gpu-error` case in kebab case, or `mismatch` when data read back differs from what was
//! written) after which the command stops.
//!
//! | command | what is timed | lines |
//! | --- | --- | --- |
//! | `launch-sync N` | `N` × (launch `empty()` of `kernels/faults.ptx` on 1×1, then `sync`), each timed; then `N` more in batches of 10, each batch timed | `launch_sync_ns` (median batch / 10), `launch_sync_each_ns` (median pair), `launch_sync_p99_ns` (pairs) |
//! | `launch-async N` | 10 batches of (`N` launches, then one `sync`) | `launch_async_ns`: median over batches of batch time / `N`; `launch_async_posted_ns`: the same for the launches alone (until the last returned) |
//! | `burst N` | 10 batches of (one `launch-burst` of `N` launches of `empty()` through a kernel handle, then one `sync`) | `burst_ns`: median over batches of batch time / `N` |
//! | `graph K R` | a graph of `K` launches of `empty()` (recorded and replayed once untimed); `R` × (`replay(1)`, then `sync`), each timed; then `R / 10` × (`K` launches through a kernel handle, then `sync`), each timed | `graph_replay_ns` (median replay + sync), `graph_launches_ns` (median `K` launches + sync) |
//! | `rw4k N` | `N` × (write 4 KiB, read 4 KiB, `sync`), each timed | `rw4k_ns` (median), `rw4k_p99_ns` |
//! | `bulk BYTES REPS` | `REPS` × (`mem-write` of `BYTES` from a guest `Vec` + `sync`; `mem-read-into` of `BYTES` into a guest buffer allocated beforehand; `mem-read` of `BYTES` returning a new list), each timed | `bulk_bytes`, `bulk_write_bps`, `bulk_read_bps` (in place), `bulk_read_list_bps` (returned list) (medians) |
//! | `lease N` | `N` × (acquire a 1 MiB lease, drop it) | `lease_acquire_p50_ns`, `lease_acquire_p99_ns`, `lease_cycle_p50_ns`, `lease_cycle_p99_ns` (acquire + drop) |
//! | `clock N` | `N` batches of 100 reads of the guest's monotonic clock (`Instant::now`, a WASI host call) | `clock_read_ns` (median batch / 100, one decimal) |
//! | `module-load N` | `N` × load `faults.ptx` again in a session where it stays loaded (the new module is dropped untimed) | `module_load_ns` (median), `module_load_p99_ns` |
//! | `actor-rtt N`, `actor-batch B R`, `actor-rtt-seq N`, `actor-batch-seq B R`, `handler-launch N`, `ring-calls N` | a persistent kernel's message round trip and batches, and its handler as a normal kernel (see the `actor` module) | `actor_rtt_ns`, `actor_batch_ns`, `actor_msgs_per_s`, `handler_launch_sync_ns`, … |
//!
//! Any command also takes a word `settle=MS`: after its setup and before its warm-up it sleeps
//! that many milliseconds (untimed), so that work the host starts in the background when a lease
//! is acquired (a replacement warm worker) is done before the timing begins.
//!
//! An unknown command, or a missing or malformed argument, is an `Err`.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use tasklet_gpu::raw::leases::{Lease, LeaseRequest};
use tasklet_gpu::raw::sessions::{BurstArg, LaunchConfig, Module, Session};
use tasklet_gpu::{input, Error};

mod actor;
use actor::Rings;

const FAULTS_PTX: &str = include_str!("../../../../kernels/faults.ptx");

const MIB: u64 = 1 << 20;
/// Lease length for every command: long enough for the slowest (`bulk` on a slow backend).
const LEASE_SECS: u32 = 600;
/// Untimed iterations before each timed loop.
const WARMUP: u32 = 10;
/// Batches of `launch-async`.
const ASYNC_BATCHES: u32 = 10;
/// Launch + sync pairs timed together in `launch-sync`'s batches (see there).
const PAIRS_PER_BATCH: u32 = 10;
/// Clock reads timed together in `clock`.
const CLOCK_READS_PER_BATCH: u32 = 100;

fn run(input: Vec<u8>) -> Result<Vec<u8>, String> {
    let mut settle = Duration::ZERO;
    let mut words = Vec::new();
    for word in input::text(&input)?.split_whitespace() {
        match word.strip_prefix("settle=") {
            Some(ms) => {
                settle = Duration::from_millis(input::parse(
                    ms,
                    "a number of milliseconds (settle=MS)",
                )?);
            }
            None => words.push(word),
        }
    }
    let mut words = words.into_iter();
    let command = words.next().unwrap_or("");
    let a = words.next();
    let b = words.next();
    let mut out = Out {
        text: String::new(),
        settle,
    };
    // `Err(Stopped)` only means a step failed and printed its line.
    let _ = match command {
        "launch-sync" => launch_sync(&mut out, count(command, a)?),
        "launch-async" => launch_async(&mut out, count(command, a)?),
        "burst" => burst(&mut out, count(command, a)?),
        "graph" => graph(&mut out, count(command, a)?, count(command, b)?),
        "rw4k" => rw4k(&mut out, count(command, a)?),
        "bulk" => bulk(&mut out, count(command, a)?, count(command, b)?),
        "lease" => lease(&mut out, count(command, a)?),
        "module-load" => module_load(&mut out, count(command, a)?),
        "clock" => clock(&mut out, count(command, a)?),
        "actor-rtt" => actor::actor_rtt(&mut out, Rings::Plain, count(command, a)?),
        "actor-batch" => {
            actor::actor_batch(&mut out, Rings::Plain, count(command, a)?, count(command, b)?)
        }
        "actor-rtt-seq" => actor::actor_rtt(&mut out, Rings::Sequenced, count(command, a)?),
        "actor-batch-seq" => {
            actor::actor_batch(&mut out, Rings::Sequenced, count(command, a)?, count(command, b)?)
        }
        "handler-launch" => actor::handler_launch(&mut out, count(command, a)?),
        "ring-calls" => actor::ring_calls(&mut out, count(command, a)?),
        _ => {
            return Err(format!(
                "unknown command {command:?}; expected one of launch-sync N, launch-async N, burst N, graph K R, \
                 rw4k N, bulk BYTES REPS, lease N, module-load N, clock N, actor-rtt N, actor-batch B R, \
                 actor-rtt-seq N, actor-batch-seq B R, handler-launch N, ring-calls N"
            ))
        }
    };
    Ok(out.text.into_bytes())
}

tasklet_gpu::export!(run);

/// A command's argument, a count above zero.
fn count<T>(command: &str, arg: Option<&str>) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + Default + std::fmt::Display,
{
    let count: T = input::argument(command, arg)?;
    if count > T::default() {
        Ok(count)
    } else {
        Err(format!("{command}: {count} is not a positive number"))
    }
}

/// The output being built, and the command's settle time.
#[derive(Default)]
struct Out {
    text: String,
    settle: Duration,
}

/// A step failed; its line is printed.
struct Stopped;

type Step = Result<(), Stopped>;

impl Out {
    fn line(&mut self, name: &str, value: impl std::fmt::Display) {
        writeln!(self.text, "{name} {value}").unwrap();
    }

    /// Sleeps the settle time (untimed).
    fn settle(&self) {
        if !self.settle.is_zero() {
            std::thread::sleep(self.settle);
        }
    }

    fn error(&mut self, kind: &str, message: &str) {
        let message = message.replace(['\n', '\r'], " ");
        writeln!(self.text, "error {kind} {message}").unwrap();
    }

    /// Passes a value through, or prints the error and stops the command.
    fn check<T, E: Into<Error>>(&mut self, r: Result<T, E>) -> Result<T, Stopped> {
        r.map_err(|e| {
            let e: Error = e.into();
            self.error(e.kind().as_str(), e.message());
            Stopped
        })
    }
}

fn acquire(out: &mut Out, bytes: u64) -> Result<Lease, Stopped> {
    out.check(Lease::acquire(LeaseRequest {
        min_vram: bytes,
        secs: LEASE_SECS,
        device: None,
    }))
}

const ONE: LaunchConfig = LaunchConfig {
    grid: (1, 1, 1),
    block: (1, 1, 1),
    shared_mem_bytes: 0,
};

fn launch_empty(session: &Session, module: &Module) -> Result<(), Error> {
    session.launch(module, "empty", ONE, &[])?;
    Ok(())
}

/// Runs `f` `warmup` times untimed, then `n` times timed one by one; returns the sorted times in
/// nanoseconds.
fn time_each(
    out: &mut Out,
    warmup: u32,
    n: u32,
    mut f: impl FnMut() -> Result<(), Error>,
) -> Result<Vec<u64>, Stopped> {
    out.settle();
    for _ in 0..warmup {
        out.check(f())?;
    }
    let mut times = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let start = Instant::now();
        let r = f();
        let t = start.elapsed();
        out.check(r)?;
        times.push(nanos(t));
    }
    times.sort_unstable();
    Ok(times)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The nearest-rank percentile `p` (0 < p <= 100) of sorted values.
fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The median of sorted values (the mean of the middle two for an even count).
fn median(sorted: &[u64]) -> u64 {
    let n = sorted.len();
    match n {
        0 => 0,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2,
    }
}

fn median_f64(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// A lease, a session on it and `faults.ptx` loaded in it.
fn with_empty_kernel(out: &mut Out, f: impl FnOnce(&mut Out, &Session, &Module) -> Step) -> Step {
    let lease = acquire(out, MIB)?;
    let session = out.check(Session::open(&lease))?;
    let module = out.check(session.module_load(FAULTS_PTX))?;
    f(out, &session, &module)
}

/// Each pair timed alone (its median and p99), then in batches of [`PAIRS_PER_BATCH`] with one
/// clock read at each end (the median batch over its pairs): a clock read in the guest is a host
/// call (`clock` measures it), which would otherwise be charged to every pair.
fn launch_sync(out: &mut Out, n: u32) -> Step {
    with_empty_kernel(out, |out, session, module| {
        let pair = || -> Result<(), Error> {
            launch_empty(session, module)?;
            Ok(session.sync()?)
        };
        let each = time_each(out, WARMUP, n, pair)?;
        let batches = time_each(out, 1, n.div_ceil(PAIRS_PER_BATCH), || {
            for _ in 0..PAIRS_PER_BATCH {
                pair()?;
            }
            Ok(())
        })?;
        out.line(
            "launch_sync_ns",
            median(&batches) / u64::from(PAIRS_PER_BATCH),
        );
        out.line("launch_sync_each_ns", median(&each));
        out.line("launch_sync_p99_ns", percentile(&each, 99.0));
        Ok(())
    })
}

/// Also says how long the launches alone took to return (the host's share of a batch: the
/// worker is still launching when they have all returned if it, not the host, bounds the batch).
fn launch_async(out: &mut Out, n: u32) -> Step {
    with_empty_kernel(out, |out, session, module| {
        let mut posted = Vec::with_capacity(ASYNC_BATCHES as usize);
        let mut batch = || -> Result<(), Error> {
            let start = Instant::now();
            for _ in 0..n {
                launch_empty(session, module)?;
            }
            posted.push(nanos(start.elapsed()));
            Ok(session.sync()?)
        };
        let batches = time_each(out, 1, ASYNC_BATCHES, &mut batch)?;
        // The warm-up batch's figure is left out.
        let mut posted = posted.split_off(1);
        posted.sort_unstable();
        out.line("launch_async_ns", median(&batches) / u64::from(n));
        out.line("launch_async_posted_ns", median(&posted) / u64::from(n));
        Ok(())
    })
}

fn burst(out: &mut Out, n: u32) -> Step {
    with_empty_kernel(out, |out, session, module| {
        let kernel = out.check(module.kernel("empty"))?;
        let launches: Vec<Vec<BurstArg<'_>>> = (0..n).map(|_| Vec::new()).collect();
        let batches = time_each(out, 1, ASYNC_BATCHES, || {
            session.launch_burst(&kernel, ONE, &[], &launches)?;
            Ok(session.sync()?)
        })?;
        out.line("burst_ns", median(&batches) / u64::from(n));
        Ok(())
    })
}

fn graph(out: &mut Out, k: u32, replays: u32) -> Step {
    with_empty_kernel(out, |out, session, module| {
        let kernel = out.check(module.kernel("empty"))?;
        let graph = out.check(session.new_graph())?;
        for _ in 0..k {
            out.check(graph.launch(&kernel, ONE, &[]))?;
        }
        let replay = time_each(out, WARMUP, replays, || {
            graph.replay(1)?;
            Ok(session.sync()?)
        })?;
        let launches = time_each(out, 1, replays.div_ceil(10).max(1), || {
            for _ in 0..k {
                session.launch_kernel(&kernel, ONE, &[])?;
            }
            Ok(session.sync()?)
        })?;
        out.line("graph_replay_ns", median(&replay));
        out.line("graph_launches_ns", median(&launches));
        Ok(())
    })
}

fn rw4k(out: &mut Out, n: u32) -> Step {
    let lease = acquire(out, MIB)?;
    let session = out.check(Session::open(&lease))?;
    let buf = out.check(session.mem_alloc(4096))?;
    let data = [0x5au8; 4096];
    let mut last = Vec::new();
    let times = time_each(out, WARMUP, n, || {
        session.mem_write(&buf, 0, &data)?;
        last = session.mem_read(&buf, 0, 4096)?;
        Ok(session.sync()?)
    })?;
    if last != data {
        out.error(
            "mismatch",
            "rw4k: the 4 KiB read back differ from what was written",
        );
        return Err(Stopped);
    }
    out.line("rw4k_ns", median(&times));
    out.line("rw4k_p99_ns", percentile(&times, 99.0));
    Ok(())
}

fn bulk(out: &mut Out, bytes: u64, reps: u32) -> Step {
    let Ok(len) = usize::try_from(bytes) else {
        out.error(
            "invalid-argument",
            "bulk: BYTES does not fit in guest memory",
        );
        return Err(Stopped);
    };
    let lease = acquire(out, bytes)?;
    let session = out.check(Session::open(&lease))?;
    let buf = out.check(session.mem_alloc(bytes))?;
    // A non-zero fill touches every page, so no page is first touched inside the timing.
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    out.settle();
    // Warm-up, and the correctness check: one full round trip, compared byte for byte. (The
    // list-returning read is checked in the loop; a returned list here too would hold a fourth
    // 256 MiB, past the default 1 GiB memory limit.)
    out.check(session.mem_write(&buf, 0, &data))?;
    out.check(session.sync())?;
    // The in-place read's destination, allocated (and every page touched) before the timing.
    let mut into = vec![0u8; len];
    out.check(tasklet_gpu::mem_read_into(&session, &buf, 0, &mut into))?;
    if into != data {
        out.error(
            "mismatch",
            "bulk: the data read in place differ from what was written",
        );
        return Err(Stopped);
    }
    // Sized up front: a figures Vec growing mid-loop would take its new block from the space the
    // freed returned list leaves, so the next 256 MiB list no longer fits there and memory grows
    // past the limit (seen at the fifth repetition).
    let reps_len = reps as usize;
    let (mut write, mut read, mut read_list) = (
        Vec::with_capacity(reps_len),
        Vec::with_capacity(reps_len),
        Vec::with_capacity(reps_len),
    );
    for _ in 0..reps {
        let start = Instant::now();
        let r = session
            .mem_write(&buf, 0, &data)
            .and_then(|()| session.sync());
        let t = start.elapsed();
        out.check(r)?;
        write.push(bytes as f64 / t.as_secs_f64());

        let start = Instant::now();
        let r = tasklet_gpu::mem_read_into(&session, &buf, 0, &mut into);
        let t = start.elapsed();
        out.check(r)?;
        read.push(bytes as f64 / t.as_secs_f64());

        let start = Instant::now();
        let r = session.mem_read(&buf, 0, bytes);
        let t = start.elapsed();
        let back = out.check(r)?;
        read_list.push(bytes as f64 / t.as_secs_f64());
        if back != data {
            out.error(
                "mismatch",
                "bulk: the data read back as a list differ from what was written",
            );
            return Err(Stopped);
        }
        drop(back); // untimed
    }
    out.line("bulk_bytes", bytes);
    out.line("bulk_write_bps", median_f64(write).round() as u64);
    out.line("bulk_read_bps", median_f64(read).round() as u64);
    out.line("bulk_read_list_bps", median_f64(read_list).round() as u64);
    Ok(())
}

fn lease(out: &mut Out, n: u32) -> Step {
    let request = || LeaseRequest {
        min_vram: MIB,
        secs: LEASE_SECS,
        device: None,
    };
    let mut acquire_ns = Vec::with_capacity(n as usize);
    let mut cycle_ns = Vec::with_capacity(n as usize);
    out.settle();
    for i in 0..WARMUP + n {
        let start = Instant::now();
        let r = Lease::acquire(request());
        let acquired = start.elapsed();
        let lease = out.check(r)?;
        drop(lease);
        let cycle = start.elapsed();
        if i >= WARMUP {
            acquire_ns.push(nanos(acquired));
            cycle_ns.push(nanos(cycle));
        }
    }
    acquire_ns.sort_unstable();
    cycle_ns.sort_unstable();
    out.line("lease_acquire_p50_ns", percentile(&acquire_ns, 50.0));
    out.line("lease_acquire_p99_ns", percentile(&acquire_ns, 99.0));
    out.line("lease_cycle_p50_ns", percentile(&cycle_ns, 50.0));
    out.line("lease_cycle_p99_ns", percentile(&cycle_ns, 99.0));
    Ok(())
}

fn module_load(out: &mut Out, n: u32) -> Step {
    with_empty_kernel(out, |out, session, _loaded| {
        let mut times = Vec::with_capacity(n as usize);
        out.settle();
        for i in 0..WARMUP.min(n) + n {
            let start = Instant::now();
            let r = session.module_load(FAULTS_PTX);
            let t = start.elapsed();
            let again = out.check(r)?;
            drop(again); // untimed: the first load stays loaded throughout
            if i >= WARMUP.min(n) {
                times.push(nanos(t));
            }
        }
        times.sort_unstable();
        out.line("module_load_ns", median(&times));
        out.line("module_load_p99_ns", percentile(&times, 99.0));
        Ok(())
    })
}

fn clock(out: &mut Out, n: u32) -> Step {
    out.settle();
    let mut batches = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let start = Instant::now();
        let mut last = start;
        for _ in 0..CLOCK_READS_PER_BATCH {
            last = std::hint::black_box(Instant::now());
        }
        batches.push(nanos(last - start));
    }
    batches.sort_unstable();
    let per_read = median(&batches) as f64 / f64::from(CLOCK_READS_PER_BATCH);
    out.line("clock_read_ns", format_args!("{per_read:.1}"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&v, 100.0), 100);
        assert_eq!(percentile(&[7], 99.0), 7);
        assert_eq!(percentile(&[], 50.0), 0);
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&[1, 2, 9]), 2);
        assert_eq!(median(&[1, 3, 5, 9]), 4);
        assert_eq!(median_f64(vec![3.0, 1.0, 2.0, 10.0]), 2.5);
    }

    #[test]
    fn bad_commands_and_arguments_are_errors() {
        assert!(run(b"frobnicate".to_vec())
            .unwrap_err()
            .starts_with("unknown command"));
        assert!(run(b"launch-sync".to_vec())
            .unwrap_err()
            .contains("needs a number"));
        assert!(run(b"rw4k 0".to_vec())
            .unwrap_err()
            .contains("not a positive number"));
        assert!(run(b"bulk 4096".to_vec())
            .unwrap_err()
            .contains("needs a number"));
        assert!(run(b"lease 3 settle=x".to_vec())
            .unwrap_err()
            .contains("\"x\" is not a number of milliseconds (settle=MS)"));
    }
}
