//! The store itself: its root opened once, its folders, and the locks that order changes to
//! them.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use cap_std::ambient_authority;
use cap_std::fs::{Dir, Metadata};

use crate::area::{same_file, Area};
use crate::config::StoreConfig;
use crate::error::Error;
use crate::layout::{BLOBS, COMPILED, DEPLOYMENTS, TMP};
use crate::temp::STALE_AFTER;

/// A content-addressed store in one folder. Cloning it is cheap and shares it: open one
/// `Store` per folder and clone it, since its locks order changes only among its clones.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) root: PathBuf,
    pub(crate) config: StoreConfig,
    pub(crate) blobs: Area,
    pub(crate) deployments: Area,
    pub(crate) compiled: Area,
    pub(crate) tmp: Area,
    /// Held while names in `blobs/` and `deployments/` are added or removed. Writes stream
    /// into `tmp/` without it; only their renames take it. It keeps a deletion from removing
    /// a blob that a push is about to reference, and a damaged file's removal from removing
    /// the good copy a push just put in its place.
    namespace: Mutex<()>,
    /// Held while compiled-cache entries are added, evicted or removed.
    cache: Mutex<()>,
}

impl Store {
    /// Opens the store in `root`, creating the folder and its layout if need be.
    ///
    /// This is the one use of ambient authority: every later file operation is relative to
    /// the folder opened here. Files left in `tmp/` by writes that can no longer finish (a
    /// crash) are removed.
    pub fn open(root: impl AsRef<Path>, config: StoreConfig) -> Result<Store, Error> {
        let root = root.as_ref().to_path_buf();
        let open_error = |source| Error::Open {
            root: root.clone(),
            source,
        };
        Store::make_folder(&root)?;
        let dir = Dir::open_ambient_dir(&root, ambient_authority()).map_err(open_error)?;
        let inner = Inner {
            blobs: Area::create(&dir, &root, BLOBS)?,
            deployments: Area::create(&dir, &root, DEPLOYMENTS)?,
            compiled: Area::create(&dir, &root, COMPILED)?,
            tmp: Area::create(&dir, &root, TMP)?,
            root,
            config,
            namespace: Mutex::new(()),
            cache: Mutex::new(()),
        };
        inner.remove_stale_temp_files()?;
        Ok(Store {
            inner: Arc::new(inner),
        })
    }

    /// Makes the store's folder at `root` if it is missing, as [`Store::open`] does first, and
    /// touches nothing in it: for a caller that must hold the folder (a lock file in it) before
    /// the store is opened, since opening tidies it (removes stale temporary files).
    pub fn make_folder(root: impl AsRef<Path>) -> Result<(), Error> {
        let root = root.as_ref();
        if root.exists() && !root.is_dir() {
            return Err(Error::NotAFolder {
                root: root.to_path_buf(),
            });
        }
        std::fs::create_dir_all(root).map_err(|source| Error::Open {
            root: root.to_path_buf(),
            source,
        })
    }

    /// The store's folder.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The store's limits.
    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }
}

impl Inner {
    /// Takes the namespace lock. The lock guards no data, so a thread that panicked while
    /// holding it left nothing half-done in memory and the lock is taken all the same.
    pub(crate) fn namespace(&self) -> MutexGuard<'_, ()> {
        self.namespace
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes the compiled-cache lock (see [`Inner::namespace`] on poisoning).
    pub(crate) fn cache(&self) -> MutexGuard<'_, ()> {
        self.cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Removes `name` from `area` if it is still the file `found` (opened and found damaged),
    /// and not a good copy renamed over it since. The caller holds the lock guarding `area`.
    pub(crate) fn remove_if_same(
        &self,
        area: &Area,
        name: &str,
        found: &Metadata,
    ) -> Result<(), Error> {
        match area.metadata(name)? {
            Some(now) if same_file(&now, found) => {
                area.remove(name)?;
                area.sync()
            }
            _ => Ok(()),
        }
    }

    fn remove_stale_temp_files(&self) -> Result<(), Error> {
        let now = SystemTime::now();
        for entry in self.tmp.files()? {
            let age = now.duration_since(entry.modified).unwrap_or_default();
            if age >= STALE_AFTER {
                self.tmp.remove(&entry.name)?;
            }
        }
        Ok(())
    }
}
