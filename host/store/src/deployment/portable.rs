//! A deployment outside a store: its record made from, and read back into, the two blobs it
//! names, so that a deployment can travel (a cluster's object store) and land in another node's
//! store under the same digest.

use crate::digest::Digest;

use super::{record, BlobRef, Deployment};

/// A deployment record received from elsewhere that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("deployment record {digest} is malformed: {reason}")]
pub struct InvalidRecord {
    pub digest: Digest,
    pub reason: String,
}

impl Deployment {
    /// The deployment of `manifest` and `component`, and its record's bytes (whose SHA-256 is
    /// its digest): what [`Store::push_deployment`](crate::Store::push_deployment) of the same
    /// bytes stores, without a store.
    pub fn of(manifest: &[u8], component: &[u8]) -> (Deployment, Vec<u8>) {
        let component = BlobRef {
            digest: Digest::of(component),
            len: component.len() as u64,
        };
        let manifest = BlobRef {
            digest: Digest::of(manifest),
            len: manifest.len() as u64,
        };
        let bytes = record::encode(&component, &manifest);
        let deployment = Deployment {
            digest: Digest::of(&bytes),
            component,
            manifest,
        };
        (deployment, bytes)
    }

    /// Reads a record that was fetched as `digest`; the caller has verified that its bytes hash
    /// to it. Records longer than any this store writes are refused unread.
    pub fn from_record(digest: Digest, bytes: &[u8]) -> Result<Deployment, InvalidRecord> {
        if bytes.len() as u64 > record::MAX_RECORD_BYTES {
            return Err(InvalidRecord {
                digest,
                reason: format!(
                    "{} bytes, more than a record holds ({})",
                    bytes.len(),
                    record::MAX_RECORD_BYTES
                ),
            });
        }
        record::decode(digest, bytes).map_err(|reason| InvalidRecord { digest, reason })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_made_here_reads_back_and_names_what_a_store_would() {
        let (deployment, bytes) = Deployment::of(b"name = \"x\"\n", b"\0asm");
        assert_eq!(Digest::of(&bytes), deployment.digest);
        assert_eq!(
            Deployment::from_record(deployment.digest, &bytes).unwrap(),
            deployment
        );
        let dir = tempfile::tempdir().unwrap();
        let store = crate::Store::open(dir.path(), crate::StoreConfig::default()).unwrap();
        let pushed = store.push_deployment(b"name = \"x\"\n", b"\0asm").unwrap();
        assert_eq!(pushed.deployment, deployment);
    }

    #[test]
    fn garbage_is_refused_in_one_line() {
        let digest = Digest::of(b"junk");
        let err = Deployment::from_record(digest, b"junk").unwrap_err();
        assert!(err.to_string().contains("malformed"), "{err}");
        assert_eq!(err.to_string().lines().count(), 1);
        assert!(Deployment::from_record(digest, &[b'a'; 4096]).is_err());
    }
}
