//! A leased worker's claim on its pool's capacity.
//!
//! It lives apart from the pool so that a [`Worker`](super::client::Worker) can carry it without
//! knowing what a pool is: the pool implements [`SlotOwner`], and the token held by the worker
//! gives the slot back when it is dropped — whether the worker was released or simply dropped.

use std::sync::{Arc, Weak};

use super::process::Proc;

/// What hands out slots: told when one comes back.
pub(crate) trait SlotOwner: Send + Sync {
    /// The worker whose process is `proc` no longer holds its slot.
    fn give_back(&self, proc: &Weak<Proc>);
}

/// Held by a leased worker; gives the slot back when dropped.
pub(crate) struct LeaseToken {
    owner: Weak<dyn SlotOwner>,
    proc: Weak<Proc>,
    /// Counts the worker as leased (see [`super::linger`]) until the token goes.
    _leased: super::linger::Leased,
}

impl LeaseToken {
    pub(crate) fn new(owner: Weak<dyn SlotOwner>, proc: &Arc<Proc>) -> LeaseToken {
        LeaseToken {
            owner,
            proc: Arc::downgrade(proc),
            _leased: super::linger::Leased::new(),
        }
    }

    /// Whether the slot came from `owner`.
    pub(crate) fn is_from<T: SlotOwner>(&self, owner: &Arc<T>) -> bool {
        std::ptr::addr_eq(self.owner.as_ptr(), Arc::as_ptr(owner))
    }
}

impl Drop for LeaseToken {
    fn drop(&mut self) {
        if let Some(owner) = self.owner.upgrade() {
            owner.give_back(&self.proc);
        }
    }
}
