//! Placement latency through the registry's own code, three ways:
//!
//! - **per invocation, cold**, what `tasklet deploy run --nats` and `tasklet run --nats` do when
//!   no young view is cached: a new client runtime, a new NATS connection, one listing
//!   (`Registry::list_once`), then `choose`;
//! - **per invocation, warm**: what they do with a young cached view (`ViewCache::load`, then
//!   `choose`), no NATS at all;
//! - **warm listing**: one connection kept, `Registry::list` + `choose` per placement (a
//!   long-lived client that lists every time);
//! - **watch-cached**: one `Registry::watch` keeps a view of the live nodes up to date, and a
//!   placement is `choose` over that view (a long-lived client done the cheap way).

use crate::stats::Samples;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tasklet_cluster::{
    choose, Cluster, Heartbeat, LiveNode, NatsConfig, NodeName, Registry, RegistryEvent,
    Requirement, ViewCache,
};
use tokio::runtime::Runtime;

/// One per-invocation placement, in its parts.
#[derive(Debug, Default)]
pub struct Invocations {
    /// Runtime + connection.
    pub connect: Samples,
    /// `Registry::list_once`.
    pub list: Samples,
    /// `choose`.
    pub choose: Samples,
    /// All of it.
    pub total: Samples,
    /// Listings that did not hold every node expected (a heartbeat late past its TTL).
    pub short_listings: usize,
}

/// Places `count` times the way one CLI invocation does, within `budget`.
pub fn per_invocation(
    config: &NatsConfig,
    requirement: &Requirement,
    expected: usize,
    count: usize,
    budget: Duration,
) -> Result<Invocations, String> {
    let mut out = Invocations::default();
    let start = Instant::now();
    for _ in 0..count {
        if start.elapsed() > budget {
            break;
        }
        let t0 = Instant::now();
        let runtime = client_runtime()?;
        let (nodes, t1, t2) = runtime.block_on(async {
            let cluster = Cluster::connect(config).await.map_err(|e| e.to_string())?;
            let t1 = Instant::now();
            let nodes = Registry::list_once(&cluster)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>((nodes, t1, Instant::now()))
        })?;
        drop(runtime);
        let chosen = choose(requirement, &nodes)
            .first()
            .map(|c| c.node.name.clone());
        let t3 = Instant::now();
        if chosen.is_none() {
            return Err(format!("no node of {} meets {requirement}", nodes.len()));
        }
        if nodes.len() < expected {
            out.short_listings += 1;
        }
        out.connect.push(t1 - t0);
        out.list.push(t2 - t1);
        out.choose.push(t3 - t2);
        out.total.push(t3 - t0);
    }
    Ok(out)
}

/// Places `count` times from a cached view as a warm CLI invocation does (read the file,
/// `choose`), within `budget`; the view is listed and stored again whenever it is too old.
pub fn from_cached_view(
    config: &NatsConfig,
    cache: &ViewCache,
    requirement: &Requirement,
    count: usize,
    budget: Duration,
) -> Result<Samples, String> {
    let store = || {
        let runtime = client_runtime()?;
        let nodes = runtime.block_on(async {
            let cluster = Cluster::connect(config).await.map_err(|e| e.to_string())?;
            Registry::list_once(&cluster)
                .await
                .map_err(|e| e.to_string())
        })?;
        cache
            .store(&nodes)
            .map_err(|e| format!("storing the view in {}: {e}", cache.path().display()))
    };
    store()?;
    let mut samples = Samples::with_capacity(count);
    let start = Instant::now();
    while samples.len() < count && start.elapsed() < budget {
        let t0 = Instant::now();
        let Some(view) = cache.load() else {
            store()?;
            continue;
        };
        if choose(requirement, &view.nodes).is_empty() {
            return Err(format!(
                "no node of {} cached meets {requirement}",
                view.nodes.len()
            ));
        }
        samples.push(t0.elapsed());
    }
    Ok(samples)
}

/// Places `count` times over one connection kept open, listing each time.
pub fn warm_listing(
    runtime: &Runtime,
    config: &NatsConfig,
    requirement: &Requirement,
    count: usize,
    budget: Duration,
) -> Result<Samples, String> {
    runtime.block_on(async {
        let cluster = Cluster::connect(config).await.map_err(|e| e.to_string())?;
        let registry = Registry::open(&cluster).await.map_err(|e| e.to_string())?;
        let mut samples = Samples::with_capacity(count);
        let start = Instant::now();
        for _ in 0..count {
            if start.elapsed() > budget {
                break;
            }
            let t0 = Instant::now();
            let nodes = registry.list().await.map_err(|e| e.to_string())?;
            if choose(requirement, &nodes).is_empty() {
                return Err(format!("no node of {} meets {requirement}", nodes.len()));
            }
            samples.push(t0.elapsed());
        }
        Ok(samples)
    })
}

/// A view of the live nodes kept by a registry watch.
pub struct View {
    nodes: Arc<Mutex<HashMap<NodeName, Seen>>>,
    /// Events received (every heartbeat of every node is one).
    events: Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
    /// From opening the watch to holding every expected node.
    pub synced_in: Duration,
    stale_after: Duration,
}

struct Seen {
    node: LiveNode,
    /// When this reader received it: the record is stale `stale_after - node.age` later.
    at: Instant,
}

impl View {
    /// Opens a watch on `runtime` and waits (at most `wait`) until it holds `expected` nodes.
    pub fn open(
        runtime: &Runtime,
        config: &NatsConfig,
        expected: usize,
        wait: Duration,
    ) -> Result<View, String> {
        let nodes: Arc<Mutex<HashMap<NodeName, Seen>>> = Arc::default();
        let events: Arc<std::sync::atomic::AtomicU64> = Arc::default();
        let start = Instant::now();
        let task = runtime.block_on(async {
            let cluster = Cluster::connect(config).await.map_err(|e| e.to_string())?;
            let registry = Registry::open(&cluster).await.map_err(|e| e.to_string())?;
            let mut watch = registry.watch().await.map_err(|e| e.to_string())?;
            let (into, counted) = (nodes.clone(), events.clone());
            Ok::<_, String>(tokio::spawn(async move {
                use futures_util::StreamExt as _;
                // Keeps the connection for as long as the watch runs.
                let _cluster = cluster;
                while let Some(Ok(event)) = watch.next().await {
                    counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let mut nodes = into.lock().unwrap_or_else(|e| e.into_inner());
                    match event {
                        RegistryEvent::Up(node) => {
                            let name = node.record.name.clone();
                            nodes.insert(
                                name,
                                Seen {
                                    node,
                                    at: Instant::now(),
                                },
                            );
                        }
                        RegistryEvent::Gone(name) => {
                            nodes.remove(&name);
                        }
                    }
                }
            }))
        })?;
        loop {
            let held = nodes.lock().unwrap_or_else(|e| e.into_inner()).len();
            if held >= expected {
                break;
            }
            if start.elapsed() > wait {
                task.abort();
                return Err(format!(
                    "the watch held {held} of {expected} nodes after {wait:?}"
                ));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(View {
            nodes,
            events,
            task,
            synced_in: start.elapsed(),
            stale_after: Heartbeat::default().stale_after,
        })
    }

    /// Events received so far.
    pub fn events(&self) -> u64 {
        self.events.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The best node for `requirement` among the fresh ones in the view, and how many were.
    pub fn place(&self, requirement: &Requirement) -> Option<(LiveNode, usize)> {
        let nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let fresh: Vec<&LiveNode> = nodes
            .values()
            .filter(|seen| now.duration_since(seen.at) + seen.node.age <= self.stale_after)
            .map(|seen| &seen.node)
            .collect();
        let best = choose(requirement, &fresh)
            .first()
            .map(|c| c.node.clone())?;
        let node = nodes.get(&best.name)?.node.clone();
        Some((node, fresh.len()))
    }

    /// Places `count` times from the view.
    pub fn placements(&self, requirement: &Requirement, count: usize) -> Result<Samples, String> {
        let mut samples = Samples::with_capacity(count);
        for _ in 0..count {
            let t0 = Instant::now();
            if self.place(requirement).is_none() {
                return Err(format!("no node in the watched view meets {requirement}"));
            }
            samples.push(t0.elapsed());
        }
        Ok(samples)
    }
}

impl Drop for View {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The runtime one CLI invocation builds for its NATS work (`cluster::live_nodes`).
pub fn client_runtime() -> Result<Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("a client runtime: {e}"))
}
