//! Membership in a cluster: while the node serves, its record in the NATS registry
//! (`tasklet_cluster`), refreshed every heartbeat and soon after a lease is taken or ends,
//! marked draining when it drains and removed when it stops.
//!
//! NATS is not on the node's serving path: a node that cannot reach NATS at start, or loses
//! it later, serves its clients all the same and registers (again) by itself once NATS
//! answers. Only the registry's view of it suffers meanwhile.

use crate::shared::{Phase, Shared};
use crate::status::NodeStatus;
use std::sync::Arc;
use std::time::Duration;
use tasklet_cluster::{
    Cluster, DeviceRecord, Heartbeat, Load, NatsConfig, NodeName, NodeRecord, Registrar,
    RECORD_FORMAT,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The longest a stopping node waits to remove its record; past it the record expires by
/// itself within the heartbeat's TTL.
const LEAVE_WAIT: Duration = Duration::from_secs(5);

/// The same, when the connection to NATS is down at the stop.
const LEAVE_WAIT_UNREACHABLE: Duration = Duration::from_millis(500);

/// How often the registry task looks at the lease books for a change to write.
const BOOKS_CHECK: Duration = Duration::from_millis(100);

/// What of the lease books a node's record shows: a change is worth a write before the next
/// heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Books {
    leases: usize,
    granted_bytes: u64,
}

impl Books {
    fn of(shared: &Shared) -> Books {
        let a = shared.host.accounting();
        Books {
            leases: a.leases,
            granted_bytes: a.granted_bytes,
        }
    }
}

/// What a node says about itself in the registry, besides its live state.
#[derive(Debug, Clone)]
pub(crate) struct Membership {
    pub nats: NatsConfig,
    pub heartbeat: Heartbeat,
    pub name: NodeName,
    /// Where clients reach the node (`host:port`).
    pub address: String,
    /// The node certificate's SHA-256, which clients check against the one they are shown.
    pub cert_sha256: String,
}

/// Keeps the node registered until it stops; the task ends once its record is removed.
pub(crate) fn spawn(shared: Arc<Shared>, membership: Membership) -> JoinHandle<()> {
    tokio::spawn(run(shared, membership))
}

async fn run(shared: Arc<Shared>, membership: Membership) {
    let mut phase = shared.phase();
    let Some(registrar) = join(&shared, &membership, &mut phase).await else {
        return;
    };
    // Draining is said once; the registrar writes it on every heartbeat from then on. The loop
    // ends at the node's stop (or when its control is gone): phases only move forward. Between
    // phase changes, a lease taken or ended is written within about BOOKS_CHECK (the registrar
    // spaces such writes), not at the next heartbeat: placement reads the free memory from here.
    let mut books = Books::of(&shared);
    let mut check = tokio::time::interval(BOOKS_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    'phases: loop {
        match *phase.borrow_and_update() {
            Phase::Stopping => break,
            Phase::Draining => registrar.set_draining(true),
            Phase::Serving => {}
        }
        loop {
            tokio::select! {
                changed = phase.changed() => {
                    if changed.is_err() {
                        break 'phases;
                    }
                    continue 'phases;
                }
                _ = check.tick() => {
                    let now = Books::of(&shared);
                    if now != books {
                        books = now;
                        registrar.refresh();
                    }
                }
            }
        }
    }
    // With NATS unreachable now, the removal would only wait out its time: the stop is not
    // held up for a record that expires by itself anyway.
    let wait = match registrar.connected() {
        true => LEAVE_WAIT,
        false => LEAVE_WAIT_UNREACHABLE,
    };
    match tokio::time::timeout(wait, registrar.stop()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(
            "could not remove this node's registry record ({e}); it expires by itself"
        ),
        Err(_) => tracing::warn!(
            "removing this node's registry record took over {wait:?}; it expires by itself"
        ),
    }
}

/// Connects and registers, trying again every heartbeat while NATS does not answer; `None` if
/// the node stops first.
async fn join(
    shared: &Arc<Shared>,
    membership: &Membership,
    phase: &mut watch::Receiver<Phase>,
) -> Option<Registrar> {
    let url = membership.nats.display_url();
    let mut failures: u64 = 0;
    // Bounded by the node's life: each attempt by the NATS timeouts, the loop by the stop.
    loop {
        if *phase.borrow() == Phase::Stopping {
            return None;
        }
        match register(shared, membership).await {
            Ok(registrar) => {
                if failures > 0 {
                    tracing::info!(
                        url,
                        attempts = failures + 1,
                        "registered with the cluster at last"
                    );
                }
                return Some(registrar);
            }
            Err(e) => {
                failures += 1;
                if failures == 1 {
                    tracing::warn!(
                        "not registered with the cluster; serving anyway and trying again every {:?}: {e}",
                        membership.heartbeat.interval
                    );
                } else {
                    tracing::debug!(failures, "still not registered with the cluster: {e}");
                }
            }
        }
        tokio::select! {
            changed = phase.changed() => if changed.is_err() { return None },
            _ = tokio::time::sleep(membership.heartbeat.interval) => {}
        }
    }
}

async fn register(
    shared: &Arc<Shared>,
    membership: &Membership,
) -> tasklet_cluster::Result<Registrar> {
    let cluster = Cluster::connect(&membership.nats).await?;
    let source = {
        let shared = Arc::clone(shared);
        let membership = membership.clone();
        move || record(&membership, &NodeStatus::of(&shared))
    };
    let registrar = Registrar::start(&cluster, membership.heartbeat, source).await?;
    if shared.draining() {
        registrar.set_draining(true);
    }
    Ok(registrar)
}

/// The node's record: who it is and where, from `membership`; what it has, from `status`.
pub(crate) fn record(membership: &Membership, status: &NodeStatus) -> NodeRecord {
    let sessions = status.leases.saturating_sub(status.runs);
    NodeRecord {
        format: RECORD_FORMAT,
        name: membership.name.clone(),
        address: membership.address.clone(),
        cert_sha256: membership.cert_sha256.clone(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        devices: status.devices.iter().map(DeviceRecord::from).collect(),
        load: Load {
            connections: saturate(status.connections),
            sessions: saturate(sessions),
            runs: saturate(status.runs),
        },
        draining: status.draining,
        // The registrar stamps each write.
        heartbeat_unix_ms: 0,
    }
}

fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
