//! A registrar outlives its NATS server: it keeps trying, and its record comes back when the
//! server does.

use std::time::{Duration, Instant};

use tasklet_cluster::{Registrar, Registry};

use crate::support::{connect, eventually, fast, nats_or_skip, record};

/// From the server's return to the record's: reconnection waits of at most 1 s, one heartbeat,
/// with room for a loaded machine.
const BACK_WITHIN: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_record_comes_back_after_nats_restarts() {
    let mut server = nats_or_skip!();
    let cluster = connect(&server).await;
    let registrar = Registrar::start(&cluster, fast(), || record("survivor", 4))
        .await
        .expect("register");

    server.kill();
    eventually(Duration::from_secs(5), "the registrar notices", || async {
        (!registrar.status().registered).then_some(())
    })
    .await;
    // Down for longer than the record's TTL: it expires on the server while it is away (the
    // store keeps the bucket).
    tokio::time::sleep(fast().ttl + Duration::from_secs(1)).await;
    let failures = registrar.status().failures;
    assert!(failures >= 1, "{:?}", registrar.status());

    server.restart();
    let since = Instant::now();
    let registry = Registry::open(&connect(&server).await)
        .await
        .expect("the bucket survived in the store")
        .with_stale_after(fast().stale_after);
    eventually(BACK_WITHIN, "the record is back", || async {
        let nodes = registry.list().await.ok()?;
        nodes
            .iter()
            .any(|n| n.record.name.as_str() == "survivor")
            .then_some(())
    })
    .await;
    println!(
        "registered again {:?} after nats-server restarted",
        since.elapsed()
    );
    // The write that put it back may have been answered after the registrar stopped waiting (a
    // busy machine): its next refresh, a heartbeat later, is what marks it registered.
    eventually(
        BACK_WITHIN,
        "the registrar knows it is registered",
        || async { registrar.status().registered.then_some(()) },
    )
    .await;
    registrar.stop().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bucket_is_created_again_when_the_server_lost_its_store() {
    let mut server = nats_or_skip!();
    let cluster = connect(&server).await;
    let registrar = Registrar::start(&cluster, fast(), || record("phoenix", 4))
        .await
        .expect("register");

    server.restart_empty();
    let reader = connect(&server).await;
    let since = Instant::now();
    let node = eventually(BACK_WITHIN, "bucket and record are back", || async {
        let registry = Registry::open(&reader).await.ok()?;
        registry.list().await.ok()?.into_iter().next()
    })
    .await;
    println!(
        "bucket and record back {:?} after an empty restart",
        since.elapsed()
    );
    assert_eq!(node.record.name.as_str(), "phoenix");
    registrar.stop().await.expect("stop");
}
