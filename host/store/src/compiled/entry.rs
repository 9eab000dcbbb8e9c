//! A compiled-cache entry's file: a header that says what it holds, then the compiled bytes.
//!
//! ```text
//! magic            8 bytes   "TSKLCMP1"
//! component       32 bytes   the component's digest
//! engine length    2 bytes   little-endian
//! engine           that many bytes: the engine fingerprint
//! payload length   8 bytes   little-endian
//! payload digest  32 bytes   SHA-256 of the payload
//! payload
//! ```
//!
//! The entry's name already encodes the component and the engine; the header repeats them so
//! that an entry is checked against the request itself, not only against its name, and carries
//! the payload's digest so that a damaged payload is never handed to a deserializer.

use crate::digest::Digest;

const MAGIC: &[u8; 8] = b"TSKLCMP1";

/// The longest engine fingerprint an entry carries.
pub(crate) const MAX_ENGINE_BYTES: usize = 1024;

/// The header of an entry for `payload`. `engine` is at most [`MAX_ENGINE_BYTES`] long.
pub(crate) fn header(component: &Digest, engine: &str, payload: &[u8]) -> Vec<u8> {
    let engine_len = u16::try_from(engine.len()).unwrap_or(u16::MAX);
    let engine = &engine.as_bytes()[..usize::from(engine_len)];
    let mut header = Vec::with_capacity(header_len(engine.len()));
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(component.as_bytes());
    header.extend_from_slice(&engine_len.to_le_bytes());
    header.extend_from_slice(engine);
    header.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    header.extend_from_slice(Digest::of(payload).as_bytes());
    header
}

/// The length of a header carrying an engine fingerprint of `engine_len` bytes.
pub(crate) fn header_len(engine_len: usize) -> usize {
    MAGIC.len() + 32 + 2 + engine_len + 8 + 32
}

/// Checks that `entry` is an entry for (`component`, `engine`) whose payload is intact, and
/// returns where the payload starts; otherwise says what is wrong.
pub(crate) fn verify(entry: &[u8], component: &Digest, engine: &str) -> Result<usize, String> {
    let mut rest = entry;
    let mut take = |n: usize, what: &str| -> Result<&[u8], String> {
        if rest.len() < n {
            return Err(format!("cut short in its {what}"));
        }
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Ok(head)
    };
    if take(MAGIC.len(), "magic")? != MAGIC {
        return Err("not a compiled-cache entry".into());
    }
    if take(32, "component digest")? != component.as_bytes() {
        return Err("made for another component".into());
    }
    let engine_len = take(2, "engine length")?;
    let engine_len = usize::from(u16::from_le_bytes([engine_len[0], engine_len[1]]));
    if take(engine_len, "engine fingerprint")? != engine.as_bytes() {
        return Err("made for another engine".into());
    }
    let payload_len = take(8, "payload length")?;
    let payload_len = u64::from_le_bytes(payload_len.try_into().map_err(|_| "bad length")?);
    let payload_digest = take(32, "payload digest")?;
    let payload_digest = Digest::from_bytes(payload_digest.try_into().map_err(|_| "bad digest")?);
    if rest.len() as u64 != payload_len {
        return Err(format!(
            "its payload is {} bytes, not the {payload_len} its header says",
            rest.len()
        ));
    }
    if Digest::of(rest) != payload_digest {
        return Err("its payload does not hash to the digest in its header".into());
    }
    Ok(entry.len() - rest.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(component: &Digest, engine: &str, payload: &[u8]) -> Vec<u8> {
        let mut entry = header(component, engine, payload);
        entry.extend_from_slice(payload);
        entry
    }

    #[test]
    fn intact_entry_verifies() {
        let component = Digest::of(b"component");
        let entry = entry(&component, "engine-1", b"compiled bytes");
        let start = verify(&entry, &component, "engine-1").unwrap();
        assert_eq!(&entry[start..], b"compiled bytes");
        assert_eq!(start, header_len("engine-1".len()));
    }

    #[test]
    fn every_single_byte_flip_and_every_truncation_is_caught() {
        let component = Digest::of(b"component");
        let good = entry(&component, "engine-1", b"compiled bytes");
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x01;
            assert!(
                verify(&bad, &component, "engine-1").is_err(),
                "flip at {at}"
            );
            assert!(
                verify(&good[..at], &component, "engine-1").is_err(),
                "cut at {at}"
            );
        }
        assert!(verify(&good, &component, "engine-2").is_err());
        assert!(verify(&good, &Digest::of(b"other"), "engine-1").is_err());
    }
}
