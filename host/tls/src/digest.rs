//! SHA-256 digests written as hex, the form people compare and registries publish.

/// The SHA-256 digest of `bytes`: 64 lowercase hex digits.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}
