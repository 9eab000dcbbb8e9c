//! The errors of a store: each says what happened and what to do about it, in one line.

use std::io;
use std::path::PathBuf;

use crate::digest::{Digest, InvalidDigest};

/// What went wrong opening, writing or reading a store. Every error about a file names it by
/// its full path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The store's folder could not be created or opened.
    #[error("cannot open the store at {}: {source}; check that the path is a folder the node may write", root.display())]
    Open {
        /// The store's folder.
        root: PathBuf,
        /// The failure.
        source: io::Error,
    },
    /// The store's path names something that is not a folder.
    #[error("the store's path {} is a file, not a folder: give a folder (it is made if missing)", root.display())]
    NotAFolder {
        /// The store's path.
        root: PathBuf,
    },
    /// An operation on a file or folder inside the store failed.
    #[error("cannot {op} {}: {source}; check the store folder's permissions and free space", path.display())]
    Io {
        /// What was being done, as a verb ("read", "rename", …).
        op: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The failure.
        source: io::Error,
    },
    /// Something other than a regular file sits where the store keeps one.
    #[error("{} is not a regular file: remove it, and the store will write that entry anew when it is next pushed", path.display())]
    NotAFile {
        /// What sits there.
        path: PathBuf,
    },
    /// A blob grew past the store's size limit; nothing of it was kept.
    #[error("more than {limit} bytes: the store's limit on one blob; raise `{setting}` in the node's configuration, or push something smaller")]
    TooLarge {
        /// The limit, in bytes.
        limit: u64,
        /// The configuration key that sets it.
        setting: &'static str,
    },
    /// The bytes written do not hash to the digest the caller said they would; nothing of them
    /// was kept.
    #[error("the bytes received hash to {actual}, not to the expected {expected}: the transfer was damaged or the expected digest is wrong; send them again")]
    DigestMismatch {
        /// The digest the caller expected.
        expected: Digest,
        /// The digest of the bytes received.
        actual: Digest,
    },
    /// A stored file's bytes no longer hash to its name: it was damaged on disk. The file is
    /// removed, so that pushing the same content again restores it.
    #[error("{} was damaged on disk (its bytes hash to {actual}): {}", path.display(), if *removed { "it has been removed; push the deployment again" } else { "remove it, then push the deployment again" })]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// The digest its bytes have now.
        actual: Digest,
        /// Whether the store removed it (it could not if, say, its folder is read-only).
        removed: bool,
    },
    /// The store holds nothing under a digest.
    #[error("the store holds no {what} {digest}: push it with `tasklet deploy push`, and use the digest that prints")]
    NotFound {
        /// What was looked for ("deployment", "blob").
        what: &'static str,
        /// The digest looked up.
        digest: Digest,
    },
    /// A deployment record hashes to its name but does not say what a record says: it was
    /// not written by this store.
    #[error("{} is not a deployment record ({reason}): remove it", path.display())]
    MalformedRecord {
        /// The record.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A writer was used after it had failed or been finished.
    #[error("this write already failed or finished; start a new one")]
    WriterClosed,
    /// An engine fingerprint longer than a compiled-cache entry can carry.
    #[error("an engine fingerprint of {len} bytes is longer than the {max} a compiled-cache entry carries; pass a hash of it instead")]
    FingerprintTooLong {
        /// Its length.
        len: usize,
        /// The most allowed.
        max: usize,
    },
    /// A text given as a digest is not one.
    #[error(transparent)]
    InvalidDigest(#[from] InvalidDigest),
}

impl Error {
    /// Whether this error says the store lacks what was asked for (as opposed to failing to
    /// read it).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound { .. })
    }
}

impl From<Error> for io::Error {
    /// For callers that stream through `std::io` traits: the store's error rides inside, and
    /// `io::Error::get_ref` + `downcast_ref::<Error>` recovers it.
    fn from(err: Error) -> io::Error {
        let kind = match &err {
            Error::Io { source, .. } | Error::Open { source, .. } => source.kind(),
            Error::NotFound { .. } => io::ErrorKind::NotFound,
            Error::TooLarge { .. } => io::ErrorKind::FileTooLarge,
            _ => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, err)
    }
}
