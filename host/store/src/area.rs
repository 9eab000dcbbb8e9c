//! One folder of a store, and the file operations on it that the rest of the crate uses.
//!
//! An [`Area`] holds a `cap_std` directory handle opened beneath the store's root: every name
//! is resolved relative to it, and `cap_std` refuses any resolution (a symlink included) that
//! would leave the root. Each operation turns an `io::Error` into an [`Error`] naming the full
//! path, which is kept for messages only and never opened.

use std::io;
use std::path::PathBuf;
use std::time::SystemTime;

use cap_std::fs::{Dir, File, Metadata};

use crate::error::Error;

pub(crate) struct Area {
    pub(crate) dir: Dir,
    /// The folder's path, for messages.
    path: PathBuf,
}

/// A file found in an area.
pub(crate) struct Entry {
    pub(crate) name: String,
    pub(crate) len: u64,
    pub(crate) modified: SystemTime,
}

impl Area {
    /// Creates `rel` beneath `root` (and the folders above it) if need be, and opens it.
    pub(crate) fn create(
        root: &Dir,
        root_path: &std::path::Path,
        rel: &str,
    ) -> Result<Area, Error> {
        let path = root_path.join(rel);
        root.create_dir_all(rel)
            .map_err(|source| io_error("create", &path, source))?;
        let dir = root
            .open_dir(rel)
            .map_err(|source| io_error("open", &path, source))?;
        Ok(Area { dir, path })
    }

    /// The full path of `name`, for messages.
    pub(crate) fn path_of(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    pub(crate) fn error(&self, op: &'static str, name: &str, source: io::Error) -> Error {
        io_error(op, &self.path_of(name), source)
    }

    /// Opens `name` for reading: `None` if there is nothing by that name, an error if what is
    /// there is not a regular file (a folder, a device) or cannot be opened.
    pub(crate) fn open_file(&self, name: &str) -> Result<Option<(File, Metadata)>, Error> {
        let file = match self.dir.open(name) {
            Ok(file) => file,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(err) if is_a_directory(&err) => {
                return Err(Error::NotAFile {
                    path: self.path_of(name),
                })
            }
            Err(err) => {
                // A symbolic link (which the store does not follow out of its folder), or
                // anything else the store never writes.
                if matches!(self.dir.symlink_metadata(name), Ok(m) if !m.is_file()) {
                    return Err(Error::NotAFile {
                        path: self.path_of(name),
                    });
                }
                return Err(self.error("open", name, err));
            }
        };
        let metadata = file
            .metadata()
            .map_err(|err| self.error("inspect", name, err))?;
        if !metadata.is_file() {
            return Err(Error::NotAFile {
                path: self.path_of(name),
            });
        }
        Ok(Some((file, metadata)))
    }

    /// What is at `name` itself (a symlink is not followed): `None` if nothing is.
    pub(crate) fn metadata(&self, name: &str) -> Result<Option<Metadata>, Error> {
        match self.dir.symlink_metadata(name) {
            Ok(metadata) => Ok(Some(metadata)),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(self.error("inspect", name, err)),
        }
    }

    /// Removes the file `name`; `false` if it was already gone.
    pub(crate) fn remove(&self, name: &str) -> Result<bool, Error> {
        match self.dir.remove_file(name) {
            Ok(()) => Ok(true),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(err) => Err(self.error("remove", name, err)),
        }
    }

    /// Makes the folder's entries (names added, renamed or removed) durable.
    pub(crate) fn sync(&self) -> Result<(), Error> {
        // The handle itself may be a path-only descriptor (`cap_std` opens folders that way
        // where it can), which fsync refuses; the folder opened for reading is one it accepts.
        let sync = || self.dir.open(".")?.sync_all();
        sync().map_err(|source| io_error("sync", &self.path, source))
    }

    /// The regular files in the folder whose names are UTF-8; anything else is skipped, since
    /// the store never writes it.
    pub(crate) fn files(&self) -> Result<Vec<Entry>, Error> {
        let list_error = |source| io_error("list", &self.path, source);
        let mut files = Vec::new();
        for entry in self.dir.entries().map_err(list_error)? {
            let entry = entry.map_err(list_error)?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let metadata = match entry.metadata() {
                Ok(metadata) => metadata,
                // Removed between the listing and this look.
                Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
                Err(err) => return Err(self.error("inspect", &name, err)),
            };
            if !metadata.is_file() {
                continue;
            }
            let modified = metadata
                .modified()
                .map_or(SystemTime::UNIX_EPOCH, |time| time.into_std());
            files.push(Entry {
                name,
                len: metadata.len(),
                modified,
            });
        }
        Ok(files)
    }
}

pub(crate) fn io_error(op: &'static str, path: &std::path::Path, source: io::Error) -> Error {
    Error::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn is_a_directory(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::IsADirectory
}

/// Whether two metadata describe the same file (not merely equal contents): a damaged file is
/// removed only while its name still refers to the file that was found damaged.
#[cfg(unix)]
pub(crate) fn same_file(a: &Metadata, b: &Metadata) -> bool {
    use cap_std::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
pub(crate) fn same_file(a: &Metadata, b: &Metadata) -> bool {
    a.len() == b.len() && a.modified().ok() == b.modified().ok()
}
