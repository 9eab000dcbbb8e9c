//! Blobs by digest in the JetStream object store: pushed once, fetched by any node.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use async_nats::jetstream::object_store::{self, InfoErrorKind, ObjectStore};
use async_nats::jetstream::stream::StorageType;
use sha2::{Digest as _, Sha256};
use tasklet_store::Digest;
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

use crate::cluster::Cluster;
use crate::error::{Error, Result};

/// The object store bucket holding blobs.
pub const BLOBS_BUCKET: &str = "tasklet-blobs";

/// The largest blob accepted by default, either way.
pub const DEFAULT_MAX_BLOB_BYTES: u64 = 1 << 30;

/// The name a blob has in the object store: `sha256/<64 lowercase hex>`.
pub fn object_name(digest: &Digest) -> String {
    format!("sha256/{digest}")
}

/// What [`Blobs::publish`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// The blob was stored, this many bytes.
    Stored(u64),
    /// A blob of that digest was there already; nothing was sent.
    AlreadyPresent,
}

/// The cluster's blobs.
///
/// Publication checks the bytes against the digest they are published under; every fetch
/// hashes what it read and returns it only if it matches. What the object store holds is
/// never trusted on its own: anyone with write access to the bucket could have put it there.
#[derive(Clone)]
pub struct Blobs {
    store: ObjectStore,
    cluster: Cluster,
    max_bytes: u64,
}

impl Blobs {
    /// Opens the bucket, creating it when missing.
    pub async fn open(cluster: &Cluster) -> Result<Blobs> {
        let exists = cluster
            .stream(
                &format!("OBJ_{BLOBS_BUCKET}"),
                "looking up the blobs bucket",
            )
            .await?
            .is_some();
        let store = if exists {
            cluster
                .jetstream
                .get_object_store(BLOBS_BUCKET)
                .await
                .map_err(|e| Error::request(cluster.url(), "opening the blobs bucket", e))?
        } else {
            let config = object_store::Config {
                bucket: BLOBS_BUCKET.into(),
                description: Some("tasklet blobs: components and manifests by SHA-256".into()),
                storage: StorageType::File,
                num_replicas: cluster.bucket_replicas,
                ..Default::default()
            };
            cluster
                .jetstream
                .create_object_store(config)
                .await
                .map_err(|e| Error::request(cluster.url(), "creating the blobs bucket", e))?
        };
        Ok(Blobs {
            store,
            cluster: cluster.clone(),
            max_bytes: DEFAULT_MAX_BLOB_BYTES,
        })
    }

    /// Refuses blobs larger than `max_bytes` both ways.
    pub fn with_max_bytes(mut self, max_bytes: u64) -> Blobs {
        self.max_bytes = max_bytes;
        self
    }

    /// Whether a blob of this digest is stored (its bytes are checked only when fetched).
    pub async fn contains(&self, digest: &Digest) -> Result<bool> {
        Ok(self.size(digest).await?.is_some())
    }

    /// Stores `bytes` as `digest`, unless a blob of that digest is there already.
    pub async fn publish(&self, digest: &Digest, bytes: &[u8]) -> Result<Published> {
        let size = bytes.len() as u64;
        self.check_size(digest, size)?;
        let actual = Digest::of(bytes);
        if actual != *digest {
            return Err(Error::WrongBytes {
                expected: digest.to_hex(),
                actual: actual.to_hex(),
            });
        }
        if self.contains(digest).await? {
            return Ok(Published::AlreadyPresent);
        }
        let mut reader = bytes;
        self.store
            .put(object_name(digest).as_str(), &mut reader)
            .await
            .map_err(|e| self.failed("storing a blob", e))?;
        Ok(Published::Stored(size))
    }

    /// Stores what `reader` yields as `digest`, unless a blob of that digest is there already.
    /// The bytes are hashed as they are sent; if they turn out to be other bytes (or more than
    /// the limit), what was stored is deleted and the publication fails.
    pub async fn publish_reader(
        &self,
        digest: &Digest,
        reader: &mut (impl AsyncRead + Unpin),
    ) -> Result<Published> {
        if self.contains(digest).await? {
            return Ok(Published::AlreadyPresent);
        }
        let mut hashing = HashingReader::new(reader, self.max_bytes);
        let name = object_name(digest);
        let stored = self.store.put(name.as_str(), &mut hashing).await;
        if hashing.over_limit {
            return Err(self.too_large(digest, hashing.count));
        }
        stored.map_err(|e| self.failed("storing a blob", e))?;
        let actual = Digest::from_bytes(hashing.hasher.finalize().into());
        if actual != *digest {
            if let Err(e) = self.store.delete(name.as_str()).await {
                tracing::warn!(%digest, "could not delete a blob stored with the wrong bytes: {e}");
            }
            return Err(Error::WrongBytes {
                expected: digest.to_hex(),
                actual: actual.to_hex(),
            });
        }
        Ok(Published::Stored(hashing.count))
    }

    /// The blob's bytes, verified against `digest`; `None` when no such blob is stored.
    pub async fn fetch(&self, digest: &Digest) -> Result<Option<Vec<u8>>> {
        let Some(size) = self.size(digest).await? else {
            return Ok(None);
        };
        self.check_size(digest, size)?;
        let mut object = match self.store.get(object_name(digest).as_str()).await {
            Ok(object) => object,
            Err(e) if e.kind() == object_store::GetErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.failed("fetching a blob", e)),
        };
        // The size in the object's metadata is what the writer said: the read is bounded on
        // its own.
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        let read = (&mut object)
            .take(self.max_bytes + 1)
            .read_to_end(&mut bytes)
            .await;
        let read = read.map_err(|e| self.failed("fetching a blob", e))?;
        if read as u64 > self.max_bytes {
            return Err(self.too_large(digest, read as u64));
        }
        let actual = Digest::of(&bytes);
        if actual != *digest {
            return Err(Error::DigestMismatch {
                expected: digest.to_hex(),
                actual: actual.to_hex(),
            });
        }
        Ok(Some(bytes))
    }

    /// The stored size, `None` when absent (or deleted).
    async fn size(&self, digest: &Digest) -> Result<Option<u64>> {
        match self.store.info(object_name(digest).as_str()).await {
            Ok(info) if !info.deleted => Ok(Some(info.size as u64)),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == InfoErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.failed("looking up a blob", e)),
        }
    }

    fn check_size(&self, digest: &Digest, size: u64) -> Result<()> {
        if size > self.max_bytes {
            return Err(self.too_large(digest, size));
        }
        Ok(())
    }

    fn too_large(&self, digest: &Digest, size: u64) -> Error {
        Error::BlobTooLarge {
            digest: digest.to_hex(),
            size,
            max: self.max_bytes,
        }
    }

    fn failed(&self, operation: &'static str, cause: impl ToString) -> Error {
        Error::request(self.cluster.url(), operation, cause)
    }
}

/// A reader that hashes and counts what passes through, and fails past a limit.
struct HashingReader<'a, R> {
    inner: &'a mut R,
    hasher: Sha256,
    count: u64,
    max: u64,
    over_limit: bool,
}

impl<'a, R> HashingReader<'a, R> {
    fn new(inner: &'a mut R, max: u64) -> Self {
        HashingReader {
            inner,
            hasher: Sha256::new(),
            count: 0,
            max,
            over_limit: false,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for HashingReader<'_, R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut *this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let new = &buf.filled()[before..];
            this.hasher.update(new);
            this.count += new.len() as u64;
            if this.count > this.max {
                this.over_limit = true;
                return Poll::Ready(Err(io::Error::other("blob over the size limit")));
            }
        }
        polled
    }
}
