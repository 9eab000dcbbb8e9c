//! The warm set: linked tasklets kept in memory between runs, so that running a deployment that
//! ran recently only instantiates and calls.
//!
//! A [`Tasklet`] is wasmtime's pre-instantiated component (imports resolved, code mapped) plus
//! the grant of the run it serves. Each run sets its own grant, so runs at once cannot share one:
//! a run takes a tasklet out, sets its grant, runs it and gives it back, and two runs of one
//! deployment at once take two. The set thus holds, per deployment, as many idle tasklets as ran
//! at once last, within two bounds for all deployments together: a count, and the bytes of
//! compiled code they account for. Past either, the idle tasklets of the deployment used
//! longest ago go first.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use tasklet_runtime::config::Manifest;
use tasklet_runtime::Tasklet;
use tasklet_store::Digest;

/// Idle linked tasklets by deployment, least recently used evicted first.
pub(crate) struct WarmSet {
    max_tasklets: usize,
    max_bytes: u64,
    state: Mutex<State>,
}

/// A tasklet out of the set, with its weight for when it comes back.
pub(crate) struct Linked {
    pub(crate) tasklet: Tasklet,
    /// The size of its compiled form: what it is weighed by against the byte bound.
    pub(crate) weight: u64,
}

/// The set's [`WarmSet::forget`] count when a tasklet was taken out or loaded: one that comes
/// back after a deployment was forgotten might be of that deployment, and is not kept.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Generation(u64);

#[derive(Default)]
struct State {
    deployments: HashMap<Digest, Idle>,
    /// Counts takes and gives: a deployment's `last_used` is the clock's value then.
    clock: u64,
    generation: u64,
    tasklets: usize,
    bytes: u64,
}

struct Idle {
    tasklets: Vec<Tasklet>,
    weight: u64,
    last_used: u64,
}

impl WarmSet {
    pub(crate) fn new(max_tasklets: usize, max_bytes: u64) -> WarmSet {
        WarmSet {
            max_tasklets,
            max_bytes,
            state: Mutex::new(State::default()),
        }
    }

    /// The generation to give tasklets back with: read before taking one, or before reading
    /// what a tasklet is loaded from.
    pub(crate) fn generation(&self) -> Generation {
        Generation(self.lock().generation)
    }

    /// An idle tasklet of `deployment`, if one is warm.
    pub(crate) fn take(&self, deployment: &Digest) -> Option<Linked> {
        let mut state = self.lock();
        state.clock += 1;
        let clock = state.clock;
        let idle = state.deployments.get_mut(deployment)?;
        let tasklet = idle.tasklets.pop()?;
        let weight = idle.weight;
        idle.last_used = clock;
        if idle.tasklets.is_empty() {
            state.deployments.remove(deployment);
        }
        state.tasklets -= 1;
        state.bytes = state.bytes.saturating_sub(weight);
        Some(Linked { tasklet, weight })
    }

    /// The manifest of an idle tasklet of `deployment`, if one is warm: what the store holds for
    /// it, parsed when it was loaded, so that a node deciding whether to run it reads no file.
    /// The deployment is not counted as used.
    pub(crate) fn manifest(&self, deployment: &Digest) -> Option<Manifest> {
        let state = self.lock();
        let idle = state.deployments.get(deployment)?;
        idle.tasklets.last().map(|tasklet| tasklet.manifest.clone())
    }

    /// Keeps `linked` for the next run of `deployment`, then evicts what the bounds no longer
    /// allow (possibly `linked` itself, when it alone weighs more than the byte bound). Unless
    /// a deployment was forgotten since `generation`: then it is dropped.
    pub(crate) fn give(&self, deployment: Digest, linked: Linked, generation: Generation) {
        let evicted = {
            let mut state = self.lock();
            if state.generation != generation.0 {
                drop(state);
                drop(linked);
                return;
            }
            state.clock += 1;
            let clock = state.clock;
            let idle = state.deployments.entry(deployment).or_insert(Idle {
                tasklets: Vec::new(),
                weight: linked.weight,
                last_used: clock,
            });
            // A deployment's compiled form, hence its weight, never changes: the entry's
            // weight is the one its tasklets are counted by.
            let weight = idle.weight;
            idle.tasklets.push(linked.tasklet);
            idle.last_used = clock;
            state.tasklets += 1;
            state.bytes = state.bytes.saturating_add(weight);
            self.evict(&mut state)
        };
        // Dropped outside the lock: releasing compiled code unmaps memory.
        drop(evicted);
    }

    /// Drops every idle tasklet of `deployment`, and (see [`Generation`]) any that runs under
    /// way give back.
    pub(crate) fn forget(&self, deployment: &Digest) {
        let removed = {
            let mut state = self.lock();
            state.generation += 1;
            let removed = state.deployments.remove(deployment);
            if let Some(idle) = &removed {
                state.tasklets -= idle.tasklets.len();
                state.bytes = state
                    .bytes
                    .saturating_sub(idle.weight.saturating_mul(idle.tasklets.len() as u64));
            }
            removed
        };
        drop(removed);
    }

    /// How many idle tasklets the set holds.
    pub(crate) fn len(&self) -> usize {
        self.lock().tasklets
    }

    /// Removes idle tasklets, one at a time from the deployment used longest ago, until the
    /// set is within its bounds. Returns them, to be dropped once the lock is released.
    fn evict(&self, state: &mut State) -> Vec<Tasklet> {
        let mut evicted = Vec::new();
        while state.tasklets > self.max_tasklets || state.bytes > self.max_bytes {
            let Some((&oldest, _)) = state
                .deployments
                .iter()
                .min_by_key(|(_, idle)| idle.last_used)
            else {
                break;
            };
            let Some(idle) = state.deployments.get_mut(&oldest) else {
                break;
            };
            if let Some(tasklet) = idle.tasklets.pop() {
                evicted.push(tasklet);
                state.tasklets -= 1;
                state.bytes = state.bytes.saturating_sub(idle.weight);
            }
            if idle.tasklets.is_empty() {
                state.deployments.remove(&oldest);
            }
        }
        evicted
    }

    /// The lock guards counts and tasklets that are consistent between statements, so a
    /// thread that panicked while holding it left nothing half-done and it is taken anyway.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}
