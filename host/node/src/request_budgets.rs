//! What client input the node holds now: every connection's queue budget (see
//! `connection::QUEUE_BYTES`) counts the request bytes it holds, from a frame's first bytes
//! until the request is served, so the sum over open connections is what clients' requests hold
//! of the node's memory (QUIC's own receive windows aside). Read for the node's status and
//! metrics, never on a request's path.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use tokio::sync::Semaphore;

/// The queue budgets of the node's connections, each of `size` permits when nothing is held.
pub(crate) struct RequestBudgets {
    size: usize,
    open: Mutex<Vec<Weak<Semaphore>>>,
}

impl RequestBudgets {
    pub fn new(size: usize) -> RequestBudgets {
        RequestBudgets {
            size,
            open: Mutex::new(Vec::new()),
        }
    }

    /// A new connection's budget, counted while the connection holds it.
    pub fn open(&self) -> Arc<Semaphore> {
        let budget = Arc::new(Semaphore::new(self.size));
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        // Connections come and go: the closed ones' entries go as new ones come.
        open.retain(|b| b.strong_count() > 0);
        open.push(Arc::downgrade(&budget));
        budget
    }

    /// Bytes of requests the node's open connections hold now.
    pub fn held(&self) -> u64 {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.iter()
            .filter_map(Weak::upgrade)
            .map(|b| self.size.saturating_sub(b.available_permits()) as u64)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_counts_what_open_budgets_lend_and_forgets_closed_ones() {
        let budgets = RequestBudgets::new(100);
        let a = budgets.open();
        let b = budgets.open();
        let held_a = Arc::clone(&a).try_acquire_many_owned(30).unwrap();
        let held_b = Arc::clone(&b).try_acquire_many_owned(5).unwrap();
        assert_eq!(budgets.held(), 35);
        drop(held_a);
        assert_eq!(budgets.held(), 5);
        drop(b);
        assert_eq!(budgets.held(), 5, "what a closed connection's requests hold until dropped");
        drop(held_b);
        assert_eq!(budgets.held(), 0);
        let _c = budgets.open();
        assert_eq!(
            budgets.open.lock().unwrap().len(),
            2,
            "a and c; b's entry went"
        );
    }
}
