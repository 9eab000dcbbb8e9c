//! Protocol versions and their negotiation.
//!
//! Every frame carries the version it is written in, and a receiver rejects any version it does
//! not speak: there is no best-effort reading of a newer peer. HELLO lets the two ends find that
//! out before anything else is said: the client offers a range, the node picks the highest
//! version in it that it speaks, or answers UNSUPPORTED and closes. A HELLO and its reply are
//! always framed as version 1 (their layout is frozen), so that a node of any later version can
//! read a client's HELLO and answer it.

/// The protocol version this crate speaks; the first byte of every frame.
pub const PROTOCOL_VERSION: u8 = 1;

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
        assert_eq!(negotiate(1, 1), Some(1));
        assert_eq!(negotiate(0, 7), Some(1));
        assert_eq!(negotiate(2, 7), None);
        assert_eq!(negotiate(0, 0), None);
        // An empty (inverted) range offers nothing.
        assert_eq!(negotiate(3, 1), None);
    }
}
