//! Which of a session's module ids a reload replaced, so that naming one again says the module was
//! reloaded (resolve the kernel again) rather than that it belongs to another session.
//!
//! Only the latest replaced id of each live module is kept: a loop of reloads would otherwise
//! grow the host's memory by one id each, without end. An id replaced two reloads ago, or whose
//! successor was unloaded, is refused as any unknown module is.

use crate::gpu::types::ModuleId;
use rustc_hash::FxHashMap;

#[derive(Default)]
pub(super) struct Reloads {
    /// A replaced id → the live module that replaced it; at most one entry per live module.
    replaced_by: FxHashMap<ModuleId, ModuleId>,
}

impl Reloads {
    /// `old` was reloaded as `new` (and `old` unloaded).
    pub(super) fn replaced(&mut self, old: ModuleId, new: ModuleId) {
        self.unloaded(old);
        self.replaced_by.insert(old, new);
    }

    /// `module` is gone: the id it replaced, if any, is forgotten.
    pub(super) fn unloaded(&mut self, module: ModuleId) {
        self.replaced_by.retain(|_, live| *live != module);
    }

    /// Whether `module` is an id a reload replaced (and still remembered).
    pub(super) fn contains(&self, module: &ModuleId) -> bool {
        self.replaced_by.contains_key(module)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.replaced_by.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loop of reloads keeps one id, the latest replaced; unloading the live module forgets it.
    #[test]
    fn reloads_keep_at_most_one_replaced_id_per_live_module() {
        let mut r = Reloads::default();
        for i in 0..10_000u64 {
            r.replaced(ModuleId(i), ModuleId(i + 1));
        }
        assert_eq!(r.len(), 1);
        assert!(
            r.contains(&ModuleId(9_999)),
            "the latest replaced id is known"
        );
        assert!(!r.contains(&ModuleId(9_998)), "older ones are not kept");
        assert!(
            !r.contains(&ModuleId(10_000)),
            "the live module is not replaced"
        );
        // Two modules reloaded side by side each keep theirs.
        r.replaced(ModuleId(50_000), ModuleId(50_001));
        assert_eq!(r.len(), 2);
        r.unloaded(ModuleId(10_000));
        assert!(!r.contains(&ModuleId(9_999)));
        assert!(r.contains(&ModuleId(50_000)));
        assert_eq!(r.len(), 1);
    }
}
