//! Counters the node keeps as it serves: what an operator's metrics are read from.
//!
//! Updating one is an atomic add, so the node counts on every path without cost worth measuring;
//! [`NodeMetrics::snapshot`] reads them all.

use std::sync::atomic::{AtomicU64, Ordering};

/// The node's counters. Each only grows, except `connections_open`.
#[derive(Debug, Default)]
pub struct NodeMetrics {
    connections_accepted: AtomicU64,
    connections_open: AtomicU64,
    handshakes_refused: AtomicU64,
    tenants_refused: AtomicU64,
    protocol_errors: AtomicU64,
    requests: AtomicU64,
    leases_acquired: AtomicU64,
    leases_dropped: AtomicU64,
    gpu_submit_total: AtomicU64,
    gpu_submit_errors: AtomicU64,
    gpu_submit_output_bytes: AtomicU64,
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// Connections whose handshake succeeded, whatever happened next.
    pub connections_accepted: u64,
    /// Connections being served now.
    pub connections_open: u64,
    /// Handshakes the TLS layer refused (no, foreign or expired certificate, wrong protocol).
    pub handshakes_refused: u64,
    /// Connections of tenants the policy or the authorizer refused.
    pub tenants_refused: u64,
    /// Connections closed because the client broke the protocol.
    pub protocol_errors: u64,
    /// Requests decoded, every kind.
    pub requests: u64,
    /// Leases granted to clients.
    pub leases_acquired: u64,
    /// Leases clients released, or that ended with their connection.
    pub leases_dropped: u64,
    pub gpu_submit_total: u64,
    pub gpu_submit_errors: u64,
    pub gpu_submit_output_bytes: u64,
}

macro_rules! counters {
    ($($name:ident),*) => {
        impl NodeMetrics {
            pub fn snapshot(&self) -> MetricsSnapshot {
                MetricsSnapshot { $($name: self.$name.load(Ordering::Relaxed)),* }
            }
        }
    };
}

counters!(
    connections_accepted,
    connections_open,
    handshakes_refused,
    tenants_refused,
    protocol_errors,
    requests,
    leases_acquired,
    leases_dropped,
    gpu_submit_total,
    gpu_submit_errors,
    gpu_submit_output_bytes
);

impl NodeMetrics {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn connection_opened(&self) {
        Self::add(&self.connections_accepted, 1);
        Self::add(&self.connections_open, 1);
    }

    pub(crate) fn connection_closed(&self) {
        self.connections_open.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn handshake_refused(&self) {
        Self::add(&self.handshakes_refused, 1);
    }

    pub(crate) fn tenant_refused(&self) {
        Self::add(&self.tenants_refused, 1);
    }

    pub(crate) fn protocol_error(&self) {
        Self::add(&self.protocol_errors, 1);
    }

    pub(crate) fn request(&self) {
        Self::add(&self.requests, 1);
    }

    pub(crate) fn lease_acquired(&self) {
        Self::add(&self.leases_acquired, 1);
    }

    pub(crate) fn leases_dropped(&self, n: u64) {
        Self::add(&self.leases_dropped, n);
    }

    pub(crate) fn gpu_submit(&self, ok: bool, output_bytes: u64) {
        Self::add(&self.gpu_submit_total, 1);
        if ok {
            Self::add(&self.gpu_submit_output_bytes, output_bytes);
        } else {
            Self::add(&self.gpu_submit_errors, 1);
        }
    }
}
