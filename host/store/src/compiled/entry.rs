//! A compiled-cache entry's file: the compiled bytes, then a trailer that says what they are.
//!
//! ```text
//! payload           the engine's bytes, first, so that the file can be mapped as it is
//! component         32 bytes   the component's digest
//! engine            the engine fingerprint's bytes
//! engine length      2 bytes   little-endian
//! payload length     8 bytes   little-endian
//! checksum           4 bytes   CRC-32 (IEEE), little-endian, of every byte before it
//! magic              8 bytes   "TSKLCMP2"
//! ```
//!
//! The entry's name already encodes the component and the engine; the trailer repeats them so
//! that an entry is checked against the request itself, not only against its name.
//!
//! The payload comes first because an engine can load a file of compiled code by mapping it
//! (wasmtime's `Component::deserialize_file`), which spares copying tens of MiB into fresh
//! memory on every warm start; the engine reads its object file's own structure and ignores
//! the trailer past its end.
//!
//! The checksum is there to catch damage at rest (a bad disk, a file cut short or overwritten
//! in place): the payload is machine code, never handed to the engine unless it reads back as
//! written. A CRC-32 misses a random corruption with odds of one in 2^32, on top of the exact
//! length and the engine's own checks of its object file, and costs a tenth of a SHA-256 (2 ms
//! against 25 ms over a 35 MB entry on the 2-core development machine). It is no defence
//! against someone who may write the cache's folder, and neither would a cryptographic digest
//! stored beside the bytes be: such a writer can rewrite both. The folder's permissions are
//! that defence.

use crate::digest::Digest;

pub(crate) const MAGIC: &[u8; 8] = b"TSKLCMP2";

/// The longest engine fingerprint an entry carries.
pub(crate) const MAX_ENGINE_BYTES: usize = 1024;

/// The bytes at an entry's end that the checksum does not cover: itself and the magic.
pub(crate) const UNCHECKED_END: usize = 4 + MAGIC.len();

/// The trailer that follows `payload` in an entry. `engine` is at most [`MAX_ENGINE_BYTES`]
/// long.
pub(crate) fn trailer(component: &Digest, engine: &str, payload: &[u8]) -> Vec<u8> {
    let engine_len = u16::try_from(engine.len()).unwrap_or(u16::MAX);
    let engine = &engine.as_bytes()[..usize::from(engine_len)];
    let mut trailer = Vec::with_capacity(trailer_len(engine.len()));
    trailer.extend_from_slice(component.as_bytes());
    trailer.extend_from_slice(engine);
    trailer.extend_from_slice(&engine_len.to_le_bytes());
    trailer.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    let mut checksum = crc32fast::Hasher::new();
    checksum.update(payload);
    checksum.update(&trailer);
    trailer.extend_from_slice(&checksum.finalize().to_le_bytes());
    trailer.extend_from_slice(MAGIC);
    trailer
}

/// The length of a trailer carrying an engine fingerprint of `engine_len` bytes.
pub(crate) fn trailer_len(engine_len: usize) -> usize {
    32 + engine_len + 2 + 8 + UNCHECKED_END
}

/// What an entry's trailer says, once it matched the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Trailer {
    /// The payload's length: the entry's first bytes.
    pub(crate) payload_len: u64,
    /// The CRC-32 of the entry's first `checked_len` bytes.
    pub(crate) checksum: u32,
    /// How many of the entry's bytes the checksum covers.
    pub(crate) checked_len: u64,
}

/// Checks the last [`trailer_len`]`(engine.len())` bytes of an entry `entry_len` bytes long
/// (`tail`; fewer when the entry is shorter) against the request: an entry for (`component`,
/// `engine`) whose payload fills the rest. The checksum is left to the caller, who reads the
/// payload.
pub(crate) fn check_trailer(
    tail: &[u8],
    entry_len: u64,
    component: &Digest,
    engine: &str,
) -> Result<Trailer, String> {
    let expected_len = trailer_len(engine.len());
    if tail.len() < expected_len {
        if tail.ends_with(MAGIC) {
            return Err("cut short, or made for another engine".into());
        }
        return Err("not a compiled-cache entry of this version".into());
    }
    let (fields, end) = tail.split_at(tail.len() - UNCHECKED_END);
    let (checksum, magic) = end.split_at(4);
    if magic != MAGIC {
        return Err("not a compiled-cache entry of this version".into());
    }
    let (stored_component, rest) = fields.split_at(32);
    let (stored_engine, rest) = rest.split_at(engine.len());
    let (stored_engine_len, stored_payload_len) = rest.split_at(2);
    if usize::from(u16::from_le_bytes([
        stored_engine_len[0],
        stored_engine_len[1],
    ])) != engine.len()
        || stored_engine != engine.as_bytes()
    {
        return Err("made for another engine".into());
    }
    if stored_component != component.as_bytes() {
        return Err("made for another component".into());
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(stored_payload_len);
    let payload_len = u64::from_le_bytes(len);
    let found = entry_len.saturating_sub(expected_len as u64);
    if payload_len != found {
        return Err(format!(
            "its payload is {found} bytes, not the {payload_len} its trailer says"
        ));
    }
    let mut sum = [0u8; 4];
    sum.copy_from_slice(checksum);
    Ok(Trailer {
        payload_len,
        checksum: u32::from_le_bytes(sum),
        checked_len: entry_len - UNCHECKED_END as u64,
    })
}

/// The error for a checksum that does not match.
pub(crate) fn checksum_mismatch() -> String {
    "its bytes do not match the checksum in its trailer".into()
}

/// Checks that `entry` (the whole file) is an entry for (`component`, `engine`) whose bytes
/// are intact, and returns its payload's length; otherwise says what is wrong.
pub(crate) fn verify(entry: &[u8], component: &Digest, engine: &str) -> Result<usize, String> {
    let tail_start = entry.len().saturating_sub(trailer_len(engine.len()));
    let trailer = check_trailer(&entry[tail_start..], entry.len() as u64, component, engine)?;
    let checked = &entry[..entry.len() - UNCHECKED_END];
    if crc32fast::hash(checked) != trailer.checksum {
        return Err(checksum_mismatch());
    }
    Ok(entry.len() - trailer_len(engine.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(component: &Digest, engine: &str, payload: &[u8]) -> Vec<u8> {
        let mut entry = payload.to_vec();
        entry.extend_from_slice(&trailer(component, engine, payload));
        entry
    }

    #[test]
    fn intact_entry_verifies() {
        let component = Digest::of(b"component");
        let entry = entry(&component, "engine-1", b"compiled bytes");
        let len = verify(&entry, &component, "engine-1").unwrap();
        assert_eq!(&entry[..len], b"compiled bytes");
        assert_eq!(entry.len() - len, trailer_len("engine-1".len()));
    }

    #[test]
    fn every_single_byte_flip_and_every_truncation_is_caught() {
        let component = Digest::of(b"component");
        let good = entry(&component, "engine-1", b"compiled bytes");
        for at in 0..good.len() {
            for bit in [0x01, 0x80] {
                let mut bad = good.clone();
                bad[at] ^= bit;
                assert!(
                    verify(&bad, &component, "engine-1").is_err(),
                    "flip {bit:#x} at {at}"
                );
            }
            assert!(
                verify(&good[..at], &component, "engine-1").is_err(),
                "cut at {at}"
            );
        }
        let mut longer = good.clone();
        longer.push(0);
        assert!(verify(&longer, &component, "engine-1").is_err());
        assert!(verify(&good, &component, "engine-2").is_err());
        assert!(verify(&good, &component, "engine-10").is_err());
        assert!(verify(&good, &Digest::of(b"other"), "engine-1").is_err());
    }

    #[test]
    fn an_entry_of_the_first_format_is_not_one() {
        // The first format began with a header ("TSKLCMP1", ...) and had no trailer.
        let component = Digest::of(b"component");
        let mut old = b"TSKLCMP1".to_vec();
        old.extend_from_slice(component.as_bytes());
        old.extend_from_slice(&[0u8; 200]);
        let err = verify(&old, &component, "engine-1").unwrap_err();
        assert!(err.contains("not a compiled-cache entry"), "{err}");
    }
}
