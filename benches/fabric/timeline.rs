//! The timeline phase: where a remote launch + sync, and a remote 1,000-launch batch, spend
//! their time, stage by stage, beside the bare echo's.
//!
//! The node and its client mark each stage of a request's way with a TRACE event (the node's
//! `tasklet_node::TIMELINE`, the client's `tasklet_remote::TIMELINE`, the bare echo server's
//! [`TARGET`] here); this phase installs a subscriber that records when each came, runs echoes,
//! pairs and batches between markers of its own, and prints, for the commonest sequence of
//! stages, each stage's median time after the one before; batches back to back, and each after a
//! local batch (as the latency phase runs them); then bulk transfers: bare uploads beside remote
//! writes of the same size, where each side's reading stalled and what the node's GPU thread
//! spent on the pieces. Everything runs in this process, so the node's and the client's clocks
//! are one. Run last: once installed, the subscriber stays.

use crate::rig::Rig;
use crate::session::Session;
use crate::{bare, progress};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;

/// The benchmark's own markers, and the bare echo server's stages.
pub const TARGET: &str = "fabric::timeline";

/// Echoes, pairs and batches recorded.
const ECHOES: usize = 2000;
const PAIRS: usize = 2000;
const BATCHES: usize = 20;

/// Bulk transfers recorded each way.
const TRANSFERS: usize = 3;

/// A pause between two reads of a transfer's stream longer than this counts as a stall.
const STALL: Duration = Duration::from_micros(500);

/// The most events kept (a batch is about 2,100; a bare 256 MiB upload about 45,000).
const MOST_EVENTS: usize = 1 << 20;

/// One recorded event: when, and which stage (its callsite's name and target).
#[derive(Clone, Copy)]
struct Mark {
    at: Instant,
    what: &'static Metadata<'static>,
}

impl Mark {
    fn stage(&self) -> String {
        let side = match self.what.target() {
            tasklet_node::TIMELINE => "node",
            tasklet_remote::TIMELINE => "client",
            _ => "bench",
        };
        format!("{side} {}", self.what.name())
    }
}

/// Records the timeline events while switched on.
#[derive(Clone, Default)]
struct Recorder {
    on: Arc<AtomicBool>,
    marks: Arc<Mutex<Vec<Mark>>>,
}

fn timeline_target(target: &str) -> bool {
    target == tasklet_node::TIMELINE || target == tasklet_remote::TIMELINE || target == TARGET
}

impl<S: Subscriber> Layer<S> for Recorder {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if !self.on.load(Ordering::Relaxed) {
            return;
        }
        let at = Instant::now();
        let mut marks = self.marks.lock().unwrap_or_else(PoisonError::into_inner);
        if marks.len() < MOST_EVENTS {
            marks.push(Mark {
                at,
                what: event.metadata(),
            });
        }
    }
}

impl Recorder {
    /// Runs `f` with recording on; the marks it left.
    fn record<T>(&self, f: impl FnOnce() -> T) -> (T, Vec<Mark>) {
        self.marks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        self.on.store(true, Ordering::SeqCst);
        let out = f();
        self.on.store(false, Ordering::SeqCst);
        let marks = std::mem::take(&mut *self.marks.lock().unwrap_or_else(PoisonError::into_inner));
        (out, marks)
    }
}

/// Marks the start of one timed unit (an echo, a pair, a batch).
pub fn begin() {
    tracing::trace!(name: "begin", target: TARGET, "");
}

/// Marks its end.
pub fn end() {
    tracing::trace!(name: "end", target: TARGET, "");
}

pub fn run(rig: &Rig, bulk_bytes: u64, out: &mut String) -> Result<(), String> {
    progress("timeline: echoes, pairs and batches with each stage marked");
    let recorder = Recorder::default();
    let filtered = recorder
        .clone()
        .with_filter(tracing_subscriber::filter::filter_fn(|m| {
            timeline_target(m.target())
        }));
    tracing_subscriber::registry()
        .with(filtered)
        .try_init()
        .map_err(|e| format!("cannot install the timeline's subscriber: {e}"))?;

    let setting = bare::Setting::fabric();
    let server = bare::Server::start(&rig.runtime, &rig.certs(), &setting)?;
    let echo = bare::Client::connect(server.addr()?, &rig.certs(), &setting)?;
    let mut remote =
        Session::open(rig.remote_gpu()?, 1 << 20).map_err(|e| format!("remote: {e}"))?;
    // Warm both paths before recording.
    echo.echo(100, 0, Duration::from_secs(5), false)?;
    remote.launch_sync(100, 0, Duration::from_secs(5), Duration::ZERO)?;
    remote.launch_batch(crate::ASYNC_LAUNCHES)?;

    let (echoed, marks) = recorder.record(|| echo.echo(0, ECHOES, Duration::from_secs(10), true));
    echoed?;
    writeln!(out, "bare echo, {ECHOES} round trips:").unwrap();
    out.push_str(&sequences(&units(&marks)));
    let (paired, marks) =
        recorder.record(|| remote.launch_sync_marked(PAIRS, Duration::from_secs(10)));
    paired?;
    writeln!(out, "remote launch + sync, {PAIRS} pairs:").unwrap();
    out.push_str(&sequences(&units(&marks)));
    let marks = record_batches(&recorder, &mut remote, None)?;
    writeln!(
        out,
        "remote {} async launches + sync, {BATCHES} batches back to back:",
        crate::ASYNC_LAUNCHES
    )
    .unwrap();
    out.push_str(&batches(&units(&marks)));
    out.push_str(&between(&marks));
    // As the latency phase runs them: each remote batch after a local one, during which the
    // remote path's threads have nothing to do.
    let mut local = Session::open(rig.local_gpu(), 1 << 20).map_err(|e| format!("local: {e}"))?;
    let marks = record_batches(&recorder, &mut remote, Some(&mut local))?;
    writeln!(
        out,
        "remote {} async launches + sync, {BATCHES} batches, each after a local batch:",
        crate::ASYNC_LAUNCHES
    )
    .unwrap();
    out.push_str(&batches(&units(&marks)));
    out.push_str(&between(&marks));
    drop((remote, local));
    bulk(rig, bulk_bytes, &recorder, &echo, out)
}

/// [`TRANSFERS`] bare uploads under the fabric's settings, then as many remote writes of the
/// same size, recorded: for each, where its reading side stalled and where the time went.
fn bulk(
    rig: &Rig,
    bytes: u64,
    recorder: &Recorder,
    bare: &bare::Client,
    out: &mut String,
) -> Result<(), String> {
    let budget = Duration::from_secs(120);
    let data = crate::pattern(bytes);
    let mut remote =
        Session::open(rig.remote_gpu()?, bytes + crate::MIB).map_err(|e| format!("remote: {e}"))?;
    // Warm both: the first transfer of a connection grows its windows and finds its datagrams.
    bare.upload(bytes, 1, budget)?;
    remote.bulk_write(&data)?;
    let mib = bytes / crate::MIB;
    let (marks, faults) = record_transfers(recorder, || bare.upload(bytes, 1, budget).map(drop))?;
    writeln!(
        out,
        "bare upload of {mib} MiB under the fabric's settings, {TRANSFERS} transfers:"
    )
    .unwrap();
    out.push_str(&transfers(&units(&marks), "bench server-upload-read"));
    writeln!(out, "  page faults (this process): {faults:?}").unwrap();
    let (marks, faults) = record_transfers(recorder, || remote.bulk_write(&data).map(drop))?;
    writeln!(
        out,
        "remote write of {mib} MiB + sync, {TRANSFERS} transfers:"
    )
    .unwrap();
    out.push_str(&transfers(&units(&marks), "node read"));
    writeln!(out, "  page faults (this process): {faults:?}").unwrap();
    Ok(())
}

/// [`TRANSFERS`] runs of `transfer`, each between the markers, recorded: their marks, and the
/// process's page faults during each.
fn record_transfers(
    recorder: &Recorder,
    mut transfer: impl FnMut() -> Result<(), String>,
) -> Result<(Vec<Mark>, Vec<u64>), String> {
    let mut faults = Vec::new();
    let (done, marks) = recorder.record(|| {
        (0..TRANSFERS).try_for_each(|_| {
            let before = minor_faults();
            begin();
            let done = transfer();
            end();
            faults.push(minor_faults().saturating_sub(before));
            done
        })
    });
    done.map(|()| (marks, faults))
}

/// The process's minor page faults so far (`/proc/self/stat`'s tenth field; 0 where unread).
fn minor_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(7))
        .and_then(|field| field.parse().ok())
        .unwrap_or(0)
}

/// For transfers: the reading side's reads (`reads`, the stage of each read of the stream),
/// the pauses between them longer than [`STALL`], the time spent inside each pair of stages
/// that brackets work (the node's reader waiting for queue budget, its GPU thread gathering
/// each piece and writing it), and each stage's first and last time and count; medians over
/// the transfers.
fn transfers(units: &[(Instant, Vec<Mark>, Duration)], reads: &str) -> String {
    let mut out = String::new();
    let mut stalls = Vec::new();
    let mut stalled = Vec::new();
    let mut longest = Vec::new();
    let mut reading = Vec::new();
    for (start, inside, _) in units {
        let at: Vec<Instant> = inside
            .iter()
            .filter(|m| m.stage() == reads)
            .map(|m| m.at)
            .collect();
        let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
        let long: Vec<Duration> = gaps.iter().copied().filter(|g| *g > STALL).collect();
        stalls.push(Duration::from_nanos(long.len() as u64));
        stalled.push(long.iter().sum::<Duration>());
        longest.push(gaps.iter().max().copied().unwrap_or_default());
        reading.push(at.first().map_or(Duration::ZERO, |first| *first - *start));
    }
    writeln!(
        out,
        "  all: median {}; the first read {} in; {} pauses between reads over {} (median), {} in all, the longest {}",
        ms(median(units.iter().map(|u| u.2).collect())),
        us(median(reading)),
        median(stalls).as_nanos(),
        us(STALL),
        ms(median(stalled)),
        ms(median(longest)),
    )
    .unwrap();
    for (from, to, what) in [
        (
            "node budget-wait",
            "node budget-got",
            "the node's reader waiting for queue budget",
        ),
        (
            "node taken",
            "node piece-gathered",
            "the GPU thread gathering pieces",
        ),
        (
            "node piece-gathered",
            "node piece-written",
            "the GPU thread writing pieces",
        ),
    ] {
        let (mut counts, mut sums) = (Vec::new(), Vec::new());
        for (_, inside, _) in units {
            let (count, sum) = bracketed(inside, from, to);
            counts.push(Duration::from_nanos(count));
            sums.push(sum);
        }
        if median(counts.clone()).is_zero() {
            continue;
        }
        writeln!(
            out,
            "  {what}: {} in all over {} spans",
            ms(median(sums)),
            median(counts).as_nanos()
        )
        .unwrap();
    }
    out.push_str(&batches(units));
    out
}

/// How many `to` marks follow a `from` (with no other `to` between), and the time from the last
/// `from` before each `to` to it, summed.
fn bracketed(marks: &[Mark], from: &str, to: &str) -> (u64, Duration) {
    let (mut count, mut sum) = (0, Duration::ZERO);
    let mut open: Option<Instant> = None;
    for mark in marks {
        let stage = mark.stage();
        if stage == from {
            open = Some(mark.at);
        } else if stage == to {
            if let Some(since) = open.take() {
                count += 1;
                sum += mark.at - since;
            }
        }
    }
    (count, sum)
}

/// [`BATCHES`] remote batches, each between the markers and after a local batch on `before` if
/// given: the marks they left.
fn record_batches(
    recorder: &Recorder,
    remote: &mut Session,
    mut before: Option<&mut Session>,
) -> Result<Vec<Mark>, String> {
    let (batched, marks) = recorder.record(|| {
        (0..BATCHES).try_for_each(|_| {
            if let Some(local) = before.as_mut() {
                local.launch_batch(crate::ASYNC_LAUNCHES)?;
            }
            begin();
            let batch = remote.launch_batch(crate::ASYNC_LAUNCHES);
            end();
            batch.map(|_| ())
        })
    });
    batched.map(|()| marks)
}

/// The marks between each `begin` and its `end`, without those two, and the unit's time.
fn units(marks: &[Mark]) -> Vec<(Instant, Vec<Mark>, Duration)> {
    let mut units = Vec::new();
    let mut open: Option<(Instant, Vec<Mark>)> = None;
    for mark in marks {
        let bench = mark.what.target() == TARGET;
        match (bench, mark.what.name()) {
            (true, "begin") => open = Some((mark.at, Vec::new())),
            (true, "end") => {
                if let Some((start, inside)) = open.take() {
                    units.push((start, inside, mark.at - start));
                }
            }
            _ => {
                if let Some((_, inside)) = open.as_mut() {
                    inside.push(*mark);
                }
            }
        }
    }
    units
}

/// The marks between one unit's end and the next one's begin (the hot waits that stopped while
/// the local batch ran, say): how many of each stage, and when after the unit's end (median).
fn between(marks: &[Mark]) -> String {
    let mut after: HashMap<String, Vec<Duration>> = HashMap::new();
    let mut ended: Option<Instant> = None;
    for mark in marks {
        match (mark.what.target() == TARGET, mark.what.name()) {
            (true, "begin") => ended = None,
            (true, "end") => ended = Some(mark.at),
            _ => {
                if let Some(end) = ended {
                    after.entry(mark.stage()).or_default().push(mark.at - end);
                }
            }
        }
    }
    let mut stages: Vec<_> = after.into_iter().collect();
    stages.sort_by_key(|(_, at)| median(at.clone()));
    let mut out = String::from("  between the batches (after one's end, before the next's begin):");
    if stages.is_empty() {
        out.push_str(" nothing");
    }
    out.push('\n');
    for (stage, at) in stages {
        writeln!(
            out,
            "    {stage}: {} times, median {} after the end",
            at.len(),
            us(median(at))
        )
        .unwrap();
    }
    out
}

fn median(mut values: Vec<Duration>) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    values.sort();
    values[values.len() / 2]
}

fn us(d: Duration) -> String {
    format!("{:.2} µs", d.as_secs_f64() * 1e6)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// For the commonest sequences of stages (at most three), how many units took it, and each
/// stage's median time after the one before.
fn sequences(units: &[(Instant, Vec<Mark>, Duration)]) -> String {
    let mut by_sequence: HashMap<Vec<String>, Vec<usize>> = HashMap::new();
    for (i, (_, inside, _)) in units.iter().enumerate() {
        let stages = inside.iter().map(Mark::stage).collect();
        by_sequence.entry(stages).or_default().push(i);
    }
    let mut common: Vec<_> = by_sequence.into_iter().collect();
    common.sort_by_key(|(_, members)| std::cmp::Reverse(members.len()));
    let mut out = String::new();
    writeln!(
        out,
        "  all: median {} ({} units, {} sequences of stages)",
        us(median(units.iter().map(|u| u.2).collect())),
        units.len(),
        common.len()
    )
    .unwrap();
    for (stages, members) in common.iter().take(3) {
        writeln!(
            out,
            "  {} units ({:.0} %), median {}:",
            members.len(),
            100.0 * members.len() as f64 / units.len().max(1) as f64,
            us(median(members.iter().map(|&i| units[i].2).collect()))
        )
        .unwrap();
        let mut previous = "bench begin".to_string();
        for (k, stage) in stages.iter().enumerate() {
            let gaps = members
                .iter()
                .map(|&i| {
                    let (start, inside, _) = &units[i];
                    let before = if k == 0 { *start } else { inside[k - 1].at };
                    inside[k].at - before
                })
                .collect();
            writeln!(out, "    {previous} → {stage}: {}", us(median(gaps))).unwrap();
            previous = stage.clone();
        }
        let last = members
            .iter()
            .map(|&i| {
                let (start, inside, total) = &units[i];
                (*start + *total) - inside.last().map_or(*start, |m| m.at)
            })
            .collect();
        writeln!(out, "    {previous} → bench end: {}", us(median(last))).unwrap();
    }
    out
}

/// For batches: when (after the batch's start) the first and last of each stage came, medians
/// over the batches, in the order of the first; and the node's GPU thread's idle time inside a
/// batch (from a `done` that ended what it had taken to its next `taken`).
fn batches(units: &[(Instant, Vec<Mark>, Duration)]) -> String {
    let mut firsts: HashMap<String, Vec<Duration>> = HashMap::new();
    let mut lasts: HashMap<String, Vec<Duration>> = HashMap::new();
    let mut counts: HashMap<String, Vec<usize>> = HashMap::new();
    let mut idle = Vec::new();
    for (start, inside, _) in units {
        let mut seen: HashMap<String, (Duration, Duration, usize)> = HashMap::new();
        let mut waiting_since: Option<Instant> = None;
        let mut gpu_idle = Duration::ZERO;
        for (k, mark) in inside.iter().enumerate() {
            let stage = mark.stage();
            let at = mark.at - *start;
            let entry = seen.entry(stage.clone()).or_insert((at, at, 0));
            entry.1 = at;
            entry.2 += 1;
            match stage.as_str() {
                "node done" => {
                    // The GPU thread goes back to its queue when the next of its marks is not
                    // another `done`.
                    let next_done = inside[k + 1..]
                        .iter()
                        .map(Mark::stage)
                        .find(|s| s == "node done" || s == "node taken");
                    if next_done.as_deref() != Some("node done") {
                        waiting_since = Some(mark.at);
                    }
                }
                "node taken" => {
                    if let Some(since) = waiting_since.take() {
                        gpu_idle += mark.at - since;
                    }
                }
                _ => {}
            }
        }
        idle.push(gpu_idle);
        for (stage, (first, last, count)) in seen {
            firsts.entry(stage.clone()).or_default().push(first);
            lasts.entry(stage.clone()).or_default().push(last);
            counts.entry(stage).or_default().push(count);
        }
    }
    let mut stages: Vec<(String, Duration)> = firsts
        .iter()
        .map(|(stage, at)| (stage.clone(), median(at.clone())))
        .collect();
    stages.sort_by_key(|(_, at)| *at);
    let mut out = String::new();
    writeln!(
        out,
        "  all: median {} ({} batches); the node's GPU thread idle inside a batch: median {}",
        us(median(units.iter().map(|u| u.2).collect())),
        units.len(),
        us(median(idle))
    )
    .unwrap();
    for (stage, first) in stages {
        let mut n = counts[&stage].clone();
        n.sort_unstable();
        writeln!(
            out,
            "    {stage}: first at {}, last at {} (median count {})",
            us(first),
            us(median(lasts[&stage].clone())),
            n[n.len() / 2]
        )
        .unwrap();
    }
    out
}
