//! Each way of not reaching a usable cluster is a typed error that says what to do.

use async_nats::jetstream::kv;
use tasklet_cluster::{Cluster, Error, Heartbeat, NatsConfig, Registrar, Registry, NODES_BUCKET};

use crate::support::{connect, free_port, nats_or_skip, record};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_listening_is_unreachable_and_says_how_to_start_a_server() {
    let url = format!("nats://127.0.0.1:{}", free_port());
    let err = Cluster::connect(&NatsConfig::new(&url)).await.unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
    assert!(message.contains(&url), "{message}");
    assert!(message.contains("nats-server -js"), "{message}");
    assert!(!message.contains('\n'), "{message}");
}

/// A port that accepts connections and says nothing (another service's, here a silent one):
/// not "unreachable", which would send the user looking for a server that is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_that_is_not_nats_is_told_apart_from_nothing_listening() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("nats://{}", listener.local_addr().unwrap());
    // Accepted and held open, silent, as an HTTP server waiting for a request does.
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            open.push(stream);
        }
    });
    let mut config = NatsConfig::new(&url);
    config.connect_timeout = std::time::Duration::from_millis(500);
    let err = Cluster::connect(&config).await.unwrap_err();
    held.abort();
    let message = err.to_string();
    assert!(matches!(err, Error::NotNats { .. }), "{err:?}");
    assert!(message.contains(&url), "{message}");
    assert!(message.contains("client port"), "{message}");
    assert!(!message.contains('\n'), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_in_the_url_never_shows() {
    let url = format!("nats://alice:hunter2@127.0.0.1:{}", free_port());
    let err = Cluster::connect(&NatsConfig::new(&url)).await.unwrap_err();
    let message = err.to_string();
    assert!(!message.contains("hunter2"), "{message}");
    assert!(message.contains("alice:***@"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_url_is_invalid() {
    let err = Cluster::connect(&NatsConfig::new("nats://[::1:4222"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidUrl { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_credentials_file_is_named() {
    let mut config = NatsConfig::new(format!("nats://127.0.0.1:{}", free_port()));
    config.credentials = Some("/nonexistent/tasklet.creds".into());
    let err = Cluster::connect(&config).await.unwrap_err();
    assert!(matches!(err, Error::File { .. }), "{err:?}");
    assert!(
        err.to_string().contains("/nonexistent/tasklet.creds"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_are_unauthorized_and_right_ones_work() {
    let server = nats_or_skip!(jetstream: true, args: ["--user", "alice", "--pass", "hunter2"]);
    let wrong = format!("nats://alice:guess@127.0.0.1:{}", server.port());
    let err = Cluster::connect(&NatsConfig::new(&wrong))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unauthorized { .. }), "{err:?}");
    assert!(!err.to_string().contains("guess"), "{err}");

    let none = Cluster::connect(&NatsConfig::new(server.url()))
        .await
        .unwrap_err();
    assert!(matches!(none, Error::Unauthorized { .. }), "{none:?}");

    let right = format!("nats://alice:hunter2@127.0.0.1:{}", server.port());
    let cluster = Cluster::connect(&NatsConfig::new(&right))
        .await
        .expect("connect");
    let registrar = Registrar::start(&cluster, Heartbeat::default(), || record("authed", 1))
        .await
        .expect("register with credentials");
    registrar.stop().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_jetstream_is_refused() {
    let server = nats_or_skip!(jetstream: false);
    let err = Cluster::connect(&NatsConfig::new(server.url()))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::JetStreamDisabled { .. }), "{err:?}");
    assert!(err.to_string().contains("-js"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_before_any_node_registered_is_bucket_missing() {
    let server = nats_or_skip!();
    let cluster = connect(&server).await;
    let err = Registry::open(&cluster).await.err().expect("no bucket yet");
    assert!(matches!(err, Error::BucketMissing { .. }), "{err:?}");
    assert!(err.to_string().contains("tasklet node --nats"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_without_per_key_expiry_is_refused() {
    let server = nats_or_skip!();
    let raw = async_nats::jetstream::new(async_nats::connect(server.url()).await.unwrap());
    raw.create_key_value(kv::Config {
        bucket: NODES_BUCKET.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let cluster = connect(&server).await;
    let err = Registrar::start(&cluster, Heartbeat::default(), || record("n", 1))
        .await
        .err()
        .expect("refused");
    assert!(matches!(err, Error::BucketMisconfigured { .. }), "{err:?}");
    assert!(err.to_string().contains("nats kv del"), "{err}");
}
