//! How many of something each tenant holds at once (connections, deployed runs under way), so
//! that no tenant can take all the node has of it: past its share a tenant's next one is refused
//! at once, saying why, while the others still get theirs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Slots held now, by tenant.
#[derive(Default)]
pub(crate) struct TenantSlots {
    open: Arc<Mutex<HashMap<String, u64>>>,
}

/// One slot of a tenant, counted until dropped.
pub(crate) struct TenantSlot {
    open: Arc<Mutex<HashMap<String, u64>>>,
    tenant: String,
}

impl TenantSlots {
    /// Counts one more slot of `tenant` if it holds fewer than `max`; `None` (nothing counted)
    /// when it already holds `max`.
    pub fn take(&self, tenant: &str, max: u64) -> Option<TenantSlot> {
        self.take_checked(tenant, |held| if held >= max { Err(()) } else { Ok(()) })
            .ok()
    }

    /// Counts one more slot of `tenant` if `check`, given the slots it holds now, allows it;
    /// `check` runs under the lock the count is kept under, so that what it reads besides
    /// (a count kept elsewhere that a slot's holder raises before it gives its slot back) is
    /// seen together with the slots.
    pub fn take_checked<E>(
        &self,
        tenant: &str,
        check: impl FnOnce(u64) -> Result<(), E>,
    ) -> Result<TenantSlot, E> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        check(open.get(tenant).copied().unwrap_or(0))?;
        *open.entry(tenant.to_owned()).or_insert(0) += 1;
        Ok(TenantSlot {
            open: Arc::clone(&self.open),
            tenant: tenant.to_owned(),
        })
    }
}

impl Drop for TenantSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = open.get_mut(&self.tenant) {
            *held -= 1;
            if *held == 0 {
                open.remove(&self.tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_gets_at_most_its_share_and_its_slots_come_back() {
        let c = TenantSlots::default();
        let bob: Vec<_> = (0..2)
            .map(|_| c.take("bob", 2).expect("under the cap"))
            .collect();
        assert!(c.take("bob", 2).is_none(), "bob holds his 2");
        let alice = c.take("alice", 2).expect("another tenant still gets in");
        drop(bob);
        assert!(c.take("bob", 2).is_some(), "slots given back count no more");
        drop(alice);
        assert!(
            c.open.lock().unwrap().get("alice").is_none(),
            "nothing kept for none"
        );
    }
}
