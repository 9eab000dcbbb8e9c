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
//! | 256 MiB write / read | median of the rounds, remote (write + sync; read) | ≥ 0.8 × the median of the best bare quinn setting's uploads / downloads of distinct data; ≥ 1 GB/s |
//! | deploy run, node side | p50 of the node's instantiate + call of a tiny deployed tasklet | ≤ 50 µs |
//! | deploy runs/s | tiny runs over one connection, the better of one at a time and pipelined | ≥ 2,000/s |
//! | 64 clients | launch + sync loops, each client its own connection and lease | no error; p99 ≤ 5 × p50 |
//!
//! Everything a target compares is measured interleaved, so that load on the machine hits both
//! sides alike: the latency phase runs many short rounds, each an echo block, a local block and a
//! remote block in a rotating order (`latency`); the bulk phase runs rounds in which every bare
//! setting and the remote and local paths each move the data once (`bulk`). Each target is read
//! from the pooled figures and, round by round, from each round's own bound; every round is
//! printed. Each loop is bounded in count and in time. Loopback only: the node listens on
//! 127.0.0.1.
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
//!   --rounds R               latency rounds (default 12)
//!   --bulk-rounds R          bulk rounds (default 9)
//!   --bulk-bytes B           bytes of the bulk transfers (default 268435456)
//!   --clients N              concurrent clients (default 64)
//!   --lanes L                runs in flight in the pipelined deploy series (default 4)
//!   --pairs N                timed launch + sync pairs (and echoes) per path per round
//!                            (default 500)
//!   --batches N              async batches per path per round (default 3)
//!   --only P[,P…]            only these phases: latency, bulk, deploy, crowd, timeline (default
//!                            all; for profiling one). timeline (last) marks each stage of a
//!                            remote pair and batch, and of the bare echo, and prints where their
//!                            time goes
//! ```
//!
//! The program is its own GPU worker (`fabric worker …`, as the hosts start it). Environment:
//! `TASKLET_REPO` (the checkout holding `tasklets/` and its built components; default: where
//! this was built). Exit status 0 when every figure was measured, whether or not its target is
//! met; 1 when a measurement failed (its row says why); 2 for bad arguments.

mod bare;
mod bulk;
mod crowd;
mod deploy;
mod latency;
mod machine;
mod pipelined;
mod rig;
mod session;
mod stats;
mod table;
mod timeline;

use rig::Rig;
use stats::{micros, Want};
use std::process::ExitCode;
use std::time::Duration;
use table::Table;
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
            rounds: 12,
            pairs: 500,
            batches: 3,
            bulk_bytes: 256 * MIB,
            // Nine: the best of nine settings' medians over fewer draws is more luck than rate.
            bulk_reps: 9,
            deploy_runs: 3000,
            lanes: 4,
            clients: 64,
            crowd_pairs: 200,
            budget: Duration::from_secs(20),
        }
    }

    fn quick() -> Params {
        Params {
            rounds: 2,
            pairs: 100,
            batches: 1,
            bulk_bytes: 32 * MIB,
            bulk_reps: 2,
            deploy_runs: 200,
            lanes: 4,
            clients: 8,
            crowd_pairs: 50,
            budget: Duration::from_secs(5),
        }
    }
}

/// The phases, in the order they run.
const PHASES: [&str; 5] = ["latency", "bulk", "deploy", "crowd", "timeline"];

struct Options {
    params: Params,
    /// The phases to run, of [`PHASES`].
    only: Vec<String>,
    /// `None`: cuda if a worker finds a device, else emu.
    backend: Option<BackendKind>,
    commit: Option<String>,
}

fn usage() -> &'static str {
    "usage: fabric [--backend auto|emu|cuda] [--commit HASH] [--quick] [--rounds R] [--bulk-rounds R] [--bulk-bytes B] [--clients N] [--lanes L] [--pairs N] [--batches N] [--only latency,bulk,deploy,crowd,timeline]"
}

fn parse_options() -> Result<Options, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut quick = false;
    let mut backend = None;
    let mut commit = None;
    let mut only: Vec<String> = PHASES.iter().map(|p| p.to_string()).collect();
    let (mut rounds, mut bulk, mut clients, mut lanes) = (None, None, None, None);
    let (mut pairs, mut batches, mut bulk_rounds) = (None, None, None);
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
            "--bulk-rounds" => {
                bulk_rounds = Some(positive(&value("--bulk-rounds")?, "--bulk-rounds")?)
            }
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
    params.bulk_reps = bulk_rounds.unwrap_or(params.bulk_reps);
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
        "node on 127.0.0.1 in this process (2 runtime threads, as `tasklet node`); {} latency rounds of {} pairs, {} bulk rounds of {} MiB transfers (the remote path's on {}), {} clients",
        p.rounds,
        p.pairs,
        p.bulk_reps,
        p.bulk_bytes / MIB,
        match tasklet_remote::transfer_streams() {
            1 => "one stream".to_owned(),
            n => format!("{n} streams"),
        },
        p.clients
    );
    println!(
        "the fabric's transport: a stream window of {} MiB, {} MiB socket buffers asked; {}",
        tasklet_tls::transport::stream_window() >> 20,
        tasklet_tls::transport::socket_buffer() >> 20,
        machine::socket_limits()
    );
    println!();

    let mut table = Table::default();
    let mut settings = String::new();
    let mut ok = true;
    let runs = |phase: &str| options.only.iter().any(|o| o == phase);
    let mut rounds = String::new();
    if runs("latency") {
        if let Err(e) = latency::run(&rig, p, &mut table, &mut rounds) {
            table.failed("launch + sync, async batches", &e);
            ok = false;
        }
    }
    if runs("bulk") {
        if let Err(e) = bulk::run(&rig, p, &mut table, &mut settings) {
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
    let mut stages = String::new();
    if runs("timeline") {
        if let Err(e) = timeline::run(&rig, p.bulk_bytes, &mut stages) {
            table.failed("timeline", &e);
            ok = false;
        }
    }
    if let Err(e) = rig.stop() {
        eprintln!("{e}");
        ok = false;
    }

    print!("{}", table.markdown());
    let (met, checked) = table.targets();
    println!();
    println!("{met} of {checked} targets met");
    if !rounds.is_empty() {
        println!();
        println!(
            "latency, round by round (p50s of {} pairs; ratio: remote / (echo + 1.2 × local); batches: median of {} each, ratio: remote / (1.2 × (echo + local))):",
            p.pairs, p.batches
        );
        print!("{rounds}");
    }
    if !stages.is_empty() {
        println!();
        println!("where the time goes, stage by stage (medians; each stage after the one before):");
        print!("{stages}");
    }
    if !settings.is_empty() {
        println!();
        println!(
            "bare quinn transfers of {} MiB ({} rounds), client ↔ server on loopback, same TLS:",
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

/// A pattern that a misplaced or missing piece would not reproduce.
fn pattern(len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i ^ (i >> 11) ^ (i >> 23)) as u8)
        .collect()
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
        "the same run in this process, no node: instantiate + call",
        format!(
            "p50 {} · p99 {} (then its teardown: p50 {}, done after the node's reply)",
            us(local.run.p50()),
            us(local.run.p99()),
            us(local.teardown.p50())
        ),
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
