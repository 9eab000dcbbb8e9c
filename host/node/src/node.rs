//! [`Node`]: a bound endpoint over a host, and the loop that serves it until it is drained or
//! stopped; [`NodeControl`] and [`RunningNode`] to steer one from elsewhere.

use crate::builder::NodeError;
use crate::cluster::{self, Membership};
use crate::connection;
use crate::metrics::{http, MetricsSnapshot};
use crate::shared::{Phase, Shared};
use crate::status::NodeStatus;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tasklet_runtime::Accounting;
use tasklet_wire::ErrorCode;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How often a drain looks whether the last lease has ended.
const DRAIN_POLL: Duration = Duration::from_millis(50);

/// How often a stopping node looks whether its connections have closed.
const CLOSED_POLL: Duration = Duration::from_millis(10);

/// The longest a stopping node waits to leave the cluster (its record expires by itself).
const LEAVE_WAIT: Duration = Duration::from_secs(10);

/// How long closing connections get to tell their clients before the node stops waiting.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// A node ready to serve: its host is started and its addresses bound. See [`Node::serve`].
pub struct Node {
    shared: Arc<Shared>,
    endpoint: quinn::Endpoint,
    /// Where `/metrics` is served, when it is.
    metrics: Option<TcpListener>,
    /// Its place in a cluster, when it joins one.
    membership: Option<Membership>,
}

impl Node {
    pub(crate) fn new(
        shared: Arc<Shared>,
        endpoint: quinn::Endpoint,
        metrics: Option<TcpListener>,
        membership: Option<Membership>,
    ) -> Node {
        Node {
            shared,
            endpoint,
            metrics,
            membership,
        }
    }

    /// The address the node serves on (the port chosen, when it was 0).
    pub fn local_addr(&self) -> SocketAddr {
        // A bound endpoint's socket has an address; the listen address is the fallback.
        self.endpoint
            .local_addr()
            .unwrap_or(crate::builder::DEFAULT_LISTEN)
    }

    /// The TCP address `/metrics` is served on (the port chosen, when it was 0), if it is.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// A handle to drain or stop the node and read its state, usable while it serves.
    pub fn control(&self) -> NodeControl {
        NodeControl {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Serves connections until the node is drained ([`NodeControl::drain`]: once the last
    /// lease has ended) or stopped ([`NodeControl::stop`]: at once). Either way every connection
    /// is closed, every lease ended and every worker process stopped before this returns.
    pub async fn serve(self) -> Result<(), NodeError> {
        let Node {
            shared,
            endpoint,
            metrics,
            membership,
        } = self;
        tracing::info!(addr = %endpoint.local_addr().map_or("?".into(), |a| a.to_string()), node = %shared.name, "serving");
        for line in shared.host.policy().tenant_caps_above_the_ceiling() {
            tracing::warn!("policy: {line}");
        }
        if let Some(deployments) = &shared.deployments {
            tracing::info!(store = %deployments.root().display(), "serving deployments");
        }
        let scrapes = metrics.map(|listener| {
            if let Ok(addr) = listener.local_addr() {
                tracing::info!(%addr, "metrics at http://{addr}/metrics");
            }
            tokio::spawn(http::serve(listener, Arc::clone(&shared)))
        });
        let membership = membership.map(|m| {
            tracing::info!(node = %m.name, address = m.address, nats = m.nats.display_url(), "joining the cluster");
            cluster::spawn(Arc::clone(&shared), m)
        });
        let mut phase = shared.phase();
        let mut drain_deadline: Option<Instant> = None;
        let close = loop {
            let draining = *phase.borrow() == Phase::Draining;
            if draining {
                // Running work is the lease holders' and the deployed tasklets' runs; and the
                // replies owed, the last lease's release or the last run's output among them.
                if shared.host.accounting().leases == 0
                    && shared.metrics.deploy_runs_active() == 0
                    && shared.unanswered() == 0
                {
                    break (ErrorCode::Draining, "the node has drained and stopped");
                }
                if drain_deadline.is_some_and(|d| Instant::now() >= d) {
                    tracing::warn!(
                        leases = shared.host.accounting().leases,
                        "drain timeout: closing connections that still hold leases"
                    );
                    break (
                        ErrorCode::Draining,
                        "the node stopped at the end of its drain timeout",
                    );
                }
            }
            tokio::select! {
                incoming = endpoint.accept() => match incoming {
                    Some(incoming) => {
                        let open = shared.metrics.connections_open();
                        if open >= shared.limits.max_connections {
                            tracing::warn!(remote = %incoming.remote_address(), open, "refused a connection: the node serves its most connections");
                            incoming.refuse();
                            continue;
                        }
                        tokio::spawn(connection::serve(Arc::clone(&shared), incoming));
                    }
                    None => break (ErrorCode::Internal, "the node's endpoint closed"),
                },
                changed = phase.changed() => {
                    if changed.is_err() {
                        break (ErrorCode::Internal, "the node's control ended");
                    }
                    match *phase.borrow() {
                        Phase::Stopping => break (ErrorCode::Draining, "the node was stopped"),
                        Phase::Draining => {
                            tracing::info!(leases = shared.host.accounting().leases, "draining: new leases are refused; stopping once the running ones end");
                            drain_deadline = shared.limits.drain_timeout.map(|t| Instant::now() + t);
                        }
                        Phase::Serving => {}
                    }
                },
                _ = tokio::time::sleep(DRAIN_POLL), if draining => {}
            }
        };
        let (code, reason) = close;
        shared.advance(Phase::Stopping);
        if let Some(scrapes) = scrapes {
            scrapes.abort();
        }
        // Out of the registry before the connections close, so that no client is sent here
        // any more (the membership task removes the record on the stop; bounded inside).
        if let Some(mut membership) = membership {
            if tokio::time::timeout(LEAVE_WAIT, &mut membership)
                .await
                .is_err()
            {
                membership.abort();
            }
        }
        // The connections close themselves once they have delivered what was answered
        // (bounded in each); the endpoint's close ends any that have not.
        let closing = Instant::now();
        while shared.metrics.connections_open() > 0 && closing.elapsed() < CLOSE_GRACE * 2 {
            tokio::time::sleep(CLOSED_POLL).await;
        }
        endpoint.close((code as u32).into(), reason.as_bytes());
        let _ = tokio::time::timeout(CLOSE_GRACE, endpoint.wait_idle()).await;
        let host = Arc::clone(&shared);
        let _ = tokio::task::spawn_blocking(move || host.shut_down_host()).await;
        tracing::info!(reason, "stopped");
        Ok(())
    }

    /// Serves on the current Tokio runtime in a task of its own.
    pub fn start(self) -> RunningNode {
        let control = self.control();
        let local_addr = self.local_addr();
        let metrics_addr = self.metrics_addr();
        RunningNode {
            control,
            local_addr,
            metrics_addr,
            task: tokio::spawn(self.serve()),
        }
    }
}

/// Drains, stops and reads a node from anywhere (it is cheap to clone).
#[derive(Clone)]
pub struct NodeControl {
    shared: Arc<Shared>,
}

impl NodeControl {
    /// Refuses new leases (`DRAINING`) and stops the node once the running leases have ended,
    /// released or expired (or at the drain timeout). Connections without leases keep being
    /// served until then.
    pub fn drain(&self) {
        self.shared.advance(Phase::Draining);
    }

    /// Closes every connection now, ending its leases.
    pub fn stop(&self) {
        self.shared.advance(Phase::Stopping);
    }

    pub fn is_draining(&self) -> bool {
        self.shared.draining()
    }

    /// What the node is doing now: its devices and their free memory, leases, connections,
    /// runs, and whether it drains (what its cluster record says).
    pub fn status(&self) -> NodeStatus {
        NodeStatus::of(&self.shared)
    }

    /// The host's lease books: every lease of every connection.
    pub fn accounting(&self) -> Accounting {
        self.shared.host.accounting()
    }

    /// The node's counters, each summed over its labels (the same figures `/metrics` serves).
    pub fn metrics(&self) -> MetricsSnapshot {
        self.shared.metrics.snapshot()
    }

    /// Every metric in Prometheus's text format, as `/metrics` serves it.
    pub fn metrics_text(&self) -> String {
        self.shared.observe_for_scrape();
        self.shared
            .metrics
            .encode()
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default()
    }

    /// Process ids of the GPU workers serving live leases.
    pub fn lease_worker_pids(&self) -> Vec<u32> {
        self.shared.host.lease_worker_pids()
    }
}

/// A node serving in a task of its own ([`Node::start`]).
pub struct RunningNode {
    control: NodeControl,
    local_addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    task: JoinHandle<Result<(), NodeError>>,
}

impl RunningNode {
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Where `/metrics` is served, if it is.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    pub fn control(&self) -> &NodeControl {
        &self.control
    }

    pub fn drain(&self) {
        self.control.drain();
    }

    pub fn stop(&self) {
        self.control.stop();
    }

    pub fn accounting(&self) -> Accounting {
        self.control.accounting()
    }

    /// Waits until the node has stopped (after [`RunningNode::drain`] or [`RunningNode::stop`]).
    pub async fn wait(self) -> Result<(), NodeError> {
        match self.task.await {
            Ok(result) => result,
            // The serve task only ends by returning, unless the runtime is going away.
            Err(_) => Ok(()),
        }
    }
}
