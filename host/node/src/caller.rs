//! Who is calling on a connection: the tenant its certificate names, what the node decided that
//! tenant may have, and its metrics. Decided once, when the connection is let in, and shared by
//! the connection's streams, its GPU thread and its deployments' runs.

use crate::metrics::TenantMetrics;
use std::sync::atomic::{AtomicBool, Ordering};
use tasklet_runtime::config::{Grant, TenantTotals};
use tasklet_tls::Tenant;

pub(crate) struct Caller {
    pub tenant: Tenant,
    /// A number naming the connection in the node's logs.
    pub connection: u64,
    /// The most the tenant gets on this node: `[tasklets]`, its `[tenants.NAME]` section and the
    /// authorizer's answer, intersected. GRANT narrows the connection's own sessions within it;
    /// a deployment's run gets it narrowed by the deployment's manifest.
    pub ceiling: Grant,
    /// What the tenant may hold at once, all its connections and runs together (the policy's
    /// `tenant-max-*`).
    pub totals: TenantTotals,
    /// Whether the tenant may push and run deployed tasklets; if not, why, naming the policy key.
    pub deploy: Result<(), String>,
    pub metrics: TenantMetrics,
    /// Set once HELLO has been answered: requests served off the GPU thread check it, since
    /// nothing but HELLO may come before HELLO's reply.
    greeted: AtomicBool,
}

impl Caller {
    pub fn new(
        tenant: Tenant,
        connection: u64,
        ceiling: Grant,
        totals: TenantTotals,
        deploy: Result<(), String>,
        metrics: TenantMetrics,
    ) -> Caller {
        Caller {
            tenant,
            connection,
            ceiling,
            totals,
            deploy,
            metrics,
            greeted: AtomicBool::new(false),
        }
    }

    /// Marks HELLO answered; called before its reply is sent, so that a client that waited for
    /// the reply always finds it set.
    pub fn greet(&self) {
        self.greeted.store(true, Ordering::Release);
    }

    pub fn greeted(&self) -> bool {
        self.greeted.load(Ordering::Acquire)
    }
}
