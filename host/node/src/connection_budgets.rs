//! What client traffic holds of the node's memory now, connection by connection: each
//! connection's queue budget (see `connection::QUEUE_BYTES`) counts the request bytes it holds,
//! from a frame's first bytes until the request is served, and its reply budget
//! (`reply_budget`) the reply bytes queued for the client. Read for the node's status and
//! metrics, never on a request's path.

use crate::reply_budget::ReplyBudget;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use tokio::sync::Semaphore;

/// A connection's two budgets.
pub(crate) struct Budgets {
    /// Request bytes: `size` permits when nothing is held.
    pub requests: Arc<Semaphore>,
    pub replies: Arc<ReplyBudget>,
}

/// The budgets of the node's connections.
pub(crate) struct ConnectionBudgets {
    size: usize,
    open: Mutex<Vec<(Weak<Semaphore>, Weak<ReplyBudget>)>>,
}

impl ConnectionBudgets {
    /// Each connection's request budget will be `size` bytes.
    pub fn new(size: usize) -> ConnectionBudgets {
        ConnectionBudgets {
            size,
            open: Mutex::new(Vec::new()),
        }
    }

    /// A new connection's budgets, counted while anything holds them.
    pub fn open(&self) -> Budgets {
        let budgets = Budgets {
            requests: Arc::new(Semaphore::new(self.size)),
            replies: Arc::default(),
        };
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        // Connections come and go: the closed ones' entries go as new ones come.
        open.retain(|(requests, replies)| requests.strong_count() + replies.strong_count() > 0);
        open.push((
            Arc::downgrade(&budgets.requests),
            Arc::downgrade(&budgets.replies),
        ));
        budgets
    }

    /// Bytes of requests the node holds now, received whole or in part and not yet served.
    pub fn requests_held(&self) -> u64 {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.iter()
            .filter_map(|(requests, _)| requests.upgrade())
            .map(|b| self.size.saturating_sub(b.available_permits()) as u64)
            .sum()
    }

    /// Bytes of replies queued now for clients to take.
    pub fn replies_queued(&self) -> u64 {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.iter()
            .filter_map(|(_, replies)| replies.upgrade())
            .map(|b| b.queued() as u64)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_open_budgets_hold_is_counted_until_dropped() {
        let budgets = ConnectionBudgets::new(100);
        let a = budgets.open();
        let b = budgets.open();
        let held_a = Arc::clone(&a.requests).try_acquire_many_owned(30).unwrap();
        let held_b = Arc::clone(&b.requests).try_acquire_many_owned(5).unwrap();
        let reply = a.replies.hold(7);
        assert_eq!((budgets.requests_held(), budgets.replies_queued()), (35, 7));
        drop((held_a, reply));
        assert_eq!((budgets.requests_held(), budgets.replies_queued()), (5, 0));
        drop(b);
        assert_eq!(
            budgets.requests_held(),
            5,
            "what a closed connection's requests hold until dropped"
        );
        drop(held_b);
        assert_eq!(budgets.requests_held(), 0);
        let _c = budgets.open();
        assert_eq!(
            budgets.open.lock().unwrap().len(),
            2,
            "a and c; b's entry went"
        );
    }
}
