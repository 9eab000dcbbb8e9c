//! Writing a blob: chunks are hashed and counted as they arrive, and the blob takes its name
//! only once complete.

use std::io;
use std::sync::Arc;

use crate::config::MAX_BLOB_SETTING;
use crate::digest::{Digest, Hasher};
use crate::error::Error;
use crate::layout::digest_name;
use crate::sealed::Sealed;
use crate::store::{Inner, Store};
use crate::temp::TempFile;

/// What a finished write stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Put {
    /// The digest of the bytes written: the blob's name.
    pub digest: Digest,
    /// How many bytes were written.
    pub len: u64,
    /// Whether the store already held these bytes (the write then changed nothing).
    pub already_present: bool,
}

/// A blob being written: feed it chunks, then [`finish`](BlobWriter::finish) it.
///
/// The bytes go to a file in `tmp/`, hashed as they arrive. A chunk that would take the blob
/// past [`StoreConfig::max_blob_bytes`](crate::StoreConfig::max_blob_bytes) is refused before
/// any of it is written. Dropping the writer, or any error, removes what was written; a
/// writer that failed refuses further use with [`Error::WriterClosed`].
pub struct BlobWriter {
    inner: Arc<Inner>,
    expected: Option<Digest>,
    open: Option<Open>,
}

struct Open {
    temp: TempFile,
    hasher: Hasher,
    len: u64,
}

impl Store {
    /// Starts writing a blob. With `expected`, [`BlobWriter::finish`] refuses bytes that do not
    /// hash to it.
    pub fn blob_writer(&self, expected: Option<Digest>) -> Result<BlobWriter, Error> {
        Ok(BlobWriter {
            inner: Arc::clone(&self.inner),
            expected,
            open: Some(Open {
                temp: TempFile::create(&self.inner)?,
                hasher: Hasher::default(),
                len: 0,
            }),
        })
    }

    /// Writes `bytes` as one blob.
    pub fn put_blob(&self, bytes: &[u8], expected: Option<Digest>) -> Result<Put, Error> {
        let mut writer = self.blob_writer(expected)?;
        writer.write_chunk(bytes)?;
        writer.finish()
    }

    /// Whether the store holds a blob named `digest` (its bytes are verified only when read).
    pub fn contains_blob(&self, digest: &Digest) -> Result<bool, Error> {
        let there = self.inner.blobs.metadata(&digest_name(digest))?;
        Ok(there.is_some_and(|there| there.is_file()))
    }
}

impl BlobWriter {
    /// Appends `chunk`.
    pub fn write_chunk(&mut self, chunk: &[u8]) -> Result<(), Error> {
        let limit = self.inner.config.max_blob_bytes;
        let open = self.open.as_mut().ok_or(Error::WriterClosed)?;
        let len = u64::try_from(chunk.len())
            .ok()
            .and_then(|chunk_len| open.len.checked_add(chunk_len))
            .filter(|len| *len <= limit);
        let Some(len) = len else {
            self.open = None;
            return Err(Error::TooLarge {
                limit,
                setting: MAX_BLOB_SETTING,
            });
        };
        if let Err(err) = open.temp.write_all(chunk) {
            self.open = None;
            return Err(err);
        }
        open.hasher.update(chunk);
        open.len = len;
        Ok(())
    }

    /// How many bytes have been written so far.
    pub fn len(&self) -> u64 {
        self.open.as_ref().map_or(0, |open| open.len)
    }

    /// Whether nothing has been written yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Completes the blob: checks the expected digest, makes the bytes durable and gives them
    /// their name (or finds them already there).
    pub fn finish(self) -> Result<Put, Error> {
        let inner = Arc::clone(&self.inner);
        let sealed = self.seal()?;
        let (digest, len) = (sealed.digest, sealed.len);
        let already_present = {
            let _namespace = inner.namespace();
            sealed.place(&inner.blobs)?
        };
        Ok(Put {
            digest,
            len,
            already_present,
        })
    }

    /// Completes the bytes without naming them yet.
    pub(crate) fn seal(mut self) -> Result<Sealed, Error> {
        let open = self.open.take().ok_or(Error::WriterClosed)?;
        let digest = open.hasher.finish();
        if let Some(expected) = self.expected {
            if expected != digest {
                return Err(Error::DigestMismatch {
                    expected,
                    actual: digest,
                });
            }
        }
        open.temp.sync()?;
        Ok(Sealed {
            temp: open.temp,
            digest,
            len: open.len,
        })
    }
}

/// For callers that copy into the writer with `std::io` (`io::copy`); errors carry the
/// store's [`Error`] inside (see its `From` impl).
impl io::Write for BlobWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_chunk(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
