//! The unit device memory is charged in: one rule for every backend's cap and for the host's
//! lease accounting, so that both sides count an allocation the same.

/// An allocation of `n` bytes counts as `charged_bytes(n)`, so that many tiny allocations cannot
/// hold more of the device than their lease was granted (CUDA itself rounds each allocation up).
pub const ALLOC_GRANULE: u64 = 512;

/// `bytes` rounded up to [`ALLOC_GRANULE`]; `u64::MAX` when that overflows (so it fails any quota).
pub fn charged_bytes(bytes: u64) -> u64 {
    bytes
        .checked_next_multiple_of(ALLOC_GRANULE)
        .unwrap_or(u64::MAX)
}
