//! Deployments: a manifest and a component, stored as blobs, tied together by a record whose
//! digest is what `tasklet deploy push` prints and `tasklet deploy run` takes.

mod delete;
mod lookup;
mod portable;
mod push;
mod record;

pub use delete::Deleted;
pub use lookup::Listing;
pub use portable::InvalidRecord;
pub use push::{DeploymentWriter, Pushed};

use crate::digest::Digest;

/// A blob a deployment refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlobRef {
    /// The blob's digest (its name in the store).
    pub digest: Digest,
    /// Its length in bytes.
    pub len: u64,
}

/// A stored deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Deployment {
    /// The deployment's digest: the SHA-256 of its record, naming the pair below.
    pub digest: Digest,
    /// The WebAssembly component.
    pub component: BlobRef,
    /// The manifest (`tasklet.toml`), as pushed.
    pub manifest: BlobRef,
}
