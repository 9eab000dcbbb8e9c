//! The fabric benchmark: a node served from this process, reached over loopback through
//! `tasklet_remote`, side by side in one run with the same GPU operations on a local host and
//! with bare quinn (the node's TLS, none of its protocol) as the floor. Prints the machine, then
//! a Markdown table of each figure, its target, the ratio to the target's bound and whether it
//! is met, then the bare transfers under each transport setting tried (docs/performance.md,
//! "Fabric", says how to read it).
//!
//! | row | measured | target |
//! | --- | --- | --- |
//! | launch + sync | p50 of empty-kernel launch + sync, remote | ≤ bare echo RTT p50 + 1.2 × local p50 |
//! | 1,000 async launches + sync | median batch, remote | ≤ 1.2 × (RTT + local batch) |
//! | 256 MiB write / read | median, remote (write + sync; read) | ≥ 0.8 × best bare quinn upload / download; ≥ 1 GB/s |
//! | deploy run, node side | p50 of the node's instantiate + call of a tiny deployed tasklet | ≤ 50 µs |
//! | deploy runs/s | tiny runs over one connection, the better of one at a time and pipelined | ≥ 2,000/s |
//! | 64 clients | launch + sync loops, each client its own connection and lease | no error; p99 ≤ 5 × p50 |
//!
//! Local and remote take turns within each round (A/B, then B/A); each loop is bounded in count
//! and in time. Loopback only: the node listens on 127.0.0.1.
//!
//! ```text
//! cargo bench -p tasklet-benches --bench fabric [-- OPTIONS]
//! target/release/deps/fabric-<hash> [OPTIONS]          (prebuilt)
//!
//!   --backend auto|emu|cuda  the hosts' backend (default auto: cuda where a worker finds a
//!                            device, else emu)
//!   --commit HASH            the commit to name on the machine line (default: TASKLET_COMMIT,
//!                            else `git rev-parse --short HEAD` of the checkout)
//!   --quick                  small counts, 32 MiB transfers, 8 clients: checks the program
//!   --rounds R               rounds of local/remote turns (default 3)
//!   --bulk-bytes B           bytes of the bulk transfers (default 268435456)
//!   --clients N              concurrent clients (default 64)
//!   --lanes L                runs in flight in the pipelined deploy series (default 4)
//!   --pairs N                timed launch + sync pairs (and echoes) per path per round
//!                            (default 2000)
//!   --batches N              async batches per path per round (default 5)
//!   --only P[,P…]            only these phases: latency, bulk, deploy, crowd (default all; for
//!                            profiling one)
//! ```
//!
//! The program is its own GPU worker (`fabric worker …`, as the hosts start it). Environment:
//! `TASKLET_REPO` (the checkout holding `tasklets/` and its built components; default: where
//! this was built). Exit status 0 when every figure was measured, whether or not its target is
//! met; 1 when a measurement failed (its row says why); 2 for bad arguments.

mod bare;
mod crowd;
mod deploy;
mod machine;
mod pipelined;
mod rig;
mod session;
mod stats;
mod table;

use bare::Setting;
use rig::Rig;
use session::Session;
use stats::{median, median_duration, micros, rate, Samples};
use std::process::ExitCode;
use std::time::Duration;
use table::{Table, Want};
use tasklet_runtime::gpu::GpuService;
use tasklet_runtime::{BackendKind, Policy, WorkerCommand};

const MIB: u64 = 1 << 20;

/// Launches in an async batch (the issue's figure).
const ASYNC_LAUNCHES: usize = 1000;

/// The targets.
const LATENCY_FACTOR: f64 = 1.2;
const BULK_SHARE: f64 = 0.8;
const BULK_FLOOR: f64 = 1e9;
const DEPLOY_NODE_P50: Duration = Duration::from_micros(50);
const DEPLOY_RUNS_PER_SECOND: f64 = 2000.0;
const CROWD_TAIL: f64 = 5.0;

#[derive(Debug, Clone)]
struct Params {
    rounds: usize,
    /// Timed pairs per path per round (echo, launch + sync).
    pairs: usize,
    /// Async batches per path per round.
    batches: usize,
    bulk_bytes: u64,
    bulk_reps: usize,
    deploy_runs: usize,
    lanes: usize,
    clients: usize,
    crowd_pairs: usize,
    /// The longest any one timed loop runs.
    budget: Duration,
}

impl Params {
    fn full() -> Params {
        Params {
            rounds: 3,
            pairs: 2000,
            batches: 5,
            bulk_bytes: 256 * MIB,
            bulk_reps: 3,
            deploy_runs: 3000,
            lanes: 4,
            clients: 64,
            crowd_pairs: 200,
            budget: Duration::from_secs(20),
        }
    }

    fn quick() -> Params {
        Params {
            rounds: 1,
            pairs: 200,
            batches: 2,
            bulk_bytes: 32 * MIB,
            bulk_reps: 1,
            deploy_runs: 200,
            lanes: 4,
            clients: 8,
            crowd_pairs: 50,
            budget: Duration::from_secs(5),
        }
    }
}

/// The phases, in the order they run.
const PHASES: [&str; 4] = ["latency", "bulk", "deploy", "crowd"];

struct Options {
    params: Params,
    /// The phases to run, of [`PHASES`].
    only: Vec<String>,
    /// `None`: cuda if a worker finds a device, else emu.
    backend: Option<BackendKind>,
    commit: Option<String>,
}

fn usage() -> &'static str {
    "usage: fabric [--backend auto|emu|cuda] [--commit HASH] [--quick] [--rounds R] [--bulk-bytes B] [--clients N] [--lanes L] [--pairs N] [--batches N] [--only latency,bulk,deploy,crowd]"
}

fn parse_options() -> Result<Options, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut quick = false;
    let mut backend = None;
    let mut commit = None;
    let mut only: Vec<String> = PHASES.iter().map(|p| p.to_string()).collect();
    let (mut rounds, mut bulk, mut clients, mut lanes) = (None, None, None, None);
    let (mut pairs, mut batches) = (None, None);
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value\n{}", usage()))
        };
        match arg.as_str() {
            "--quick" => quick = true,
            "--backend" => {
                backend = match value("--backend")?.as_str() {
                    "auto" => None,
                    v => Some(
                        BackendKind::parse(v)
                            .ok_or_else(|| format!("--backend: {v:?} is not auto, emu or cuda"))?,
                    ),
                }
            }
            "--commit" => commit = Some(value("--commit")?),
            "--only" => {
                only = value("--only")?.split(',').map(str::to_owned).collect();
                if let Some(bad) = only.iter().find(|p| !PHASES.contains(&p.as_str())) {
                    return Err(format!(
                        "--only: {bad:?} is not one of {}",
                        PHASES.join(", ")
                    ));
                }
            }
            "--rounds" => rounds = Some(positive(&value("--rounds")?, "--rounds")?),
            "--bulk-bytes" => bulk = Some(positive(&value("--bulk-bytes")?, "--bulk-bytes")?),
            "--clients" => clients = Some(positive(&value("--clients")?, "--clients")?),
            "--lanes" => lanes = Some(positive(&value("--lanes")?, "--lanes")?),
            "--pairs" => pairs = Some(positive(&value("--pairs")?, "--pairs")?),
            "--batches" => batches = Some(positive(&value("--batches")?, "--batches")?),
            // `cargo bench` passes `--bench` to every bench program.
            "--bench" => {}
            "-h" | "--help" => {
                println!("{}", usage());
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}\n{}", usage())),
        }
    }
    let mut params = if quick {
        Params::quick()
    } else {
        Params::full()
    };
    params.rounds = rounds.unwrap_or(params.rounds);
    params.bulk_bytes = bulk.map_or(params.bulk_bytes, |b| b as u64);
    params.clients = clients.unwrap_or(params.clients);
    params.lanes = lanes.unwrap_or(params.lanes);
    params.pairs = pairs.unwrap_or(params.pairs);
    params.batches = batches.unwrap_or(params.batches);
    Ok(Options {
        params,
        only,
        backend,
        commit,
    })
}

fn positive(text: &str, name: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(v) if v > 0 => Ok(v),
        _ => Err(format!("{name}: {text:?} is not a positive number")),
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().is_some_and(|a| a == "worker") {
        args.next();
        return ExitCode::from(tasklet_worker::serve_main(args) as u8);
    }
    let options = match parse_options() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let worker = match std::env::current_exe() {
        Ok(program) => WorkerCommand {
            program,
            args: vec!["worker".into()],
        },
        Err(e) => {
            eprintln!("cannot find this program to run it as the worker: {e}");
            return ExitCode::FAILURE;
        }
    };
    let backend = options
        .backend
        .unwrap_or_else(|| match tasklet_worker::probe_cuda(&worker) {
            Ok(_) => BackendKind::Cuda,
            Err(why) => {
                progress(&format!("no CUDA device ({why}): the emulator"));
                BackendKind::Emu
            }
        });
    let p = &options.params;
    let rig = match Rig::start(backend, worker, policy(p, backend)) {
        Ok(rig) => rig,
        Err(e) => {
            eprintln!("cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    let device = device_name(&rig);
    println!(
        "machine: {} ({} cores, load {} at the start), {}, commit {}, backend {}{}",
        machine::cpu(),
        machine::cores(),
        machine::load(),
        machine::date(),
        machine::commit(options.commit.as_deref(), &tasklet_tests::repo()),
        backend.as_str(),
        device.map_or(String::new(), |d| format!(" ({d})")),
    );
    println!(
        "node on 127.0.0.1 in this process (2 runtime threads, as `tasklet node`); {} rounds, {} MiB transfers, {} clients",
        p.rounds,
        p.bulk_bytes / MIB,
        p.clients
    );
    println!();

    let mut table = Table::default();
    let mut settings = String::new();
    let mut ok = true;
    let runs = |phase: &str| options.only.iter().any(|o| o == phase);
    if runs("latency") {
        if let Err(e) = latency(&rig, p, &mut table) {
            table.failed("launch + sync, async batches", &e);
            ok = false;
        }
    }
    if runs("bulk") {
        if let Err(e) = bulk(&rig, p, &mut table, &mut settings) {
            table.failed("256 MiB write and read", &e);
            ok = false;
        }
    }
    if runs("deploy") {
        if let Err(e) = deployed(&rig, p, &mut table) {
            table.failed("deploy run", &e);
            ok = false;
        }
    }
    if runs("crowd") {
        crowd(&rig, p, &mut table);
    }
    if let Err(e) = rig.stop() {
        eprintln!("{e}");
        ok = false;
    }

    print!("{}", table.markdown());
    let (met, checked) = table.targets();
    println!();
    println!("{met} of {checked} targets met");
    if !settings.is_empty() {
        println!();
        println!(
            "bare quinn transfers of {} MiB (median of {}), client ↔ server on loopback, same TLS:",
            p.bulk_bytes / MIB,
            p.bulk_reps
        );
        print!("{settings}");
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Both hosts' policy: room for every client's lease and the bulk transfers' buffers.
fn policy(p: &Params, backend: BackendKind) -> Policy {
    let mut policy = Policy::default();
    policy.workers.warm = 2;
    policy.workers.max = p.clients + 4;
    let needed = 2 * (p.bulk_bytes + MIB) + p.clients as u64 * MIB;
    if backend == BackendKind::Emu {
        policy.workers.emu_memory = needed.max(1 << 30);
    }
    policy
}

fn device_name(rig: &Rig) -> Option<String> {
    rig.local_gpu().devices().into_iter().next().map(|d| d.name)
}

fn progress(what: &str) {
    eprintln!("fabric: {what}");
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", micros(d))
}

fn gbps(bytes_per_second: f64) -> String {
    format!("{:.2} GB/s", bytes_per_second / 1e9)
}

/// The round-trip floor, launch + sync and async batches, local and remote in turns.
fn latency(rig: &Rig, p: &Params, table: &mut Table) -> Result<(), String> {
    progress("latency: bare echo, launch + sync, async batches (local and remote in turns)");
    let setting = Setting::fabric();
    let server = bare::Server::start(&rig.runtime, &rig.certs(), &setting)?;
    let echo = bare::Client::connect(server.addr()?, &rig.certs(), &setting)?;
    let mut local = Session::open(rig.local_gpu(), MIB).map_err(|e| format!("local: {e}"))?;
    let mut remote = Session::open(rig.remote_gpu()?, MIB).map_err(|e| format!("remote: {e}"))?;
    let (mut rtt, mut ls_local, mut ls_remote) =
        (Samples::default(), Samples::default(), Samples::default());
    let (mut batch_local, mut batch_remote) = (Vec::new(), Vec::new());
    // The node's GPU threads' own time (its gpu_op_seconds), summed over the remote turns:
    // what is left of a remote figure after it and the RTT is the hand-offs between threads.
    let mut node_pairs = NodeTime::default();
    let mut node_batches = NodeTime::default();
    let warmup = p.pairs / 10;
    for round in 0..p.rounds {
        rtt.extend(echo.echo(warmup, p.pairs, p.budget)?);
        let mut turn = |local_first: bool| -> Result<(), String> {
            for remote_turn in [!local_first, local_first] {
                if remote_turn {
                    let before = NodeTime::read(rig);
                    ls_remote.extend(remote.launch_sync(
                        warmup,
                        p.pairs,
                        p.budget,
                        Duration::ZERO,
                    )?);
                    node_pairs.add(before, NodeTime::read(rig));
                } else {
                    ls_local.extend(local.launch_sync(
                        warmup,
                        p.pairs,
                        p.budget,
                        Duration::ZERO,
                    )?);
                }
            }
            Ok(())
        };
        turn(round % 2 == 0)?;
        for batch in 0..p.batches {
            let order = if (round + batch) % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for remote_turn in order {
                if remote_turn {
                    let before = NodeTime::read(rig);
                    batch_remote.push(remote.launch_batch(ASYNC_LAUNCHES)?);
                    node_batches.add(before, NodeTime::read(rig));
                } else {
                    batch_local.push(local.launch_batch(ASYNC_LAUNCHES)?);
                }
            }
        }
    }
    drop(echo);
    drop(server);
    let rtt_p50 = rtt.p50();
    // The local path with its pairs as far apart as a remote client's: the worker has stopped
    // spinning and gone to sleep before each launch, as the node's worker has.
    let ls_idle = local.launch_sync(warmup, p.pairs / 4, p.budget, rtt_p50)?;

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
        "remote launch + sync p50 (RemoteGpu)",
        format!("p50 {} · p99 {}", us(ls_remote.p50()), us(ls_remote.p99())),
        micros(ls_remote.p50()),
        Want::AtMost,
        bound,
        format!("≤ RTT + 1.2 × local = {bound:.1} µs"),
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
    let bound = LATENCY_FACTOR * (micros(rtt_p50) + micros(local_batch));
    table.check(
        "remote 1,000 async launches + sync",
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
    table.info(
        "of which the node's GPU thread (gpu_op_seconds, mean)",
        format!("{:.2} ms per batch", micros(node_batches.per_sync()) / 1e3),
    );
    Ok(())
}

/// The node's GPU-thread time on LAUNCH and SYNC requests, and the SYNCs among them.
#[derive(Debug, Default, Clone, Copy)]
struct NodeTime {
    seconds: f64,
    syncs: u64,
}

impl NodeTime {
    fn read(rig: &Rig) -> NodeTime {
        let (launch, _) = rig.node_op_time("LAUNCH");
        let (sync, syncs) = rig.node_op_time("SYNC");
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

/// A pattern that a misplaced or missing piece would not reproduce.
fn pattern(len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i ^ (i >> 11) ^ (i >> 23)) as u8)
        .collect()
}

/// Bare transfers under every setting; remote and local write and read.
fn bulk(rig: &Rig, p: &Params, table: &mut Table, settings: &mut String) -> Result<(), String> {
    use std::fmt::Write as _;
    let bytes = p.bulk_bytes;
    let mut best_up: (f64, &str) = (0.0, "");
    let mut best_down: (f64, &str) = (0.0, "");
    // The bare transfer with the settings the fabric itself runs with.
    let mut as_fabric = None;
    let fabric = Setting::fabric();
    let all = Setting::all();
    let _ = writeln!(settings, "| setting | upload | download |");
    let _ = writeln!(settings, "| --- | ---: | ---: |");
    for setting in &all {
        progress(&format!("bulk: bare quinn, {}", setting.name));
        let transfers = || -> Result<(f64, f64), String> {
            let server = bare::Server::start(&rig.runtime, &rig.certs(), setting)?;
            let client = bare::Client::connect(server.addr()?, &rig.certs(), setting)?;
            let (mut ups, mut downs) = (Vec::new(), Vec::new());
            for _ in 0..p.bulk_reps {
                ups.push(rate(
                    bytes,
                    client.upload(bytes, setting.streams, p.budget)?,
                ));
                downs.push(rate(
                    bytes,
                    client.download(bytes, setting.streams, p.budget)?,
                ));
            }
            Ok((median(&ups), median(&downs)))
        };
        let (up, down) = match transfers() {
            Ok(rates) => rates,
            Err(e) => {
                let _ = writeln!(settings, "| {} | failed: {e} | |", setting.name);
                continue;
            }
        };
        let _ = writeln!(
            settings,
            "| {} | {} | {} |",
            setting.name,
            gbps(up),
            gbps(down)
        );
        if setting.name == fabric.name {
            as_fabric = Some((up, down));
        }
        if up > best_up.0 {
            best_up = (up, setting.name);
        }
        if down > best_down.0 {
            best_down = (down, setting.name);
        }
    }

    progress("bulk: remote and local write and read");
    let data = pattern(bytes);
    let measure = |gpu: Box<dyn GpuService>, what: &str| -> Result<(f64, f64), String> {
        let mut session = Session::open(gpu, bytes + MIB).map_err(|e| format!("{what}: {e}"))?;
        let (mut writes, mut reads) = (Vec::new(), Vec::new());
        for rep in 0..p.bulk_reps {
            writes.push(rate(bytes, session.bulk_write(&data)?));
            let (took, back) = session.bulk_read(bytes)?;
            if rep == 0 && back != data {
                return Err(format!(
                    "{what}: the data read back differs from the data written"
                ));
            }
            reads.push(rate(bytes, took));
        }
        Ok((median(&writes), median(&reads)))
    };
    let (local_write, local_read) = measure(rig.local_gpu(), "local")?;
    let (remote_write, remote_read) = measure(rig.remote_gpu()?, "remote")?;
    let mib = bytes / MIB;
    table.info(
        format!("best bare quinn, {mib} MiB up / down"),
        format!(
            "{} ({}) / {} ({})",
            gbps(best_up.0),
            best_up.1,
            gbps(best_down.0),
            best_down.1
        ),
    );
    table.info(
        format!("local {mib} MiB write / read (LocalGpu)"),
        format!("{} / {}", gbps(local_write), gbps(local_read)),
    );
    for (what, remote, best) in [
        ("write", remote_write, best_up.0),
        ("read", remote_read, best_down.0),
    ] {
        table.check(
            format!("remote {mib} MiB {what} vs bare"),
            gbps(remote),
            remote,
            Want::AtLeast,
            BULK_SHARE * best,
            format!("≥ 0.8 × best bare = {}", gbps(BULK_SHARE * best)),
        );
        table.check(
            format!("remote {mib} MiB {what}, absolute"),
            gbps(remote),
            remote,
            Want::AtLeast,
            BULK_FLOOR,
            "≥ 1 GB/s (on a GPU machine)".into(),
        );
    }
    if let Some((up, down)) = as_fabric {
        table.info(
            format!("remote {mib} MiB write / read vs bare with the fabric's own settings"),
            format!(
                "{:.2}× of {} / {:.2}× of {} ({})",
                remote_write / up,
                gbps(up),
                remote_read / down,
                gbps(down),
                fabric.name
            ),
        );
    }
    Ok(())
}

/// Warm runs of the tiny deployed tasklet: one at a time, then pipelined on one connection.
fn deployed(rig: &Rig, p: &Params, table: &mut Table) -> Result<(), String> {
    progress("deploy: push, warm runs one at a time, then pipelined");
    let mut client = rig.client()?;
    let digest = deploy::push(&mut client)?;
    let single = deploy::one_at_a_time(&mut client, &digest, 50, p.deploy_runs, p.budget)?;
    drop(client);
    let piped = pipelined::runs(
        rig.addr,
        &rig.certs(),
        &digest,
        p.lanes,
        10,
        p.deploy_runs,
        p.budget,
    )?;
    table.check(
        "deploy run: node's instantiate + call p50",
        format!(
            "p50 {} · p99 {} (one at a time)",
            us(single.node.p50()),
            us(single.node.p99())
        ),
        micros(single.node.p50()),
        Want::AtMost,
        micros(DEPLOY_NODE_P50),
        "≤ 50 µs".into(),
    );
    let local = deploy::in_process(|| rig.local_gpu(), 50, p.deploy_runs, p.budget)?;
    table.info(
        "the same run in this process, no node (Runner::run)",
        format!("p50 {} · p99 {}", us(local.p50()), us(local.p99())),
    );
    table.info(
        "deploy run at the client, one at a time",
        format!(
            "p50 {} · p99 {} · {:.0} runs/s",
            us(single.client.p50()),
            us(single.client.p99()),
            single.per_second()
        ),
    );
    table.info(
        format!("deploy runs, {} in flight on one connection", p.lanes),
        format!(
            "{:.0} runs/s · node's p50 {} · client's p50 {}",
            piped.per_second(),
            us(piped.node.p50()),
            us(piped.client.p50())
        ),
    );
    let best = single.per_second().max(piped.per_second());
    table.check(
        "tiny deploy runs/s over one connection",
        format!("{best:.0} runs/s"),
        best,
        Want::AtLeast,
        DEPLOY_RUNS_PER_SECOND,
        format!("≥ 2,000/s on 2 cores ({} here)", machine::cores()),
    );
    Ok(())
}

/// The concurrent clients' launch + sync loops.
fn crowd(rig: &Rig, p: &Params, table: &mut Table) {
    progress(&format!(
        "crowd: {} clients, each its own connection and lease",
        p.clients
    ));
    let crowd = crowd::run(rig, p.clients, 10, p.crowd_pairs, p.budget);
    let (p50, p99) = (crowd.samples.p50(), crowd.samples.p99());
    let tail = micros(p99) / micros(p50).max(1e-9);
    let errors = match crowd.errors.first() {
        None => "no error".to_string(),
        Some(first) => format!("{} errors, first: {first}", crowd.errors.len()),
    };
    table.verdict(
        format!("{} concurrent clients, launch + sync", p.clients),
        format!(
            "p50 {} · p99 {} (p99/p50 {tail:.2}) · {} pairs, {:.0}/s · {errors}",
            us(p50),
            us(p99),
            crowd.samples.len(),
            crowd.pairs_per_second()
        ),
        "no error; p99 ≤ 5 × p50".into(),
        crowd.errors.is_empty() && crowd.samples.len() > 0 && tail <= CROWD_TAIL,
    );
}
