//! The kernel tables of a session's modules, shared between loads of the same module.
//!
//! A repeated load of a module's text is answered with the first load's worker module id
//! (`tasklet_worker`'s module aliases). Each load is a module of its own to the guest, but its
//! kernels, and the argument layouts worked out from them, are the same: the loads share one
//! table, built once, so a repeated load copies no kernel names or parameter lists. A worker's
//! module ids are never reused within its lifetime, and a lease keeps its one worker, so within
//! a session an id names one table.

use std::sync::Arc;

use rustc_hash::FxHashMap;
use tasklet_worker::LoadedModule;

use super::super::args::KernelEntry;

#[derive(Default)]
pub(in crate::gpu) struct KernelTables {
    /// By worker module id: the table and how many of the session's modules hold it.
    by_id: FxHashMap<u32, (Arc<[KernelEntry]>, usize)>,
}

impl KernelTables {
    /// The table for a module the worker answered with `loaded`: the one already held under
    /// its id, or one built now.
    pub fn hold(&mut self, loaded: &LoadedModule) -> Arc<[KernelEntry]> {
        let (table, holders) = self.by_id.entry(loaded.id).or_insert_with(|| {
            let table = loaded
                .kernels
                .iter()
                .cloned()
                .map(KernelEntry::new)
                .collect();
            (table, 0)
        });
        *holders += 1;
        Arc::clone(table)
    }

    /// One module holding the table of worker module `id` is gone.
    pub fn release(&mut self, id: u32) {
        if let Some((_, holders)) = self.by_id.get_mut(&id) {
            *holders -= 1;
            if *holders == 0 {
                self.by_id.remove(&id);
            }
        }
    }

    /// Tables held now (for tests).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_id.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tasklet_worker::KernelInfo;

    fn loaded(id: u32) -> LoadedModule {
        LoadedModule {
            id,
            kernels: vec![KernelInfo {
                name: "k".into(),
                params: Vec::new(),
            }]
            .into(),
            variable_bytes: 0,
            text_bytes: 0,
        }
    }

    #[test]
    fn loads_of_one_module_share_its_table_until_the_last_is_released() {
        let mut tables = KernelTables::default();
        let a = tables.hold(&loaded(7));
        let b = tables.hold(&loaded(7));
        let c = tables.hold(&loaded(8));
        assert!(Arc::ptr_eq(&a, &b), "the same worker module: one table");
        assert!(!Arc::ptr_eq(&a, &c), "another module: its own");
        assert_eq!(tables.len(), 2);
        tables.release(7);
        assert_eq!(tables.len(), 2, "one load of module 7 still holds it");
        tables.release(7);
        tables.release(8);
        assert_eq!(tables.len(), 0, "nothing kept past the last holder");
        tables.release(9); // unknown: nothing happens
        let d = tables.hold(&loaded(7));
        assert!(!Arc::ptr_eq(&a, &d), "built again after it was released");
    }
}
