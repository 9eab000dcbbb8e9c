//! Registration, listing, expiry, draining, stop and watch against a real nats-server.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use tasklet_cluster::{
    choose, Heartbeat, Registrar, Registry, RegistryEvent, Requirement, NODES_BUCKET,
};

use crate::support::{connect, eventually, fast, nats_or_skip, record, slow};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registered_nodes_are_listed_and_placed_by_free_vram() {
    let server = nats_or_skip!();
    println!("nats-server: {}", server.version());
    let cluster = connect(&server).await;
    let mut registrars = Vec::new();
    for (name, free_gib) in [("small", 2), ("large", 12), ("medium", 6)] {
        let registrar = Registrar::start(&cluster, fast(), move || record(name, free_gib))
            .await
            .expect("register");
        assert!(registrar.status().registered);
        registrars.push(registrar);
    }

    let registry = Registry::open(&cluster)
        .await
        .expect("open registry")
        .with_stale_after(fast().stale_after);
    let nodes = registry.list().await.expect("list");
    let names: Vec<_> = nodes.iter().map(|n| n.record.name.to_string()).collect();
    assert_eq!(names, ["large", "medium", "small"]);
    for node in &nodes {
        assert!(node.age < fast().stale_after, "{node:?}");
        assert!(
            node.record.heartbeat_unix_ms > 0,
            "the registrar stamps its writes"
        );
        let expected = record(node.record.name.as_str(), 0);
        assert_eq!(node.record.address, expected.address);
        assert_eq!(node.record.cert_sha256, expected.cert_sha256);
    }

    let order = |text: &str| {
        let requirement: Requirement = text.parse().unwrap();
        choose(&requirement, &nodes)
            .iter()
            .map(|c| c.node.name.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(order("gpu"), ["large", "medium", "small"]);
    assert_eq!(order("gpu:vram=4GiB"), ["large", "medium"]);
    assert_eq!(order("gpu:vram=8GiB,cc>=9.0"), ["large"]);
    assert!(order("gpu:vram=13GiB").is_empty());
    assert!(
        order("gpu:backend=cuda").is_empty(),
        "emulators are not cuda"
    );

    for registrar in registrars {
        registrar.stop().await.expect("stop");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_stops_refreshing_is_gone_within_ten_seconds() {
    let server = nats_or_skip!();
    let cluster = connect(&server).await;
    let registrar = Registrar::start(&cluster, Heartbeat::default(), || record("doomed", 4))
        .await
        .expect("register");
    // A reader that never judges age itself: the record must be removed by the server.
    let registry = Registry::open(&cluster)
        .await
        .expect("open")
        .with_stale_after(Duration::from_secs(3600));
    assert_eq!(registry.list().await.expect("list").len(), 1);

    // Dropped without stop: heartbeats end as if the process had been killed.
    drop(registrar);
    let since = Instant::now();
    eventually(Duration::from_secs(12), "the record expires", || async {
        registry
            .list()
            .await
            .expect("list")
            .is_empty()
            .then_some(())
    })
    .await;
    let gone_after = since.elapsed();
    println!("gone {gone_after:?} after the last heartbeat stopped");
    assert!(gone_after <= Duration::from_secs(10), "{gone_after:?}");
    // And not much before the TTL: the record lived on its heartbeats, not by chance.
    assert!(gone_after >= Duration::from_secs(3), "{gone_after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_is_published_at_once_and_stop_removes_the_record() {
    let server = nats_or_skip!();
    let cluster = connect(&server).await;
    // What shows up quickly came from set_draining, not from a beat.
    let slow = slow();
    let registrar = Registrar::start(&cluster, slow, || record("drainer", 8))
        .await
        .expect("register");
    let other = Registrar::start(&cluster, slow, || record("steady", 1))
        .await
        .expect("register");
    let registry = Registry::open(&cluster).await.expect("open");

    registrar.set_draining(true);
    eventually(Duration::from_secs(2), "draining is published", || async {
        let node = registry.get(registrar.name()).await.expect("get")?;
        node.record.draining.then_some(())
    })
    .await;
    let nodes = registry.list().await.expect("list");
    let any: Requirement = "gpu".parse().unwrap();
    let chosen: Vec<_> = choose(&any, &nodes)
        .iter()
        .map(|c| c.node.name.to_string())
        .collect();
    assert_eq!(chosen, ["steady"], "a draining node is not offered");

    registrar.stop().await.expect("stop");
    let names: Vec<_> = registry
        .list()
        .await
        .expect("list")
        .into_iter()
        .map(|n| n.record.name.to_string())
        .collect();
    assert_eq!(names, ["steady"], "a stopped node leaves at once");
    other.stop().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_is_one_live_nodes_and_a_stop_removes_only_its_own_record() {
    let server = nats_or_skip!();
    let cluster = connect(&server).await;
    let slow = slow();
    let first = Registrar::start(&cluster, slow, || record("twin", 8))
        .await
        .expect("register");
    // Another node (another address) of the same name is refused, naming the holder.
    let elsewhere = || {
        let mut other = record("twin", 8);
        other.address = "127.0.0.1:5702".into();
        other
    };
    let err = match Registrar::start(&cluster, slow, elsewhere).await {
        Err(err) => err.to_string(),
        Ok(_) => panic!("a second live node of one name registered"),
    };
    assert!(
        err.contains("another live node has the name twin") && err.contains("127.0.0.1:5701"),
        "{err}"
    );
    // The same node again (same address and certificate, as after a kill and restart) is not
    // another: it registers, and its write is now the record's last.
    let again = Registrar::start(&cluster, slow, || record("twin", 4))
        .await
        .expect("the same node registers again");
    let registry = Registry::open(&cluster).await.expect("open");
    // The first one's stop leaves the record its successor wrote.
    first.stop().await.expect("stop");
    let node = registry
        .get(&tasklet_cluster::NodeName::new("twin").unwrap())
        .await
        .expect("get")
        .expect("the successor's record is left in place");
    assert_eq!(node.record.devices[0].free_vram, 4 << 30);
    again.stop().await.expect("stop");
    assert!(registry.list().await.expect("list").is_empty());
    // With the name free, the other node registers.
    let other = Registrar::start(&cluster, slow, elsewhere)
        .await
        .expect("a free name registers");
    other.stop().await.expect("stop");
}

/// Two nodes of one name that both got past the start's check (started at the same moment):
/// a registered node that finds the other's write under its name says where that node is in
/// its status (and warns, once), writes its own record back at its next heartbeat, and drops
/// the contest once no other write has been found for as long as a record stays live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_finds_another_writing_its_name_says_so_and_writes_its_record_back() {
    let server = nats_or_skip!();
    let cluster = connect(&server).await;
    let registrar = Registrar::start(&cluster, fast(), || record("twin", 8))
        .await
        .expect("register");
    assert_eq!(registrar.status().contested_by, None);
    // The other node's write, as its registrar would make it: live, at another address.
    let raw = async_nats::jetstream::new(async_nats::connect(server.url()).await.unwrap());
    let kv = raw
        .get_key_value(NODES_BUCKET)
        .await
        .expect("the registry's bucket");
    let mut other = record("twin", 2);
    other.address = "127.0.0.1:5702".into();
    other.heartbeat_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    kv.put("twin", other.to_json().unwrap().into())
        .await
        .expect("the other node's write");
    eventually(
        Duration::from_secs(5),
        "the registrar names the other writer",
        || async {
            (registrar.status().contested_by.as_deref() == Some("127.0.0.1:5702")).then_some(())
        },
    )
    .await;
    let registry = Registry::open(&cluster).await.expect("open");
    let name = tasklet_cluster::NodeName::new("twin").unwrap();
    eventually(
        Duration::from_secs(5),
        "this node's record written back",
        || async {
            let node = registry.get(&name).await.ok()??;
            (node.record.address == "127.0.0.1:5701").then_some(())
        },
    )
    .await;
    // Nobody else writes now: once no other write has been found for `stale_after` (5 s),
    // the contest is over.
    assert_eq!(
        registrar.status().contested_by.as_deref(),
        Some("127.0.0.1:5702"),
        "the contest holds while the other's record could still be live"
    );
    eventually(Duration::from_secs(10), "the contest dropped", || async {
        registrar.status().contested_by.is_none().then_some(())
    })
    .await;
    assert!(registrar.status().registered);
    registrar.stop().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_publishes_a_change_before_the_next_heartbeat() {
    let server = nats_or_skip!();
    let cluster = connect(&server).await;
    let free_gib = Arc::new(AtomicU64::new(8));
    let source = {
        let free_gib = free_gib.clone();
        move || record("busy", free_gib.load(Ordering::Relaxed))
    };
    let slow = slow();
    let registrar = Registrar::start(&cluster, slow, source)
        .await
        .expect("register");
    let registry = Registry::open(&cluster).await.expect("open");

    free_gib.store(1, Ordering::Relaxed);
    registrar.refresh();
    eventually(
        Duration::from_secs(2),
        "the new free VRAM is published",
        || async {
            let node = registry.get(registrar.name()).await.expect("get")?;
            (node.record.devices[0].free_vram == 1 << 30).then_some(())
        },
    )
    .await;
    registrar.stop().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_sees_nodes_arrive_beat_and_leave() {
    let server = nats_or_skip!();
    let cluster = connect(&server).await;
    let early = Registrar::start(&cluster, fast(), || record("early", 4))
        .await
        .expect("register");
    let registry = Registry::open(&cluster)
        .await
        .expect("open")
        .with_stale_after(fast().stale_after);
    let mut events = registry.watch().await.expect("watch");
    // The node registered before the watch is reported first.
    match next(&mut events).await {
        RegistryEvent::Up(node) => assert_eq!(node.record.name.as_str(), "early"),
        other => panic!("{other:?}"),
    }
    let late = Registrar::start(&cluster, fast(), || record("late", 4))
        .await
        .expect("register");
    late.stop().await.expect("stop");
    // Heartbeats of `early` interleave; `late` comes and goes, in that order.
    let mut seen = Vec::new();
    for _ in 0..50 {
        match next(&mut events).await {
            RegistryEvent::Up(node)
                if node.record.name.as_str() == "late" && seen.last() != Some(&"up") =>
            {
                seen.push("up");
            }
            RegistryEvent::Gone(name) if name.as_str() == "late" => {
                seen.push("gone");
                break;
            }
            _ => {}
        }
    }
    assert_eq!(seen, ["up", "gone"]);
    early.stop().await.expect("stop");
}

async fn next(
    events: &mut BoxStream<'static, tasklet_cluster::Result<RegistryEvent>>,
) -> RegistryEvent {
    tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .expect("an event within 5 s")
        .expect("the watch goes on")
        .expect("no watch error")
}

/// A listing is a read: the consumer it reads through is deleted at once, not left for the
/// server's own cleanup 30 s later (meanwhile matched against every heartbeat).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_leaves_no_consumer_behind() {
    let server = nats_or_skip!();
    let cluster = connect(&server).await;
    let registrar = Registrar::start(&cluster, fast(), || record("first", 4))
        .await
        .expect("register");
    let raw = async_nats::jetstream::new(async_nats::connect(server.url()).await.unwrap());
    let stream = format!("KV_{NODES_BUCKET}");
    let consumers = || async {
        let stream = raw.get_stream(&stream).await.expect("the bucket's stream");
        stream.cached_info().state.consumer_count
    };
    for _ in 0..5 {
        // A fresh client each time, gone right after, as one command invocation is.
        let cluster = connect(&server).await;
        let registry = Registry::open(&cluster).await.expect("open");
        assert_eq!(registry.list().await.expect("list").len(), 1);
    }
    eventually(
        Duration::from_secs(3),
        "no listing consumer left",
        || async { (consumers().await == 0).then_some(()) },
    )
    .await;
    registrar.stop().await.expect("stop");
}
