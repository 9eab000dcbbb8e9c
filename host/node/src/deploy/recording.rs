//! One deployment's push stored and its tenant recorded at a time: of pushes of the same
//! deployment made at once, the one that stored it is told apart from those that found it
//! present, and none is taken for one that put back what the store had lost. Pushes of other
//! deployments are not held up (each writes its own blobs, syncs them, compiles).

use std::collections::HashSet;
use std::sync::{Condvar, Mutex, PoisonError};

use tasklet_store::Digest;

/// The deployments being stored and recorded now.
#[derive(Default)]
pub(crate) struct Recording {
    held: Mutex<HashSet<Digest>>,
    released: Condvar,
}

/// Held while one deployment is stored and recorded; let go when dropped.
pub(crate) struct Held<'a> {
    recording: &'a Recording,
    digest: Digest,
}

impl Recording {
    /// Waits until no other push or fetch is storing `digest`, then holds it. The set holds
    /// nothing a panicking holder could break: a poisoned lock is taken all the same.
    pub fn hold(&self, digest: Digest) -> Held<'_> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        while held.contains(&digest) {
            held = self
                .released
                .wait(held)
                .unwrap_or_else(PoisonError::into_inner);
        }
        held.insert(digest);
        Held {
            recording: self,
            digest,
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut held = self
            .recording
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        held.remove(&self.digest);
        self.recording.released.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// A second hold of one digest waits for the first; another digest does not.
    #[test]
    fn one_digest_at_a_time_and_others_beside_it() {
        let recording = Arc::new(Recording::default());
        let (a, b) = (Digest::of(b"a"), Digest::of(b"b"));
        let first = recording.hold(a);
        drop(recording.hold(b));
        let waiter = {
            let recording = Arc::clone(&recording);
            std::thread::spawn(move || {
                let started = Instant::now();
                drop(recording.hold(a));
                started.elapsed()
            })
        };
        std::thread::sleep(Duration::from_millis(200));
        drop(first);
        let waited = waiter.join().unwrap();
        assert!(waited >= Duration::from_millis(150), "{waited:?}");
    }
}
