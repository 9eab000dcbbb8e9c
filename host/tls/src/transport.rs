//! The QUIC transport settings a node and its clients share: datagram sizes and flow-control
//! windows. Both ends must agree on the datagram bound (each advertises the largest datagram it
//! accepts, and the other never sends more), so both take them from here.
//!
//! - **Datagrams**: quinn starts at 1200 bytes and, left alone, discovers at most 1452 and
//!   accepts at most 1472. Each datagram costs a system call's share, a packet's encryption and
//!   an acknowledgement's, so bulk transfers on a link that carries more (loopback, jumbo
//!   frames) are bounded by the count of datagrams, not by bytes. Here discovery is on, from
//!   1200 bytes up to [`MAX_DATAGRAM`]: a path that carries less (a 1500-byte Ethernet hop, a
//!   tunnel) simply loses the larger probes, which are never retransmitted data, and stays at
//!   what got through; quinn's black-hole detection falls back to 1200 if a path shrinks later.
//! - **Windows**: a stream may have [`STREAM_WINDOW`] bytes in flight and a connection
//!   [`CONNECTION_WINDOW`], so a bulk transfer is not held to a few round trips' worth of data on
//!   a long or fast path (16 MiB covers 10 Gb/s at 13 ms of round trip). Memory is taken only as
//!   data arrives.
//! - **Socket buffers**: the kernel's default UDP receive buffer (about 208 KiB) holds a few
//!   segmentation-offload batches; a receiver whose thread is late by a fraction of a
//!   millisecond (a busy machine) has the rest dropped, and every drop is a congestion signal
//!   that halves the sender's rate. [`socket`] asks for [`SOCKET_BUFFER`] each way, which the
//!   kernel caps at `net.core.rmem_max` / `wmem_max`.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::OnceLock;

/// The largest datagram either end sends or accepts, in bytes of UDP payload. quinn hands the
/// kernel up to 10 datagrams in one segmentation-offload (GSO) send, which must fit in one UDP
/// send of at most 65,507 bytes: 10 × 6,400 does, and a jumbo-frame path (9000-byte MTU)
/// carries it.
pub const MAX_DATAGRAM: u16 = 6400;

/// Bytes a peer may send on one stream ahead of what was read, unless
/// `TASKLET_QUIC_STREAM_WINDOW_MIB` says (see [`stream_window`]).
pub const STREAM_WINDOW: u32 = 16 << 20;

/// Bytes a peer may send on all streams of a connection ahead of what was read, and bytes this
/// end keeps unacknowledged in flight.
pub const CONNECTION_WINDOW: u32 = 64 << 20;

/// The UDP send and receive buffer asked of the kernel for each end's socket, unless
/// `TASKLET_QUIC_SOCKET_BUFFER_MIB` says (see [`socket_buffer`]).
pub const SOCKET_BUFFER: usize = 4 << 20;

/// The stream window this process uses: `TASKLET_QUIC_STREAM_WINDOW_MIB` (1 MiB up to the
/// connection window), read once, else [`STREAM_WINDOW`]. Node and client each use their own
/// process's: what a peer may send on a stream is what the receiving end allows.
pub fn stream_window() -> u32 {
    static WINDOW: OnceLock<u32> = OnceLock::new();
    *WINDOW.get_or_init(|| {
        mib_from_env("TASKLET_QUIC_STREAM_WINDOW_MIB", CONNECTION_WINDOW as usize)
            .map_or(STREAM_WINDOW, |bytes| bytes as u32)
    })
}

/// The socket buffers this process asks for: `TASKLET_QUIC_SOCKET_BUFFER_MIB` (1 to 64 MiB), read
/// once, else [`SOCKET_BUFFER`].
pub fn socket_buffer() -> usize {
    static BUFFER: OnceLock<usize> = OnceLock::new();
    *BUFFER.get_or_init(|| {
        mib_from_env("TASKLET_QUIC_SOCKET_BUFFER_MIB", 64 << 20).unwrap_or(SOCKET_BUFFER)
    })
}

/// `name`'s value, a whole count of MiB, as bytes within 1 MiB..=`most`; `None` when unset or
/// not a number.
fn mib_from_env(name: &str, most: usize) -> Option<usize> {
    let mib: usize = std::env::var(name).ok()?.trim().parse().ok()?;
    Some(mib.saturating_mul(1 << 20).clamp(1 << 20, most))
}

/// A UDP socket bound to `addr` for a node's or a client's endpoint, with [`SOCKET_BUFFER`]
/// asked for each way. A kernel that gives less (its `net.core.rmem_max` / `wmem_max`) is no
/// error: the endpoint works with what it has, only less well on a busy machine.
pub fn socket(addr: SocketAddr) -> io::Result<UdpSocket> {
    let socket = UdpSocket::bind(addr)?;
    let state = quinn::udp::UdpSocketState::new((&socket).into())?;
    let _ = state.set_recv_buffer_size((&socket).into(), socket_buffer());
    let _ = state.set_send_buffer_size((&socket).into(), socket_buffer());
    Ok(socket)
}

/// The transport settings both ends share ([`MAX_DATAGRAM`], the windows); each end adds its
/// own (idle timeout, keep-alives, stream counts) before using it.
pub fn transport_config() -> quinn::TransportConfig {
    let mut discovery = quinn::MtuDiscoveryConfig::default();
    discovery.upper_bound(MAX_DATAGRAM);
    let mut transport = quinn::TransportConfig::default();
    transport
        .mtu_discovery_config(Some(discovery))
        .stream_receive_window(stream_window().into())
        .receive_window(CONNECTION_WINDOW.into())
        .send_window(CONNECTION_WINDOW.into());
    transport
}

/// The endpoint settings both ends share: datagrams up to [`MAX_DATAGRAM`] accepted (and said
/// so to the peer, which would otherwise never send more than 1472 bytes in one).
pub fn endpoint_config() -> quinn::EndpointConfig {
    let mut config = quinn::EndpointConfig::default();
    // Within 1200..=65527, the only values refused.
    let _ = config.max_udp_payload_size(MAX_DATAGRAM);
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_or_buffer_in_mib_is_held_within_its_bounds() {
        // A name of this test's own: nothing else reads it.
        let name = "TASKLET_TLS_TRANSPORT_TEST_MIB";
        for (value, bytes) in [
            ("8", Some(8 << 20)),
            (" 0 ", Some(1 << 20)),
            ("1000", Some(64 << 20)),
            ("x", None),
        ] {
            std::env::set_var(name, value);
            assert_eq!(mib_from_env(name, 64 << 20), bytes, "{value:?}");
        }
        std::env::remove_var(name);
        assert_eq!(mib_from_env(name, 64 << 20), None);
    }

    #[test]
    fn the_datagram_bound_fits_a_gso_batch_and_is_accepted() {
        assert!(10 * u32::from(MAX_DATAGRAM) <= 65_507);
        assert_eq!(
            endpoint_config().get_max_udp_payload_size(),
            u64::from(MAX_DATAGRAM)
        );
    }
}
