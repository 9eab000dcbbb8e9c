//! Finding deployments: one by digest, whether one is runnable, all of them.

use std::io::Read;

use cap_std::fs::Metadata;

use crate::digest::Digest;
use crate::error::Error;
use crate::layout::digest_name;
use crate::store::{Inner, Store};

use super::{record, BlobRef, Deployment};

/// Every deployment the store holds, and what could not be read.
#[derive(Debug, Default)]
pub struct Listing {
    /// The deployments, ordered by digest.
    pub deployments: Vec<Deployment>,
    /// Records that could not be read, one error each (a damaged one is removed, and named
    /// here once).
    pub problems: Vec<Error>,
}

/// A record as read from disk, before a damaged one is dealt with.
pub(super) enum Fetched {
    Good(Deployment),
    Damaged { found: Metadata, actual: Digest },
}

impl Store {
    /// The deployment named `digest`: [`Error::NotFound`] if there is none.
    pub fn deployment(&self, digest: &Digest) -> Result<Deployment, Error> {
        match fetch(&self.inner, digest)? {
            Fetched::Good(deployment) => Ok(deployment),
            Fetched::Damaged { found, actual } => {
                let _namespace = self.inner.namespace();
                Err(damaged(&self.inner, digest, &found, actual))
            }
        }
    }

    /// Whether the deployment named `digest` is stored whole: its record and both its blobs,
    /// at their lengths. (Their bytes are verified when read.) A deployment that is not
    /// stored whole can be pushed again.
    pub fn has_deployment(&self, digest: &Digest) -> Result<bool, Error> {
        let deployment = match self.deployment(digest) {
            Ok(deployment) => deployment,
            Err(Error::NotFound { .. } | Error::Corrupt { .. }) => return Ok(false),
            Err(err) => return Err(err),
        };
        let stored = |blob: &BlobRef| -> Result<bool, Error> {
            let there = self.inner.blobs.metadata(&digest_name(&blob.digest))?;
            Ok(there.is_some_and(|there| there.is_file() && there.len() == blob.len))
        };
        Ok(stored(&deployment.component)? && stored(&deployment.manifest)?)
    }

    /// Every deployment the store holds.
    pub fn deployments(&self) -> Result<Listing, Error> {
        let mut listing = Listing::default();
        for digest in record_digests(&self.inner)? {
            match self.deployment(&digest) {
                Ok(deployment) => listing.deployments.push(deployment),
                // Deleted since it was listed.
                Err(Error::NotFound { .. }) => {}
                Err(err) => listing.problems.push(err),
            }
        }
        Ok(listing)
    }
}

/// The digests the files in `deployments/` are named by, in order; files named otherwise are
/// not the store's and are left alone.
pub(super) fn record_digests(inner: &Inner) -> Result<Vec<Digest>, Error> {
    let mut digests: Vec<Digest> = inner
        .deployments
        .files()?
        .into_iter()
        .filter_map(|entry| Digest::parse(&entry.name).ok())
        .collect();
    digests.sort_unstable();
    Ok(digests)
}

/// Reads and verifies the record named `digest`, reading no more than a record can hold.
pub(super) fn fetch(inner: &Inner, digest: &Digest) -> Result<Fetched, Error> {
    let name = digest_name(digest);
    let Some((file, found)) = inner.deployments.open_file(&name)? else {
        return Err(Error::NotFound {
            what: "deployment",
            digest: *digest,
        });
    };
    let mut bytes = Vec::new();
    file.take(record::MAX_RECORD_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| inner.deployments.error("read", &name, err))?;
    let actual = Digest::of(&bytes);
    if actual != *digest {
        return Ok(Fetched::Damaged { found, actual });
    }
    record::decode(*digest, &bytes)
        .map(Fetched::Good)
        .map_err(|reason| Error::MalformedRecord {
            path: inner.deployments.path_of(&name),
            reason,
        })
}

/// Removes a damaged record and says so. The caller holds the namespace lock.
pub(super) fn damaged(inner: &Inner, digest: &Digest, found: &Metadata, actual: Digest) -> Error {
    let name = digest_name(digest);
    let removed = inner
        .remove_if_same(&inner.deployments, &name, found)
        .is_ok();
    Error::Corrupt {
        path: inner.deployments.path_of(&name),
        actual,
        removed,
    }
}
