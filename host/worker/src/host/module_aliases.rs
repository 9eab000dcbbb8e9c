//! Loads of a module the worker already holds, answered by the host.
//!
//! A worker shares one loaded module among every load of the same PTX text that declares no
//! module-scope `.global` variables ([`crate::contract::modules`]): a repeated load is a lookup
//! there, but still a round trip to the worker process (and, through the host's node-wide
//! cache, a SHA-256 of the text and the cached image sent along). The host keeps the texts it
//! has seen loaded as shareable on this worker, so a repeated load is answered here with the
//! first load's module id and kernels, and only the last unload of that id goes to the worker.
//!
//! Kept texts are bounded ([`MAX_TEXT_BYTES`] per worker): past that a load goes to the worker
//! as before. Every load answered here still counts against the worker's
//! [`MAX_MODULES`](crate::contract::modules::MAX_MODULES).

use rustc_hash::FxHashMap;

use crate::contract::modules::declares_module_globals;
use crate::contract::LoadedModule;

/// Bytes of PTX text kept per worker to recognise repeated loads.
pub const MAX_TEXT_BYTES: usize = 8 << 20;

/// The shareable modules loaded on one worker, by text, with how many loads hold each.
#[derive(Default)]
pub(crate) struct ModuleAliases {
    by_text: FxHashMap<Box<str>, u32>,
    held: FxHashMap<u32, Held>,
    text_bytes: usize,
    /// Loads answered here and not yet unloaded: ids the worker did not hand out.
    extra: usize,
}

struct Held {
    module: LoadedModule,
    /// Loads holding the id (the worker's own load included).
    loads: u32,
    text_len: usize,
}

impl ModuleAliases {
    /// The module an earlier load of exactly `ptx` made, held once more; `None` when no
    /// shareable load of it is held.
    pub fn load_again(&mut self, ptx: &str) -> Option<LoadedModule> {
        let id = *self.by_text.get(ptx)?;
        let held = self.held.get_mut(&id)?;
        held.loads += 1;
        self.extra += 1;
        Some(held.module.clone())
    }

    /// The worker loaded `ptx` as `module`: kept, if shareable and within the bound, for the
    /// next load of the same text.
    pub fn loaded(&mut self, ptx: &str, module: &LoadedModule) {
        if self.by_text.contains_key(ptx)
            || self.text_bytes + ptx.len() > MAX_TEXT_BYTES
            || declares_module_globals(ptx)
        {
            return;
        }
        self.text_bytes += ptx.len();
        self.by_text.insert(ptx.into(), module.id);
        self.held.insert(
            module.id,
            Held {
                module: module.clone(),
                loads: 1,
                text_len: ptx.len(),
            },
        );
    }

    /// One load of `id` is unloaded: true when the worker must unload it (no other load holds
    /// it, or it was never kept here).
    pub fn unload(&mut self, id: u32) -> bool {
        let Some(held) = self.held.get_mut(&id) else {
            return true;
        };
        if held.loads > 1 {
            held.loads -= 1;
            self.extra -= 1;
            return false;
        }
        let text_len = held.text_len;
        self.held.remove(&id);
        self.by_text.retain(|_, held_id| *held_id != id);
        self.text_bytes -= text_len;
        true
    }

    /// Loads answered here and still held.
    pub fn extra(&self) -> usize {
        self.extra
    }

    /// The worker's modules are gone (reset, or the worker ended).
    pub fn clear(&mut self) {
        *self = ModuleAliases::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: &str = ".version 8.0\n.target sm_80\n.visible .entry k() { ret; }\n";
    const STATEFUL: &str =
        ".version 8.0\n.target sm_80\n.global .u32 n;\n.visible .entry k() { ret; }\n";

    fn module(id: u32) -> LoadedModule {
        LoadedModule {
            id,
            kernels: Vec::new().into(),
            variable_bytes: 0,
            text_bytes: 0,
        }
    }

    #[test]
    fn a_repeated_load_is_the_first_ones_id_until_the_last_unload() {
        let mut a = ModuleAliases::default();
        assert!(a.load_again(PLAIN).is_none());
        a.loaded(PLAIN, &module(7));
        assert_eq!(a.load_again(PLAIN).map(|m| m.id), Some(7));
        assert_eq!(a.load_again(PLAIN).map(|m| m.id), Some(7));
        assert_eq!(a.extra(), 2);
        assert!(!a.unload(7));
        assert!(!a.unload(7));
        assert_eq!(a.extra(), 0);
        assert!(a.unload(7), "the last load's unload goes to the worker");
        assert!(a.load_again(PLAIN).is_none());
        assert_eq!(a.text_bytes, 0);
    }

    #[test]
    fn a_module_with_globals_is_never_shared() {
        let mut a = ModuleAliases::default();
        a.loaded(STATEFUL, &module(3));
        assert!(a.load_again(STATEFUL).is_none());
        assert!(a.unload(3));
    }

    #[test]
    fn texts_past_the_bound_are_not_kept() {
        let mut a = ModuleAliases::default();
        let big = format!("{PLAIN}//{}\n", "x".repeat(MAX_TEXT_BYTES - PLAIN.len()));
        a.loaded(&big, &module(1));
        assert!(
            a.load_again(&big).is_none(),
            "over the bound by a few bytes"
        );
        a.loaded(PLAIN, &module(2));
        assert_eq!(a.load_again(PLAIN).map(|m| m.id), Some(2));
        a.clear();
        assert!(a.load_again(PLAIN).is_none());
        assert_eq!(a.extra(), 0);
    }
}
