//! Protocol versions and their negotiation.
//!
//! Every frame carries the version it is written in, and a receiver rejects any version it does
//! not speak: there is no best-effort reading of a newer peer. HELLO lets the two ends find that
//! out before anything else is said: the client offers a range, the node picks the highest
//! version in it that it speaks, or answers UNSUPPORTED and closes. A HELLO and its reply are
//! always framed as version [`HELLO_VERSION`] (their layout is frozen), so that a node of any
//! version can read a client's HELLO and answer it, and a client of any version can read that
//! answer: a peer of another version is told so in words, and nothing else it says is read.

/// The protocol version this crate speaks; the first byte of every frame but HELLO's.
///
/// Version 2: GPU_SUBMIT's request carries `input`, and its failed reply the precise `cause`.
/// Version 3: each kernel parameter in MODULE_LOAD's reply says whether it is a pointer.
/// Version 4: LEASE_ALLOC's request carries what the lease requires of its device.
/// Version 5: LAUNCH_BURST and GRAPH.
/// Version 6: LEASE_ALLOC_GROUP and MEM_COPY_BETWEEN.
/// Version 7: QUEUE_OP (streams and events).
/// Version 8: STREAM_WRITE, STREAM_LAUNCH and STREAM_READ (copies and launches on a stream).
/// Version 9: GET_INVENTORY's reply says whether the node is draining.
/// Version 10: FORK, BRANCH and BRANCH_END (a transfer spread over several streams).
pub const PROTOCOL_VERSION: u8 = 10;

/// The version HELLO and its reply are framed as, whatever version the two ends go on to speak.
pub const HELLO_VERSION: u8 = 1;

/// The version byte a frame about `opcode` carries.
pub(crate) fn frame_version(opcode: crate::Opcode) -> u8 {
    if opcode == crate::Opcode::Hello {
        HELLO_VERSION
    } else {
        PROTOCOL_VERSION
    }
}

/// The version both ends speak, given a client's offered range (inclusive): the highest this
/// crate speaks within it, or `None` (the node then answers UNSUPPORTED).
pub fn negotiate(min_version: u8, max_version: u8) -> Option<u8> {
    (min_version..=max_version)
        .contains(&PROTOCOL_VERSION)
        .then_some(PROTOCOL_VERSION)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_common_version_or_none() {
        assert_eq!(negotiate(10, 10), Some(10));
        assert_eq!(negotiate(0, 11), Some(10));
        // A peer of versions 1 to 9 shares no version with this one.
        assert_eq!(negotiate(1, 9), None);
        assert_eq!(negotiate(11, 12), None);
        assert_eq!(negotiate(0, 0), None);
        // An empty (inverted) range offers nothing.
        assert_eq!(negotiate(10, 1), None);
    }

    #[test]
    fn hello_keeps_its_frozen_frame_version() {
        assert_eq!(frame_version(crate::Opcode::Hello), 1);
        assert_eq!(frame_version(crate::Opcode::GpuSubmit), PROTOCOL_VERSION);
        assert_eq!(frame_version(crate::Opcode::GoAway), PROTOCOL_VERSION);
    }
}
