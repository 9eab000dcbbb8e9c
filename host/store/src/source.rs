//! Where a node gets a deployment it does not hold: a [`DeploymentSource`], such as a cluster's
//! object store, consulted when a tenant asks to run a digest the node lacks.

use crate::digest::Digest;

/// A deployment's two blobs as a source gave them, each verified against its digest in the
/// deployment's record by the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedDeployment {
    /// The manifest (`tasklet.toml`) as pushed.
    pub manifest: Vec<u8>,
    /// The WebAssembly component.
    pub component: Vec<u8>,
}

/// A source could not answer, said in one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// The source could not be reached or did not answer in time: nothing is known of the
    /// deployment, and another node (or this one later) may well get it.
    #[error("{0}")]
    Unavailable(String),
    /// The source answered, and what it holds cannot be used (damaged, not a deployment):
    /// every node would be told the same.
    #[error("{0}")]
    Failed(String),
}

/// Deployments held elsewhere, each with the tenants that pushed it there.
///
/// The node's rule holds across sources: a tenant runs only deployments it pushed, so a source
/// gives a deployment only to a tenant recorded as having pushed it there, and answers `None`
/// for a digest it lacks and for one that tenant did not push alike.
///
/// `fetch` blocks (the network); a node calls it from a blocking thread.
pub trait DeploymentSource: Send + Sync {
    /// Deployment `digest` if `tenant` pushed it to this source; `None` otherwise.
    fn fetch(
        &self,
        tenant: &str,
        digest: &Digest,
    ) -> Result<Option<FetchedDeployment>, SourceError>;
}
