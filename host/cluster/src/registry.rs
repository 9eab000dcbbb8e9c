//! The reader's side of the registry: the live nodes and their records.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::consumer::{push, DeliverPolicy, ReplayPolicy};
use async_nats::jetstream::kv::{Entry, Operation};
use async_nats::jetstream::stream::ConsumerErrorKind;
use async_nats::jetstream::ErrorCode;
use futures_util::stream::{BoxStream, StreamExt};
use tokio::time::timeout;

use crate::cluster::Cluster;
use crate::error::one_line;
use crate::error::{Error, Result};
use crate::heartbeat::Heartbeat;
use crate::nodes_bucket::{self, NodesBucket, NODES_BUCKET, NODES_PREFIX, NODES_STREAM};
use crate::record::{NodeName, NodeRecord};

/// A node whose record is fresh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveNode {
    pub record: NodeRecord,
    /// Time since the record was written, by this reader's clock against the server's.
    pub age: Duration,
    /// The record's revision in the bucket (it grows with every write, across all nodes).
    pub revision: u64,
}

impl AsRef<NodeRecord> for LiveNode {
    fn as_ref(&self) -> &NodeRecord {
        &self.record
    }
}

/// A change seen by [`Registry::watch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryEvent {
    /// A node's record was written: a new node, or a heartbeat of a known one.
    Up(LiveNode),
    /// A node left: stopped cleanly, or its record expired.
    Gone(NodeName),
}

/// Reads the registry.
#[derive(Clone)]
pub struct Registry {
    bucket: NodesBucket,
    cluster: Cluster,
    stale_after: Duration,
}

impl Registry {
    /// Opens the registry; [`Error::BucketMissing`] when no node ever registered with this
    /// server. Records older than [`Heartbeat::default`]'s `stale_after` are not live.
    pub async fn open(cluster: &Cluster) -> Result<Registry> {
        Ok(Registry {
            bucket: NodesBucket::open(cluster).await?,
            cluster: cluster.clone(),
            stale_after: Heartbeat::default().stale_after,
        })
    }

    /// Records older than `stale_after` are not live (use the registrars' `stale_after`).
    pub fn with_stale_after(mut self, stale_after: Duration) -> Registry {
        self.stale_after = stale_after;
        self
    }

    /// The live nodes, by name. Malformed records are left out (and logged).
    ///
    /// One request and one stream: an ordered consumer delivers the last message of every key,
    /// values included, and the listing ends when the consumer has nothing pending. (Listing
    /// the keys and then getting each record would be a request per node: with 200 nodes,
    /// several times slower. JetStream's batched direct get, `multi_last`, leaves no consumer
    /// but streamed the same records about half as fast on nats-server 2.12.) A record
    /// rewritten while the listing runs is delivered again; the newest revision is kept. The
    /// consumer is deleted as soon as the listing is done: the server would otherwise keep it
    /// for 30 s, matching every heartbeat against it.
    pub async fn list(&self) -> Result<Vec<LiveNode>> {
        list(&self.cluster, self.stale_after).await
    }

    /// [`Registry::list`] without opening the registry first: one request fewer, for a
    /// command that connects, lists once and leaves. [`Error::BucketMissing`] when no node
    /// ever registered with this server. Records older than [`Heartbeat::default`]'s
    /// `stale_after` are not live.
    pub async fn list_once(cluster: &Cluster) -> Result<Vec<LiveNode>> {
        list(cluster, Heartbeat::default().stale_after).await
    }

    /// One node, if it is live.
    pub async fn get(&self, name: &NodeName) -> Result<Option<LiveNode>> {
        let entry = self
            .bucket
            .kv
            .entry(name.as_str())
            .await
            .map_err(|e| self.failed("reading a node record", e))?;
        Ok(entry.and_then(|entry| self.live(&entry)))
    }

    /// Every live node now, then every change as it happens. Heartbeats show up as `Up`
    /// again; a stale or malformed record as `Gone`. The stream ends with an error when the
    /// watch cannot go on (open a new one).
    pub async fn watch(&self) -> Result<BoxStream<'static, Result<RegistryEvent>>> {
        let watch = self
            .bucket
            .kv
            .watch_with_history(">")
            .await
            .map_err(|e| self.failed("watching the registry", e))?;
        let reader = self.clone();
        Ok(watch
            .filter_map(move |entry| {
                let event = match entry {
                    Err(e) => Some(Err(reader.failed("watching the registry", e))),
                    Ok(entry) => reader.event(&entry).map(Ok),
                };
                std::future::ready(event)
            })
            .boxed())
    }

    fn event(&self, entry: &Entry) -> Option<RegistryEvent> {
        let Ok(name) = NodeName::new(entry.key.as_str()) else {
            tracing::warn!(key = entry.key, "registry key is not a node name; ignored");
            return None;
        };
        Some(match self.live(entry) {
            Some(node) => RegistryEvent::Up(node),
            None => RegistryEvent::Gone(name),
        })
    }

    /// The node in `entry` if it is a fresh, well-formed record.
    fn live(&self, entry: &Entry) -> Option<LiveNode> {
        live(entry, self.stale_after)
    }

    fn failed(&self, operation: &'static str, cause: impl ToString) -> Error {
        Error::request(self.cluster.url(), operation, cause)
    }
}

/// The live nodes, by name (see [`Registry::list`]).
async fn list(cluster: &Cluster, stale_after: Duration) -> Result<Vec<LiveNode>> {
    // Bounded as a whole: a server that stops answering mid-listing is an error, not a wait.
    let bound = cluster.request_timeout * 2;
    let entries = timeout(bound, last_entries(cluster)).await.map_err(|_| {
        Error::request(
            cluster.url(),
            "listing nodes",
            format!("no answer within {bound:?}"),
        )
    })??;
    let mut nodes: Vec<LiveNode> = entries
        .into_values()
        .filter_map(|entry| live(&entry, stale_after))
        .collect();
    nodes.sort_by(|a, b| a.record.name.cmp(&b.record.name));
    Ok(nodes)
}

/// The last message of every key now, as entries by key. The consumer is made on the bucket's
/// stream by name, without looking the stream up first: a missing stream is told apart by the
/// server's answer.
async fn last_entries(cluster: &Cluster) -> Result<HashMap<String, Entry>> {
    let listing = |e: &dyn std::fmt::Display| Error::request(cluster.url(), "listing nodes", e);
    let consumer = cluster
        .jetstream
        .create_consumer_on_stream(
            push::OrderedConfig {
                deliver_subject: cluster.jetstream.client().new_inbox(),
                description: Some("tasklet registry listing".into()),
                filter_subject: format!("{NODES_PREFIX}>"),
                replay_policy: ReplayPolicy::Instant,
                deliver_policy: DeliverPolicy::LastPerSubject,
                ..Default::default()
            },
            NODES_STREAM,
        )
        .await
        .map_err(|e| match e.kind() {
            ConsumerErrorKind::JetStream(js) if js.error_code() == ErrorCode::STREAM_NOT_FOUND => {
                nodes_bucket::missing(cluster)
            }
            ConsumerErrorKind::JetStream(js)
                if js.error_code() == ErrorCode::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT
                    || js.error_code() == ErrorCode::JETSTREAM_NOT_ENABLED =>
            {
                Error::JetStreamDisabled {
                    url: cluster.url().into(),
                    cause: one_line(&e.to_string()),
                }
            }
            _ => listing(&e),
        })?;
    let name = consumer.cached_info().name.clone();
    let read = read_last_entries(cluster, consumer).await;
    delete_consumer(cluster, &name).await;
    read
}

/// What `consumer` delivers until it has nothing pending. The consumer is dropped (its
/// subscription ended) on return, so that it is not recreated once deleted.
async fn read_last_entries(
    cluster: &Cluster,
    consumer: async_nats::jetstream::consumer::Consumer<push::OrderedConfig>,
) -> Result<HashMap<String, Entry>> {
    let listing = |e: &dyn std::fmt::Display| Error::request(cluster.url(), "listing nodes", e);
    let mut entries: HashMap<String, Entry> = HashMap::new();
    if consumer.cached_info().num_pending == 0 {
        return Ok(entries);
    }
    let mut messages = consumer.messages().await.map_err(|e| listing(&e))?;
    while let Some(message) = messages.next().await {
        let message = message.map_err(|e| listing(&e))?;
        let info = message.info().map_err(|e| listing(&*e))?;
        let pending = info.pending;
        if let Some(key) = message.subject.strip_prefix(NODES_PREFIX) {
            let entry = Entry {
                bucket: NODES_BUCKET.to_owned(),
                key: key.to_owned(),
                value: message.payload.clone(),
                revision: info.stream_sequence,
                delta: pending,
                created: info.published,
                operation: operation(&message),
                seen_current: pending == 0,
            };
            match entries.get(key) {
                Some(known) if known.revision > entry.revision => {}
                _ => {
                    entries.insert(entry.key.clone(), entry);
                }
            }
        }
        if pending == 0 {
            break;
        }
    }
    Ok(entries)
}

/// Asks the server to delete the listing's consumer, without waiting for its answer: the
/// request is written out before this returns (a command that exits next still sends it),
/// and a delete that fails leaves the consumer to the server's own 30 s cleanup.
async fn delete_consumer(cluster: &Cluster, name: &str) {
    let client = cluster.jetstream.client();
    let subject = format!("$JS.API.CONSUMER.DELETE.{NODES_STREAM}.{name}");
    let sent = match client.publish(subject, bytes::Bytes::new()).await {
        Ok(()) => client.flush().await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = sent {
        tracing::debug!(
            consumer = name,
            "registry listing consumer not deleted: {e}"
        );
    }
}

/// The node in `entry` if it is a fresh, well-formed record.
pub(crate) fn live(entry: &Entry, stale_after: Duration) -> Option<LiveNode> {
    if entry.operation != Operation::Put {
        return None;
    }
    let age = age(entry.created.unix_timestamp_nanos());
    if age > stale_after {
        return None;
    }
    match NodeRecord::from_json(&entry.key, &entry.value) {
        Ok(record) => Some(LiveNode {
            record,
            age,
            revision: entry.revision,
        }),
        Err(e) => {
            tracing::warn!(key = entry.key, "malformed node record ignored: {e}");
            None
        }
    }
}

/// What a message of the bucket's stream does to its key: a record written, or one removed (a
/// delete or purge by a client, or the server's marker for an expired record).
fn operation(message: &async_nats::jetstream::Message) -> Operation {
    let Some(headers) = message.headers.as_ref() else {
        return Operation::Put;
    };
    match headers.get("KV-Operation").map(|v| v.as_str()) {
        Some("DEL") => Operation::Delete,
        Some("PURGE") => Operation::Purge,
        // A value this reader does not know is not a record it can use.
        Some(_) => Operation::Delete,
        None if headers.get("Nats-Marker-Reason").is_some() => Operation::Purge,
        None => Operation::Put,
    }
}

/// Time since `written` (nanoseconds since the Unix epoch, the server's clock); zero when the
/// server's clock is ahead of this one.
fn age(written_unix_nanos: i128) -> Duration {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    let nanos = (now - written_unix_nanos).clamp(0, u64::MAX as i128);
    Duration::from_nanos(nanos as u64)
}
