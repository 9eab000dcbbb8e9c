//! The tasklet's memory limit, as wasm specifies it: a `memory.grow` past `[limits] memory` fails
//! (returns -1) rather than trapping, so a guest that can live with less memory may. What was
//! refused is remembered, so that a trap that follows (a guest allocator giving up) can name the
//! limit and the setting that raises it.

use wasmtime::ResourceLimiter;

/// Most table elements a tasklet may have: far above what compiled Rust or C need, and small
/// enough that a hostile module cannot make the host allocate without bound.
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

pub struct MemoryLimit {
    limit: usize,
    /// The largest size a refused growth asked for.
    refused: Option<usize>,
}

impl MemoryLimit {
    pub fn new(limit: u64) -> MemoryLimit {
        MemoryLimit {
            limit: usize::try_from(limit).unwrap_or(usize::MAX),
            refused: None,
        }
    }

    /// Why the tasklet may have trapped, if it was refused memory: one line naming the limit.
    pub fn refusal(&self) -> Option<String> {
        self.refused.map(|asked| {
            format!(
                "it asked to grow its memory to {asked} bytes, past its limit of {} bytes; raise `memory` under [limits] \
                 in its manifest (the node policy caps it too)",
                self.limit
            )
        })
    }
}

impl ResourceLimiter for MemoryLimit {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired <= self.limit {
            return Ok(true);
        }
        self.refused = Some(self.refused.map_or(desired, |r| r.max(desired)));
        Ok(false)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}
