//! The registry's KV bucket: opened or created with per-key expiry, and written with a TTL on
//! every record (which the KV API of the client library offers only on create).

use std::time::Duration;

use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::StorageType;
use async_nats::jetstream::{self, kv};
use bytes::Bytes;

use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::record::NodeName;

/// The KV bucket holding one record per live node, keyed by node name.
pub const NODES_BUCKET: &str = "tasklet-nodes";

/// The bucket's stream.
pub(crate) const NODES_STREAM: &str = "KV_tasklet-nodes";

/// What the subjects of the bucket's records begin with; the node's name follows.
pub(crate) const NODES_PREFIX: &str = "$KV.tasklet-nodes.";

/// How long the server keeps the delete marker it writes when a record expires: long enough
/// for watchers that were briefly away to see it, short enough that markers do not pile up.
const EXPIRY_MARKER_TTL: Duration = Duration::from_secs(60);

/// How long a clean stop's tombstone stays, for the same reason.
pub(crate) const TOMBSTONE_TTL: Duration = EXPIRY_MARKER_TTL;

/// The bucket, opened.
#[derive(Clone)]
pub(crate) struct NodesBucket {
    pub(crate) kv: kv::Store,
    cluster: Cluster,
}

impl NodesBucket {
    /// The bucket as it is; [`Error::BucketMissing`] when no node has created it. One
    /// request: the stream's info, which is all the client library's own opening would ask
    /// for (twice, with this check).
    pub(crate) async fn open(cluster: &Cluster) -> Result<NodesBucket> {
        match cluster
            .stream(NODES_STREAM, "looking up the nodes bucket")
            .await?
        {
            Some(stream) => NodesBucket::bound(cluster, stream),
            None => Err(missing(cluster)),
        }
    }

    /// The bucket, created first when missing (with per-key expiry, one value per key).
    pub(crate) async fn open_or_create(cluster: &Cluster) -> Result<NodesBucket> {
        if let Some(stream) = cluster
            .stream(NODES_STREAM, "looking up the nodes bucket")
            .await?
        {
            return NodesBucket::bound(cluster, stream);
        }
        let config = kv::Config {
            bucket: NODES_BUCKET.into(),
            description: "tasklet nodes: one record per live node, expiring unless refreshed"
                .into(),
            history: 1,
            storage: StorageType::File,
            num_replicas: cluster.bucket_replicas,
            limit_markers: Some(EXPIRY_MARKER_TTL),
            ..Default::default()
        };
        match cluster.jetstream.create_key_value(config).await {
            Ok(kv) => Ok(NodesBucket {
                kv,
                cluster: cluster.clone(),
            }),
            // Another node may have created it meanwhile, with its own idea of the details.
            Err(create) => NodesBucket::open(cluster).await.map_err(|open| match open {
                Error::BucketMissing { .. } => {
                    Error::request(cluster.url(), "creating the nodes bucket", create)
                }
                other => other,
            }),
        }
    }

    /// The bucket on `stream`, as the client library binds a KV store to its stream (this
    /// bucket is never a mirror), once checked for per-key expiry.
    fn bound(cluster: &Cluster, stream: jetstream::stream::Stream) -> Result<NodesBucket> {
        if !stream.cached_info().config.allow_message_ttl {
            return Err(Error::BucketMisconfigured {
                bucket: NODES_BUCKET.into(),
                url: cluster.url().into(),
                problem: "does not allow per-key expiry (it was created without message TTLs)",
            });
        }
        Ok(NodesBucket {
            kv: kv::Store {
                name: NODES_BUCKET.into(),
                stream_name: NODES_STREAM.into(),
                prefix: NODES_PREFIX.into(),
                put_prefix: None,
                use_jetstream_prefix: false,
                stream,
            },
            cluster: cluster.clone(),
        })
    }

    /// Writes `json` under `name`, to be removed by the server `ttl` after this write unless
    /// written again; with `after`, only if the key's last write is still that one (its
    /// sequence). The write's sequence, or `None` when the key was written since `after`.
    pub(crate) async fn put(
        &self,
        name: &NodeName,
        json: Bytes,
        ttl: Duration,
        after: Option<u64>,
    ) -> Result<Option<u64>> {
        let mut message = PublishMessage::build().payload(json).ttl(ttl);
        if let Some(sequence) = after {
            message = message.expected_last_subject_sequence(sequence);
        }
        let failed =
            |e: PublishError| Error::request(self.cluster.url(), "writing a node record", e);
        let ack = self
            .cluster
            .jetstream
            .send_publish(subject(name), message)
            .await
            .map_err(failed)?
            .await;
        match ack {
            Ok(ack) => Ok(Some(ack.sequence)),
            Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => Ok(None),
            Err(e) => Err(failed(e)),
        }
    }

    /// Removes `name`'s record now, leaving a tombstone that expires in turn; with `after`,
    /// only if the key's last write is still that one. Whether it was removed.
    pub(crate) async fn remove(&self, name: &NodeName, after: Option<u64>) -> Result<bool> {
        let purged = match after {
            Some(revision) => {
                self.kv
                    .purge_expect_revision_with_ttl(name.as_str(), revision, TOMBSTONE_TTL)
                    .await
            }
            None => self.kv.purge_with_ttl(name.as_str(), TOMBSTONE_TTL).await,
        };
        match purged {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => Ok(false),
            Err(e) => Err(Error::request(
                self.cluster.url(),
                "removing a node record",
                e,
            )),
        }
    }
}

fn subject(name: &NodeName) -> String {
    format!("$KV.{NODES_BUCKET}.{name}")
}

pub(crate) fn missing(cluster: &Cluster) -> Error {
    Error::BucketMissing {
        bucket: NODES_BUCKET.into(),
        url: cluster.url().into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_the_buckets() {
        assert_eq!(NODES_STREAM, format!("KV_{NODES_BUCKET}"));
    }
}
