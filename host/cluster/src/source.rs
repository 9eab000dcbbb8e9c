//! The cluster as a node's [`DeploymentSource`]: a deployment the node lacks is fetched from
//! the object store when the tenant asking for it pushed it there.

use std::time::Duration;

use tasklet_store::{DeploymentSource, Digest, FetchedDeployment, SourceError};
use tokio::runtime::Handle;
use tokio::sync::Mutex;

use crate::blobs::DEFAULT_MAX_BLOB_BYTES;
use crate::cluster::Cluster;
use crate::config::NatsConfig;
use crate::deployments::ClusterDeployments;
use crate::error::Error;

/// The longest a fetch may take, connecting included: past it the run is refused rather than
/// left waiting on a NATS that does not answer.
pub const FETCH_LIMIT: Duration = Duration::from_secs(60);

/// Fetches deployments from the cluster's object store for a node, connecting to NATS on the
/// first miss (a node that starts before NATS fetches once NATS is there) and keeping the
/// connection for the next.
///
/// [`DeploymentSource::fetch`] blocks on `handle`'s runtime: call it from a blocking thread
/// (`spawn_blocking`), never from a task of that runtime.
pub struct ClusterSource {
    config: NatsConfig,
    handle: Handle,
    max_bytes: u64,
    deployments: Mutex<Option<ClusterDeployments>>,
}

impl ClusterSource {
    /// A source on the NATS `config` names, run on `handle`'s runtime.
    pub fn new(config: NatsConfig, handle: Handle) -> ClusterSource {
        ClusterSource {
            config,
            handle,
            max_bytes: DEFAULT_MAX_BLOB_BYTES,
            deployments: Mutex::new(None),
        }
    }

    /// Refuses blobs larger than `max_bytes` (the node's own blob limit).
    pub fn with_max_bytes(mut self, max_bytes: u64) -> ClusterSource {
        self.max_bytes = max_bytes;
        self
    }

    async fn fetch_async(
        &self,
        tenant: &str,
        digest: &Digest,
    ) -> crate::Result<Option<FetchedDeployment>> {
        let mut slot = self.deployments.lock().await;
        let deployments = match slot.as_ref() {
            Some(deployments) => deployments.clone(),
            None => {
                let cluster = Cluster::connect(&self.config).await?;
                let opened = ClusterDeployments::open(&cluster)
                    .await?
                    .with_max_bytes(self.max_bytes);
                *slot = Some(opened.clone());
                opened
            }
        };
        // Fetches of different deployments need not wait for one another.
        drop(slot);
        Ok(deployments
            .fetch(tenant, digest)
            .await?
            .map(|parts| FetchedDeployment {
                manifest: parts.manifest,
                component: parts.component,
            }))
    }
}

impl DeploymentSource for ClusterSource {
    fn fetch(
        &self,
        tenant: &str,
        digest: &Digest,
    ) -> Result<Option<FetchedDeployment>, SourceError> {
        let fetched = self.handle.block_on(async {
            tokio::time::timeout(FETCH_LIMIT, self.fetch_async(tenant, digest)).await
        });
        match fetched {
            Ok(Ok(found)) => Ok(found),
            Ok(Err(e)) => {
                let message = format!("cannot fetch deployment {digest} from the cluster: {e}");
                Err(if about_the_content(&e) {
                    SourceError::Failed(message)
                } else {
                    SourceError::Unavailable(message)
                })
            }
            Err(_) => Err(SourceError::Unavailable(format!(
                "cannot fetch deployment {digest} from the cluster: NATS at {} did not answer within {FETCH_LIMIT:?}",
                self.config.display_url()
            ))),
        }
    }
}

/// Whether `err` is about what the cluster holds (the same for every node that fetches it),
/// rather than about reaching NATS from this node (which another node may do).
fn about_the_content(err: &Error) -> bool {
    matches!(
        err,
        Error::DigestMismatch { .. }
            | Error::BadDeployment { .. }
            | Error::BlobTooLarge { .. }
            | Error::WrongBytes { .. }
    )
}
