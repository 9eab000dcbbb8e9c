//! What the store's tests share: a store in a fresh temp folder, and paths into its layout
//! (the tests damage files on purpose, so they reach them directly).

use std::path::PathBuf;

use tasklet_store::{Digest, Store, StoreConfig};

pub struct TestStore {
    pub store: Store,
    pub dir: tempfile::TempDir,
}

pub fn open(config: StoreConfig) -> TestStore {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(dir.path(), config).expect("store opens");
    TestStore { store, dir }
}

pub fn open_default() -> TestStore {
    open(StoreConfig::default())
}

impl TestStore {
    pub fn blob_path(&self, digest: &Digest) -> PathBuf {
        self.dir.path().join("blobs/sha256").join(digest.to_hex())
    }

    pub fn record_path(&self, digest: &Digest) -> PathBuf {
        self.dir
            .path()
            .join("deployments/sha256")
            .join(digest.to_hex())
    }

    /// The names in one of the store's folders, sorted.
    pub fn names_in(&self, folder: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.dir.path().join(folder))
            .expect("folder lists")
            .map(|entry| {
                entry
                    .expect("entry")
                    .file_name()
                    .into_string()
                    .expect("UTF-8 name")
            })
            .collect();
        names.sort();
        names
    }
}

/// Bytes that differ for each `seed`.
pub fn content(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Flips one bit of the file at `path`, at `offset`.
pub fn flip_byte(path: &std::path::Path, offset: usize) {
    let mut bytes = std::fs::read(path).expect("file reads");
    bytes[offset] ^= 0x40;
    std::fs::write(path, bytes).expect("file writes");
}
