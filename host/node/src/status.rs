//! [`NodeStatus`]: what a node is doing now, read from its counters without waiting — what
//! its cluster record and an embedding daemon's health checks report.

use crate::inventory;
use crate::shared::Shared;
use tasklet_wire::Device;

/// A node's state at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    /// The devices it lends, with their free memory and running leases (GET_INVENTORY's
    /// answer).
    pub devices: Vec<Device>,
    /// Leases held now, by remote sessions and deployed runs together.
    pub leases: u64,
    /// Client connections open now.
    pub connections: u64,
    /// Deployed runs in progress.
    pub runs: u64,
    /// Bytes of client requests the node holds now: received (whole or in part) and not yet
    /// served. At most 64 MiB a connection, whatever its clients send.
    pub request_bytes: u64,
    /// Bytes of replies queued now for clients to take: at most 16 MiB a connection (besides
    /// what QUIC keeps in flight), whether or not its client reads them.
    pub reply_bytes: u64,
    /// New leases and runs are refused.
    pub draining: bool,
}

impl NodeStatus {
    pub(crate) fn of(shared: &Shared) -> NodeStatus {
        NodeStatus {
            devices: inventory::devices(&shared.host),
            leases: shared.host.accounting().leases as u64,
            connections: shared.metrics.connections_open(),
            runs: shared.metrics.deploy_runs_active(),
            request_bytes: shared.budgets.requests_held(),
            reply_bytes: shared.budgets.replies_queued(),
            draining: shared.draining(),
        }
    }
}
