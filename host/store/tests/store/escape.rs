//! Nothing a client sends can name a file outside the store.

use crate::support::{content, open_default};
use tasklet_store::{Digest, Error, Lookup};

#[test]
fn digests_that_are_paths_or_misspelled_are_refused() {
    let good = Digest::of(b"x").to_hex();
    let refused = [
        "../x".to_string(),
        "..".into(),
        "/etc/passwd".into(),
        format!("/{}", &good[1..]),
        format!("../{}", &good[3..]),
        format!("{}/..", &good[..61]),
        good.to_uppercase(),
        format!("{}A", &good[..63]),
        good[..63].to_string(),
        format!("{good}0"),
        String::new(),
        format!("sha256:{}", &good[7..]),
        format!("{}\0", &good[..63]),
    ];
    for text in &refused {
        let err = Digest::parse(text).expect_err(text);
        assert!(err.to_string().contains("not a digest"), "{err}");
        // The same refusal through `FromStr`, and into the store's error.
        let err: Error = text.parse::<Digest>().unwrap_err().into();
        assert!(matches!(err, Error::InvalidDigest(_)));
    }
    assert_eq!(Digest::parse(&good).unwrap().to_hex(), good);
}

#[test]
fn a_symlink_planted_in_the_store_is_not_followed_out_of_it() {
    let t = open_default();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret");
    std::fs::write(&secret, b"not the store's").unwrap();
    let digest = Digest::of(b"not the store's");
    std::os::unix::fs::symlink(&secret, t.blob_path(&digest)).unwrap();

    // Said to be what it is, not a matter of permissions or free space.
    let err = t.store.read_blob(&digest).unwrap_err();
    assert!(matches!(err, Error::NotAFile { .. }), "{err:?}");
    assert!(err.to_string().contains("is not a regular file"), "{err}");
    // Nor is the link taken as the content being present.
    assert!(!t.store.contains_blob(&digest).unwrap());
    let put = t.store.put_blob(b"not the store's", None).unwrap();
    assert!(!put.already_present);
    assert_eq!(std::fs::read(&secret).unwrap(), b"not the store's");
    assert!(!std::fs::symlink_metadata(t.blob_path(&digest))
        .unwrap()
        .is_symlink());
}

#[test]
fn a_root_folder_swapped_for_a_symlink_outward_is_not_followed() {
    let t = open_default();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join(Digest::of(b"a").to_hex()), b"a").unwrap();
    // The deployments folder replaced by a link to a folder outside the root.
    let deployments = t.dir.path().join("deployments");
    std::fs::remove_dir_all(&deployments).unwrap();
    std::os::unix::fs::symlink(outside.path(), &deployments).unwrap();
    // A store opened now refuses to follow the link out of its root.
    let err = tasklet_store::Store::open(t.dir.path(), Default::default())
        .err()
        .unwrap();
    assert!(matches!(err, Error::Io { op: "create", .. }), "{err:?}");
    // The store opened before the swap holds the folder it opened (now unlinked): its writes
    // fail rather than land outside.
    assert!(t.store.push_deployment(b"manifest", b"component").is_err());
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
}

#[test]
fn engine_fingerprints_never_become_paths() {
    let t = open_default();
    let component = Digest::of(b"component");
    for engine in ["../../escape", "/abs", "a/b", "..", ""] {
        let put = t
            .store
            .compiled()
            .put(&component, engine, &content(1, 100))
            .unwrap();
        assert!(put.stored);
        match t.store.compiled().get(&component, engine).unwrap() {
            Lookup::Hit(bytes) => assert_eq!(bytes, content(1, 100)),
            other => panic!("{engine:?}: {other:?}"),
        }
    }
    assert_eq!(t.names_in("compiled").len(), 5);
    assert_eq!(
        t.names_in("").len(),
        4,
        "nothing beside the store's own folders"
    );
}

/// A store path that names a file is refused in one line saying so, and the file is left as
/// it was.
#[test]
fn a_store_path_that_is_a_file_is_refused_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("store");
    std::fs::write(&file, b"mine").unwrap();
    let err = match tasklet_store::Store::open(&file, tasklet_store::StoreConfig::default()) {
        Ok(_) => panic!("a file opened as a store"),
        Err(err) => err,
    };
    let text = err.to_string();
    assert!(
        text.contains("is a file, not a folder") && !text.contains('\n'),
        "{text}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"mine");
}
