//! Blobs by digest through the object store: published once, fetched from another connection,
//! verified on every fetch.

use tasklet_cluster::{object_name, Blobs, Digest, Error, Published, BLOBS_BUCKET};

use crate::support::{connect, nats_or_skip};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_once_fetched_anywhere() {
    let server = nats_or_skip!();
    let pusher = Blobs::open(&connect(&server).await).await.expect("open");
    // Several chunks (the store cuts at 128 KiB) and an odd tail.
    let component: Vec<u8> = (0..(1 << 20) + 3).map(|i| (i * 7 % 251) as u8).collect();
    let digest = Digest::of(&component);

    assert_eq!(
        pusher.publish(&digest, &component).await.expect("publish"),
        Published::Stored(component.len() as u64)
    );
    assert_eq!(
        pusher.publish(&digest, &component).await.expect("again"),
        Published::AlreadyPresent
    );

    // Another connection, as another node.
    let node = Blobs::open(&connect(&server).await).await.expect("open");
    assert!(node.contains(&digest).await.expect("contains"));
    let fetched = node.fetch(&digest).await.expect("fetch").expect("present");
    assert!(fetched == component, "the bytes come back as published");

    let absent = Digest::of(b"never pushed");
    assert!(!node.contains(&absent).await.expect("contains"));
    assert!(node.fetch(&absent).await.expect("fetch").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_is_streamed_and_checked() {
    let server = nats_or_skip!();
    let blobs = Blobs::open(&connect(&server).await).await.expect("open");
    let manifest = b"[tasklet]\nname = \"x\"\n".repeat(20_000);
    let digest = Digest::of(&manifest);
    let mut reader = &manifest[..];
    assert_eq!(
        blobs
            .publish_reader(&digest, &mut reader)
            .await
            .expect("publish"),
        Published::Stored(manifest.len() as u64)
    );
    let mut reader = &manifest[..];
    assert_eq!(
        blobs
            .publish_reader(&digest, &mut reader)
            .await
            .expect("again"),
        Published::AlreadyPresent
    );
    assert_eq!(blobs.fetch(&digest).await.unwrap().unwrap(), manifest);

    // Other bytes under a digest: refused, and nothing stays behind under that name.
    let claimed = Digest::of(b"what was promised");
    let mut other = &b"what was sent"[..];
    match blobs.publish_reader(&claimed, &mut other).await {
        Err(Error::WrongBytes { expected, actual }) => {
            assert_eq!(expected, claimed.to_hex());
            assert_eq!(actual, Digest::of(b"what was sent").to_hex());
        }
        other => panic!("{other:?}"),
    }
    assert!(!blobs.contains(&claimed).await.unwrap());
    match blobs.publish(&claimed, b"what was sent").await {
        Err(Error::WrongBytes { .. }) => {}
        other => panic!("{other:?}"),
    }
    assert!(!blobs.contains(&claimed).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_stored_by_someone_else_under_a_digest_are_refused_on_fetch() {
    let server = nats_or_skip!();
    let cluster = connect(&server).await;
    let blobs = Blobs::open(&cluster).await.expect("open");
    let digest = Digest::of(b"the real component");

    // Another writer with access to the bucket puts other bytes under the name.
    let raw = async_nats::jetstream::new(async_nats::connect(server.url()).await.unwrap());
    let store = raw.get_object_store(BLOBS_BUCKET).await.unwrap();
    let mut forged = &b"a forged component"[..];
    store
        .put(object_name(&digest).as_str(), &mut forged)
        .await
        .unwrap();

    match blobs.fetch(&digest).await {
        Err(e @ Error::DigestMismatch { .. }) => {
            let message = e.to_string();
            assert!(message.contains(&digest.to_hex()), "{message}");
            assert!(message.contains("push it again"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_size_limit_holds_both_ways() {
    let server = nats_or_skip!();
    let cluster = connect(&server).await;
    let roomy = Blobs::open(&cluster).await.expect("open");
    let small = roomy.clone().with_max_bytes(10);
    let big = vec![1u8; 11];
    let digest = Digest::of(&big);

    assert!(matches!(
        small.publish(&digest, &big).await,
        Err(Error::BlobTooLarge {
            size: 11,
            max: 10,
            ..
        })
    ));
    let mut reader = &big[..];
    assert!(matches!(
        small.publish_reader(&digest, &mut reader).await,
        Err(Error::BlobTooLarge { max: 10, .. })
    ));
    assert!(!roomy.contains(&digest).await.unwrap());

    roomy
        .publish(&digest, &big)
        .await
        .expect("within the default limit");
    assert!(matches!(
        small.fetch(&digest).await,
        Err(Error::BlobTooLarge {
            size: 11,
            max: 10,
            ..
        })
    ));
}
