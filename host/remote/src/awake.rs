//! Keeping the client runtime's thread awake while a call is out, while pipelined frames go out,
//! and for a while after, when calls come back to back.
//!
//! A call's frames reach quinn from the calling thread, and quinn's connection task, woken to
//! send them, runs on the client runtime's one thread; so does the read of the reply's datagram.
//! When that thread has parked (in epoll), each of the two is the wake-up of a parked thread (on
//! a virtual machine, a vCPU's too, 10–15 µs each on the H200 machines): two per round trip,
//! besides the node's, and one for every write of pipelined frames. While a call is out, or
//! pipelined frames are being written, a task on the runtime yields in a loop instead, so that
//! the runtime's thread polls its socket and takes the woken connection task without parking;
//! and it stays a while after (the linger), so that the next write finds the thread awake.
//!
//! Bounded like every hot wait (see `tasklet_spin`): a call whose reply has not come within the
//! ceiling (`TASKLET_CLIENT_AWAKE_US`, default [`DEFAULT_AWAKE_US`]; 0 turns this off) stops the
//! task, and so does a linger with nothing written or answered, whose budget goes back to its
//! ceiling (`TASKLET_CLIENT_LINGER_US`, default [`DEFAULT_LINGER_US`]; 0 turns it off) when the
//! next write came within it and halves, down to nothing, when it did not; a channel whose
//! calling thread has stopped polling for replies (its calls take long: `spin`) starts none; and
//! the process's spinning threads, every kind of hot wait together, are at most a quarter of the
//! cores (`tasklet_spin::SPINNERS`; none on a machine of fewer than 4).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};
use tasklet_spin::{Budget, Slot, Slots};
use tokio::runtime::Runtime;

/// The ceiling of the wait for a reply when `TASKLET_CLIENT_AWAKE_US` does not say: the same as
/// the calling thread's own (`spin`).
pub const DEFAULT_AWAKE_US: u64 = crate::spin::DEFAULT_SPIN_US;

/// The linger after a reply or a write when `TASKLET_CLIENT_LINGER_US` does not say: the next
/// call of a series, the next write of a batch, or the next batch after a millisecond or two
/// of the caller's own work.
pub const DEFAULT_LINGER_US: u64 = 2000;

fn ceilings() -> Limits {
    static CEILINGS: OnceLock<Limits> = OnceLock::new();
    *CEILINGS.get_or_init(|| Limits {
        out: tasklet_spin::ceiling_from_env("TASKLET_CLIENT_AWAKE_US", DEFAULT_AWAKE_US),
        linger: tasklet_spin::ceiling_from_env("TASKLET_CLIENT_LINGER_US", DEFAULT_LINGER_US),
    })
}

/// How long the task stays awake: while a call is out, and after the last write or reply.
#[derive(Debug, Clone, Copy)]
struct Limits {
    out: Duration,
    linger: Duration,
}

/// One channel's keeping awake.
pub(crate) struct Awake {
    state: Arc<State>,
    limits: Limits,
    /// The linger's budget.
    linger: Mutex<Budget>,
    /// Whether the next write carries a call ([`call_out`](Self::call_out)).
    call_next: AtomicBool,
    slots: &'static Slots,
    allowed: usize,
}

struct State {
    /// Whether a task keeps the runtime awake now.
    running: AtomicBool,
    /// Whether a call is out.
    out: AtomicBool,
    /// When frames last went out, or a reply came, in nanoseconds after `epoch`.
    changed: AtomicU64,
    epoch: Instant,
    /// How long the task lingers now, in nanoseconds (learnt by `sent`).
    linger: AtomicU64,
}

impl State {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Whether the task has nothing more to wait for: the call out has taken longer than its
    /// ceiling, or nothing has gone out or come back for the linger.
    fn done(&self, limits: Limits) -> bool {
        let since = self
            .now()
            .saturating_sub(self.changed.load(Ordering::SeqCst));
        let limit = match self.out.load(Ordering::SeqCst) {
            true => limits.out.as_nanos() as u64,
            false => self.linger.load(Ordering::SeqCst),
        };
        since >= limit
    }
}

impl Awake {
    pub fn new() -> Awake {
        Awake::within(
            ceilings(),
            &tasklet_spin::SPINNERS,
            tasklet_spin::spinners_allowed(),
        )
    }

    fn within(limits: Limits, slots: &'static Slots, allowed: usize) -> Awake {
        Awake {
            state: Arc::new(State {
                running: AtomicBool::new(false),
                out: AtomicBool::new(false),
                changed: AtomicU64::new(0),
                epoch: Instant::now(),
                linger: AtomicU64::new(limits.linger.as_nanos() as u64),
            }),
            limits,
            linger: Mutex::new(Budget::new(limits.linger, Duration::ZERO)),
            call_next: AtomicBool::new(false),
            slots,
            allowed,
        }
    }

    /// A call goes out: the write that carries it ([`sent`](Self::sent)) keeps the runtime's
    /// thread awake until its reply (and the linger after).
    pub fn call_out(&self) {
        self.call_next.store(true, Ordering::SeqCst);
    }

    /// Frames go out (a call's, or pipelined ones): keeps the runtime's thread awake until the
    /// reply to a call that is out, and for the linger after, starting a task for it unless one
    /// runs, no slot is free, or this is off.
    pub fn sent(&self, runtime: &Runtime) {
        if self.limits.out.is_zero() {
            return;
        }
        let state = &self.state;
        let now = state.now();
        // How soon this came after the last write or reply teaches the linger.
        let linger = {
            let mut budget = self.linger.lock().unwrap_or_else(PoisonError::into_inner);
            if !state.out.load(Ordering::SeqCst) {
                let gap = now.saturating_sub(state.changed.load(Ordering::SeqCst));
                budget.waited(Duration::from_nanos(gap));
            }
            budget.get()
        };
        state
            .linger
            .store(linger.as_nanos() as u64, Ordering::SeqCst);
        if self.call_next.swap(false, Ordering::SeqCst) {
            state.out.store(true, Ordering::SeqCst);
        } else if linger.is_zero() && !state.out.load(Ordering::SeqCst) {
            return;
        }
        state.changed.store(now, Ordering::SeqCst);
        if state.running.swap(true, Ordering::SeqCst) {
            return;
        }
        match self.slots.take(self.allowed) {
            Some(slot) => {
                runtime.spawn(keep_awake(Arc::clone(state), self.limits, slot));
            }
            None => {
                tracing::trace!(name: "awake-refused", target: crate::TIMELINE, "");
                state.running.store(false, Ordering::SeqCst)
            }
        }
    }

    /// The call's reply came (or the call ended otherwise): the task lingers for the next.
    pub fn call_back(&self) {
        let state = &self.state;
        if state.out.swap(false, Ordering::SeqCst) {
            state.changed.store(state.now(), Ordering::SeqCst);
        }
    }

    /// Whether a task keeps the runtime awake now.
    #[cfg(test)]
    fn running(&self) -> bool {
        self.state.running.load(Ordering::SeqCst)
    }
}

impl Drop for Awake {
    fn drop(&mut self) {
        // The task's next look ends it: nothing is out, and nothing will be.
        self.state.out.store(false, Ordering::SeqCst);
        self.state.linger.store(0, Ordering::SeqCst);
    }
}

/// Yields until the state says there is nothing to wait for, so that the runtime's thread
/// polls its sockets and its queue instead of parking.
async fn keep_awake(state: Arc<State>, limits: Limits, slot: Slot) {
    let _slot = slot;
    loop {
        tokio::task::yield_now().await;
        if state.done(limits) {
            state.running.store(false, Ordering::SeqCst);
            // A call that went out just now saw this task running and started none: this one
            // goes on for it, unless another has started meanwhile.
            if state.done(limits) || state.running.swap(true, Ordering::SeqCst) {
                tracing::trace!(name: "awake-ended", target: crate::TIMELINE, "");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests' own slots, apart from what other tests of the crate take.
    static TEST_SLOTS: Slots = Slots::new();

    fn runtime() -> Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    }

    /// Waits (at most 10 s, for a loaded machine) until no task keeps `awake`'s runtime awake.
    fn until_stopped(awake: &Awake) -> Duration {
        let start = Instant::now();
        while awake.running() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_micros(200));
        }
        assert!(!awake.running(), "the task stopped");
        start.elapsed()
    }

    #[test]
    fn a_call_keeps_the_runtime_awake_until_its_reply_and_the_linger_after() {
        let runtime = runtime();
        let limits = Limits {
            out: Duration::from_millis(40),
            linger: Duration::from_millis(20),
        };
        let awake = Awake::within(limits, &TEST_SLOTS, 1);
        awake.call_out();
        awake.sent(&runtime);
        assert!(awake.running());
        // A second call while one runs starts no second task (one slot: it would be refused).
        awake.call_out();
        awake.sent(&runtime);
        assert_eq!(TEST_SLOTS.taken(), 1);
        std::thread::sleep(Duration::from_millis(5));
        awake.call_back();
        // The linger: the task stops about a linger after the reply, not at once.
        assert!(awake.running(), "lingers after the reply");
        let stopped = until_stopped(&awake);
        assert!(stopped >= limits.linger / 2, "stopped after {stopped:?}");
        assert_eq!(TEST_SLOTS.taken(), 0, "its slot is given back");

        // Pipelined frames going out keep it awake for the linger.
        awake.sent(&runtime);
        assert!(awake.running());
        let stopped = until_stopped(&awake);
        assert!(
            stopped < limits.out,
            "a linger, not a call's wait: {stopped:?}"
        );

        // A call whose reply does not come stops it after its ceiling.
        let started = Instant::now();
        awake.call_out();
        awake.sent(&runtime);
        assert!(awake.running());
        until_stopped(&awake);
        assert!(started.elapsed() >= limits.out, "{:?}", started.elapsed());

        // A write long after the last linger: the linger halves. (Compared with the linger
        // right before, not the first one: on a loaded machine a write above may have come
        // late already.)
        awake.call_back();
        let before = awake.linger.lock().unwrap().get();
        std::thread::sleep(limits.linger * 2);
        awake.sent(&runtime);
        let linger = awake.linger.lock().unwrap().get();
        assert_eq!(linger, before / 2);
        until_stopped(&awake);
    }

    #[test]
    fn nothing_runs_when_off_or_without_a_slot() {
        let runtime = runtime();
        let off = Awake::within(
            Limits {
                out: Duration::ZERO,
                linger: Duration::from_millis(20),
            },
            &TEST_SLOTS,
            1,
        );
        off.call_out();
        off.sent(&runtime);
        assert!(!off.running());
        let no_slot = Awake::within(
            Limits {
                out: Duration::from_millis(20),
                linger: Duration::from_millis(20),
            },
            &TEST_SLOTS,
            0,
        );
        no_slot.call_out();
        no_slot.sent(&runtime);
        assert!(!no_slot.running());
    }
}
