//! Content-addressed storage for a tasklet node: deployed tasklets, and a cache of what the
//! engine compiled them into.
//!
//! Everything stored is named by the SHA-256 of its bytes ([`Digest`]), written whole or not at
//! all, and verified when read. A [`Store`] is one folder:
//!
//! ```text
//! <root>/
//!   blobs/sha256/<digest>         content: components and manifests, named by their digest
//!   deployments/sha256/<digest>   deployment records, named by the digest of the record
//!   compiled/<component>-<engine> compiled components (see `CompiledCache`)
//!   tmp/                          writes in progress
//! ```
//!
//! # Deployments
//!
//! `tasklet deploy push` sends a manifest and a component. Both become blobs, and a three-line
//! record names them:
//!
//! ```text
//! tasklet-deployment 1
//! component <digest> <length>
//! manifest <digest> <length>
//! ```
//!
//! **A deployment is keyed by the digest of its record**, hence by the manifest and the
//! component together, not by the component alone. The manifest grants rights and limits, so
//! the same component pushed with another manifest is another deployment with another digest;
//! what a digest runs never changes once it was printed, and `tasklet deploy run DIGEST` finds
//! the record, and through it both blobs. Blobs are shared: deleting a deployment removes its
//! blobs only when no other record refers to them.
//!
//! # Guarantees
//!
//! - **No escape.** The root is opened once with ambient authority (`cap_std`); every other
//!   operation is relative to that handle, which refuses any path (`..`, a symlink) resolving
//!   outside it. A client's digest becomes a file name only after [`Digest::parse`] has
//!   accepted it as exactly 64 lowercase hex characters.
//! - **Whole or nothing.** Writes stream into `tmp/`, hashed as they go; the file is synced
//!   and only then renamed to its digest, and the destination folder is synced before the
//!   write reports success. A reader sees no file or a complete one. A write that fails (its
//!   expected digest does not match, it passes the size limit, the disk fills) or is dropped
//!   removes its temp file; files a crash left in `tmp/` are removed when a store next opens
//!   (those untouched for an hour: a write in progress touches its file as bytes arrive).
//! - **Bounded.** [`StoreConfig::max_blob_bytes`] is checked as each chunk arrives, before it
//!   is written. The compiled cache evicts to stay within
//!   [`StoreConfig::compiled_cache_bytes`].
//! - **Verified on read.** A [`BlobReader`] hashes what it streams and gives its verdict at
//!   the end, so a caller uses nothing it read until the end reads clean; [`Store::read_blob`]
//!   returns bytes only once verified. Records are small, and verified by their digest before
//!   they are served; compiled-cache entries by the checksum they were written with (a CRC-32:
//!   what it guards against is damage at rest, see `CompiledCache`). A damaged file is never
//!   served: it is removed, so that pushing the same content again restores it, and the caller
//!   gets [`Error::Corrupt`] (or, from the cache, [`Lookup::Discarded`]).
//! - **Idempotent.** Putting content already present changes nothing and says so
//!   (`already_present`); two writers putting the same content at once both succeed and leave
//!   one file.
//! - **No panics on input.** Bad digests, truncated or overgrown files, folders where files
//!   should be, permission errors: each is an [`Error`] saying, in one line, what happened and
//!   what to do.
//!
//! Open one [`Store`] per folder and clone it (clones share the locks that order renames and
//! removals); the store assumes no other process writes its folder.
//!
//! # Using it
//!
//! ```
//! # fn main() -> Result<(), tasklet_store::Error> {
//! # let dir = tempfile::tempdir().unwrap();
//! use tasklet_store::{Store, StoreConfig};
//!
//! let store = Store::open(dir.path(), StoreConfig::default())?;
//!
//! // Push: the manifest up front, the component in chunks as they arrive.
//! let mut push = store.deployment_writer(b"name = \"iota\"\n")?;
//! push.write_chunk(b"\0asm")?;
//! push.write_chunk(&[0x0d, 0, 1, 0])?;
//! let pushed = push.finish()?;
//! println!("{}", pushed.deployment.digest); // what `tasklet deploy push` prints
//!
//! // Run: the record, then both blobs, verified.
//! let deployment = store.deployment(&pushed.deployment.digest)?;
//! let manifest = store.read_blob(&deployment.manifest.digest)?;
//! let component = store.read_blob(&deployment.component.digest)?;
//! assert_eq!(component, b"\0asm\x0d\0\x01\0");
//!
//! // Compile once per engine.
//! let engine = "wasmtime-48-x86_64-abc123";
//! if store.compiled().get(&deployment.component.digest, engine)?.into_hit().is_none() {
//!     let compiled = b"what the engine made".to_vec();
//!     store.compiled().put(&deployment.component.digest, engine, &compiled)?;
//! }
//! # let _ = manifest;
//! # Ok(())
//! # }
//! ```

mod area;
mod blob;
mod compiled;
mod config;
mod deployment;
mod digest;
mod error;
mod layout;
mod sealed;
mod source;
mod store;
mod temp;

pub use blob::{BlobReader, BlobWriter, Put};
pub use compiled::{CachePut, CachedFile, CompiledCache, Lookup};
pub use config::{StoreConfig, COMPILED_CACHE_SETTING, MAX_BLOB_SETTING};
pub use deployment::{
    BlobRef, Deleted, Deployment, DeploymentWriter, InvalidRecord, Listing, Pushed,
};
pub use digest::{Digest, InvalidDigest, DIGEST_HEX_LEN};
pub use error::Error;
pub use layout::TOP_FOLDERS;
pub use source::{DeploymentSource, FetchedDeployment, SourceError};
pub use store::Store;
