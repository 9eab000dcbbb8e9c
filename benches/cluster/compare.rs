//! `deploy run` of a tiny deployed tasklet on the real node, by `--node` and by placement
//! through the registry (`--nats --requires`), side by side and alternating (A/B, then B/A):
//!
//! - **per invocation**: what one `tasklet deploy run DIGEST` does in-process, through the
//!   same library calls: `--node` connects to the node and runs; `--nats` *cold* (no young
//!   view cached) first builds a client runtime, connects to NATS, lists the registry, keeps
//!   the view in its cache file and chooses; `--nats` *warm* reads the view a command cached
//!   less than 2 s ago and chooses; then both connect to the chosen node checking the
//!   certificate fingerprint of its record, and run;
//! - **steady state**: a long-lived client with its connections open: `--node` runs on its one
//!   connection; placement chooses from a watch-cached view of the registry, then runs on its
//!   open connection to the chosen node;
//! - **the CLI**: the `tasklet` binary itself, one process per run: `--node`, `--nats` warm
//!   (the view a command before it cached, checked unchanged by the run) and `--nats` cold
//!   (the cache file removed before the run).

use crate::placement::{client_runtime, View};
use crate::real_node::RealNode;
use crate::stats::Samples;
use crate::tiny;
use std::collections::HashMap;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tasklet_cluster::{choose, Cluster, NatsConfig, Registry, Requirement, ViewCache};
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

/// Runs by `--node`, and placed from a young cached view (warm) and from NATS (cold), the same
/// number of each.
#[derive(Debug, Default)]
pub struct Triple {
    pub node: Samples,
    pub warm: Samples,
    pub cold: Samples,
}

impl Triple {
    /// Runs `node`, `warm` and `cold` once each, in an order that turns with `i` (a cold run
    /// always comes before the warm one, which uses the view it cached).
    fn round(
        &mut self,
        i: usize,
        mut node: impl FnMut() -> Result<Duration, String>,
        mut warm: impl FnMut() -> Result<Duration, String>,
        mut cold: impl FnMut() -> Result<Duration, String>,
    ) -> Result<(), String> {
        match i % 3 {
            0 => {
                self.node.push(node()?);
                self.cold.push(cold()?);
                self.warm.push(warm()?);
            }
            1 => {
                self.cold.push(cold()?);
                self.warm.push(warm()?);
                self.node.push(node()?);
            }
            _ => {
                self.cold.push(cold()?);
                self.node.push(node()?);
                self.warm.push(warm()?);
            }
        }
        Ok(())
    }
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

/// Where a placed run reads the registry.
enum Read<'a> {
    /// NATS, keeping the view in the cache (no young view cached).
    Cold(&'a ViewCache),
    /// The cached view, which must be young.
    Warm(&'a ViewCache),
}

/// One run as `deploy run DIGEST --nats URL --requires R` does it, cold or warm.
fn run_placed(
    node: &RealNode,
    config: &NatsConfig,
    read: Read<'_>,
    requirement: &Requirement,
    digest: &Digest,
) -> Result<Duration, String> {
    let t0 = Instant::now();
    let tenant = tenant()?;
    let nodes = match read {
        Read::Warm(cache) => {
            cache
                .load()
                .ok_or("--nats warm: no young view cached")?
                .nodes
        }
        Read::Cold(cache) => {
            let runtime = client_runtime()?;
            let nodes = runtime.block_on(async {
                let cluster = Cluster::connect(config).await.map_err(|e| e.to_string())?;
                Registry::list_once(&cluster)
                    .await
                    .map_err(|e| e.to_string())
            })?;
            drop(runtime);
            cache
                .store(&nodes)
                .map_err(|e| format!("--nats cold: keeping the view: {e}"))?;
            nodes
        }
    };
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

/// `count` runs of each way, per invocation, in turning order; within `budget`. The view is
/// kept in a cache file under `cache_dir`.
pub fn per_invocation(
    node: &RealNode,
    config: &NatsConfig,
    cache_dir: &Path,
    requirement: &Requirement,
    digest: &Digest,
    count: usize,
    budget: Duration,
) -> Result<Triple, String> {
    let cache = ViewCache::new(cache_dir, config);
    let cold = || {
        cache.invalidate();
        run_placed(node, config, Read::Cold(&cache), requirement, digest)
    };
    let warm = || run_placed(node, config, Read::Warm(&cache), requirement, digest);
    // Untimed: the first connection of each way (the node's first handshake, caches).
    run_by_node(node, digest)?;
    cold()?;
    warm()?;
    let mut triple = Triple::default();
    let start = Instant::now();
    for i in 0..count {
        if start.elapsed() > budget {
            break;
        }
        triple.round(i, || run_by_node(node, digest), warm, cold)?;
    }
    Ok(triple)
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

/// One `tasklet deploy run DIGEST … --json` process with the tiny input, its registry views
/// cached under `cache_home`; its wall time.
fn cli_run(
    node: &RealNode,
    cache_home: &Path,
    target: &[&str],
    digest: &Digest,
) -> Result<Duration, String> {
    let t0 = Instant::now();
    let mut child = Command::new(&node.binary)
        .args(["deploy", "run", &digest.to_hex(), "--json", "--certs"])
        .arg(node.certs())
        .args(target)
        .env("XDG_CACHE_HOME", cache_home)
        .env_remove("TASKLET_REGISTRY_CACHE")
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

/// The cache file's modification time and bytes.
fn snapshot(cache: &ViewCache) -> Option<(std::time::SystemTime, Vec<u8>)> {
    let modified = std::fs::metadata(cache.path()).ok()?.modified().ok()?;
    Some((modified, std::fs::read(cache.path()).ok()?))
}

/// `count` runs of each way through the `tasklet` binary, in turning order; within `budget`.
/// A warm run must leave the view as it found it (it used it, and did not list).
pub fn cli(
    node: &RealNode,
    url: &str,
    requirement: &Requirement,
    digest: &Digest,
    count: usize,
    budget: Duration,
) -> Result<Triple, String> {
    let home = tempfile::Builder::new()
        .prefix("tasklet-cluster-bench-cache")
        .tempdir()
        .map_err(|e| format!("cannot make a temporary folder: {e}"))?;
    let cache = ViewCache::new(&home.path().join("tasklet-registry"), &NatsConfig::new(url));
    let requirement = requirement.to_string();
    let by_node = ["--node", node.addr.as_str()];
    let placed = ["--nats", url, "--requires", requirement.as_str()];
    let run_node = || cli_run(node, home.path(), &by_node, digest);
    let cold = || {
        cache.invalidate();
        let took = cli_run(node, home.path(), &placed, digest)?;
        if snapshot(&cache).is_none() {
            return Err("a cold `deploy run --nats` kept no view".into());
        }
        Ok(took)
    };
    let warm = || {
        let before = snapshot(&cache).ok_or("no view cached before a warm run")?;
        let took = cli_run(node, home.path(), &placed, digest)?;
        if snapshot(&cache).as_ref() != Some(&before) {
            return Err("a warm `deploy run --nats` did not use the cached view".into());
        }
        Ok(took)
    };
    run_node()?;
    cold()?;
    warm()?;
    let mut triple = Triple::default();
    let start = Instant::now();
    for i in 0..count {
        if start.elapsed() > budget {
            break;
        }
        triple.round(i, run_node, warm, cold)?;
    }
    Ok(triple)
}
