//! Deleting a deployment, and with it the blobs no other deployment refers to.

use std::collections::HashSet;

use crate::digest::Digest;
use crate::error::Error;
use crate::layout::digest_name;
use crate::store::Store;

use super::lookup::{damaged, fetch, record_digests, Fetched};
use super::Deployment;

/// What a deletion removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deleted {
    /// The deployment deleted.
    pub deployment: Deployment,
    /// Its blobs that no other deployment refers to, now removed.
    pub removed_blobs: Vec<Digest>,
    /// How many compiled forms of its component were removed from the compiled cache.
    pub removed_compiled: usize,
}

impl Store {
    /// Deletes the deployment named `digest`, then removes its component and manifest unless
    /// another deployment refers to them. [`Error::NotFound`] if there is no such deployment.
    ///
    /// Blobs stay (and [`Deleted::removed_blobs`] is empty) whenever some other record cannot
    /// be read, since that record might refer to them.
    pub fn delete_deployment(&self, digest: &Digest) -> Result<Deleted, Error> {
        let inner = &self.inner;
        let (deployment, removed_blobs) = {
            let _namespace = inner.namespace();
            let deployment = match fetch(inner, digest)? {
                Fetched::Good(deployment) => deployment,
                Fetched::Damaged { found, actual } => {
                    return Err(damaged(inner, digest, &found, actual))
                }
            };
            inner.deployments.remove(&digest_name(digest))?;
            inner.deployments.sync()?;

            let mut removed = Vec::new();
            if let Some(referenced) = referenced_blobs(self)? {
                for blob in [deployment.component.digest, deployment.manifest.digest] {
                    let unreferenced = !referenced.contains(&blob) && !removed.contains(&blob);
                    if unreferenced && inner.blobs.remove(&digest_name(&blob))? {
                        removed.push(blob);
                    }
                }
                if !removed.is_empty() {
                    inner.blobs.sync()?;
                }
            }
            (deployment, removed)
        };
        let removed_compiled = if removed_blobs.contains(&deployment.component.digest) {
            self.compiled()
                .remove_component(&deployment.component.digest)?
        } else {
            0
        };
        Ok(Deleted {
            deployment,
            removed_blobs,
            removed_compiled,
        })
    }
}

/// The blobs the remaining records refer to; `None` if some record cannot be read. The caller
/// holds the namespace lock.
fn referenced_blobs(store: &Store) -> Result<Option<HashSet<Digest>>, Error> {
    let mut referenced = HashSet::new();
    for digest in record_digests(&store.inner)? {
        match fetch(&store.inner, &digest) {
            Ok(Fetched::Good(other)) => {
                referenced.insert(other.component.digest);
                referenced.insert(other.manifest.digest);
            }
            Ok(Fetched::Damaged { .. }) | Err(_) => return Ok(None),
        }
    }
    Ok(Some(referenced))
}
