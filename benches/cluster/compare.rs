//! `deploy run` of a tiny deployed tasklet on the real node, by `--node` and by placement
//! through the registry (`--nats --requires`), side by side and alternating (A/B, then B/A):
//!
//! - **per invocation**: what one `tasklet deploy run DIGEST` does in-process, through the
//!   same library calls: `--node` connects to the node and runs; `--nats` first builds a
//!   client runtime, connects to NATS, lists the registry and chooses (`cluster::live_nodes`
//!   and `placement::place` in the CLI), then connects to the chosen node checking the
//!   certificate fingerprint of its record, and runs;
//! - **steady state**: a long-lived client with its connections open: `--node` runs on its one
//!   connection; placement chooses from a watch-cached view of the registry, then runs on its
//!   open connection to the chosen node;
//! - **the CLI**: the `tasklet` binary itself, one process per run.

use crate::placement::{client_runtime, View};
use crate::real_node::RealNode;
use crate::stats::Samples;
use crate::tiny;
use std::collections::HashMap;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tasklet_cluster::{choose, Cluster, NatsConfig, Registry, Requirement};
use tasklet_remote::{ConnectOptions, Digest, NodeClient};
use tasklet_tls::Tenant;

/// What the CLI gives each candidate to answer its handshake (`placement::CONNECT_TIMEOUT`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs by `--node` and by placement, the same number of each.
#[derive(Debug, Default)]
pub struct Pair {
    pub node: Samples,
    pub placed: Samples,
}

fn tenant() -> Result<Tenant, String> {
    Tenant::new(tasklet_tls::DEFAULT_TENANT).map_err(|e| e.to_string())
}

/// Pushes the tiny tasklet to the node; its digest.
pub fn push(node: &RealNode) -> Result<Digest, String> {
    let mut client = NodeClient::connect(&node.addr, node.certs(), &tenant()?)
        .map_err(|e| format!("connecting to the real node: {e}"))?;
    tiny::push(&mut client)
}

/// One run as `deploy run DIGEST --node ADDR` does it.
fn run_by_node(node: &RealNode, digest: &Digest) -> Result<Duration, String> {
    let t0 = Instant::now();
    let mut client =
        NodeClient::connect_with(&ConnectOptions::new(&node.addr, node.certs(), tenant()?))
            .map_err(|e| format!("--node: connecting: {e}"))?;
    let run = client
        .deploy_run(digest, tiny::TINY_INPUT)
        .map_err(|e| format!("--node: deploy run: {e}"))?;
    let took = t0.elapsed();
    tiny::check(run.exit, &run.output)?;
    Ok(took)
}

/// One run as `deploy run DIGEST --nats URL --requires R` does it.
fn run_placed(
    node: &RealNode,
    config: &NatsConfig,
    requirement: &Requirement,
    digest: &Digest,
) -> Result<Duration, String> {
    let t0 = Instant::now();
    let tenant = tenant()?;
    let runtime = client_runtime()?;
    let nodes = runtime.block_on(async {
        let cluster = Cluster::connect(config).await.map_err(|e| e.to_string())?;
        let registry = Registry::open(&cluster).await.map_err(|e| e.to_string())?;
        registry.list().await.map_err(|e| e.to_string())
    })?;
    drop(runtime);
    let candidates = choose(requirement, &nodes);
    let first = candidates
        .first()
        .ok_or_else(|| format!("--nats: no node of {} meets {requirement}", nodes.len()))?;
    if first.node.address != node.addr {
        return Err(format!(
            "--nats: placement chose {} ({}), not the real node",
            first.node.name, first.node.address
        ));
    }
    let mut options = ConnectOptions::new(&first.node.address, node.certs(), tenant);
    options.connect_timeout = CONNECT_TIMEOUT;
    options.node_sha256 = Some(first.node.cert_sha256.clone());
    let mut client =
        NodeClient::connect_with(&options).map_err(|e| format!("--nats: connecting: {e}"))?;
    let run = client
        .deploy_run(digest, tiny::TINY_INPUT)
        .map_err(|e| format!("--nats: deploy run: {e}"))?;
    let took = t0.elapsed();
    tiny::check(run.exit, &run.output)?;
    Ok(took)
}

/// `count` runs of each way, per invocation, alternating; within `budget`.
pub fn per_invocation(
    node: &RealNode,
    config: &NatsConfig,
    requirement: &Requirement,
    digest: &Digest,
    count: usize,
    budget: Duration,
) -> Result<Pair, String> {
    // Untimed: the first connection of each way (the node's first handshake, caches).
    run_by_node(node, digest)?;
    run_placed(node, config, requirement, digest)?;
    let mut pair = Pair::default();
    let start = Instant::now();
    for i in 0..count {
        if start.elapsed() > budget {
            break;
        }
        if i % 2 == 0 {
            pair.node.push(run_by_node(node, digest)?);
            pair.placed
                .push(run_placed(node, config, requirement, digest)?);
        } else {
            pair.placed
                .push(run_placed(node, config, requirement, digest)?);
            pair.node.push(run_by_node(node, digest)?);
        }
    }
    Ok(pair)
}

/// `count` runs of each way by a long-lived client, alternating; within `budget`.
pub fn steady(
    node: &RealNode,
    view: &View,
    requirement: &Requirement,
    digest: &Digest,
    count: usize,
    budget: Duration,
) -> Result<Pair, String> {
    let tenant = tenant()?;
    let mut direct = NodeClient::connect(&node.addr, node.certs(), &tenant)
        .map_err(|e| format!("--node: connecting: {e}"))?;
    // The placed side's connections, by address and fingerprint, opened on first use.
    let mut pool: HashMap<(String, String), NodeClient> = HashMap::new();
    let placed = |pool: &mut HashMap<(String, String), NodeClient>| {
        let t0 = Instant::now();
        let (chosen, _) = view
            .place(requirement)
            .ok_or_else(|| format!("no node in the watched view meets {requirement}"))?;
        let key = (
            chosen.record.address.clone(),
            chosen.record.cert_sha256.clone(),
        );
        if !pool.contains_key(&key) {
            let mut options = ConnectOptions::new(&key.0, node.certs(), tenant.clone());
            options.connect_timeout = CONNECT_TIMEOUT;
            options.node_sha256 = Some(key.1.clone());
            let client = NodeClient::connect_with(&options)
                .map_err(|e| format!("placed: connecting: {e}"))?;
            pool.insert(key.clone(), client);
        }
        let client = pool.get_mut(&key).expect("inserted above");
        let run = client
            .deploy_run(digest, tiny::TINY_INPUT)
            .map_err(|e| format!("placed: deploy run: {e}"))?;
        let took = t0.elapsed();
        tiny::check(run.exit, &run.output)?;
        Ok::<_, String>(took)
    };
    let by_node = |direct: &mut NodeClient| {
        let t0 = Instant::now();
        let run = direct
            .deploy_run(digest, tiny::TINY_INPUT)
            .map_err(|e| format!("--node: deploy run: {e}"))?;
        let took = t0.elapsed();
        tiny::check(run.exit, &run.output)?;
        Ok::<_, String>(took)
    };
    // Untimed: each side's connection opened and warm.
    by_node(&mut direct)?;
    placed(&mut pool)?;
    let mut pair = Pair::default();
    let start = Instant::now();
    for i in 0..count {
        if start.elapsed() > budget {
            break;
        }
        if i % 2 == 0 {
            pair.node.push(by_node(&mut direct)?);
            pair.placed.push(placed(&mut pool)?);
        } else {
            pair.placed.push(placed(&mut pool)?);
            pair.node.push(by_node(&mut direct)?);
        }
    }
    Ok(pair)
}

/// One `tasklet deploy run DIGEST … --json` process with the tiny input; its wall time.
fn cli_run(node: &RealNode, target: &[&str], digest: &Digest) -> Result<Duration, String> {
    let t0 = Instant::now();
    let mut child = Command::new(&node.binary)
        .args(["deploy", "run", &digest.to_hex(), "--json", "--certs"])
        .arg(node.certs())
        .args(target)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", node.binary.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(tiny::TINY_INPUT)
            .map_err(|e| format!("tasklet deploy run's stdin: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("tasklet deploy run: {e}"))?;
    let took = t0.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !stdout.contains("\"status\":\"ok\"") {
        return Err(format!(
            "tasklet deploy run {}: {} {}",
            target.join(" "),
            stdout.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(took)
}

/// `count` runs of each way through the `tasklet` binary, alternating; within `budget`.
pub fn cli(
    node: &RealNode,
    url: &str,
    requirement: &Requirement,
    digest: &Digest,
    count: usize,
    budget: Duration,
) -> Result<Pair, String> {
    let requirement = requirement.to_string();
    let by_node = ["--node", node.addr.as_str()];
    let placed = ["--nats", url, "--requires", requirement.as_str()];
    cli_run(node, &by_node, digest)?;
    cli_run(node, &placed, digest)?;
    let mut pair = Pair::default();
    let start = Instant::now();
    for i in 0..count {
        if start.elapsed() > budget {
            break;
        }
        if i % 2 == 0 {
            pair.node.push(cli_run(node, &by_node, digest)?);
            pair.placed.push(cli_run(node, &placed, digest)?);
        } else {
            pair.placed.push(cli_run(node, &placed, digest)?);
            pair.node.push(cli_run(node, &by_node, digest)?);
        }
    }
    Ok(pair)
}
