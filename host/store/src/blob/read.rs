//! Reading a blob: bytes are streamed to the caller and hashed on the way; the end of the
//! stream is where the digest is checked.
//!
//! Verifying at the end, rather than before serving, reads each blob once and never holds a
//! component in memory the caller did not ask for. The price is that bytes already handed out
//! are unverified until the reader reports the end: a caller must treat nothing it read as
//! valid until [`BlobReader::read_chunk`] has returned `Ok(0)`, and discard it all on an
//! error. [`Store::read_blob`] does exactly that for callers that want the whole blob in
//! memory (a manifest; a component about to be compiled): it returns bytes only once
//! verified.

use std::io::{self, Read};
use std::sync::Arc;

use cap_std::fs::{File, Metadata};

use crate::digest::{Digest, Hasher};
use crate::error::Error;
use crate::layout::digest_name;
use crate::store::{Inner, Store};

/// Size of the pieces [`BlobReader::read_to_vec`] reads in.
const CHUNK: usize = 64 << 10;

/// How often one read is retried after a signal interrupted it.
const MAX_INTERRUPTED: u32 = 8;

/// A blob being read: its bytes, then a verdict on them.
pub struct BlobReader {
    inner: Arc<Inner>,
    digest: Digest,
    file: File,
    /// The file as opened: its length, and its identity (to remove it, and only it, if it
    /// turns out damaged).
    found: Metadata,
    read: u64,
    state: State,
}

enum State {
    Reading(Hasher),
    Verified,
    Damaged { actual: Digest, removed: bool },
}

impl Store {
    /// Opens the blob named `digest` for reading; [`Error::NotFound`] if the store lacks it.
    pub fn open_blob(&self, digest: &Digest) -> Result<BlobReader, Error> {
        let name = digest_name(digest);
        let Some((file, found)) = self.inner.blobs.open_file(&name)? else {
            return Err(Error::NotFound {
                what: "blob",
                digest: *digest,
            });
        };
        Ok(BlobReader {
            inner: Arc::clone(&self.inner),
            digest: *digest,
            file,
            found,
            read: 0,
            state: State::Reading(Hasher::default()),
        })
    }

    /// The whole blob named `digest`, returned only once its bytes are verified.
    pub fn read_blob(&self, digest: &Digest) -> Result<Vec<u8>, Error> {
        self.open_blob(digest)?.read_to_vec()
    }
}

impl BlobReader {
    /// The digest the blob's bytes must hash to.
    pub fn digest(&self) -> Digest {
        self.digest
    }

    /// The blob's length on disk when it was opened.
    pub fn len(&self) -> u64 {
        self.found.len()
    }

    /// Whether the blob was empty when opened.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads the next bytes into `buf`. `Ok(0)` (for a non-empty `buf`) means the end, and that
    /// every byte read hashed to the blob's digest; [`Error::Corrupt`] means they did not, and
    /// none of them may be used.
    pub fn read_chunk(&mut self, buf: &mut [u8]) -> Result<usize, Error> {
        match self.state {
            // An empty buffer reads nothing, which says nothing about the end.
            _ if buf.is_empty() => return Ok(0),
            State::Reading(_) => {}
            State::Verified => return Ok(0),
            State::Damaged { actual, removed } => return Err(self.corrupt(actual, removed)),
        }
        let name = digest_name(&self.digest);
        let n = self
            .read_file(buf)
            .map_err(|err| self.inner.blobs.error("read", &name, err))?;
        self.read += n as u64;
        // Blobs are never written in place: a file longer than it was when opened has been
        // changed by something else, and reading on could go on without end.
        let grown = self.read > self.found.len();
        let State::Reading(hasher) = &mut self.state else {
            return Ok(0);
        };
        hasher.update(&buf[..n]);
        if n > 0 && !grown {
            return Ok(n);
        }
        let State::Reading(hasher) = std::mem::replace(&mut self.state, State::Verified) else {
            return Ok(0);
        };
        let actual = hasher.finish();
        if actual == self.digest && !grown {
            return Ok(0);
        }
        let removed = {
            let _namespace = self.inner.namespace();
            self.inner
                .remove_if_same(&self.inner.blobs, &name, &self.found)
                .is_ok()
        };
        self.state = State::Damaged { actual, removed };
        Err(self.corrupt(actual, removed))
    }

    /// One `read` of the file, retried when a signal interrupts it (a bounded number of times).
    fn read_file(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut interrupted = 0;
        loop {
            match self.file.read(buf) {
                Err(err)
                    if err.kind() == io::ErrorKind::Interrupted
                        && interrupted < MAX_INTERRUPTED =>
                {
                    interrupted += 1;
                }
                result => return result,
            }
        }
    }

    /// The rest of the blob, returned only once verified.
    pub fn read_to_vec(mut self) -> Result<Vec<u8>, Error> {
        let capacity = self.found.len().min(self.inner.config.max_blob_bytes);
        let mut bytes = Vec::with_capacity(usize::try_from(capacity).unwrap_or(0));
        let mut chunk = vec![0; CHUNK];
        loop {
            let n = self.read_chunk(&mut chunk)?;
            if n == 0 {
                return Ok(bytes);
            }
            bytes.extend_from_slice(&chunk[..n]);
        }
    }

    fn corrupt(&self, actual: Digest, removed: bool) -> Error {
        Error::Corrupt {
            path: self.inner.blobs.path_of(&digest_name(&self.digest)),
            actual,
            removed,
        }
    }
}

/// For callers that stream with `std::io` (`io::copy`); errors carry the store's [`Error`]
/// inside (see its `From` impl), and the last `read` before the end returns the verdict.
impl Read for BlobReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        Ok(self.read_chunk(buf)?)
    }
}
