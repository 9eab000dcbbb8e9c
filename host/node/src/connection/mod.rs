//! One client connection: its tenant and grant, its GPU thread, and its streams.
//!
//! ```text
//! streams (tokio tasks) ── batches of jobs, in arrival order (bounded) ──> GPU thread (owns the LocalGpu)
//!        ^                                                            │
//!        └──────────────── replies, per stream (`outlet`) ────────────┘
//!          straight to quinn when nothing is queued before them, else
//!          through the stream's writer task (bounded)
//! ```
//!
//! The GPU thread is an OS thread of the connection's own, because every GPU operation blocks on
//! a worker process; the async side never waits on one. When the connection ends, however it
//! ends, the jobs still queued are dropped and the GPU thread drops its `LocalGpu`, which ends
//! every lease the connection held.

mod deploy;
mod forks;
mod hot;
mod stream;

use crate::caller::Caller;
use crate::dispatch::Dispatcher;
use crate::shared::{Phase, Shared};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tasklet_runtime::guest_memory::staging::StagingPool;
use tasklet_tls::{peer_tenant, Refusal};
use tasklet_wire::ErrorCode;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// Batches of jobs (each what one read of a stream held) queued for a connection's GPU thread
/// before its streams wait; their payload bytes are bounded by [`QUEUE_BYTES`].
const JOB_QUEUE: usize = 1024;

/// Bytes of request payload (modules, every by-value kernel argument of launches, bursts and
/// graph recordings, write data) queued for a connection's GPU thread before its streams wait.
pub(crate) const QUEUE_BYTES: usize = 64 << 20;

/// How long a stopping connection waits for its streams to deliver their last replies.
const STOP_GRACE: Duration = Duration::from_secs(1);

/// Bytes of one buffer of a connection's staging memory: a MEM_WRITE's data is gathered, and a
/// MEM_READ's read from the device, a piece of this size at a time.
pub(crate) const STAGING_PIECE: usize = 4 << 20;

/// Buffers of staging memory a connection has at most (made as bulk transfers need them, kept
/// until it ends): enough that the device copies of a transfer overlap its network side.
/// `TASKLET_NODE_STAGING_BUFFERS` sets it (0: none, every piece goes through a plain buffer and
/// the worker's channel), read once.
const STAGING_BUFFERS: usize = 6;

fn staging_buffers() -> usize {
    static BUFFERS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BUFFERS.get_or_init(|| {
        std::env::var("TASKLET_NODE_STAGING_BUFFERS")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(STAGING_BUFFERS)
    })
}

/// A connection's QUIC close code: the wire status that says why (PROTOCOL_ERROR, DRAINING, …).
pub(crate) fn close_code(code: ErrorCode) -> quinn::VarInt {
    quinn::VarInt::from(code as u32)
}

/// Why a handshake failed, in one line: what the certificates said, or, where it failed before
/// they were looked at (QUIC-shaped datagrams from a scanner, another protocol, damage on the
/// way), that, with QUIC's own words after.
fn why_refused(err: &quinn::ConnectionError) -> String {
    match Refusal::find(err, quinn::Side::Server) {
        Some(refusal) => refusal.to_string(),
        None => format!(
            "not a handshake this node could complete (a client of another protocol, a scanner, or datagrams \
             damaged on the way): {err}"
        ),
    }
}

pub(crate) async fn serve(shared: Arc<Shared>, incoming: quinn::Incoming) {
    let remote = incoming.remote_address();
    let connection = match incoming.await {
        Ok(connection) => connection,
        Err(err) => {
            shared.metrics.handshake_refused();
            if let Some(left_out) = shared.unknown_clients_log.admit() {
                // Only where lines were left out (an Option field is recorded when Some).
                let left_out = (left_out > 0).then_some(left_out);
                tracing::warn!(%remote, left_out, "handshake refused: {}", why_refused(&err));
            }
            return;
        }
    };
    // The handshake only completes for a certificate naming a tenant; this fails for none.
    let tenant = match peer_tenant(&connection) {
        Ok(tenant) => tenant,
        Err(err) => {
            shared.metrics.handshake_refused();
            if let Some(left_out) = shared.unknown_clients_log.admit() {
                let left_out = (left_out > 0).then_some(left_out);
                tracing::warn!(%remote, left_out, "refused a client: {err}");
            }
            connection.close(
                close_code(ErrorCode::Unauthorized),
                err.to_string().as_bytes(),
            );
            return;
        }
    };
    let grant = match shared.host.policy().tenant_ceiling(tenant.as_str()) {
        Err(err) => {
            // The roster for the operator, not for the refused client.
            tracing::info!(%tenant, listed = %err.listed.join(", "), "a tenant the policy does not list");
            Err(err.to_string())
        }
        Ok(ceiling) => match &shared.authorizer {
            None => Ok(ceiling),
            Some(authorizer) => authorizer
                .authorize(&tenant, ceiling)
                .await
                .map(|granted| granted.intersect(&ceiling))
                .map_err(|denied| format!("tenant `{tenant}` was refused by the node: {denied}")),
        },
    };
    let grant = match grant {
        Ok(grant) => grant,
        Err(reason) => {
            shared.metrics.tenant_refused(tenant.as_str());
            tracing::warn!(%remote, %tenant, "refused a tenant: {reason}");
            let message = format!("unauthorized: {reason}");
            connection.close(close_code(ErrorCode::Unauthorized), message.as_bytes());
            return;
        }
    };

    let max = shared.limits.max_tenant_connections;
    let Some(_tenant_slot) = shared.tenant_connections.take(tenant.as_str(), max) else {
        shared.metrics.tenant_refused(tenant.as_str());
        tracing::warn!(%remote, %tenant, "refused a connection: the tenant holds its most ({max})");
        let message = format!(
            "capacity-exceeded: tenant `{tenant}` already holds {max} connections to this node, its most; \
             close one, or share one connection between threads"
        );
        connection.close(close_code(ErrorCode::CapacityExceeded), message.as_bytes());
        return;
    };
    let number = shared.connection_number();
    shared.metrics.connection_opened(tenant.as_str());
    tracing::info!(connection = number, %remote, %tenant, "connection open");
    let (jobs, queue) = mpsc::channel(JOB_QUEUE);
    let closed = Arc::new(AtomicBool::new(false));
    let hello = Arc::new(tokio::sync::Notify::new());
    let deploy = shared
        .host
        .policy()
        .tenant_may_deploy(tenant.as_str())
        .map_err(|refused| refused.to_string());
    let metrics = shared.metrics.tenant(tenant.as_str());
    let totals = shared.host.policy().tenant_totals(tenant.as_str());
    let caller = Arc::new(Caller::new(
        tenant.clone(),
        number,
        grant,
        totals,
        deploy,
        metrics,
    ));
    // The connection's own: its buffers are attached only to its leases' workers.
    let staging = StagingPool::new(STAGING_PIECE, staging_buffers());
    let dispatcher = Dispatcher::new(
        Arc::clone(&shared),
        Arc::clone(&caller),
        Arc::clone(&closed),
        Arc::clone(&hello),
        staging,
    );
    let gpu_thread = std::thread::Builder::new()
        .name(format!("tasklet-conn-{number}"))
        .spawn(move || dispatcher.run(queue));
    if let Err(err) = gpu_thread {
        tracing::error!(
            connection = number,
            "cannot start the connection's GPU thread: {err}"
        );
        connection.close(
            close_code(ErrorCode::Internal),
            b"the node cannot serve more connections now",
        );
        shared.metrics.connection_closed();
        return;
    }

    let budgets = shared.budgets.open();
    let hot = hot::ConnectionHot::default();
    let forks = Arc::new(forks::Forks::default());
    let mut phase = shared.phase();
    let hello_deadline = tokio::time::sleep(shared.limits.stall_timeout);
    tokio::pin!(hello_deadline);
    let mut said_hello = false;
    let mut streams = JoinSet::new();
    let mut stopping = false;
    let why = loop {
        tokio::select! {
            stream = connection.accept_bi() => match stream {
                Ok((send, recv)) => {
                    streams.spawn(stream::serve(stream::Stream {
                        shared: Arc::clone(&shared),
                        caller: Arc::clone(&caller),
                        connection: connection.clone(),
                        send,
                        recv,
                        jobs: jobs.clone(),
                        budget: Arc::clone(&budgets.requests),
                        replies: Arc::clone(&budgets.replies),
                        closed: Arc::clone(&closed),
                        hot: Arc::clone(&hot),
                        forks: Arc::clone(&forks),
                    }));
                }
                Err(err) => break err.to_string(),
            },
            Some(_) = streams.join_next() => {}
            _ = hello.notified(), if !said_hello => said_hello = true,
            _ = &mut hello_deadline, if !said_hello => {
                caller.metrics.protocol_errors.inc();
                let reason = format!(
                    "no HELLO within {}s of the handshake",
                    shared.limits.stall_timeout.as_secs_f64()
                );
                connection.close(close_code(ErrorCode::ProtocolError), reason.as_bytes());
                break reason;
            }
            _ = phase.wait_for(|p| *p == Phase::Stopping) => {
                stopping = true;
                break "the node is shutting down".into();
            }
        }
    };
    if stopping {
        // Each stream stops reading and delivers what was answered (the reply that ended a
        // drain among it) before the close, which would cut it off.
        let delivered = async { while streams.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(STOP_GRACE, delivered).await;
        connection.close(
            close_code(ErrorCode::Draining),
            b"the node is shutting down",
        );
    }
    // A stream still serving ends with the connection by itself.
    streams.detach_all();
    // Whatever is still queued belongs to a client that is gone: the GPU thread drops it, and
    // then the connection's leases.
    closed.store(true, Ordering::Release);
    drop(jobs);
    shared.metrics.connection_closed();
    tracing::info!(connection = number, %remote, %tenant, reason = %why, "connection closed");
}

#[cfg(test)]
mod tests {
    use super::why_refused;

    #[test]
    fn a_handshake_that_failed_before_the_certificates_says_so() {
        // (quinn does not let a test make the transport error garbage ends in; a handshake that
        // timed out takes the same way.)
        let why = why_refused(&quinn::ConnectionError::TimedOut);
        assert!(
            why.starts_with("not a handshake this node could complete")
                && why.ends_with("timed out"),
            "{why}"
        );
    }
}
