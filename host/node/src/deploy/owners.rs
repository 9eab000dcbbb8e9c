//! Which tenants pushed which deployment: what lets a tenant see and run a deployment.
//!
//! The store is content-addressed and shared: a component pushed by two tenants is stored once,
//! under one digest. What a tenant may use is a separate record, one empty file per tenant and
//! deployment, in a folder of its own beside the store's:
//!
//! ```text
//! <store>/owners/<tenant>/<deployment digest>
//! ```
//!
//! Tenant names and digests are checked spellings (`tasklet_tls::Tenant`, `Digest`) before they
//! become file names, and every file operation is relative to the folder's handle (`cap_std`),
//! so no name reaches outside it. Records are written when a push completes and never removed
//! by the node; the files found are cached in memory, so a warm run costs no file lookup.

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use tasklet_store::Digest;
use tasklet_tls::Tenant;

/// The folder under the store's root.
pub(crate) const OWNERS: &str = "owners";

pub(crate) struct Owners {
    dir: Dir,
    root: PathBuf,
    /// (tenant, deployment) pairs known to be recorded.
    known: Mutex<HashSet<(String, Digest)>>,
}

impl Owners {
    /// Opens (creating it if need be) the owners folder under `store_root`.
    pub fn open(store_root: &Path) -> io::Result<Owners> {
        let root = store_root.join(OWNERS);
        std::fs::create_dir_all(&root)?;
        let dir = Dir::open_ambient_dir(&root, ambient_authority())?;
        Ok(Owners {
            dir,
            root,
            known: Mutex::new(HashSet::new()),
        })
    }

    /// Whether `tenant` pushed deployment `digest`.
    pub fn has(&self, tenant: &Tenant, digest: &Digest) -> io::Result<bool> {
        let key = (tenant.as_str().to_owned(), *digest);
        if self.known().contains(&key) {
            return Ok(true);
        }
        let found = self.dir.try_exists(record(tenant, digest))?;
        if found {
            self.known().insert(key);
        }
        Ok(found)
    }

    /// Records that `tenant` pushed `digest`; whether it had not before. The record is on disk
    /// (file and folder synced) when this returns.
    pub fn add(&self, tenant: &Tenant, digest: &Digest) -> io::Result<bool> {
        if self.has(tenant, digest)? {
            return Ok(false);
        }
        self.dir.create_dir_all(tenant.as_str())?;
        let file = self.dir.create(record(tenant, digest))?;
        file.sync_all()?;
        // The folder's entry for the new file, made durable in its turn.
        self.dir.open(tenant.as_str())?.sync_all()?;
        self.known().insert((tenant.as_str().to_owned(), *digest));
        Ok(true)
    }

    /// How many deployments `tenant` has pushed here (0 before its first).
    pub fn count(&self, tenant: &Tenant) -> io::Result<usize> {
        match self.dir.read_dir(tenant.as_str()) {
            Ok(entries) => Ok(entries.count()),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(0),
            Err(err) => Err(err),
        }
    }

    /// The folder, for messages.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The cache; it holds no invariant a panicking holder could break, so a poisoned lock is
    /// taken all the same.
    fn known(&self) -> MutexGuard<'_, HashSet<(String, Digest)>> {
        self.known
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn record(tenant: &Tenant, digest: &Digest) -> PathBuf {
    Path::new(tenant.as_str()).join(digest.to_hex())
}
