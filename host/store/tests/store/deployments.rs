//! Deployments: push, find, list, delete; blobs shared between deployments.

use std::time::{Duration, SystemTime};

use crate::support::{content, flip_byte, open, open_default};
use tasklet_store::{Digest, Error, Store, StoreConfig};

const MANIFEST: &[u8] = b"name = \"iota\"\ncomponent = \"iota.wasm\"\n";

#[test]
fn push_then_run_finds_manifest_and_component_by_one_digest() {
    let t = open_default();
    let component = content(1, 100_000);
    let mut writer = t.store.deployment_writer(MANIFEST).unwrap();
    for chunk in component.chunks(10_000) {
        writer.write_chunk(chunk).unwrap();
    }
    let pushed = writer.finish().unwrap();
    assert!(!pushed.already_present);
    let digest = pushed.deployment.digest;

    // What `tasklet deploy run DIGEST` does with the printed digest.
    let parsed = Digest::parse(&digest.to_string()).unwrap();
    let deployment = t.store.deployment(&parsed).unwrap();
    assert_eq!(deployment, pushed.deployment);
    assert_eq!(deployment.component.digest, Digest::of(&component));
    assert_eq!(deployment.component.len, component.len() as u64);
    assert_eq!(deployment.manifest.digest, Digest::of(MANIFEST));
    assert_eq!(
        t.store.read_blob(&deployment.manifest.digest).unwrap(),
        MANIFEST
    );
    assert_eq!(
        t.store.read_blob(&deployment.component.digest).unwrap(),
        component
    );
    assert!(t.store.has_deployment(&digest).unwrap());

    // The digest names the record, which names both blobs.
    let record = std::fs::read_to_string(t.record_path(&digest)).unwrap();
    assert_eq!(Digest::of(record.as_bytes()), digest);
    assert!(record.contains(&deployment.component.digest.to_hex()));
    assert!(record.contains(&deployment.manifest.digest.to_hex()));
    assert!(t.names_in("tmp").is_empty());
}

#[test]
fn pushing_the_same_deployment_again_is_a_no_op() {
    let t = open_default();
    let first = t
        .store
        .push_deployment(MANIFEST, &content(2, 5_000))
        .unwrap();
    let second = t
        .store
        .push_deployment(MANIFEST, &content(2, 5_000))
        .unwrap();
    assert!(!first.already_present);
    assert!(second.already_present);
    assert_eq!(first.deployment, second.deployment);
    assert_eq!(t.names_in("deployments/sha256").len(), 1);
    assert_eq!(t.names_in("blobs/sha256").len(), 2);
    assert!(t.names_in("tmp").is_empty());
}

#[test]
fn one_component_with_two_manifests_is_two_deployments_sharing_a_blob() {
    let t = open_default();
    let component = content(3, 5_000);
    let narrow = t
        .store
        .push_deployment(b"name = \"a\"\n", &component)
        .unwrap()
        .deployment;
    let wide = t
        .store
        .push_deployment(b"name = \"a\"\n[gpu]\n", &component)
        .unwrap()
        .deployment;
    assert_ne!(narrow.digest, wide.digest);
    assert_eq!(narrow.component, wide.component);
    assert_eq!(t.names_in("blobs/sha256").len(), 3);

    // Deleting one keeps the component the other still refers to.
    let deleted = t.store.delete_deployment(&narrow.digest).unwrap();
    assert_eq!(deleted.removed_blobs, [narrow.manifest.digest]);
    assert!(t
        .store
        .deployment(&narrow.digest)
        .unwrap_err()
        .is_not_found());
    assert!(t.store.has_deployment(&wide.digest).unwrap());
    assert_eq!(
        t.store.read_blob(&wide.component.digest).unwrap(),
        component
    );

    // Deleting the other removes the rest.
    let deleted = t.store.delete_deployment(&wide.digest).unwrap();
    assert_eq!(deleted.removed_blobs.len(), 2);
    assert!(t.names_in("blobs/sha256").is_empty());
    assert!(t.names_in("deployments/sha256").is_empty());
}

#[test]
fn deleting_removes_the_components_compiled_forms() {
    let t = open_default();
    let d = t
        .store
        .push_deployment(MANIFEST, &content(4, 1_000))
        .unwrap()
        .deployment;
    t.store
        .compiled()
        .put(&d.component.digest, "engine-a", b"compiled a")
        .unwrap();
    t.store
        .compiled()
        .put(&d.component.digest, "engine-b", b"compiled b")
        .unwrap();
    t.store
        .compiled()
        .put(&Digest::of(b"other"), "engine-a", b"other")
        .unwrap();
    let deleted = t.store.delete_deployment(&d.digest).unwrap();
    assert_eq!(deleted.removed_compiled, 2);
    assert_eq!(t.names_in("compiled").len(), 1);
}

#[test]
fn listing_shows_every_deployment_in_digest_order() {
    let t = open_default();
    let mut pushed: Vec<_> = (0..5)
        .map(|i| {
            t.store
                .push_deployment(MANIFEST, &content(i, 100 + usize::from(i)))
                .unwrap()
                .deployment
        })
        .collect();
    pushed.sort_by_key(|d| d.digest);
    // A file the store did not write is left alone and not listed.
    std::fs::write(t.dir.path().join("deployments/sha256/README"), b"hello").unwrap();
    let listing = t.store.deployments().unwrap();
    assert_eq!(listing.deployments, pushed);
    assert!(listing.problems.is_empty());

    t.store.delete_deployment(&pushed[2].digest).unwrap();
    assert_eq!(t.store.deployments().unwrap().deployments.len(), 4);
}

#[test]
fn unknown_deployments_are_not_found() {
    let t = open_default();
    let digest = Digest::of(b"never pushed");
    assert!(t.store.deployment(&digest).unwrap_err().is_not_found());
    assert!(!t.store.has_deployment(&digest).unwrap());
    let err = t.store.delete_deployment(&digest).unwrap_err();
    assert!(err.is_not_found());
    assert!(err.to_string().contains("tasklet deploy push"), "{err}");
}

#[test]
fn a_damaged_record_is_removed_and_reported() {
    let t = open_default();
    let d = t
        .store
        .push_deployment(MANIFEST, &content(5, 1_000))
        .unwrap()
        .deployment;
    let other = t
        .store
        .push_deployment(b"other", &content(6, 1_000))
        .unwrap()
        .deployment;
    flip_byte(&t.record_path(&d.digest), 30);

    let listing = t.store.deployments().unwrap();
    assert_eq!(listing.deployments, [other]);
    assert!(matches!(
        listing.problems[..],
        [Error::Corrupt { removed: true, .. }]
    ));
    assert!(!t.record_path(&d.digest).exists());
    assert!(!t.store.has_deployment(&d.digest).unwrap());

    // Pushing again restores it under the same digest.
    let again = t
        .store
        .push_deployment(MANIFEST, &content(5, 1_000))
        .unwrap();
    assert_eq!(again.deployment, d);
    assert!(!again.already_present);
}

#[test]
fn a_deployment_missing_a_blob_is_not_had_and_a_push_restores_it() {
    let t = open_default();
    let d = t
        .store
        .push_deployment(MANIFEST, &content(7, 1_000))
        .unwrap()
        .deployment;
    std::fs::remove_file(t.blob_path(&d.component.digest)).unwrap();
    assert!(!t.store.has_deployment(&d.digest).unwrap());
    assert!(t
        .store
        .read_blob(&d.component.digest)
        .unwrap_err()
        .is_not_found());
    let again = t
        .store
        .push_deployment(MANIFEST, &content(7, 1_000))
        .unwrap();
    assert!(!again.already_present, "the push restored the component");
    assert!(t.store.has_deployment(&d.digest).unwrap());
}

#[test]
fn oversized_manifest_or_component_leaves_nothing() {
    let t = open(StoreConfig {
        max_blob_bytes: 64,
        ..StoreConfig::default()
    });
    assert!(matches!(
        t.store.deployment_writer(&[b'x'; 65]),
        Err(Error::TooLarge { limit: 64, .. })
    ));
    let mut writer = t.store.deployment_writer(MANIFEST[..30].as_ref()).unwrap();
    writer.write_chunk(&[0; 64]).unwrap();
    assert!(matches!(
        writer.write_chunk(&[0]),
        Err(Error::TooLarge { .. })
    ));
    drop(writer);
    assert!(t.names_in("tmp").is_empty());
    assert!(t.names_in("blobs/sha256").is_empty());
    assert!(t.names_in("deployments/sha256").is_empty());
}

#[test]
fn deployments_survive_reopening_and_stale_temp_files_are_cleared() {
    let t = open_default();
    let d = t
        .store
        .push_deployment(MANIFEST, &content(8, 1_000))
        .unwrap()
        .deployment;
    // One write a crash left behind long ago, one that may still be going on.
    let stale = t.dir.path().join("tmp/stale");
    let fresh = t.dir.path().join("tmp/fresh");
    std::fs::write(&stale, b"partial").unwrap();
    std::fs::write(&fresh, b"partial").unwrap();
    let long_ago = SystemTime::now() - Duration::from_secs(2 * 60 * 60);
    std::fs::File::options()
        .write(true)
        .open(&stale)
        .unwrap()
        .set_modified(long_ago)
        .unwrap();

    let reopened = Store::open(t.dir.path(), StoreConfig::default()).unwrap();
    assert_eq!(reopened.deployment(&d.digest).unwrap(), d);
    assert!(!stale.exists());
    assert!(fresh.exists());
}
