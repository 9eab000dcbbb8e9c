//! The node's QUIC settings: TLS from the certificate folder, and the transport's bounds.

use crate::builder::NodeError;
use crate::shared::Limits;
use std::path::Path;
use std::sync::Arc;

/// Bidirectional streams a client may have open at once: a control stream, one per session it
/// runs in parallel, one per transfer.
const MAX_STREAMS: u32 = 16;

/// Flow-control windows: large enough that a bulk transfer is not held to a few round trips'
/// worth of data in flight.
const STREAM_WINDOW: u32 = 16 << 20;
const CONNECTION_WINDOW: u32 = 64 << 20;

pub(crate) fn server_config(
    certs: &Path,
    limits: &Limits,
) -> Result<quinn::ServerConfig, NodeError> {
    let mut server = tasklet_tls::server_config(certs)?;
    let mut transport = quinn::TransportConfig::default();
    transport
        .max_concurrent_bidi_streams(MAX_STREAMS.into())
        .max_concurrent_uni_streams(0u32.into())
        .stream_receive_window(STREAM_WINDOW.into())
        .receive_window(CONNECTION_WINDOW.into())
        .send_window(CONNECTION_WINDOW.into());
    // An idle timeout too large for QUIC's encoding is clamped to the largest it can say.
    let idle = quinn::IdleTimeout::try_from(limits.idle_timeout)
        .unwrap_or_else(|_| quinn::VarInt::MAX.into());
    transport.max_idle_timeout(Some(idle));
    server.transport_config(Arc::new(transport));
    Ok(server)
}
