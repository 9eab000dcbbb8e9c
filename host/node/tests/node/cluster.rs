//! Nodes in a cluster, against a real nats-server on loopback: they register with their live
//! state, mark themselves draining, leave on a stop, vanish within 10 s when killed, and serve
//! while NATS is away, registering once it comes.

use crate::lifecycle::{helper, kill};
use crate::nats::{nats_or_skip, NatsServer};
use crate::support::*;
use std::time::{Duration, Instant};
use tasklet_cluster::{choose, Cluster, LiveNode, NatsConfig, Registry, Requirement};

/// The registry's promise for a node that stops refreshing.
const GONE_WITHIN: Duration = Duration::from_secs(10);

/// The live nodes, or none while the bucket does not exist yet.
fn live(runtime: &tokio::runtime::Runtime, url: &str) -> Vec<LiveNode> {
    runtime.block_on(async {
        let cluster = Cluster::connect(&NatsConfig::new(url))
            .await
            .expect("the test's nats-server answers");
        match Registry::open(&cluster).await {
            Ok(registry) => registry.list().await.expect("the registry lists"),
            Err(tasklet_cluster::Error::BucketMissing { .. }) => Vec::new(),
            Err(e) => panic!("{e}"),
        }
    })
}

/// Polls the registry every 100 ms until `check` holds, for at most `limit`; how long it took.
fn until(
    runtime: &tokio::runtime::Runtime,
    url: &str,
    limit: Duration,
    what: &str,
    check: impl Fn(&[LiveNode]) -> bool,
) -> Result<Duration, String> {
    let start = Instant::now();
    loop {
        let nodes = live(runtime, url);
        if check(&nodes) {
            return Ok(start.elapsed());
        }
        if start.elapsed() > limit {
            let names: Vec<_> = nodes.iter().map(|n| n.record.name.to_string()).collect();
            return Err(format!("not within {limit:?}: {what}; live: {names:?}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn member(url: &str, name: &str) -> TestNode {
    TestNode::with(Setup {
        cluster: Some((url.to_owned(), name.to_owned())),
        ..Setup::default()
    })
}

fn named<'a>(nodes: &'a [LiveNode], name: &str) -> Option<&'a LiveNode> {
    nodes.iter().find(|n| n.record.name.as_str() == name)
}

pub fn nodes_register_drain_and_leave() -> TestResult {
    let nats = nats_or_skip!();
    let url = nats.url();
    let a = member(&url, "node-a");
    let b = member(&url, "node-b");
    let runtime = a.runtime();
    until(runtime, &url, WAIT, "both nodes listed", |nodes| {
        named(nodes, "node-a").is_some() && named(nodes, "node-b").is_some()
    })?;
    let nodes = live(runtime, &url);
    for (node, name) in [(&a, "node-a"), (&b, "node-b")] {
        let record = &named(&nodes, name).ok_or("listed")?.record;
        check(record.address == node.addr_text(), || {
            format!("{name} advertises {} for {}", record.address, node.addr)
        })?;
        let fingerprint =
            tasklet_tls::node_fingerprint(node.certs_path()).map_err(|e| e.to_string())?;
        check(record.cert_sha256 == fingerprint, || {
            format!(
                "{name}: {} is not its certificate's {fingerprint}",
                record.cert_sha256
            )
        })?;
        let status = node.node().control().status();
        check(record.devices.len() == status.devices.len(), || {
            format!("{record:?}")
        })?;
        let device = &record.devices[0];
        check(
            device.backend == crate::support::backend_for(&policy()).as_str()
                && device.total_vram == status.devices[0].total_memory
                && device.free_vram == device.total_vram
                && !record.draining,
            || format!("{record:?}"),
        )?;
    }

    // A lease taken shows in the record's free memory and leases within a heartbeat or two.
    let mut client = a.client("dev");
    let lease = client
        .lease_alloc(1 << 20, 30, None)
        .map_err(|e| e.to_string())?;
    until(
        runtime,
        &url,
        WAIT,
        "node-a's lease in its record",
        |nodes| {
            named(nodes, "node-a").is_some_and(|n| {
                let d = &n.record.devices[0];
                d.leases == 1 && d.free_vram == d.total_vram - lease.granted_bytes
            })
        },
    )?;

    // Draining: marked so, and never chosen, however much room it has.
    b.node().drain();
    until(runtime, &url, WAIT, "node-b marked draining", |nodes| {
        named(nodes, "node-b").is_some_and(|n| n.record.draining)
    })
    .or_else(|e| {
        // A drained node with nothing running stops at once: gone is as good as draining.
        until(runtime, &url, Duration::ZERO, "node-b gone", |nodes| {
            named(nodes, "node-b").is_none()
        })
        .map_err(|_| e)
    })?;
    let nodes = live(runtime, &url);
    let chosen: Vec<_> = choose(&Requirement::any_gpu(), &nodes)
        .iter()
        .map(|c| c.node.name.to_string())
        .collect();
    check(chosen == ["node-a"], || format!("chosen: {chosen:?}"))?;

    // A stop removes the record at once, not at its expiry.
    drop(client);
    let stopped = Instant::now();
    drop(a);
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    until(
        &runtime,
        &url,
        Duration::from_secs(2),
        "node-a removed on its stop",
        |nodes| named(nodes, "node-a").is_none(),
    )?;
    check(stopped.elapsed() < Duration::from_secs(5), || {
        format!("node-a left {:?} after its stop", stopped.elapsed())
    })?;
    Ok(())
}

/// A lease taken or ended is in the node's record well before the next heartbeat: placement
/// reads free memory from the record.
pub fn a_lease_reaches_the_registry_before_the_next_heartbeat() -> TestResult {
    let nats = nats_or_skip!();
    let url = nats.url();
    // Heartbeats 6 s apart; a change must show within 4 s of it, so only the node's own
    // refresh after the change can show it.
    let heartbeat = tasklet_cluster::Heartbeat {
        interval: Duration::from_secs(6),
        ttl: Duration::from_secs(12),
        stale_after: Duration::from_secs(20),
    };
    let soon = Duration::from_secs(4);
    let node = TestNode::with(Setup {
        cluster: Some((url.clone(), "prompt".to_owned())),
        heartbeat: Some(heartbeat),
        ..Setup::default()
    });
    let runtime = node.runtime();
    // Right after the record first appears: the next heartbeat is about 6 s away.
    until(runtime, &url, WAIT, "the node registered", |nodes| {
        named(nodes, "prompt").is_some()
    })?;
    let mut client = node.client("dev");
    let lease = client
        .lease_alloc(1 << 20, 30, None)
        .map_err(|e| e.to_string())?;
    let shown = until(runtime, &url, soon, "the lease in the record", |nodes| {
        named(nodes, "prompt").is_some_and(|n| {
            let d = &n.record.devices[0];
            d.leases == 1 && d.free_vram == d.total_vram - lease.granted_bytes
        })
    })?;
    client.mem_free(lease.lease).map_err(|e| e.to_string())?;
    let freed = until(
        runtime,
        &url,
        soon,
        "the lease gone from the record",
        |nodes| {
            named(nodes, "prompt").is_some_and(|n| {
                let d = &n.record.devices[0];
                d.leases == 0 && d.free_vram == d.total_vram
            })
        },
    )?;
    println!(
        "a lease showed in the registry {shown:?} after it was taken, its end {freed:?} after"
    );
    Ok(())
}

pub fn a_killed_node_is_gone_within_10s() -> TestResult {
    let nats = nats_or_skip!();
    let url = nats.url();
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let certs = certs();
    let (mut child, addr) =
        helper(&["serve-node", certs.path().to_str().unwrap(), &url, "doomed"])?;
    until(&runtime, &url, WAIT, "the node registered", |nodes| {
        named(nodes, "doomed").is_some_and(|n| n.record.address == addr)
    })?;
    // SIGKILL: no goodbye to NATS, as when the machine dies.
    kill(&mut child);
    let took = until(
        &runtime,
        &url,
        GONE_WITHIN,
        "the killed node gone",
        |nodes| named(nodes, "doomed").is_none(),
    )?;
    println!("a killed node left the registry {took:?} after its death");
    Ok(())
}

pub fn a_node_serves_without_nats_and_registers_when_it_comes() -> TestResult {
    let Some(binary) = NatsServer::find_binary() else {
        println!("skipped: nats-server not found (run scripts/install-nats.sh)");
        return Ok(());
    };
    let mut nats = NatsServer::not_started(binary);
    let url = nats.url();
    let node = member(&url, "patient");
    // Serving: a client is answered though NATS is not there.
    let devices = node.client("dev").inventory().map_err(|e| e.to_string())?;
    check(devices.len() == node.devices(), || format!("{devices:?}"))?;
    nats.launch();
    let took = until(
        node.runtime(),
        &url,
        WAIT,
        "registered once NATS came",
        |nodes| named(nodes, "patient").is_some(),
    )?;
    println!("registered {took:?} after NATS came up");
    Ok(())
}

/// A node whose NATS went away after it registered stops without waiting out the removal of a
/// record it cannot reach (which expires by itself): well under the 5 s it waits with NATS up.
pub fn a_node_whose_nats_is_gone_stops_at_once() -> TestResult {
    let nats = nats_or_skip!();
    let url = nats.url();
    let node = member(&url, "orphan");
    until(node.runtime(), &url, WAIT, "registered", |nodes| {
        named(nodes, "orphan").is_some()
    })?;
    drop(nats);
    // The node's connection sees the server's socket close at once; a moment for it to say so.
    std::thread::sleep(Duration::from_millis(500));
    let start = Instant::now();
    drop(node);
    let took = start.elapsed();
    println!("stopped {took:?} after the stop with NATS gone");
    check(took < Duration::from_secs(3), || {
        format!("the stop took {took:?} with NATS gone")
    })
}
