//! The node's QUIC settings: TLS from the certificate folder, the transport settings it shares
//! with its clients (`tasklet_tls::transport`: datagram sizes, windows), and its own bounds.

use crate::builder::NodeError;
use crate::shared::Limits;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use tasklet_wire::limits::MAX_BRANCHES;

/// Bidirectional streams a client may have open at once: a control stream, one per session it
/// runs in parallel, one per deployment transfer, and the branches of a transfer spread over
/// several streams (up to `MAX_BRANCHES`, which the Rust client opens once and keeps). A stream
/// past them waits (QUIC) until one ends. Each may hold the undecoded rest of one read while it
/// waits (for a fork, for queue budget): at most its flow-control window.
const MAX_STREAMS: u32 = MAX_BRANCHES as u32 + 8;

pub(crate) fn server_config(
    certs: &Path,
    limits: &Limits,
) -> Result<quinn::ServerConfig, NodeError> {
    let mut server = tasklet_tls::server_config(certs)?;
    // After the folder's other checks, which name what is missing first (ca.pem before all).
    tasklet_tls::check_node_unexpired(certs)?;
    let mut transport = tasklet_tls::transport::transport_config();
    transport
        .max_concurrent_bidi_streams(MAX_STREAMS.into())
        .max_concurrent_uni_streams(0u32.into());
    // An idle timeout too large for QUIC's encoding is clamped to the largest it can say.
    let idle = quinn::IdleTimeout::try_from(limits.idle_timeout)
        .unwrap_or_else(|_| quinn::VarInt::MAX.into());
    transport.max_idle_timeout(Some(idle));
    server.transport_config(Arc::new(transport));
    Ok(server)
}

/// The node's endpoint on `listen`, accepting the datagram sizes its clients may discover.
pub(crate) fn endpoint(
    server: quinn::ServerConfig,
    listen: SocketAddr,
) -> std::io::Result<quinn::Endpoint> {
    let socket = tasklet_tls::transport::socket(listen)?;
    let runtime = quinn::default_runtime()
        .ok_or_else(|| std::io::Error::other("no async runtime found for the node's endpoint"))?;
    quinn::Endpoint::new(
        tasklet_tls::transport::endpoint_config(),
        Some(server),
        socket,
        runtime,
    )
}
