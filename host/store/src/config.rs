//! What a store is allowed to hold: its limits, and the names of the settings behind them.

/// The node configuration key that sets [`StoreConfig::max_blob_bytes`]; errors name it so that
/// whoever reads one knows what to raise.
pub const MAX_BLOB_SETTING: &str = "store.max-blob-size";

/// The node configuration key that sets [`StoreConfig::compiled_cache_bytes`].
pub const COMPILED_CACHE_SETTING: &str = "store.compiled-cache-size";

/// A store's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreConfig {
    /// The most bytes one blob (a component, a manifest) may hold. A write is refused as soon
    /// as its bytes pass this, not after they have all been stored.
    pub max_blob_bytes: u64,
    /// The most bytes the compiled-component cache may hold, its entries' headers included;
    /// past it the entries used longest ago are evicted.
    pub compiled_cache_bytes: u64,
}

impl StoreConfig {
    /// The default [`max_blob_bytes`](Self::max_blob_bytes): far above any tasklet the
    /// examples build, far below what would let one push fill a disk.
    pub const DEFAULT_MAX_BLOB_BYTES: u64 = 256 << 20;
    /// The default [`compiled_cache_bytes`](Self::compiled_cache_bytes).
    pub const DEFAULT_COMPILED_CACHE_BYTES: u64 = 2 << 30;
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig {
            max_blob_bytes: StoreConfig::DEFAULT_MAX_BLOB_BYTES,
            compiled_cache_bytes: StoreConfig::DEFAULT_COMPILED_CACHE_BYTES,
        }
    }
}
