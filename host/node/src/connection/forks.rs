//! A connection's forks (docs/wire.md, "One transfer over several streams"): a FORK's stream
//! hands the GPU thread nothing more until every branch of the fork has handed over its last
//! job, and a branch hands over nothing until its FORK's stream has handed over everything
//! before the FORK. The GPU thread takes batches in the order they were handed over, so that is
//! the order it serves them in.
//!
//! The waits have no deadline of their own: a FORK's stream may be held up behind its session's
//! earlier work (a long kernel, a full queue) for as long as the device takes, and a branch that
//! has begun may take as long as its transfer does. A wait ends when the connection does (the
//! idle timeout closes one whose client went away); what a waiting stream holds is its task, an
//! entry of at most [`MAX_FORKS`], and the undecoded rest of its last read (at most its
//! flow-control window), as a stream waiting for queue budget does.
//!
//! A branch's stream is not read while it waits for its FORK, so its data waits in QUIC's
//! flow-control windows: a client that sends branches' data before its FORK has been given
//! credit (the Rust client writes the FORK first) can fill the connection's window with it and
//! stall its own connection. A BRANCH naming a fork that has already ended begins a new fork of
//! that number, which a FORK may come for.

use std::collections::HashMap;
use std::sync::Mutex;
use tasklet_wire::limits::MAX_BRANCHES;
use tokio::sync::Notify;

/// Forks a connection may have waiting at once (FORKs waiting for their branches, BRANCHes
/// waiting for their FORK): a client cannot make the node remember more.
pub(crate) const MAX_FORKS: usize = 64;

#[derive(Default)]
pub(crate) struct Forks {
    table: Mutex<HashMap<u64, Fork>>,
    /// Woken at every change of the table.
    changed: Notify,
}

#[derive(Default)]
struct Fork {
    /// The branches its FORK announced, once the FORK's stream has handed over what came
    /// before it.
    announced: Option<u8>,
    begun: u8,
    ended: u8,
}

/// How a wait ended when it did not end as asked.
pub(crate) enum Stop {
    /// The client broke the rules (the message says which): a protocol error.
    Broken(String),
    /// The connection closed meanwhile: nothing to answer.
    Closed,
}

impl Forks {
    /// The FORK of `fork` was read and what its stream carried before it handed over: its
    /// branches may go on. Returns once all `branches` of them have ended.
    pub async fn fork(
        &self,
        fork: u64,
        branches: u8,
        connection: &quinn::Connection,
    ) -> Result<(), Stop> {
        self.change(fork, |entry| {
            if entry.announced.is_some() {
                return Err(format!(
                    "FORK {fork} is already in flight on this connection"
                ));
            }
            if entry.begun > branches {
                return Err(too_many_branches(fork, branches));
            }
            entry.announced = Some(branches);
            Ok(())
        })?;
        let ended = self
            .wait(connection, |table| {
                table.get(&fork).is_some_and(|f| f.ended >= branches)
            })
            .await;
        self.forget(fork);
        ended
    }

    /// A BRANCH of `fork` was read: counted as begun. Returns once the fork's FORK has come.
    pub async fn branch(&self, fork: u64, connection: &quinn::Connection) -> Result<(), Stop> {
        self.change(fork, |entry| {
            let most = entry.announced.unwrap_or(MAX_BRANCHES);
            if entry.begun >= most {
                return Err(too_many_branches(fork, most));
            }
            entry.begun += 1;
            Ok(())
        })?;
        self.wait(connection, |table| {
            table.get(&fork).is_some_and(|f| f.announced.is_some())
        })
        .await
    }

    /// The BRANCH_END of a branch of `fork` that began, its jobs handed over.
    pub fn branch_end(&self, fork: u64) {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = table.get_mut(&fork) {
            entry.ended = entry.ended.saturating_add(1);
        }
        drop(table);
        self.changed.notify_waiters();
    }

    /// Changes `fork`'s entry (made if there is none, within [`MAX_FORKS`]).
    fn change(
        &self,
        fork: u64,
        change: impl FnOnce(&mut Fork) -> Result<(), String>,
    ) -> Result<(), Stop> {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if !table.contains_key(&fork) && table.len() >= MAX_FORKS {
            return Err(Stop::Broken(format!(
                "more than {MAX_FORKS} forks in flight on one connection"
            )));
        }
        change(table.entry(fork).or_default()).map_err(Stop::Broken)?;
        drop(table);
        self.changed.notify_waiters();
        Ok(())
    }

    fn forget(&self, fork: u64) {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        table.remove(&fork);
        drop(table);
        self.changed.notify_waiters();
    }

    /// Waits until `done` holds of the table, or until the connection closes.
    async fn wait(
        &self,
        connection: &quinn::Connection,
        done: impl Fn(&HashMap<u64, Fork>) -> bool,
    ) -> Result<(), Stop> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the look, so that a change right after it still wakes this.
            changed.as_mut().enable();
            if done(&self.table.lock().unwrap_or_else(|e| e.into_inner())) {
                return Ok(());
            }
            tokio::select! {
                _ = changed => {}
                _ = connection.closed() => return Err(Stop::Closed),
            }
        }
    }
}

fn too_many_branches(fork: u64, most: u8) -> String {
    format!("more BRANCHes of fork {fork} than the {most} it may have")
}
