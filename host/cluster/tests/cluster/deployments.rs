//! Deployments through the cluster: published once with the pushing tenant, fetched by that
//! tenant only, each part verified; a damaged or incomplete deployment is an error saying to
//! push it again; the blocking source a node uses answers the same.

use tasklet_cluster::{
    object_name, Blobs, ClusterDeployments, ClusterSource, Digest, Error, NatsConfig, BLOBS_BUCKET,
};
use tasklet_store::{Deployment, DeploymentSource};

use crate::support::{connect, nats_or_skip};

const MANIFEST: &[u8] = b"name = \"x\"\n[gpu]\nmax-vram = \"1MiB\"\n";

fn component() -> Vec<u8> {
    (0..300_000u32).map(|i| (i % 253) as u8).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_once_fetched_by_its_tenant_only() {
    let server = nats_or_skip!();
    let pusher = ClusterDeployments::open(&connect(&server).await)
        .await
        .unwrap();
    let component = component();
    let published = pusher
        .publish("team-7", MANIFEST, &component)
        .await
        .unwrap();
    let (expected, _) = Deployment::of(MANIFEST, &component);
    assert_eq!(published.digest, expected.digest);
    assert!(!published.already_present);
    let (_, record) = Deployment::of(MANIFEST, &component);
    assert_eq!(
        published.uploaded,
        (component.len() + MANIFEST.len() + record.len()) as u64
    );
    let again = pusher
        .publish("team-7", MANIFEST, &component)
        .await
        .unwrap();
    assert!(again.already_present && again.uploaded == 0, "{again:?}");

    // Another connection, as a node.
    let node = ClusterDeployments::open(&connect(&server).await)
        .await
        .unwrap();
    let parts = node
        .fetch("team-7", &published.digest)
        .await
        .unwrap()
        .expect("its tenant gets it");
    assert_eq!(parts.deployment, expected);
    assert_eq!(parts.manifest, MANIFEST);
    assert!(parts.component == component);
    // Another tenant knowing the digest gets what it would for a digest nobody pushed.
    assert!(node
        .fetch("other", &published.digest)
        .await
        .unwrap()
        .is_none());
    assert!(!node.owns("other", &published.digest).await.unwrap());
    assert!(node
        .fetch("team-7", &Digest::of(b"nothing"))
        .await
        .unwrap()
        .is_none());
    // Until it pushes it too: nothing new is uploaded.
    let theirs = pusher.publish("other", MANIFEST, &component).await.unwrap();
    assert!(
        !theirs.already_present && theirs.uploaded == 0,
        "{theirs:?}"
    );
    assert!(node
        .fetch("other", &published.digest)
        .await
        .unwrap()
        .is_some());

    // A tenant name that cannot be a key is refused, not mangled.
    for bad in ["a.", "A", "a b", "a>"] {
        assert!(matches!(
            pusher.publish(bad, MANIFEST, &component).await,
            Err(Error::InvalidTenant { .. })
        ));
    }

    // The node's blocking source, from a blocking thread of the runtime.
    let source = ClusterSource::new(
        NatsConfig::new(server.url()),
        tokio::runtime::Handle::current(),
    );
    let digest = published.digest;
    let (mine, foreign) = tokio::task::spawn_blocking(move || {
        (
            source.fetch("team-7", &digest),
            source.fetch("nobody", &digest),
        )
    })
    .await
    .unwrap();
    let mine = mine.unwrap().expect("fetched");
    assert_eq!(mine.manifest, MANIFEST);
    assert!(mine.component == component);
    assert!(foreign.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_or_incomplete_deployment_says_push_it_again() {
    let server = nats_or_skip!();
    let cluster = connect(&server).await;
    let deployments = ClusterDeployments::open(&cluster).await.unwrap();
    let component = component();
    let digest = deployments
        .publish("dev", MANIFEST, &component)
        .await
        .unwrap()
        .digest;
    let (deployment, _) = Deployment::of(MANIFEST, &component);

    // Its component removed by someone with access to the bucket.
    let raw = async_nats::jetstream::new(async_nats::connect(server.url()).await.unwrap());
    let store = raw.get_object_store(BLOBS_BUCKET).await.unwrap();
    store
        .delete(object_name(&deployment.component.digest).as_str())
        .await
        .unwrap();
    match deployments.fetch("dev", &digest).await {
        Err(e @ Error::BadDeployment { .. }) => {
            let message = e.to_string();
            assert!(message.contains("is not in the object store"), "{message}");
            assert!(message.contains("push it again"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // Pushing again restores it.
    deployments
        .publish("dev", MANIFEST, &component)
        .await
        .unwrap();
    assert!(deployments.fetch("dev", &digest).await.unwrap().is_some());

    // A record that is not one, stored under its own digest (so it passes the digest check).
    let junk = b"tasklet-deployment 1\nnonsense\n";
    let junk_digest = Digest::of(junk);
    Blobs::open(&cluster)
        .await
        .unwrap()
        .publish(&junk_digest, junk)
        .await
        .unwrap();
    let owners = raw.get_key_value("tasklet-owners").await.unwrap();
    owners
        .put(format!("{junk_digest}.dev"), "{}".into())
        .await
        .unwrap();
    match deployments.fetch("dev", &junk_digest).await {
        Err(e @ Error::BadDeployment { .. }) => {
            assert!(e.to_string().contains("malformed"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}
