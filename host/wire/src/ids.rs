//! Identifiers that travel in messages: handles the node hands out, and deployment digests.
//!
//! Handles are opaque to clients: the node picks them and checks every one it is given against
//! the connection that owns it, so a client learns nothing from their values and gains nothing by
//! guessing.

use crate::codec::{Reader, Writer};
use crate::error::{DecodeError, EncodeError};
use crate::limits::DIGEST_HEX_LEN;

/// Names a request; its reply and its data frames carry the same id. Chosen by the client.
pub type RequestId = u32;

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u64);

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

handle!(
    /// A lease (LEASE_ALLOC's reply).
    LeaseId
);
handle!(
    /// A session on a lease (SESSION_OPEN's reply).
    SessionId
);
handle!(
    /// A buffer of device memory in a session (MEM_ALLOC's reply).
    BufferId
);
handle!(
    /// A loaded module in a session (MODULE_LOAD's and MODULE_LOAD_SOURCE's reply).
    ModuleId
);

/// A SHA-256 digest naming a stored deployment; on the wire, 64 lowercase hex characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// Lowercase hex, as on the wire.
    pub fn to_hex(&self) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = String::with_capacity(DIGEST_HEX_LEN);
        for byte in self.0 {
            out.push(HEX[usize::from(byte >> 4)] as char);
            out.push(HEX[usize::from(byte & 0xF)] as char);
        }
        out
    }

    /// Parses exactly 64 lowercase hex characters; anything else (uppercase included, so that a
    /// digest has one spelling) is `None`.
    pub fn from_hex(text: &[u8]) -> Option<Digest> {
        if text.len() != DIGEST_HEX_LEN {
            return None;
        }
        let mut bytes = [0u8; 32];
        for (byte, pair) in bytes.iter_mut().zip(text.chunks_exact(2)) {
            *byte = (hex_value(pair[0])? << 4) | hex_value(pair[1])?;
        }
        Some(Digest(bytes))
    }
}

impl Digest {
    /// On the wire: a length-prefixed string of exactly [`DIGEST_HEX_LEN`] lowercase hex
    /// characters.
    pub(crate) fn encode(&self, w: &mut Writer) -> Result<(), EncodeError> {
        w.string("digest", &self.to_hex(), DIGEST_HEX_LEN)
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<Digest, DecodeError> {
        let text = r.bytes("digest", DIGEST_HEX_LEN)?;
        Digest::from_hex(text).ok_or(DecodeError::InvalidDigest {
            len: DIGEST_HEX_LEN,
        })
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_hex_round_trip() {
        let mut bytes = [0u8; 32];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(37);
        }
        let digest = Digest(bytes);
        let hex = digest.to_hex();
        assert_eq!(hex.len(), DIGEST_HEX_LEN);
        assert_eq!(Digest::from_hex(hex.as_bytes()), Some(digest));
    }

    #[test]
    fn digest_rejects_other_spellings() {
        let good = "ab".repeat(32);
        assert!(Digest::from_hex(good.as_bytes()).is_some());
        assert!(Digest::from_hex("AB".repeat(32).as_bytes()).is_none());
        assert!(Digest::from_hex(&good.as_bytes()[..62]).is_none());
        assert!(Digest::from_hex(format!("{good}00").as_bytes()).is_none());
        assert!(Digest::from_hex(format!("{}g0", &good[..62]).as_bytes()).is_none());
    }
}
