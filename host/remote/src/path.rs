//! What a client's QUIC connection has learned of its path to the node: the datagram size in use,
//! the round trip, and the losses its sending met. For diagnosing a slow transfer (the fabric
//! benchmark prints it beside its figures): a path whose datagrams fell back to the 1200-byte
//! minimum, or that loses many packets, moves bulk data at a fraction of what it could.

use std::time::Duration;

/// A handle on a client's connection that reads its path figures, usable after the client has
/// been handed on (e.g. into a `RemoteGpu`).
#[derive(Clone)]
pub struct PathWatch {
    connection: quinn::Connection,
}

/// The path figures at one moment (counts since the connection began).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathStats {
    /// The UDP payload size this end sends now, in bytes.
    pub mtu: u16,
    /// The smoothed round-trip time.
    pub rtt: Duration,
    /// Packets this end sent.
    pub sent_packets: u64,
    /// Of them, declared lost.
    pub lost_packets: u64,
    /// Times this end's sending rate was cut for a loss.
    pub congestion_events: u64,
    /// Times loss made this end fall back to the minimum datagram size.
    pub black_holes: u64,
}

impl PathWatch {
    pub(crate) fn new(connection: quinn::Connection) -> PathWatch {
        PathWatch { connection }
    }

    pub fn read(&self) -> PathStats {
        let path = self.connection.stats().path;
        PathStats {
            mtu: path.current_mtu,
            rtt: path.rtt,
            sent_packets: path.sent_packets,
            lost_packets: path.lost_packets,
            congestion_events: path.congestion_events,
            black_holes: path.black_holes_detected,
        }
    }
}

impl std::fmt::Display for PathStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}-byte datagrams, RTT {:.0} µs, {} of {} packets lost, {} congestion events, {} black holes",
            self.mtu,
            self.rtt.as_secs_f64() * 1e6,
            self.lost_packets,
            self.sent_packets,
            self.congestion_events,
            self.black_holes
        )
    }
}
