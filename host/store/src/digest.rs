//! SHA-256 digests: the names of everything the store holds.
//!
//! A [`Digest`] is the only way a client's words become a file name in the store, so its one
//! spelling is strict: exactly 64 lowercase hex characters. Anything else (a path, `..`, an
//! uppercase digit, a `sha256:` prefix, one character too many) is an [`InvalidDigest`] before
//! any file is touched.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest as _, Sha256};

/// Characters in a digest's hex spelling.
pub const DIGEST_HEX_LEN: usize = 64;

/// Longest prefix of a rejected text quoted back in an error: enough to recognise it, never a
/// whole uploaded file echoed into a log.
const QUOTED_MAX: usize = 80;

/// A SHA-256 digest, spelled as 64 lowercase hex characters.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest([u8; 32]);

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(Sha256::digest(bytes).into())
    }

    /// A digest from its 32 bytes.
    pub const fn from_bytes(bytes: [u8; 32]) -> Digest {
        Digest(bytes)
    }

    /// The digest's 32 bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Parses exactly 64 lowercase hex characters.
    pub fn parse(text: &str) -> Result<Digest, InvalidDigest> {
        let invalid = |reason| InvalidDigest {
            quoted: quote(text),
            reason,
        };
        if text.len() != DIGEST_HEX_LEN {
            return Err(invalid(Reason::Length(text.len())));
        }
        let mut bytes = [0u8; 32];
        for (byte, pair) in bytes.iter_mut().zip(text.as_bytes().chunks_exact(2)) {
            let high = hex_value(pair[0]).ok_or_else(|| invalid(Reason::Character(pair[0])))?;
            let low = hex_value(pair[1]).ok_or_else(|| invalid(Reason::Character(pair[1])))?;
            *byte = (high << 4) | low;
        }
        Ok(Digest(bytes))
    }

    /// The 64 lowercase hex characters.
    pub fn to_hex(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

impl FromStr for Digest {
    type Err = InvalidDigest;

    fn from_str(text: &str) -> Result<Digest, InvalidDigest> {
        Digest::parse(text)
    }
}

/// Lowercase hex only: an uppercase digit would give one digest two spellings, hence two file
/// names.
fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

fn quote(text: &str) -> String {
    match text.char_indices().nth(QUOTED_MAX) {
        Some((cut, _)) => format!("{:?}…", &text[..cut]),
        None => format!("{text:?}"),
    }
}

/// A text that is not a digest's spelling.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{quoted} is not a digest ({reason}): a digest is the 64 lowercase hex characters `tasklet deploy push` printed")]
pub struct InvalidDigest {
    quoted: String,
    reason: Reason,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    Length(usize),
    Character(u8),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Length(len) => write!(f, "{len} bytes long, not {DIGEST_HEX_LEN}"),
            Reason::Character(c) if c.is_ascii_uppercase() => {
                write!(f, "uppercase {:?}", char::from(*c))
            }
            Reason::Character(c) if c.is_ascii() => {
                write!(f, "{:?} is not a lowercase hex digit", char::from(*c))
            }
            Reason::Character(_) => f.write_str("a non-ASCII character"),
        }
    }
}

/// A SHA-256 computed over bytes fed to it in pieces.
#[derive(Clone, Default)]
pub(crate) struct Hasher(Sha256);

impl Hasher {
    pub(crate) fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    pub(crate) fn finish(self) -> Digest {
        Digest(self.0.finalize().into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spelling_round_trips() {
        let digest = Digest::of(b"abc");
        assert_eq!(
            digest.to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(Digest::parse(&digest.to_hex()), Ok(digest));
    }

    #[test]
    fn only_lowercase_hex_of_the_right_length() {
        let good = Digest::of(b"x").to_hex();
        for bad in [
            String::new(),
            "../x".into(),
            "/etc/passwd".into(),
            good.to_uppercase(),
            format!("{good}0"),
            good[1..].to_string(),
            format!("sha256:{}", &good[7..]),
            format!("../{}", &good[3..]),
            format!("{}é", &good[..62]),
        ] {
            assert!(Digest::parse(&bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn long_rejected_text_is_quoted_short() {
        let err = Digest::parse(&"z".repeat(10_000)).unwrap_err().to_string();
        assert!(err.len() < 300, "{err}");
        assert!(err.contains("10000 bytes long"), "{err}");
    }
}
