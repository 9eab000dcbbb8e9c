//! What every connection of a node shares: the host, its deployments, the policy's decisions,
//! the node's phase (serving, draining, stopping) and its metrics.

use crate::authorize::Authorizer;
use crate::connection_budgets::ConnectionBudgets;
use crate::deploy::Deployments;
use crate::log_limit::LogLimit;
use crate::metrics::NodeMetrics;
use crate::tenant_slots::TenantSlots;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tasklet_runtime::Host;
use tokio::sync::{watch, Semaphore};

/// Where a node is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Serving,
    /// New leases are refused; the node stops once the running ones have ended.
    Draining,
    /// Every connection is being closed now.
    Stopping,
}

/// The timeouts and bounds a node serves with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// A connection that hears nothing from its client for this long is closed (QUIC's idle
    /// timeout; clients send keep-alives well within it).
    pub idle_timeout: Duration,
    /// Longest a client may take to say HELLO, or go without sending a byte of a frame it has
    /// started (or of a message's data still due). A frame that trickles in is not cut short:
    /// it holds no more than a client that is quiet between frames does.
    pub stall_timeout: Duration,
    /// Longest a drain waits for running leases before closing their connections anyway;
    /// `None`: until they end or expire.
    pub drain_timeout: Option<Duration>,
    /// Connections served at once; more are refused at the door.
    pub max_connections: u64,
    /// Connections one tenant may hold at once; its next is closed at once, saying why.
    pub max_tenant_connections: u64,
    /// The largest streamed total one message may announce.
    pub max_stream_bytes: u64,
    /// Deploy requests (pushes, runs) served at once, over every tenant; more are refused.
    pub max_deploy_jobs: u64,
    /// Deploy requests one tenant may have served at once.
    pub max_tenant_deploy_jobs: u64,
}

pub(crate) struct Shared {
    pub host: Host,
    /// `None` for a node built without a store: it answers deploy requests `UNSUPPORTED`.
    pub deployments: Option<Deployments>,
    pub authorizer: Option<Arc<dyn Authorizer>>,
    /// What HELLO's reply calls this node.
    pub name: String,
    pub limits: Limits,
    pub metrics: NodeMetrics,
    phase: watch::Sender<Phase>,
    /// The phase, readable without a lock from the connections' GPU threads.
    draining: AtomicBool,
    next_connection: AtomicU64,
    /// Connections open now, by tenant (at most `limits.max_tenant_connections` each).
    pub tenant_connections: TenantSlots,
    /// Deployed runs under way, by tenant (at most each tenant's `tenant-max-runs`).
    pub tenant_runs: TenantSlots,
    /// Deploy requests being served, each on a blocking thread (at most
    /// `limits.max_deploy_jobs`), and by tenant (`limits.max_tenant_deploy_jobs` each).
    pub deploy_jobs: Arc<Semaphore>,
    pub tenant_deploy_jobs: TenantSlots,
    /// Requests taken off a stream and not yet answered (see [`Unanswered`]).
    unanswered: Arc<AtomicUsize>,
    /// Each open connection's budgets, to tell what client traffic holds.
    pub budgets: ConnectionBudgets,
    /// Lines logged for clients refused before they are known (a failed handshake, a
    /// certificate naming no tenant): anyone who reaches the port can cause them, so at most 20
    /// a minute; the metrics count every refusal.
    pub unknown_clients_log: LogLimit,
    /// Lines logged with what deployed runs printed (each run's first bytes, escaped, under
    /// its tenant and run id): a tenant decides how many runs print, so at most 20 a second.
    pub printed_log: LogLimit,
}

/// A request the node has taken off a stream, counted until its reply has been handed to the
/// stream (when the batch of jobs or the deploy request carrying it is dropped). A drain waits for none to be
/// left, so that the reply to the request that ended the last lease or run is not cut off by the
/// node closing its connections. One guard may count several requests (a batch's: `one_more`).
pub(crate) struct Unanswered {
    count: Arc<AtomicUsize>,
    requests: usize,
}

impl Unanswered {
    /// Counts one more request under this guard, until it is dropped.
    pub fn one_more(&mut self) {
        self.count.fetch_add(1, Ordering::AcqRel);
        self.requests += 1;
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        self.count.fetch_sub(self.requests, Ordering::AcqRel);
    }
}

impl Shared {
    pub fn new(
        host: Host,
        deployments: Option<Deployments>,
        authorizer: Option<Arc<dyn Authorizer>>,
        name: String,
        limits: Limits,
        metrics: NodeMetrics,
    ) -> Shared {
        Shared {
            host,
            deployments,
            authorizer,
            name,
            limits,
            metrics,
            phase: watch::Sender::new(Phase::Serving),
            draining: AtomicBool::new(false),
            next_connection: AtomicU64::new(1),
            tenant_connections: TenantSlots::default(),
            tenant_runs: TenantSlots::default(),
            deploy_jobs: Arc::new(Semaphore::new(
                usize::try_from(limits.max_deploy_jobs)
                    .unwrap_or(usize::MAX)
                    .min(Semaphore::MAX_PERMITS),
            )),
            tenant_deploy_jobs: TenantSlots::default(),
            unanswered: Arc::new(AtomicUsize::new(0)),
            budgets: ConnectionBudgets::new(crate::connection::QUEUE_BYTES),
            unknown_clients_log: LogLimit::new(20, Duration::from_secs(60)),
            printed_log: LogLimit::new(20, Duration::from_secs(1)),
        }
    }

    /// Brings the gauges and counters read from the host and the connections up to date, just
    /// before the metrics are encoded.
    pub fn observe_for_scrape(&self) {
        let leases = self.host.leases();
        self.metrics.observe_host(&self.host.accounting());
        self.metrics.observe_devices(&self.host);
        self.metrics
            .observe_module_cache(&leases.module_cache_stats());
        self.metrics.observe_gpu_time(&leases.gpu_time_by_tenant());
        self.metrics
            .observe_client_bytes(self.budgets.requests_held(), self.budgets.replies_queued());
    }

    /// Whether new leases are refused.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    pub fn phase(&self) -> watch::Receiver<Phase> {
        self.phase.subscribe()
    }

    /// Moves to `phase` if it is later than the current one (a stop is never undone by a drain).
    pub fn advance(&self, phase: Phase) {
        let rank = |p: Phase| p as u8;
        self.phase.send_if_modified(|now| {
            if rank(phase) > rank(*now) {
                *now = phase;
                true
            } else {
                false
            }
        });
        if phase != Phase::Serving {
            self.draining.store(true, Ordering::Release);
        }
    }

    /// Counts a request taken off a stream until the guard is dropped.
    pub fn taken(&self) -> Unanswered {
        self.unanswered.fetch_add(1, Ordering::AcqRel);
        Unanswered {
            count: Arc::clone(&self.unanswered),
            requests: 1,
        }
    }

    /// Requests taken and not yet answered, on every connection.
    pub fn unanswered(&self) -> usize {
        self.unanswered.load(Ordering::Acquire)
    }

    /// A number naming a connection in the node's logs.
    pub fn connection_number(&self) -> u64 {
        self.next_connection.fetch_add(1, Ordering::Relaxed)
    }

    /// Ends every lease and stops the worker processes. Blocks while workers exit.
    pub fn shut_down_host(&self) {
        self.host.leases().shutdown();
        self.host.leases().shutdown_pools();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch's guard counts every request taken under it, and gives them all back at once.
    #[test]
    fn one_guard_counts_a_batch_and_gives_it_all_back() {
        let count = Arc::new(AtomicUsize::new(0));
        count.fetch_add(1, Ordering::AcqRel);
        let mut batch = Unanswered {
            count: Arc::clone(&count),
            requests: 1,
        };
        batch.one_more();
        batch.one_more();
        assert_eq!(count.load(Ordering::Acquire), 3);
        drop(batch);
        assert_eq!(
            count.load(Ordering::Acquire),
            0,
            "the batch's three are answered"
        );
    }
}
