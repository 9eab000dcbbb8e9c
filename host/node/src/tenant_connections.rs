//! How many connections each tenant holds, so that no tenant can take every connection the node
//! serves: past its share a tenant's new connection is closed at once, saying why, while the
//! others still get in.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Connections open now, by tenant.
#[derive(Default)]
pub(crate) struct TenantConnections {
    open: Arc<Mutex<HashMap<String, u64>>>,
}

/// One connection of a tenant, counted until dropped.
pub(crate) struct TenantConnection {
    open: Arc<Mutex<HashMap<String, u64>>>,
    tenant: String,
}

impl TenantConnections {
    /// Counts one more connection of `tenant` if it holds fewer than `max`; `None` (nothing
    /// counted) when it already holds `max`.
    pub fn open(&self, tenant: &str, max: u64) -> Option<TenantConnection> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let held = open.entry(tenant.to_owned()).or_insert(0);
        if *held >= max {
            return None;
        }
        *held += 1;
        Some(TenantConnection {
            open: Arc::clone(&self.open),
            tenant: tenant.to_owned(),
        })
    }
}

impl Drop for TenantConnection {
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
        let c = TenantConnections::default();
        let bob: Vec<_> = (0..2)
            .map(|_| c.open("bob", 2).expect("under the cap"))
            .collect();
        assert!(c.open("bob", 2).is_none(), "bob holds his 2");
        let alice = c.open("alice", 2).expect("another tenant still gets in");
        drop(bob);
        assert!(
            c.open("bob", 2).is_some(),
            "closed connections count no more"
        );
        drop(alice);
        assert!(
            c.open.lock().unwrap().get("alice").is_none(),
            "nothing kept for none"
        );
    }
}
