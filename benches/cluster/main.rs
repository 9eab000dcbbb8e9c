//! The cluster benchmark: the registry at scale on one nats-server, measured through the
//! cluster crate's own code (record type, registrar, bucket, registry reader, placement policy).
//!
//! 1. Starts a nats-server on loopback (JetStream in a temporary folder, monitoring on) and
//!    reads its idle CPU.
//! 2. Registers `--nodes` simulated nodes (realistic records, 1–8 GPUs each) with one
//!    `Registrar` each, heartbeating every 2 s over `--connections` NATS connections.
//! 3. Over a steady window: the server's CPU (/proc/PID/stat), its message and byte rates
//!    (/varz), the heartbeats written, and this process's own CPU (the load generator).
//! 4. Placement latency, three ways (placement.rs): as one CLI invocation does it (connect,
//!    list, choose), over a warm connection (list + choose), and from a watch-cached view; then
//!    the server's cost of one watcher.
//! 5. With the `tasklet` binary: one real `tasklet node` on the emulator joins the same
//!    registry; `deploy run` of a tiny tasklet by `--node` against `--nats` placement (the
//!    simulated nodes are all `cuda`, the requirement `gpu:backend=emu`), per invocation
//!    through the library, in a long-lived client, and through the binary (compare.rs).
//!
//! Prints the machine, then a Markdown table of each figure (docs/performance.md, "Cluster",
//! says how to read it).
//!
//! ```text
//! cargo bench -p tasklet-benches --bench cluster [-- OPTIONS]
//!
//!   --nodes N          simulated nodes (default 200)
//!   --connections C    NATS connections the simulated nodes share (default 4)
//!   --placements P     placements timed on a warm connection and from the view (default 1000)
//!   --invocations I    placements timed as CLI invocations (default 200)
//!   --deploy-runs R    deploy runs of each way, per invocation and steady (default 200)
//!   --cli-runs K       `tasklet deploy run` processes of each way (default 30)
//!   --window S         seconds of the steady heartbeat window (default 20)
//!   --quick            small counts and windows: checks the program
//!   --commit HASH      the commit to name on the machine line
//! ```
//!
//! Environment: `TASKLET_NATS_SERVER` (else target/nats/, else PATH), `TASKLET_BIN` (the
//! `tasklet` binary; else target/release/tasklet, else target/debug/tasklet). Without
//! nats-server it prints `skipped: nats-server not found` and exits 0; without the `tasklet`
//! binary it skips step 5 and says so. Exit status 0 when every figure was measured, 1 when
//! one failed (its row says why), 2 for bad arguments. Loopback only.

mod compare;
mod fleet;
mod placement;
mod real_node;
mod server;

#[allow(dead_code)]
#[path = "../fabric/machine.rs"]
mod machine;
#[allow(dead_code)]
#[path = "../fabric/stats.rs"]
mod stats;
/// The fabric benchmark's tiny deployed tasklet (`testing/probe`, told `grow 0`).
#[allow(dead_code)]
#[path = "../fabric/deploy.rs"]
mod tiny;

use stats::Samples;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tasklet_cluster::{NatsConfig, Requirement};

/// What the placement phase asks for: a subset of the simulated nodes meets it.
const PLACEMENT_REQUIREMENT: &str = "gpu:vram=40GiB,cc>=9.0";

/// What the deploy-run phase asks for: only the real node (the emulator) meets it.
const REAL_NODE_REQUIREMENT: &str = "gpu:backend=emu";

/// The target: placement through the registry adds at most this to a `deploy run`'s p50.
const ADDED_P50_TARGET: Duration = Duration::from_millis(2);

/// The longest any one timed series may run.
const SERIES_BUDGET: Duration = Duration::from_secs(120);

#[derive(Debug, Clone)]
struct Params {
    nodes: usize,
    connections: usize,
    placements: usize,
    invocations: usize,
    deploy_runs: usize,
    cli_runs: usize,
    window: Duration,
    idle_window: Duration,
    commit: Option<String>,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            nodes: 200,
            connections: 4,
            placements: 1000,
            invocations: 200,
            deploy_runs: 200,
            cli_runs: 30,
            window: Duration::from_secs(20),
            idle_window: Duration::from_secs(5),
            commit: None,
        }
    }
}

fn parse_args() -> Result<Params, String> {
    let mut p = Params::default();
    let mut args = std::env::args().skip(1);
    let number = |flag: &str, value: Option<String>| -> Result<usize, String> {
        value
            .as_deref()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("{flag} takes a positive whole number"))
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--nodes" => p.nodes = number("--nodes", args.next())?,
            "--connections" => p.connections = number("--connections", args.next())?,
            "--placements" => p.placements = number("--placements", args.next())?,
            "--invocations" => p.invocations = number("--invocations", args.next())?,
            "--deploy-runs" => p.deploy_runs = number("--deploy-runs", args.next())?,
            "--cli-runs" => p.cli_runs = number("--cli-runs", args.next())?,
            "--window" => p.window = Duration::from_secs(number("--window", args.next())? as u64),
            "--commit" => p.commit = Some(args.next().ok_or("--commit takes a hash")?),
            "--quick" => {
                p.placements = 100;
                p.invocations = 20;
                p.deploy_runs = 20;
                p.cli_runs = 4;
                p.window = Duration::from_secs(4);
                p.idle_window = Duration::from_secs(2);
            }
            // `cargo bench` passes --bench to every bench target.
            "--bench" => {}
            other => {
                return Err(format!(
                    "unknown argument {other:?} (see the file's header)"
                ))
            }
        }
    }
    if p.nodes > 100_000 {
        return Err("--nodes is at most 100000".into());
    }
    Ok(p)
}

/// One row of the table: a figure, or why it is missing.
struct Row {
    what: String,
    p50: String,
    p99: String,
    n: String,
    note: String,
}

#[derive(Default)]
struct Table {
    rows: Vec<Row>,
    failed: bool,
}

impl Table {
    fn latency(&mut self, what: &str, samples: &Samples, note: impl Into<String>) {
        self.rows.push(Row {
            what: what.into(),
            p50: ms(samples.p50()),
            p99: ms(samples.p99()),
            n: samples.len().to_string(),
            note: note.into(),
        });
    }

    fn value(&mut self, what: &str, value: impl Into<String>, note: impl Into<String>) {
        self.rows.push(Row {
            what: what.into(),
            p50: value.into(),
            p99: String::new(),
            n: String::new(),
            note: note.into(),
        });
    }

    fn failed(&mut self, what: &str, why: &str) {
        self.failed = true;
        self.value(what, "failed", why.to_owned());
    }

    fn skipped(&mut self, what: &str, why: &str) {
        self.value(what, "skipped", why.to_owned());
    }

    /// `placed` against `node`: both rows, then the difference of the p50s and the ratio.
    fn pair(&mut self, label: &str, pair: &compare::Pair, target: Option<Duration>) {
        self.latency(&format!("{label}: `--node`"), &pair.node, "");
        self.latency(&format!("{label}: placed"), &pair.placed, "");
        let (node, placed) = (pair.node.p50(), pair.placed.p50());
        let added = placed.as_secs_f64() - node.as_secs_f64();
        let ratio = placed.as_secs_f64() / node.as_secs_f64().max(1e-9);
        let verdict = target.map_or(String::new(), |t| {
            let met = added <= t.as_secs_f64();
            format!(
                "; target ≤ {} ms: {}",
                t.as_millis(),
                if met { "met" } else { "NOT met" }
            )
        });
        self.value(
            &format!("{label}: added by placement"),
            format!("{:+.3} ms", added * 1e3),
            format!("p50 placed / p50 --node = {ratio:.2}{verdict}"),
        );
    }

    /// `--node`, placed warm and placed cold: the three rows, then what each placed way adds
    /// to `--node` at p50 and p99.
    fn triple(&mut self, label: &str, t: &compare::Triple, target: Option<Duration>) {
        self.latency(&format!("{label}: `--node`"), &t.node, "");
        self.latency(
            &format!("{label}: placed, warm (cached view)"),
            &t.warm,
            "the view a command cached < 2 s before",
        );
        self.latency(
            &format!("{label}: placed, cold (NATS)"),
            &t.cold,
            "no view cached: connect + list, view kept",
        );
        for (way, samples) in [("warm", &t.warm), ("cold", &t.cold)] {
            let added = |p: fn(&Samples) -> Duration| {
                (p(samples).as_secs_f64() - p(&t.node).as_secs_f64()) * 1e3
            };
            let (p50, p99) = (added(Samples::p50), added(Samples::p99));
            let verdict = target.map_or(String::new(), |t| {
                let met = p50 <= t.as_secs_f64() * 1e3;
                format!(
                    "; target ≤ {} ms at p50: {}",
                    t.as_millis(),
                    if met { "met" } else { "NOT met" }
                )
            });
            self.value(
                &format!("{label}: added by placement, {way}"),
                format!("{p50:+.3} ms"),
                format!("p99 {p99:+.3} ms{verdict}"),
            );
        }
    }

    fn print(&self) {
        println!("| figure | p50 (or value) | p99 | n | note |");
        println!("| --- | ---: | ---: | ---: | --- |");
        for r in &self.rows {
            println!(
                "| {} | {} | {} | {} | {} |",
                r.what, r.p50, r.p99, r.n, r.note
            );
        }
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// CPU over a window as a share of one core.
fn share(cpu: Duration, window: Duration) -> String {
    format!(
        "{:.1} % of a core",
        100.0 * cpu.as_secs_f64() / window.as_secs_f64()
    )
}

fn main() -> ExitCode {
    let params = match parse_args() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let repo = tasklet_tests::repo();
    let Some(nats_binary) = tasklet_cluster::find_nats_server(&repo) else {
        println!("skipped: nats-server not found (run scripts/install-nats.sh)");
        return ExitCode::SUCCESS;
    };
    match run(&params, &repo, &nats_binary) {
        Ok(table) => {
            table.print();
            if table.failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Steps 1–5; an error only when nothing after it could be measured.
fn run(
    params: &Params,
    repo: &std::path::Path,
    nats_binary: &std::path::Path,
) -> Result<Table, String> {
    let mut table = Table::default();
    let server = server::NatsServer::start(nats_binary)?;
    let tasklet = real_node::find_tasklet(repo);
    println!(
        "machine: {}, {} cores, load {}, {}, commit {}; {}; {} simulated nodes over {} connections; tasklet binary: {}",
        machine::cpu(),
        machine::cores(),
        machine::load(),
        machine::date(),
        machine::commit(params.commit.as_deref(), repo),
        server.version,
        params.nodes,
        params.connections,
        tasklet
            .as_ref()
            .map_or("not found".into(), |p| p.display().to_string()),
    );
    let config = NatsConfig::new(server.url.clone());

    // 1. The server idle.
    let (cpu0, varz0) = (server.cpu()?, server.varz()?);
    std::thread::sleep(params.idle_window);
    let idle_cpu = server.cpu()?.saturating_sub(cpu0);
    let idle_varz = server.varz()?;
    table.value(
        "server CPU, idle",
        share(idle_cpu, params.idle_window),
        format!(
            "{:.1} msgs/s in over {:?}",
            (idle_varz.in_msgs - varz0.in_msgs) as f64 / params.idle_window.as_secs_f64(),
            params.idle_window
        ),
    );

    // 2. The fleet.
    let fleet_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("cluster-bench-fleet")
        .enable_all()
        .build()
        .map_err(|e| format!("the fleet's runtime: {e}"))?;
    let t0 = Instant::now();
    let fleet = fleet::Fleet::start(
        &fleet_runtime,
        &server.url,
        params.nodes,
        params.connections,
    )?;
    let registered_in = t0.elapsed();
    let bytes = &fleet.record_bytes;
    let mean_record = bytes.iter().sum::<usize>() as f64 / bytes.len().max(1) as f64;
    table.value(
        &format!("registering {} nodes", fleet.len()),
        format!("{:.2} s", registered_in.as_secs_f64()),
        format!(
            "first writes spread over one 2 s interval; records {mean_record:.0} B mean ({}–{} B)",
            bytes.iter().min().unwrap_or(&0),
            bytes.iter().max().unwrap_or(&0)
        ),
    );
    // A full heartbeat interval and a half so that every node is on its steady rhythm.
    std::thread::sleep(Duration::from_millis(3500));

    // 3. Steady heartbeating.
    let me = std::process::id();
    let (cpu0, varz0, writes0, own0) = (
        server.cpu()?,
        server.varz()?,
        fleet.writes(),
        server::process_cpu(me)?,
    );
    let w0 = Instant::now();
    std::thread::sleep(params.window);
    let window = w0.elapsed();
    let (cpu1, varz1, writes1, own1) = (
        server.cpu()?,
        server.varz()?,
        fleet.writes(),
        server::process_cpu(me)?,
    );
    let secs = window.as_secs_f64();
    let beats = (writes1 - writes0) as f64;
    let server_cpu = cpu1.saturating_sub(cpu0);
    table.value(
        "heartbeats written",
        format!("{:.1} /s", beats / secs),
        format!(
            "expected N / 2 s = {:.1} /s; {} nodes unregistered at the end",
            params.nodes as f64 / 2.0,
            fleet.unregistered()
        ),
    );
    table.value(
        "server CPU, heartbeating",
        share(server_cpu, window),
        format!(
            "{:.1} µs of server CPU per heartbeat (idle not subtracted)",
            server_cpu.as_secs_f64() * 1e6 / beats.max(1.0)
        ),
    );
    let rate = |a: u64, b: u64| (b - a) as f64 / secs;
    table.value(
        "server messages, heartbeating",
        format!(
            "{:.1} in/s, {:.1} out/s",
            rate(varz0.in_msgs, varz1.in_msgs),
            rate(varz0.out_msgs, varz1.out_msgs)
        ),
        format!(
            "{:.2} in, {:.2} out per heartbeat (the write and its ack)",
            (varz1.in_msgs - varz0.in_msgs) as f64 / beats.max(1.0),
            (varz1.out_msgs - varz0.out_msgs) as f64 / beats.max(1.0)
        ),
    );
    table.value(
        "server bytes, heartbeating",
        format!(
            "{:.1} KiB/s in, {:.1} KiB/s out",
            rate(varz0.in_bytes, varz1.in_bytes) / 1024.0,
            rate(varz0.out_bytes, varz1.out_bytes) / 1024.0
        ),
        format!(
            "{:.0} B in per heartbeat (payloads; the wire adds subjects and headers); server RSS {:.1} MiB",
            (varz1.in_bytes - varz0.in_bytes) as f64 / beats.max(1.0),
            varz1.mem as f64 / (1 << 20) as f64
        ),
    );
    table.value(
        "load generator CPU (this process)",
        share(own1.saturating_sub(own0), window),
        format!("{} registrars on a 2-thread runtime", fleet.len()),
    );

    // 4. Placement latency.
    let requirement: Requirement = PLACEMENT_REQUIREMENT.parse().map_err(|e| format!("{e}"))?;
    let client_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("cluster-bench-client")
        .enable_all()
        .build()
        .map_err(|e| format!("the client's runtime: {e}"))?;
    let listed = format!("{} records listed", params.nodes);
    // The watch first, so that its window is not disturbed by the listings' consumers (each
    // listing deletes its own at once; one the server has not deleted yet is still matched
    // against every heartbeat).
    let view = match placement::View::open(
        &client_runtime,
        &config,
        params.nodes,
        Duration::from_secs(30),
    ) {
        Ok(view) => {
            table.value(
                "watch: initial view",
                ms(view.synced_in),
                format!(
                    "connect + open + every live record delivered ({} nodes)",
                    params.nodes
                ),
            );
            match view.placements(&requirement, params.placements) {
                Ok(samples) => table.latency(
                    "placement, watch-cached view (choose)",
                    &samples,
                    "a long-lived client: no NATS round trip per placement",
                ),
                Err(e) => table.failed("placement, watch-cached view", &e),
            }
            // The server's cost of one watcher: every heartbeat delivered once more.
            let (cpu0, varz0, events0) = (server.cpu()?, server.varz()?, view.events());
            let w0 = Instant::now();
            std::thread::sleep(params.window / 2);
            let window = w0.elapsed();
            let (cpu1, varz1, events1) = (server.cpu()?, server.varz()?, view.events());
            table.value(
                "server CPU, heartbeating + one watcher",
                share(cpu1.saturating_sub(cpu0), window),
                format!(
                    "{:.1} msgs/s out; the watcher received {:.1} events/s",
                    (varz1.out_msgs - varz0.out_msgs) as f64 / window.as_secs_f64(),
                    (events1 - events0) as f64 / window.as_secs_f64()
                ),
            );
            Some(view)
        }
        Err(e) => {
            table.failed("watch: initial view", &e);
            None
        }
    };

    match placement::per_invocation(
        &config,
        &requirement,
        params.nodes,
        params.invocations,
        SERIES_BUDGET,
    ) {
        Ok(inv) => {
            table.latency(
                &format!("placement, per CLI invocation, cold (`{PLACEMENT_REQUIREMENT}`)"),
                &inv.total,
                format!(
                    "runtime + connect + list_once + choose; {} listings short of {} nodes",
                    inv.short_listings, params.nodes
                ),
            );
            table.latency("… of which runtime + connect", &inv.connect, "");
            table.latency(
                "… of which `Registry::list_once`",
                &inv.list,
                listed.clone(),
            );
            table.latency("… of which `choose`", &inv.choose, "");
        }
        Err(e) => table.failed("placement, per CLI invocation", &e),
    }
    let views = tempfile::Builder::new()
        .prefix("tasklet-cluster-bench-views")
        .tempdir()
        .map_err(|e| format!("cannot make a temporary folder: {e}"))?;
    let cache = tasklet_cluster::ViewCache::new(views.path(), &config);
    match placement::from_cached_view(
        &config,
        &cache,
        &requirement,
        params.placements,
        SERIES_BUDGET,
    ) {
        Ok(samples) => table.latency(
            "placement, per CLI invocation from a cached view (read + choose)",
            &samples,
            format!(
                "{} B view file",
                std::fs::metadata(cache.path()).map_or(0, |m| m.len())
            ),
        ),
        Err(e) => table.failed("placement, from a cached view", &e),
    }
    match placement::warm_listing(
        &client_runtime,
        &config,
        &requirement,
        params.placements,
        SERIES_BUDGET,
    ) {
        Ok(samples) => table.latency(
            "placement, warm connection (list + choose)",
            &samples,
            listed.clone(),
        ),
        Err(e) => table.failed("placement, warm connection", &e),
    }
    // 5. deploy run by --node against placement.
    let Some(tasklet) = tasklet else {
        table.skipped(
            "deploy run, `--node` against `--nats`",
            "the tasklet binary not found (cargo build --release -p tasklet-cli, or set TASKLET_BIN)",
        );
        fleet.stop(&fleet_runtime);
        return Ok(table);
    };
    if let Err(e) = deploy_runs(
        params,
        repo,
        &tasklet,
        &server,
        &config,
        view.as_ref(),
        &client_runtime,
        &mut table,
    ) {
        table.failed("deploy run, `--node` against `--nats`", &e);
    }
    drop(view);
    fleet.stop(&fleet_runtime);
    Ok(table)
}

/// Step 5: the real node, and `deploy run` three ways.
#[allow(clippy::too_many_arguments)]
fn deploy_runs(
    params: &Params,
    repo: &std::path::Path,
    tasklet: &std::path::Path,
    server: &server::NatsServer,
    config: &NatsConfig,
    view: Option<&placement::View>,
    client_runtime: &tokio::runtime::Runtime,
    table: &mut Table,
) -> Result<(), String> {
    let requirement: Requirement = REAL_NODE_REQUIREMENT.parse().map_err(|e| format!("{e}"))?;
    let mut node = real_node::RealNode::start(tasklet, repo, &server.url)?;
    let registered_in = node.wait_registered(client_runtime, &server.url)?;
    table.value(
        "real `tasklet node` (emu) in the registry",
        format!("{:.2} s", registered_in.as_secs_f64()),
        format!(
            "from its start, beside {} simulated nodes; `{REAL_NODE_REQUIREMENT}` meets only it",
            params.nodes
        ),
    );
    let digest = compare::push(&node)?;
    let target = Some(ADDED_P50_TARGET);
    let cache_dir = tempfile::Builder::new()
        .prefix("tasklet-cluster-bench-views")
        .tempdir()
        .map_err(|e| format!("cannot make a temporary folder: {e}"))?;
    match compare::per_invocation(
        &node,
        config,
        cache_dir.path(),
        &requirement,
        &digest,
        params.deploy_runs,
        SERIES_BUDGET,
    ) {
        Ok(triple) => table.triple("deploy run, per invocation (library)", &triple, target),
        Err(e) => table.failed("deploy run, per invocation (library)", &e),
    }
    if let Some(view) = view {
        // The view sees the real node once its record arrives over the watch.
        let start = Instant::now();
        while view.place(&requirement).is_none() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        match compare::steady(
            &node,
            view,
            &requirement,
            &digest,
            params.deploy_runs,
            SERIES_BUDGET,
        ) {
            Ok(pair) => table.pair("deploy run, steady state (watch-cached)", &pair, None),
            Err(e) => table.failed("deploy run, steady state", &e),
        }
    }
    match compare::cli(
        &node,
        &server.url,
        &requirement,
        &digest,
        params.cli_runs,
        SERIES_BUDGET,
    ) {
        Ok(triple) => table.triple("`tasklet deploy run` process", &triple, target),
        Err(e) => table.failed("`tasklet deploy run` process", &e),
    }
    drop(node);
    Ok(())
}
