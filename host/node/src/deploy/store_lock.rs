//! One node per store folder: a node holds an exclusive lock on `node.lock` in its store for as
//! long as it runs, so that a second node given the same folder (two nodes started on one
//! machine without `--store`, which share the default) refuses to start rather than share it.
//! The store's own locks order changes only within one process; two nodes writing one folder
//! could remove each other's files mid-push.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read as _, Seek as _, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The lock file's name in the store's folder.
pub(crate) const LOCK_FILE: &str = "node.lock";

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum StoreLockError {
    #[error(
        "the store at {} is in use by another running node{}: give each node its own store folder (`tasklet node --store DIR`)",
        root.display(),
        holder.map(|pid| format!(" (process {pid})")).unwrap_or_default()
    )]
    InUse {
        root: PathBuf,
        /// The process id the holder wrote, if it could be read.
        holder: Option<u32>,
    },
    #[error("cannot lock {}: {source}; check that the store folder is one the node may write", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The lock, held until dropped (the kernel releases it when the process ends, however it
/// ends: a killed node's folder is free for its successor at once).
#[derive(Debug)]
pub(crate) struct StoreLock {
    _file: File,
}

impl StoreLock {
    /// Takes the lock of the store in `root` (an existing folder), without waiting.
    pub fn take(root: &Path) -> Result<StoreLock, StoreLockError> {
        let path = root.join(LOCK_FILE);
        let io = |source| StoreLockError::Io {
            path: path.clone(),
            source,
        };
        // Never through a link: the lock's holder writes its pid into the file.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let holder = file
                    .read_to_string(&mut text)
                    .ok()
                    .and_then(|_| text.trim().parse().ok());
                return Err(StoreLockError::InUse {
                    root: root.to_path_buf(),
                    holder,
                });
            }
            // A file system without locks (some network and FUSE mounts): the node runs
            // unguarded rather than not at all, and says so.
            Err(TryLockError::Error(source))
                if source.kind() == std::io::ErrorKind::Unsupported =>
            {
                tracing::warn!(
                    path = %path.display(),
                    "the store's file system cannot lock files: nothing keeps a second node off this store folder"
                );
            }
            Err(TryLockError::Error(source)) => return Err(io(source)),
        }
        // Who holds it, for the next one's message; the lock is what counts, not this.
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        write!(file, "{}", std::process::id()).map_err(io)?;
        Ok(StoreLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_naming_the_first_until_it_lets_go() {
        let dir = tempfile::TempDir::new().unwrap();
        let first = StoreLock::take(dir.path()).expect("the first takes it");
        let err = StoreLock::take(dir.path()).expect_err("a second is refused");
        match &err {
            StoreLockError::InUse { holder, .. } => {
                assert_eq!(*holder, Some(std::process::id()))
            }
            other => panic!("{other}"),
        }
        let line = err.to_string();
        assert!(line.contains("in use by another running node"), "{line}");
        assert!(line.contains("--store DIR"), "{line}");
        drop(first);
        StoreLock::take(dir.path()).expect("free once the first let go");
    }
}
