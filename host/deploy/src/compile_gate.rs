//! How many components a deployer compiles at once. Compiling holds many times a component's
//! size in memory (about 13 × seen for a 47 MB component of a few huge functions), and every
//! path to a compile (a push, a deployment fetched from a cluster, a run whose compiled form
//! the cache has lost) comes through [`CompileGate::enter`]: past the gate's width a compile
//! waits for one to end, on the blocking thread it runs on.

use std::sync::{Condvar, Mutex, PoisonError};

pub(crate) struct CompileGate {
    width: usize,
    inside: Mutex<usize>,
    left: Condvar,
}

/// A compile under way, counted until dropped.
pub(crate) struct Compiling<'a>(&'a CompileGate);

impl CompileGate {
    /// A gate letting one compile per core of the machine through at once, at least two.
    pub fn per_core() -> CompileGate {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        CompileGate::new(cores.max(2))
    }

    pub fn new(width: usize) -> CompileGate {
        CompileGate {
            width: width.max(1),
            inside: Mutex::new(0),
            left: Condvar::new(),
        }
    }

    /// Waits until fewer than the gate's width compile, then counts this one.
    pub fn enter(&self) -> Compiling<'_> {
        let inside = self.inside.lock().unwrap_or_else(PoisonError::into_inner);
        let mut inside = self
            .left
            .wait_while(inside, |inside| *inside >= self.width)
            .unwrap_or_else(PoisonError::into_inner);
        *inside += 1;
        Compiling(self)
    }
}

impl Drop for Compiling<'_> {
    fn drop(&mut self) {
        let mut inside = self.0.inside.lock().unwrap_or_else(PoisonError::into_inner);
        *inside -= 1;
        self.0.left.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn no_more_than_its_width_compile_at_once() {
        let gate = Arc::new(CompileGate::new(2));
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let threads: Vec<_> = (0..6)
            .map(|_| {
                let (gate, now, most) = (Arc::clone(&gate), Arc::clone(&now), Arc::clone(&most));
                std::thread::spawn(move || {
                    let _in = gate.enter();
                    let here = now.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(here, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(20));
                    now.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 2);
        assert_eq!(*gate.inside.lock().unwrap(), 0, "every one let out");
    }
}
