//! A node's side of the registry: its record written on every heartbeat until it stops.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::kv;
use tokio::sync::{oneshot, watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, timeout, Instant};

use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::heartbeat::Heartbeat;
use crate::nodes_bucket::NodesBucket;
use crate::record::{NodeName, NodeRecord, RecordError, RECORD_FORMAT};

/// What a node says about itself, asked once per heartbeat (and on [`Registrar::refresh`])
/// from the registrar's task: it should answer from counters the node keeps, without waiting.
///
/// Any `Fn() -> NodeRecord` is one. The name must not change between calls. The registrar
/// sets `format` and `heartbeat_unix_ms`, and sets `draining` when [`Registrar::set_draining`]
/// said so.
pub trait RecordSource: Send + Sync + 'static {
    fn record(&self) -> NodeRecord;
}

impl<F: Fn() -> NodeRecord + Send + Sync + 'static> RecordSource for F {
    fn record(&self) -> NodeRecord {
        self()
    }
}

/// How a registrar is doing, for logs, metrics and health checks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegistrarStatus {
    /// The last write reached the server.
    pub registered: bool,
    /// Writes that reached the server since the start.
    pub writes: u64,
    /// Writes that failed in a row (0 while registered).
    pub failures: u32,
    /// Why the last failed write failed.
    pub last_error: Option<String>,
    /// Where another live node that writes this name's record is (two nodes started under
    /// one name at the same moment): set when one of its writes is found, cleared once none
    /// has been found for as long as a record stays live (the heartbeat's `stale_after`).
    pub contested_by: Option<String>,
}

/// Refreshes between two heartbeats come at most this often, however often they are asked
/// for: a burst of lease changes is one write.
const MIN_REFRESH_SPACING: Duration = Duration::from_millis(100);

/// The longest a clean stop waits for a write in progress before removing the record.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// Keeps one node's record in the registry: written at start, then every
/// [`Heartbeat::interval`] with a TTL of [`Heartbeat::ttl`].
///
/// When NATS is unreachable the registrar keeps trying on every heartbeat (the connection
/// reconnects by itself) and the record comes back with the first write that succeeds; if the
/// bucket vanished with the server's storage, it is created again. [`Registrar::stop`] removes
/// the record at once; dropping a registrar without stopping it stops the writes, and the
/// record expires as a crashed node's would.
///
/// A name is one live node's: a registrar does not start while another node's live record (at
/// another address, or with another certificate) holds the name ([`Error::NameTaken`]). Two
/// that started at once anyway each log a warning when the other's write is found under the
/// name, and a stop removes the record only if this node's write is still the last (it never
/// removes the other's).
pub struct Registrar {
    name: NodeName,
    /// The connection the record is written over (for [`Registrar::connected`]).
    cluster: Cluster,
    shared: Arc<Shared>,
    bucket: NodesBucket,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

struct Shared {
    draining: AtomicBool,
    refresh: Notify,
    status: watch::Sender<RegistrarStatus>,
    /// The stream sequence of this node's last write of its record (0: none yet).
    last_write: AtomicU64,
}

impl Registrar {
    /// Creates the bucket if it is missing, writes the first record (an error if that fails:
    /// a node misconfigured for NATS should say so at start), and keeps it fresh from then on.
    pub async fn start(
        cluster: &Cluster,
        heartbeat: Heartbeat,
        source: impl RecordSource,
    ) -> Result<Registrar> {
        heartbeat.validate()?;
        let first = source.record();
        let name = first.name.clone();
        let shared = Arc::new(Shared {
            draining: AtomicBool::new(false),
            refresh: Notify::new(),
            status: watch::Sender::new(RegistrarStatus::default()),
            last_write: AtomicU64::new(0),
        });
        let bucket = NodesBucket::open_or_create(cluster).await?;
        check_name_free(cluster, &bucket, &first, heartbeat).await?;
        let mut writer = Writer {
            cluster: cluster.clone(),
            bucket: Some(bucket.clone()),
            name: name.clone(),
            source: Box::new(source),
            heartbeat,
            shared: shared.clone(),
            contested: None,
        };
        writer.write().await?;
        tracing::info!(node = %name, url = cluster.url(), "registered with the cluster");
        writer.report(Ok(()));

        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(writer.run(stopped));
        Ok(Registrar {
            name,
            cluster: cluster.clone(),
            shared,
            bucket,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// The node's name: its key in the registry.
    pub fn name(&self) -> &NodeName {
        &self.name
    }

    /// Marks the record draining (or no longer), written at once.
    pub fn set_draining(&self, draining: bool) {
        self.shared.draining.store(draining, Ordering::Relaxed);
        self.shared.refresh.notify_one();
    }

    /// Writes the record soon instead of at the next heartbeat (after a change placement
    /// should see, such as a lease taken). Calls in a burst give one write.
    pub fn refresh(&self) {
        self.shared.refresh.notify_one();
    }

    /// Whether the connection to NATS is up now (it reconnects by itself when not): a stop
    /// while it is down cannot remove the record, which then expires by itself.
    pub fn connected(&self) -> bool {
        self.cluster.is_connected()
    }

    /// How the writes are going.
    pub fn status(&self) -> RegistrarStatus {
        self.shared.status.borrow().clone()
    }

    /// Stops the heartbeats and removes the record, so that the node leaves the registry now
    /// rather than when its record expires. When NATS cannot be reached the error says so, and
    /// the record expires by itself within [`Heartbeat::ttl`].
    pub async fn stop(mut self) -> Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(mut task) = self.task.take() {
            if timeout(STOP_WAIT, &mut task).await.is_err() {
                task.abort();
            }
        }
        let ours = match self.shared.last_write.load(Ordering::Acquire) {
            0 => None,
            sequence => Some(sequence),
        };
        if self.bucket.remove(&self.name, ours).await? {
            tracing::info!(node = %self.name, "left the cluster");
        } else {
            tracing::warn!(
                node = %self.name,
                "left the cluster; another node wrote the record of this name since, and it is left in place"
            );
        }
        Ok(())
    }
}

impl Drop for Registrar {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The registrar's task: the state it writes from.
struct Writer {
    cluster: Cluster,
    /// `None` after a failure: looked up (or created) again before the next write.
    bucket: Option<NodesBucket>,
    name: NodeName,
    source: Box<dyn RecordSource>,
    heartbeat: Heartbeat,
    shared: Arc<Shared>,
    /// When another node's write was last found under this name. It was said once; not
    /// again until none has been found for `stale_after`.
    contested: Option<Instant>,
}

impl Writer {
    async fn run(mut self, mut stopped: oneshot::Receiver<()>) {
        let mut last_write = Instant::now();
        loop {
            let next = last_write + self.heartbeat.interval;
            tokio::select! {
                // A stop, or the registrar dropped.
                _ = &mut stopped => return,
                _ = sleep_until(next) => {}
                _ = self.shared.refresh.notified() => {
                    tokio::select! {
                        _ = &mut stopped => return,
                        _ = sleep_until(last_write + MIN_REFRESH_SPACING) => {}
                    }
                }
            }
            last_write = Instant::now();
            // A write that cannot finish within a heartbeat is a failed one: the next
            // heartbeat tries again with the record as it is then.
            let bound = self.heartbeat.interval.max(Duration::from_secs(1));
            let result = match timeout(bound, self.write()).await {
                Ok(result) => result,
                Err(_) => Err(Error::request(
                    self.cluster.url(),
                    "writing a node record",
                    format!("no answer within {bound:?}"),
                )),
            };
            if result.is_err() {
                self.bucket = None;
            }
            self.report(result);
        }
    }

    async fn write(&mut self) -> Result<()> {
        let mut record = self.source.record();
        if record.name != self.name {
            return Err(RecordError::KeyMismatch {
                key: self.name.to_string(),
                name: record.name.to_string(),
            }
            .into());
        }
        record.format = RECORD_FORMAT;
        record.draining |= self.shared.draining.load(Ordering::Relaxed);
        record.heartbeat_unix_ms = unix_ms();
        let json = record.to_json()?;
        let bucket = match &self.bucket {
            Some(bucket) => bucket,
            None => self
                .bucket
                .insert(NodesBucket::open_or_create(&self.cluster).await?),
        };
        let json = bytes::Bytes::from(json);
        let last = match self.shared.last_write.load(Ordering::Acquire) {
            0 => None,
            sequence => Some(sequence),
        };
        let (written, other) = match bucket
            .put(&self.name, json.clone(), self.heartbeat.ttl, last)
            .await?
        {
            Some(sequence) => (sequence, None),
            // Written since this node's last write: by the server (the record expired while
            // NATS was away), or by another node of this name.
            None => {
                let other = other_holder(&bucket.kv, &record, self.heartbeat).await;
                let unconditional = bucket.put(&self.name, json, self.heartbeat.ttl, None);
                (unconditional.await?.unwrap_or(0), other)
            }
        };
        self.note_contest(other);
        self.shared.last_write.store(written, Ordering::Release);
        Ok(())
    }

    /// Notes what this write found: another node writing this name (`other`: where it is),
    /// warned of once, or none. Two nodes' writes interleave (each also writes between
    /// heartbeats), so a write that found none ends the contest only once none has been
    /// found for `stale_after`.
    fn note_contest(&mut self, other: Option<String>) {
        let now = Instant::now();
        let over = self
            .contested
            .is_some_and(|seen| now.duration_since(seen) >= self.heartbeat.stale_after);
        match other {
            Some(other) => {
                if self.contested.is_none() {
                    tracing::warn!(
                        node = %self.name,
                        other = other.as_str(),
                        "another node writes the record of this name: each live node needs its own name (`tasklet node --name`)"
                    );
                }
                self.contested = Some(now);
                self.shared.status.send_if_modified(|status| {
                    let changed = status.contested_by.as_ref() != Some(&other);
                    status.contested_by = Some(other);
                    changed
                });
            }
            None if over => {
                self.contested = None;
                self.shared
                    .status
                    .send_modify(|status| status.contested_by = None);
            }
            None => {}
        }
    }

    /// Updates the status, logging only the changes between registered and not.
    fn report(&self, result: Result<()>) {
        self.shared.status.send_modify(|status| match result {
            Ok(()) => {
                if !status.registered && status.writes > 0 {
                    tracing::info!(node = %self.name, "registered again after {} failed writes", status.failures);
                }
                status.registered = true;
                status.writes += 1;
                status.failures = 0;
            }
            Err(e) => {
                if status.registered {
                    tracing::warn!(node = %self.name, "cluster registration lost, retrying every heartbeat: {e}");
                }
                status.registered = false;
                status.failures = status.failures.saturating_add(1);
                status.last_error = Some(e.to_string());
            }
        });
    }
}

/// Refuses a start while another live node's record holds `ours`'s name.
async fn check_name_free(
    cluster: &Cluster,
    bucket: &NodesBucket,
    ours: &NodeRecord,
    heartbeat: Heartbeat,
) -> Result<()> {
    match other_holder(&bucket.kv, ours, heartbeat).await {
        None => Ok(()),
        Some(address) => Err(Error::NameTaken {
            name: ours.name.to_string(),
            address,
            url: cluster.url().into(),
        }),
    }
}

/// The address of another node whose live record holds `ours`'s name: one at another address
/// or with another certificate (this node's own record, left by a run that was killed, is
/// not another's). `None` when there is none, or the record cannot be read now (the write
/// that follows says why).
async fn other_holder(kv: &kv::Store, ours: &NodeRecord, heartbeat: Heartbeat) -> Option<String> {
    let entry = kv.entry(ours.name.as_str()).await.ok()??;
    let node = crate::registry::live(&entry, heartbeat.stale_after)?;
    let theirs = &node.record;
    (theirs.address != ours.address || theirs.cert_sha256 != ours.cert_sha256)
        .then(|| theirs.address.clone())
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
