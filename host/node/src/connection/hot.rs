//! Keeping one of the node's runtime threads awake while the GPU thread makes a call's reply,
//! and for a while after it, when a stream's calls come back to back.
//!
//! The reply goes from the connection's GPU thread to quinn's connection task (directly, or
//! through the stream's writer task: `outlet`), which runs on the runtime; if every runtime
//! thread has parked meanwhile (a launch + sync takes the GPU thread about as long as a thread
//! takes to park), one is woken for it, and that wake-up (on a virtual machine, a vCPU's wake-up
//! too) is part of the round trip. So is the wake-up of a parked runtime thread by the next
//! request's datagram. After handing the GPU thread a batch that holds a call, the stream has a
//! task yield until something was written to the stream, so that a runtime thread is awake when
//! the reply comes; while it waits, the stream's sends are handed to it (`outlet`): it writes the
//! reply itself, and quinn's connection task, which that wakes, runs next on the same thread,
//! where a wake from the GPU thread would go through the runtime's shared queue and a parked
//! thread's wake-up. After the reply the task lingers, still yielding (so the runtime's thread
//! polls the socket rather than parking), and the stream's next call, if it comes within the
//! linger, is awaited by the same task.
//!
//! Bounded four ways: the wait for a reply by a budget per stream that grows back to its ceiling
//! when the reply came within it and halves when it did not (down to a floor, so that it can
//! learn again); the linger by a budget that goes back to its ceiling when the next call came
//! within it and halves (down to nothing) when it did not; by their ceilings
//! (`TASKLET_NODE_HOT_US`, default [`DEFAULT_HOT_US`], and `TASKLET_NODE_LINGER_US`, default
//! [`DEFAULT_LINGER_US`]; 0 turns each off); and by the count of such tasks in this process, at
//! most a quarter of the cores (none on a machine of fewer than 4).

use crate::job::ReplyTo;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};
use tasklet_spin::{Budget, Slot, Slots};

/// The ceiling of the wait for a reply when `TASKLET_NODE_HOT_US` does not say: long enough for
/// the sync after a thousand pipelined launches (about a millisecond of GPU work).
pub const DEFAULT_HOT_US: u64 = 1000;

/// The ceiling of the linger after a reply when `TASKLET_NODE_LINGER_US` does not say.
pub const DEFAULT_LINGER_US: u64 = 200;

/// The least the wait for a reply shrinks to.
const FLOOR: Duration = Duration::from_micros(10);

/// `awaited` when no call is awaited.
const NONE: u64 = u64::MAX;

/// Tasks keeping a runtime thread awake now, in this process.
static HOT: Slots = Slots::new();

fn ceilings() -> (Duration, Duration) {
    static CEILINGS: OnceLock<(Duration, Duration)> = OnceLock::new();
    *CEILINGS.get_or_init(|| {
        (
            tasklet_spin::ceiling_from_env("TASKLET_NODE_HOT_US", DEFAULT_HOT_US),
            tasklet_spin::ceiling_from_env("TASKLET_NODE_LINGER_US", DEFAULT_LINGER_US),
        )
    })
}

/// A stream's side of it: what its writer has written, and the task's state.
pub(super) struct Hot {
    /// Counted up for every piece put on the stream (by the outlet, either path).
    pub written: Arc<AtomicU64>,
    state: Arc<State>,
}

/// What the stream and its task share.
struct State {
    /// Whether a task keeps a runtime thread awake for this stream now.
    running: AtomicBool,
    /// `written` when the awaited call was handed over: its reply is written once `written`
    /// moves past it. [`NONE`] when no call is awaited.
    awaited: AtomicU64,
    /// When the awaited call was handed over, or the last reply came: nanoseconds after `epoch`.
    since: AtomicU64,
    epoch: Instant,
    /// The two budgets, learnt by the task and by the stream.
    budgets: Mutex<Budgets>,
}

#[derive(Clone, Copy)]
struct Budgets {
    /// How long a reply is waited for.
    reply: Budget,
    /// How long the task lingers after a reply.
    linger: Budget,
}

impl State {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn elapsed(&self) -> Duration {
        Duration::from_nanos(
            self.now()
                .saturating_sub(self.since.load(Ordering::Acquire)),
        )
    }

    fn budgets(&self) -> std::sync::MutexGuard<'_, Budgets> {
        self.budgets.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Hot {
    pub fn new() -> Hot {
        let (reply, linger) = ceilings();
        Hot::within(reply, linger)
    }

    fn within(reply: Duration, linger: Duration) -> Hot {
        Hot {
            written: Arc::new(AtomicU64::new(0)),
            state: Arc::new(State {
                running: AtomicBool::new(false),
                awaited: AtomicU64::new(NONE),
                since: AtomicU64::new(0),
                epoch: Instant::now(),
                budgets: Mutex::new(Budgets {
                    reply: Budget::new(reply, FLOOR.min(reply)),
                    linger: Budget::new(linger, Duration::ZERO),
                }),
            }),
        }
    }

    /// What the writer has written so far: taken before a batch with a call is handed over.
    pub fn mark(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    /// Keeps a runtime thread awake until something is written past `mark` (and the linger
    /// after), if the budget, the ceiling and a free slot allow; the task lingering after the
    /// last reply takes this call on. Meanwhile the stream's sends are handed to that thread to
    /// write (`outlet`).
    pub fn keep_awake(&self, mark: u64, reply: &ReplyTo) {
        self.keep_awake_within(
            Some(mark),
            Some(reply),
            &HOT,
            tasklet_spin::spinners_allowed(),
        );
    }

    /// Pipelined requests (no call) were handed over: keeps a runtime thread awake for the
    /// linger after, so that the next of a series of frames is read without a wake-up.
    pub fn linger(&self, reply: &ReplyTo) {
        self.keep_awake_within(None, Some(reply), &HOT, tasklet_spin::spinners_allowed());
    }

    fn keep_awake_within(
        &self,
        mark: Option<u64>,
        reply: Option<&ReplyTo>,
        slots: &'static Slots,
        allowed: usize,
    ) {
        let state = &self.state;
        let awaiting = state.awaited.load(Ordering::Acquire) != NONE;
        {
            let mut budgets = state.budgets();
            // How soon this came after the last reply teaches the linger.
            if !awaiting {
                let gap = state.elapsed();
                budgets.linger.waited(gap);
            }
            let budget = match mark {
                Some(_) => budgets.reply.get(),
                None => budgets.linger.get(),
            };
            if budget.is_zero() {
                return;
            }
        }
        match mark {
            Some(mark) => {
                state.since.store(state.now(), Ordering::Release);
                state.awaited.store(mark, Ordering::SeqCst);
            }
            // A call awaited goes on being awaited; else the linger starts again from now.
            None if !awaiting => state.since.store(state.now(), Ordering::Release),
            None => {}
        }
        if state.running.swap(true, Ordering::SeqCst) {
            // The running task takes it on.
            return;
        }
        let Some(slot) = slots.take(allowed) else {
            if mark.is_some() {
                state.awaited.store(NONE, Ordering::SeqCst);
            }
            state.running.store(false, Ordering::SeqCst);
            return;
        };
        // Counted as waiting from now, before the task first runs, so that a reply that comes
        // first is handed to it.
        let wait = reply.map(ReplyTo::hot_wait);
        tokio::spawn(run(
            Arc::clone(&self.written),
            Arc::clone(state),
            wait,
            slot,
        ));
    }
}

/// The task: yields while a reply is awaited or it lingers, writing what is handed to it.
async fn run(
    written: Arc<AtomicU64>,
    state: Arc<State>,
    wait: Option<crate::outlet::HotWait>,
    slot: Slot,
) {
    let _slot = slot;
    loop {
        if let Some(wait) = wait.as_ref().filter(|wait| wait.ready()) {
            wait.write().await;
        }
        if !still_needed(&written, &state) {
            state.running.store(false, Ordering::SeqCst);
            // A call handed over just now saw this task running and started none: this one
            // goes on for it, unless another has started meanwhile.
            if state.awaited.load(Ordering::SeqCst) == NONE
                || state.running.swap(true, Ordering::SeqCst)
            {
                return;
            }
            continue;
        }
        tokio::task::yield_now().await;
    }
}

/// Whether the task goes on: a reply is awaited and its budget lasts, or it lingers.
fn still_needed(written: &AtomicU64, state: &State) -> bool {
    let awaited = state.awaited.load(Ordering::SeqCst);
    let mut budgets = state.budgets();
    if awaited == NONE {
        return state.elapsed() < budgets.linger.get();
    }
    let waited = state.elapsed();
    let replied = written.load(Ordering::Acquire) != awaited;
    if !replied && waited < budgets.reply.get() {
        return true;
    }
    // Replied, or out of budget: either way the wait is over, and the budget learns which.
    if state
        .awaited
        .compare_exchange(awaited, NONE, Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        // Another call was handed over meanwhile: await it.
        return true;
    }
    state.since.store(state.now(), Ordering::Release);
    budgets
        .reply
        .waited(if replied { waited } else { Duration::MAX });
    // Out of budget, the task does not linger: a long call is no back-to-back series.
    replied && !budgets.linger.get().is_zero()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests' own slots, apart from the node's.
    static TEST_SLOTS: Slots = Slots::new();

    fn budgets(hot: &Hot) -> Budgets {
        *hot.state.budgets()
    }

    /// Waits (at most 10 s, for a loaded machine) until the task has given its slot back.
    fn until_done(hot: &Hot) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while (TEST_SLOTS.taken() != 0 || hot.state.running.load(Ordering::SeqCst))
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(TEST_SLOTS.taken(), 0, "the slot is given back");
    }

    #[test]
    fn it_stops_at_the_reply_or_the_budget_lingers_and_learns_from_which() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let _in = runtime.enter();
        let max = Duration::from_millis(2);
        let linger = Duration::from_millis(20);
        let hot = Hot::within(max, linger);

        // No reply: the task gives up after its budget and halves it, and does not linger.
        let started = Instant::now();
        hot.keep_awake_within(Some(hot.mark()), None, &TEST_SLOTS, 1);
        until_done(&hot);
        assert_eq!(budgets(&hot).reply.get(), max / 2);
        assert!(started.elapsed() < linger, "{:?}", started.elapsed());

        // The writer has written past the mark (written before the task starts, so that a
        // loaded machine cannot run the task's whole budget out first): the whole ceiling again,
        // and the task lingers after it.
        let mark = hot.mark();
        hot.written.fetch_add(1, Ordering::Release);
        let started = Instant::now();
        hot.keep_awake_within(Some(mark), None, &TEST_SLOTS, 1);
        std::thread::sleep(linger / 4);
        assert!(hot.state.running.load(Ordering::SeqCst), "lingers");
        // The next call within the linger is taken on by the same task.
        let mark = hot.mark();
        hot.keep_awake_within(Some(mark), None, &TEST_SLOTS, 1);
        assert_eq!(TEST_SLOTS.taken(), 1, "one task for the stream");
        hot.written.fetch_add(1, Ordering::Release);
        until_done(&hot);
        assert!(started.elapsed() >= linger, "{:?}", started.elapsed());
        assert_eq!(budgets(&hot).reply.get(), max);
        assert_eq!(budgets(&hot).linger.get(), linger);

        // A call long after the linger: the linger halves.
        std::thread::sleep(linger * 2);
        let mark = hot.mark();
        hot.written.fetch_add(1, Ordering::Release);
        hot.keep_awake_within(Some(mark), None, &TEST_SLOTS, 1);
        until_done(&hot);
        assert_eq!(budgets(&hot).linger.get(), linger / 2);

        // Pipelined requests: the task lingers, awaiting nothing.
        let started = Instant::now();
        hot.keep_awake_within(None, None, &TEST_SLOTS, 1);
        assert!(hot.state.running.load(Ordering::SeqCst));
        until_done(&hot);
        assert!(started.elapsed() >= linger / 2, "{:?}", started.elapsed());
        assert_eq!(budgets(&hot).reply.get(), max, "no reply was awaited");

        // No slot: nothing runs.
        hot.keep_awake_within(Some(hot.mark()), None, &TEST_SLOTS, 0);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(TEST_SLOTS.taken(), 0);
        assert!(!hot.state.running.load(Ordering::SeqCst));
    }
}
