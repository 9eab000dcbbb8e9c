//! Deployments in the cluster: pushed once into the object store, run on any node.
//!
//! A deployment travels as three blobs by digest in the blobs bucket — its record (the
//! three-line text `tasklet_store` keeps, whose SHA-256 is the deployment's digest), its
//! manifest and its component — so that a node lacking it can fetch it, verify each part and
//! store it under the very digest the tenant was given. Who pushed it is a key of its own in
//! the owners bucket, one per tenant and deployment:
//!
//! ```text
//! KV tasklet-owners   <deployment digest>.<tenant>   {"pushed_unix_ms": …}
//! ```
//!
//! A node gives a deployment only to a tenant with such a key, as it does for deployments
//! pushed to it directly. The key's place, tenant last, lets an operator restrict each
//! deployer's NATS user to writing its own tenant's keys (`$KV.tasklet-owners.*.TENANT`).

use std::time::{SystemTime, UNIX_EPOCH};

use async_nats::jetstream::kv;
use async_nats::jetstream::stream::StorageType;
use bytes::Bytes;
use tasklet_store::{Deployment, Digest};

use crate::blobs::{Blobs, Published};
use crate::cluster::Cluster;
use crate::error::{Error, Result};

/// The KV bucket recording which tenants pushed which deployment.
pub const OWNERS_BUCKET: &str = "tasklet-owners";

/// What [`ClusterDeployments::publish`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublishedDeployment {
    /// The deployment's digest: what `tasklet deploy run` takes, on any node.
    pub digest: Digest,
    /// The cluster held it already for this tenant: nothing was sent.
    pub already_present: bool,
    /// Bytes sent (blobs the cluster lacked).
    pub uploaded: u64,
}

/// A deployment's parts as fetched, each verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedParts {
    pub deployment: Deployment,
    pub manifest: Vec<u8>,
    pub component: Vec<u8>,
}

/// The cluster's deployments: the blobs bucket and the owners bucket.
#[derive(Clone)]
pub struct ClusterDeployments {
    blobs: Blobs,
    cluster: Cluster,
}

impl ClusterDeployments {
    /// Opens the blobs bucket (creating it when missing); the owners bucket is opened as used.
    pub async fn open(cluster: &Cluster) -> Result<ClusterDeployments> {
        Ok(ClusterDeployments {
            blobs: Blobs::open(cluster).await?,
            cluster: cluster.clone(),
        })
    }

    /// Refuses blobs larger than `max_bytes` both ways.
    pub fn with_max_bytes(mut self, max_bytes: u64) -> ClusterDeployments {
        self.blobs = self.blobs.with_max_bytes(max_bytes);
        self
    }

    /// Stores the deployment of `manifest` and `component` (the blobs the cluster lacks) and
    /// records `tenant` as one that pushed it.
    pub async fn publish(
        &self,
        tenant: &str,
        manifest: &[u8],
        component: &[u8],
    ) -> Result<PublishedDeployment> {
        check_tenant(tenant)?;
        let (deployment, record) = Deployment::of(manifest, component);
        let Some(owners) = self.owners(true).await? else {
            return Err(self.failed("creating the owners bucket", "it is still missing"));
        };
        let key = owner_key(&deployment.digest, tenant);
        let owned = self.owned(&owners, &key).await?;
        let mut uploaded = 0;
        // The record last: a record in the bucket means its blobs are there.
        for (digest, bytes) in [
            (deployment.component.digest, component),
            (deployment.manifest.digest, manifest),
            (deployment.digest, &record[..]),
        ] {
            if let Published::Stored(n) = self.blobs.publish(&digest, bytes).await? {
                uploaded += n;
            }
        }
        if !owned {
            let value = format!("{{\"pushed_unix_ms\":{}}}", unix_ms());
            owners
                .put(key.as_str(), Bytes::from(value))
                .await
                .map_err(|e| self.failed("recording the deployment's tenant", e))?;
        }
        Ok(PublishedDeployment {
            digest: deployment.digest,
            already_present: owned && uploaded == 0,
            uploaded,
        })
    }

    /// Whether `tenant` pushed deployment `digest` to the cluster.
    pub async fn owns(&self, tenant: &str, digest: &Digest) -> Result<bool> {
        check_tenant(tenant)?;
        match self.owners(false).await? {
            Some(owners) => self.owned(&owners, &owner_key(digest, tenant)).await,
            None => Ok(false),
        }
    }

    /// Deployment `digest`'s parts, each verified against its digest, if `tenant` pushed it;
    /// `None` for a deployment the cluster lacks and for one `tenant` did not push alike.
    pub async fn fetch(&self, tenant: &str, digest: &Digest) -> Result<Option<FetchedParts>> {
        if !self.owns(tenant, digest).await? {
            return Ok(None);
        }
        let Some(record) = self.blobs.fetch(digest).await? else {
            return Ok(None);
        };
        let deployment =
            Deployment::from_record(*digest, &record).map_err(|e| Error::BadDeployment {
                digest: digest.to_hex(),
                cause: format!("its record is malformed ({})", e.reason),
            })?;
        let mut parts = Vec::with_capacity(2);
        for (what, blob) in [
            ("manifest", deployment.manifest),
            ("component", deployment.component),
        ] {
            let bytes =
                self.blobs
                    .fetch(&blob.digest)
                    .await?
                    .ok_or_else(|| Error::BadDeployment {
                        digest: digest.to_hex(),
                        cause: format!("its {what} {} is not in the object store", blob.digest),
                    })?;
            if bytes.len() as u64 != blob.len {
                return Err(Error::BadDeployment {
                    digest: digest.to_hex(),
                    cause: format!(
                        "its {what} is {} bytes where the record says {}",
                        bytes.len(),
                        blob.len
                    ),
                });
            }
            parts.push(bytes);
        }
        let component = parts.pop().unwrap_or_default();
        let manifest = parts.pop().unwrap_or_default();
        Ok(Some(FetchedParts {
            deployment,
            manifest,
            component,
        }))
    }

    /// The owners bucket; `None` when it does not exist and `create` is false.
    async fn owners(&self, create: bool) -> Result<Option<kv::Store>> {
        let cluster = &self.cluster;
        let exists = cluster
            .stream(
                &format!("KV_{OWNERS_BUCKET}"),
                "looking up the owners bucket",
            )
            .await?
            .is_some();
        if exists {
            return cluster
                .jetstream
                .get_key_value(OWNERS_BUCKET)
                .await
                .map(Some)
                .map_err(|e| self.failed("opening the owners bucket", e));
        }
        if !create {
            return Ok(None);
        }
        let config = kv::Config {
            bucket: OWNERS_BUCKET.into(),
            description: "tasklet deployments: which tenants pushed which deployment".into(),
            history: 1,
            storage: StorageType::File,
            num_replicas: cluster.bucket_replicas,
            ..Default::default()
        };
        match cluster.jetstream.create_key_value(config).await {
            Ok(store) => Ok(Some(store)),
            // Another pusher may have created it meanwhile.
            Err(create) => cluster
                .jetstream
                .get_key_value(OWNERS_BUCKET)
                .await
                .map(Some)
                .map_err(|_| self.failed("creating the owners bucket", create)),
        }
    }

    async fn owned(&self, owners: &kv::Store, key: &str) -> Result<bool> {
        match owners.entry(key).await {
            Ok(entry) => Ok(entry.is_some_and(|e| e.operation == kv::Operation::Put)),
            Err(e) => Err(self.failed("looking up the deployment's tenant", e)),
        }
    }

    fn failed(&self, operation: &'static str, cause: impl ToString) -> Error {
        Error::request(self.cluster.url(), operation, cause)
    }
}

/// `<deployment digest>.<tenant>`: the tenant last, one or more tokens.
fn owner_key(digest: &Digest, tenant: &str) -> String {
    format!("{digest}.{tenant}")
}

/// A tenant's name as the fabric spells them (1 to 63 of `a-z 0-9 - _ .`, starting with a
/// letter or digit), and as a KV key can end: no empty token.
fn check_tenant(tenant: &str) -> Result<()> {
    let reason = if tenant.is_empty() || tenant.len() > 63 {
        Some("it must be 1 to 63 characters")
    } else if !tenant
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c))
    {
        Some("it may hold only a-z, 0-9, '-', '_' and '.'")
    } else if tenant.starts_with(['.', '-', '_']) || tenant.ends_with('.') || tenant.contains("..")
    {
        Some("it must start with a letter or digit, and not end with '.' or hold \"..\"")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(Error::InvalidTenant {
            tenant: tenant.escape_debug().to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_as_keys() {
        for good in ["dev", "team-7", "a.b", "x_y", "0"] {
            assert!(check_tenant(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "Dev",
            "a..b",
            "a.",
            ".a",
            "a b",
            "a>b",
            "a*",
            &"x".repeat(64),
        ] {
            assert!(check_tenant(bad).is_err(), "{bad:?}");
        }
        let digest = Digest::of(b"d");
        assert_eq!(owner_key(&digest, "team-7"), format!("{digest}.team-7"));
    }
}
