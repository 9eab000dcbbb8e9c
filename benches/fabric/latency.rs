//! The latency phase: the bare echo (the round-trip floor), launch + sync and 1,000-launch async
//! batches, local and remote, measured in many short rounds. Each round runs all three blocks
//! (echo, local pairs, remote pairs) in one of the six orders, so every path takes every
//! position equally often, then its async batches: a block of local ones and a block of remote
//! ones, which goes first alternating by round, each block's first batch untimed (as each block
//! of pairs follows untimed pairs). Load that comes and goes on the machine lands on the bound
//! (echo, local) and on the remote figure alike.
//!
//! The targets are read two ways, both printed: from the medians of all rounds' samples pooled
//! (the definition), and round by round (each round's remote figure against the bound
//! made of that round's own echo and local figures), whose median says how the paths compare
//! under the same load. Every round is printed.

use crate::rig::Rig;
use crate::session::Session;
use crate::stats::{median_duration, micros, spread, Samples, Want};
use crate::table::Table;
use crate::{bare, progress, us, Params, ASYNC_LAUNCHES, LATENCY_FACTOR};
use std::fmt::Write as _;
use std::time::Duration;

/// The three blocks of a round.
#[derive(Debug, Clone, Copy)]
enum Block {
    Echo,
    Local,
    Remote,
}

/// Every order of the three blocks; round `r` runs `ORDERS[r % 6]`.
const ORDERS: [[Block; 3]; 6] = [
    [Block::Echo, Block::Local, Block::Remote],
    [Block::Remote, Block::Echo, Block::Local],
    [Block::Local, Block::Remote, Block::Echo],
    [Block::Echo, Block::Remote, Block::Local],
    [Block::Local, Block::Echo, Block::Remote],
    [Block::Remote, Block::Local, Block::Echo],
];

/// One round's figures.
struct Round {
    rtt: Duration,
    local: Duration,
    remote: Duration,
    batch_local: Duration,
    batch_remote: Duration,
}

impl Round {
    /// Remote launch + sync against this round's bound.
    fn pair_ratio(&self) -> f64 {
        micros(self.remote) / (micros(self.rtt) + LATENCY_FACTOR * micros(self.local))
    }

    /// The remote async batch against this round's bound.
    fn batch_ratio(&self) -> f64 {
        micros(self.batch_remote) / (LATENCY_FACTOR * (micros(self.rtt) + micros(self.batch_local)))
    }
}

/// The node's GPU-thread time on LAUNCH and SYNC requests, and the SYNCs among them.
#[derive(Debug, Default, Clone, Copy)]
struct NodeTime {
    seconds: f64,
    syncs: u64,
}

impl NodeTime {
    fn read(rig: &Rig) -> NodeTime {
        let [(launch, _), (sync, syncs)] = rig.node_op_times(["LAUNCH", "SYNC"]);
        NodeTime {
            seconds: launch + sync,
            syncs,
        }
    }

    /// Adds what the node spent between two readings.
    fn add(&mut self, before: NodeTime, after: NodeTime) {
        self.seconds += after.seconds - before.seconds;
        self.syncs += after.syncs.saturating_sub(before.syncs);
    }

    /// The mean time per SYNC and the launches before it.
    fn per_sync(&self) -> Duration {
        Duration::from_secs_f64((self.seconds / self.syncs.max(1) as f64).max(0.0))
    }
}

/// Runs the phase; adds its rows to `table` and writes every round to `rounds`.
pub fn run(rig: &Rig, p: &Params, table: &mut Table, rounds: &mut String) -> Result<(), String> {
    progress(&format!(
        "latency: {} rounds of bare echo, local and remote launch + sync, async batches",
        p.rounds
    ));
    let setting = bare::Setting::fabric();
    let server = bare::Server::start(&rig.runtime, &rig.certs(), &setting)?;
    let echo = bare::Client::connect(server.addr()?, &rig.certs(), &setting)?;
    let mut local = Session::open(rig.local_gpu(), 1 << 20).map_err(|e| format!("local: {e}"))?;
    let mut remote =
        Session::open(rig.remote_gpu()?, 1 << 20).map_err(|e| format!("remote: {e}"))?;
    let (mut rtt, mut ls_local, mut ls_remote) =
        (Samples::default(), Samples::default(), Samples::default());
    let (mut batch_local, mut batch_remote) = (Vec::new(), Vec::new());
    let (mut posted_local, mut posted_remote) = (Vec::new(), Vec::new());
    // Each block's untimed first batch, right after the other path's block ([remote?]).
    let mut first_of_block: [Vec<Duration>; 2] = Default::default();
    // The node's GPU threads' own time (its gpu_op_seconds), summed over the remote turns:
    // what is left of a remote figure after it and the RTT is the hand-offs between threads.
    let mut node_pairs = NodeTime::default();
    let mut node_batches = NodeTime::default();
    let warmup = (p.pairs / 10).max(10);
    let mut per_round = Vec::with_capacity(p.rounds);
    for round in 0..p.rounds {
        let (mut r_rtt, mut r_local, mut r_remote) =
            (Samples::default(), Samples::default(), Samples::default());
        for block in ORDERS[round % ORDERS.len()] {
            match block {
                Block::Echo => r_rtt = echo.echo(warmup, p.pairs, p.budget, false)?,
                Block::Local => {
                    r_local = local.launch_sync(warmup, p.pairs, p.budget, Duration::ZERO)?
                }
                Block::Remote => {
                    let before = NodeTime::read(rig);
                    r_remote = remote.launch_sync(warmup, p.pairs, p.budget, Duration::ZERO)?;
                    node_pairs.add(before, NodeTime::read(rig));
                }
            }
        }
        let (mut r_batch_local, mut r_batch_remote) = (Vec::new(), Vec::new());
        // The node's time is read around all of the round's batches, not around each remote
        // one: only the remote batches use the node in between, and a reading (the node's
        // metrics rendered) right before a remote batch would leave the remote path's threads
        // that much longer to fall asleep than the local path's.
        let before_batches = NodeTime::read(rig);
        // Each path's batches in a block of their own, the block's first batch untimed, as
        // each block of pairs follows untimed pairs: every timed batch follows one of its own
        // path. The first batch pays for following the other path's block (its threads parked,
        // the GPU turning from the other lease's context); it is kept apart and printed.
        let remote_first = round % 2 == 1;
        for remote_turn in [remote_first, !remote_first] {
            for batch in 0..=p.batches {
                let (session, timed, posted) = if remote_turn {
                    (&mut remote, &mut r_batch_remote, &mut posted_remote)
                } else {
                    (&mut local, &mut r_batch_local, &mut posted_local)
                };
                let b = session.launch_batch(ASYNC_LAUNCHES)?;
                // Only a round's second block follows the other path's batches (its first
                // follows the round's pairs).
                if batch == 0 {
                    if remote_turn != remote_first {
                        first_of_block[usize::from(remote_turn)].push(b.total);
                    }
                } else {
                    timed.push(b.total);
                    posted.push(b.posted);
                }
            }
        }
        node_batches.add(before_batches, NodeTime::read(rig));
        per_round.push(Round {
            rtt: r_rtt.p50(),
            local: r_local.p50(),
            remote: r_remote.p50(),
            batch_local: median_duration(&r_batch_local),
            batch_remote: median_duration(&r_batch_remote),
        });
        rtt.extend(r_rtt);
        ls_local.extend(r_local);
        ls_remote.extend(r_remote);
        batch_local.extend(r_batch_local);
        batch_remote.extend(r_batch_remote);
    }
    drop(echo);
    drop(server);
    let rtt_p50 = rtt.p50();
    // The local path with its pairs as far apart as a remote client's: the worker has stopped
    // spinning and gone to sleep before each launch, as the node's worker has.
    let ls_idle = local.launch_sync(warmup, p.pairs / 2, p.budget, rtt_p50)?;

    table.info(
        "bare quinn echo RTT (floor)",
        format!("p50 {} · p99 {}", us(rtt_p50), us(rtt.p99())),
    );
    table.info(
        "local launch + sync (LocalGpu)",
        format!("p50 {} · p99 {}", us(ls_local.p50()), us(ls_local.p99())),
    );
    table.info(
        "local launch + sync, an RTT's sleep before each",
        format!("p50 {} · p99 {}", us(ls_idle.p50()), us(ls_idle.p99())),
    );
    let bound = micros(rtt_p50) + LATENCY_FACTOR * micros(ls_local.p50());
    table.check(
        "remote launch + sync p50 (RemoteGpu), all rounds pooled",
        format!("p50 {} · p99 {}", us(ls_remote.p50()), us(ls_remote.p99())),
        micros(ls_remote.p50()),
        Want::AtMost,
        bound,
        format!("≤ RTT + 1.2 × local = {bound:.1} µs"),
    );
    let pair_ratios: Vec<f64> = per_round.iter().map(Round::pair_ratio).collect();
    table.info(
        "remote launch + sync / its bound, round by round",
        spread(&pair_ratios, Want::AtMost),
    );
    table.info(
        "of which the node's GPU thread (gpu_op_seconds, mean)",
        format!("{} per launch + sync", us(node_pairs.per_sync())),
    );
    let (local_batch, remote_batch) = (
        median_duration(&batch_local),
        median_duration(&batch_remote),
    );
    table.info(
        "local 1,000 async launches + sync",
        format!(
            "{:.2} ms ({:.2} µs per launch)",
            micros(local_batch) / 1e3,
            micros(local_batch) / ASYNC_LAUNCHES as f64
        ),
    );
    table.info(
        "of which its 1,000 launches returning (median)",
        format!("{:.2} ms", micros(median_duration(&posted_local)) / 1e3),
    );
    let bound = LATENCY_FACTOR * (micros(rtt_p50) + micros(local_batch));
    table.check(
        "remote 1,000 async launches + sync, all rounds pooled",
        format!(
            "{:.2} ms ({:.2} µs per launch)",
            micros(remote_batch) / 1e3,
            micros(remote_batch) / ASYNC_LAUNCHES as f64
        ),
        micros(remote_batch),
        Want::AtMost,
        bound,
        format!("≤ 1.2 × (RTT + local) = {:.2} ms", bound / 1e3),
    );
    let batch_ratios: Vec<f64> = per_round.iter().map(Round::batch_ratio).collect();
    table.info(
        "remote 1,000 async launches / its bound, round by round",
        spread(&batch_ratios, Want::AtMost),
    );
    table.info(
        "of which its 1,000 launches returning at the client (median)",
        format!("{:.2} ms", micros(median_duration(&posted_remote)) / 1e3),
    );
    table.info(
        "of which the node's GPU thread (gpu_op_seconds, mean; each block's untimed batch too)",
        format!("{:.2} ms per batch", micros(node_batches.per_sync()) / 1e3),
    );
    let first = |batches: &[Duration]| match batches {
        [] => "—".to_owned(),
        _ => format!(
            "{:.2} ms ({})",
            micros(median_duration(batches)) / 1e3,
            batches.len()
        ),
    };
    table.info(
        "a block's untimed first batch, after the other path's block: remote / local",
        format!(
            "{} / {}",
            first(&first_of_block[1]),
            first(&first_of_block[0]),
        ),
    );

    let _ = writeln!(
        rounds,
        "| round | order | echo p50 | local p50 | remote p50 | ratio | local batch | remote batch | ratio |"
    );
    let _ = writeln!(
        rounds,
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for (i, r) in per_round.iter().enumerate() {
        let order: Vec<String> = ORDERS[i % ORDERS.len()]
            .iter()
            .map(|b| format!("{b:?}").to_lowercase())
            .collect();
        let _ = writeln!(
            rounds,
            "| {} | {} | {} | {} | {} | {:.2} | {:.2} ms | {:.2} ms | {:.2} |",
            i + 1,
            order.join(" → "),
            us(r.rtt),
            us(r.local),
            us(r.remote),
            r.pair_ratio(),
            micros(r.batch_local) / 1e3,
            micros(r.batch_remote) / 1e3,
            r.batch_ratio(),
        );
    }
    Ok(())
}
