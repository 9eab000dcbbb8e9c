//! Keeping one of the node's runtime threads awake while the GPU thread makes a call's reply,
//! and for a while after it, when a stream's requests come back to back.
//!
//! The reply goes from the connection's GPU thread to quinn's connection task (directly, or
//! through the stream's writer task: `outlet`), which runs on the runtime; if every runtime
//! thread has parked meanwhile (a launch + sync takes the GPU thread about as long as a thread
//! takes to park), one is woken for it, and that wake-up (on a virtual machine, a vCPU's wake-up
//! too: 10–15 µs on the H200 machines, far more after a millisecond's idle) is part of the round
//! trip. So is the wake-up of a parked runtime thread by the next request's datagram. After
//! handing the GPU thread a batch that holds a call, the stream has a task yield until something
//! was written to the stream, so that a runtime thread is awake when the reply comes; while it
//! waits, the stream's sends are handed to it (`outlet`): it writes the reply itself, and quinn's
//! connection task, which that wakes, runs next on the same thread, where a wake from the GPU
//! thread would go through the runtime's shared queue and a parked thread's wake-up. After the
//! reply, and after a batch of pipelined requests, the task lingers, still yielding (so the
//! runtime's thread polls the socket rather than parking), and the stream's next call, if it
//! comes within the linger, is awaited by the same task.
//!
//! Bounded five ways: the wait for a reply by a budget that goes back to its ceiling when the
//! reply came within it and halves when it did not (down to a floor; it learns from when the
//! reply was written, also after the task gave up on it), and by the ceiling counted from the
//! first call awaited, however many follow it; the linger by a budget that goes back to its
//! ceiling when the next request came within it and halves (down to nothing) when it did not;
//! the ceilings (`TASKLET_NODE_HOT_US`, default [`DEFAULT_HOT_US`], 0 turns all of this off;
//! `TASKLET_NODE_LINGER_US`, default [`DEFAULT_LINGER_US`], 0 turns the linger off); one such
//! task per connection, whatever its streams; and the process's spinning threads, every kind of
//! hot wait together, at most a quarter of the cores (`tasklet_spin::SPINNERS`; none on a machine
//! of fewer than 4).

use crate::job::ReplyTo;
use crate::outlet::{HotWait, Writes};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;
use tasklet_spin::{Budget, Slot, Slots};

/// The ceiling of the wait for a reply when `TASKLET_NODE_HOT_US` does not say: the client's own
/// wait for it (`TASKLET_CLIENT_SPIN_US`), long enough for the sync after a thousand pipelined
/// launches that reached the node late (about a millisecond of GPU work after them).
pub const DEFAULT_HOT_US: u64 = 2000;

/// The ceiling of the linger when `TASKLET_NODE_LINGER_US` does not say: a client's next call
/// after a round trip, or its next batch after a millisecond or two of its own work (see
/// `dispatch::poll`).
pub const DEFAULT_LINGER_US: u64 = 2000;

/// The least the wait for a reply shrinks to.
const FLOOR: Duration = Duration::from_micros(10);

/// `awaited` when no call is awaited.
const NONE: u64 = u64::MAX;

fn ceilings() -> (Duration, Duration) {
    static CEILINGS: OnceLock<(Duration, Duration)> = OnceLock::new();
    *CEILINGS.get_or_init(|| {
        (
            tasklet_spin::ceiling_from_env("TASKLET_NODE_HOT_US", DEFAULT_HOT_US),
            tasklet_spin::ceiling_from_env("TASKLET_NODE_LINGER_US", DEFAULT_LINGER_US),
        )
    })
}

/// A connection's share: whether one of its streams has a task now (one at a time).
pub(super) type ConnectionHot = Arc<AtomicBool>;

/// A stream's side of it: what its writer has written, and the task's state.
pub(super) struct Hot {
    /// Every piece put on the stream is counted here (by the outlet, either path).
    pub written: Arc<Writes>,
    state: Arc<State>,
    connection: ConnectionHot,
}

/// What the stream and its task share.
struct State {
    /// Whether a task keeps a runtime thread awake for this stream now.
    running: AtomicBool,
    /// The writes' count when the first call now awaited was handed over: its reply is written
    /// once the count moves past it. [`NONE`] when no call is awaited.
    awaited: AtomicU64,
    /// When that call was handed over, or the last request came with none awaited (the
    /// linger's start), in the writes' clock.
    since: AtomicU64,
    /// Counted up by every hand-over, before it looks whether a task runs: a task about to stop
    /// sees from it that one came meanwhile.
    requests: AtomicU64,
    /// A call the task gave up on (`awaited`, `since`): the next hand-over learns from when its
    /// reply was written.
    gave_up: Mutex<Option<(u64, u64)>>,
    budgets: Mutex<Budgets>,
}

#[derive(Clone, Copy)]
struct Budgets {
    /// How long a reply is waited for.
    reply: Budget,
    /// How long the task lingers.
    linger: Budget,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Hot {
    pub fn new(connection: ConnectionHot) -> Hot {
        let (reply, linger) = ceilings();
        Hot::within(reply, linger, connection)
    }

    fn within(reply: Duration, linger: Duration, connection: ConnectionHot) -> Hot {
        Hot {
            written: Arc::new(Writes::new()),
            state: Arc::new(State {
                running: AtomicBool::new(false),
                awaited: AtomicU64::new(NONE),
                since: AtomicU64::new(0),
                requests: AtomicU64::new(0),
                gave_up: Mutex::new(None),
                budgets: Mutex::new(Budgets {
                    reply: Budget::new(reply, FLOOR.min(reply)),
                    linger: Budget::new(linger, Duration::ZERO),
                }),
            }),
            connection,
        }
    }

    /// What the writer has written so far: taken before a batch with a call is handed over.
    pub fn mark(&self) -> u64 {
        self.written.count()
    }

    /// Keeps a runtime thread awake until something is written past `mark` (and the linger
    /// after), if the budget, the ceiling and a free slot allow; the task lingering after the
    /// last reply takes this call on. Meanwhile the stream's sends are handed to that thread to
    /// write (`outlet`).
    pub fn keep_awake(&self, mark: u64, reply: &ReplyTo) {
        self.keep_awake_within(
            Some(mark),
            Some(reply),
            &tasklet_spin::SPINNERS,
            tasklet_spin::spinners_allowed(),
        );
    }

    /// Pipelined requests (no call) were handed over: keeps a runtime thread awake for the
    /// linger after, so that the next of a series of frames is read without a wake-up.
    pub fn linger(&self, reply: &ReplyTo) {
        self.keep_awake_within(
            None,
            Some(reply),
            &tasklet_spin::SPINNERS,
            tasklet_spin::spinners_allowed(),
        );
    }

    fn keep_awake_within(
        &self,
        mark: Option<u64>,
        reply: Option<&ReplyTo>,
        slots: &'static Slots,
        allowed: usize,
    ) {
        let state = &self.state;
        let now = self.written.now();
        let awaiting = state.awaited.load(Ordering::SeqCst) != NONE;
        {
            let mut budgets = lock(&state.budgets);
            if budgets.reply.max().is_zero() {
                return;
            }
            // A reply given up on: learn from when it was written, if it has been.
            if let Some((awaited, since)) = lock(&state.gave_up).take() {
                if self.written.count() != awaited {
                    let took = self.written.last().saturating_sub(since);
                    budgets.reply.waited(Duration::from_nanos(took));
                } else {
                    budgets.reply.waited(Duration::MAX);
                }
            }
            // How soon this came after the last reply or request teaches the linger.
            if !awaiting {
                let gap = now.saturating_sub(state.since.load(Ordering::SeqCst));
                budgets.linger.waited(Duration::from_nanos(gap));
            }
            let budget = match mark {
                Some(_) => budgets.reply.get(),
                None => budgets.linger.get(),
            };
            if budget.is_zero() {
                return;
            }
        }
        // A call already awaited stays the one waited for: the wait is bounded from the first.
        if !awaiting {
            state.since.store(now, Ordering::SeqCst);
            if let Some(mark) = mark {
                state.awaited.store(mark, Ordering::SeqCst);
            }
        }
        state.requests.fetch_add(1, Ordering::SeqCst);
        if state.running.swap(true, Ordering::SeqCst) {
            // The running task takes it on.
            return;
        }
        let taken = self
            .connection
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        let slot = taken.then(|| slots.take(allowed)).flatten();
        let Some(slot) = slot else {
            tracing::trace!(name: "hot-refused", target: crate::TIMELINE, "");
            if taken {
                self.connection.store(false, Ordering::SeqCst);
            }
            if mark.is_some() && !awaiting {
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
            Arc::clone(&self.connection),
            wait,
            slot,
        ));
    }
}

/// The task: yields while a reply is awaited or it lingers, writing what is handed to it.
async fn run(
    written: Arc<Writes>,
    state: Arc<State>,
    connection: ConnectionHot,
    wait: Option<HotWait>,
    slot: Slot,
) {
    let _slot = slot;
    loop {
        if let Some(wait) = wait.as_ref().filter(|wait| wait.ready()) {
            wait.write();
        }
        let requests = state.requests.load(Ordering::SeqCst);
        if !still_needed(&written, &state) {
            state.running.store(false, Ordering::SeqCst);
            // A request handed over since this looked saw this task running and started none:
            // this one goes on for it, unless another has started meanwhile.
            if state.requests.load(Ordering::SeqCst) == requests
                || state.running.swap(true, Ordering::SeqCst)
            {
                tracing::trace!(name: "hot-ended", target: crate::TIMELINE, "");
                break;
            }
            continue;
        }
        tokio::task::yield_now().await;
    }
    // The stream's handed sends go to its writer from here (HotWait's drop), before another
    // stream of the connection may start a task.
    drop(wait);
    connection.store(false, Ordering::SeqCst);
}

/// Whether the linger since the last reply or request lasts.
fn lingers(written: &Writes, state: &State) -> bool {
    let since = written
        .now()
        .saturating_sub(state.since.load(Ordering::SeqCst));
    Duration::from_nanos(since) < lock(&state.budgets).linger.get()
}

/// Whether the task goes on: a reply is awaited and its budget lasts, or it lingers.
fn still_needed(written: &Writes, state: &State) -> bool {
    let awaited = state.awaited.load(Ordering::SeqCst);
    if awaited == NONE {
        return lingers(written, state);
    }
    let since = state.since.load(Ordering::SeqCst);
    let replied = written.count() != awaited;
    let waited = Duration::from_nanos(written.now().saturating_sub(since));
    if !replied && waited < lock(&state.budgets).reply.get() {
        return true;
    }
    // Replied, or out of budget: either way this wait is over.
    if state
        .awaited
        .compare_exchange(awaited, NONE, Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        return true;
    }
    if replied {
        let took = written.last().saturating_sub(since);
        lock(&state.budgets)
            .reply
            .waited(Duration::from_nanos(took));
        // The linger counts from the reply.
        state.since.store(written.last(), Ordering::SeqCst);
        lingers(written, state)
    } else {
        // The next hand-over learns from when the reply came; a call that takes this long is
        // no back-to-back series, so the task does not linger.
        *lock(&state.gave_up) = Some((awaited, since));
        state.since.store(written.now(), Ordering::SeqCst);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// The tests' own slots, apart from the node's.
    static TEST_SLOTS: Slots = Slots::new();

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    fn budgets(hot: &Hot) -> Budgets {
        *lock(&hot.state.budgets)
    }

    fn running(hot: &Hot) -> bool {
        hot.state.running.load(Ordering::SeqCst)
    }

    /// Waits (at most 10 s, for a loaded machine) until the task has given its slot back.
    fn until_done(hot: &Hot) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while (TEST_SLOTS.taken() != 0 || running(hot) || hot.connection.load(Ordering::SeqCst))
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(TEST_SLOTS.taken(), 0, "the slot is given back");
        assert!(
            !hot.connection.load(Ordering::SeqCst),
            "and the connection's"
        );
    }

    #[test]
    fn it_stops_at_the_reply_or_the_budget_lingers_and_learns_from_which() {
        let runtime = runtime();
        let _in = runtime.enter();
        let max = Duration::from_millis(2);
        let linger = Duration::from_millis(20);
        let connection = ConnectionHot::default();
        let hot = Hot::within(max, linger, Arc::clone(&connection));
        let call = |hot: &Hot| hot.keep_awake_within(Some(hot.mark()), None, &TEST_SLOTS, 1);

        // No reply: the task gives up after its budget and does not linger; the reply, written
        // long after, halves the budget at the next call.
        let started = Instant::now();
        call(&hot);
        until_done(&hot);
        assert!(started.elapsed() < linger, "{:?}", started.elapsed());
        std::thread::sleep(max * 2);
        hot.written.note_for_test();
        // (No slot, so that no task runs and learns before the budget is read.)
        hot.keep_awake_within(Some(hot.mark()), None, &TEST_SLOTS, 0);
        assert_eq!(budgets(&hot).reply.get(), max / 2);
        // A call whose reply came at once (written before the call starts its task, so the
        // task sees it at once): the whole ceiling again, and the task lingers.
        let mark = hot.mark();
        hot.written.note_for_test();
        hot.keep_awake_within(Some(mark), None, &TEST_SLOTS, 1);
        std::thread::sleep(linger / 4);
        assert!(running(&hot), "lingers");
        assert_eq!(budgets(&hot).reply.get(), max);

        // The next call within the linger is taken on by the same task.
        call(&hot);
        assert_eq!(TEST_SLOTS.taken(), 1, "one task for the stream");
        hot.written.note_for_test();
        let started = Instant::now();
        until_done(&hot);
        assert!(started.elapsed() >= linger / 2, "{:?}", started.elapsed());
        assert_eq!(budgets(&hot).linger.get(), linger);

        // A request long after the linger: the linger halves.
        std::thread::sleep(linger * 2);
        let mark = hot.mark();
        hot.written.note_for_test();
        hot.keep_awake_within(Some(mark), None, &TEST_SLOTS, 1);
        until_done(&hot);
        assert_eq!(budgets(&hot).linger.get(), linger / 2);

        // Pipelined requests: the task lingers, awaiting nothing.
        let started = Instant::now();
        hot.keep_awake_within(None, None, &TEST_SLOTS, 1);
        assert!(running(&hot));
        until_done(&hot);
        assert!(started.elapsed() >= linger / 2, "{:?}", started.elapsed());

        // Another stream of the same connection starts none while this one's task runs.
        let other = Hot::within(max, linger, Arc::clone(&connection));
        hot.keep_awake_within(None, None, &TEST_SLOTS, 2);
        other.keep_awake_within(None, None, &TEST_SLOTS, 2);
        assert!(running(&hot) && !running(&other));
        assert_eq!(TEST_SLOTS.taken(), 1);
        until_done(&hot);

        // No slot: nothing runs.
        call(&hot);
        hot.keep_awake_within(Some(hot.mark()), None, &TEST_SLOTS, 0);
        until_done(&hot);
        hot.keep_awake_within(Some(hot.mark()), None, &TEST_SLOTS, 0);
        assert!(!running(&hot));
    }

    #[test]
    fn a_stream_of_calls_cannot_stretch_the_wait_past_the_ceiling() {
        let runtime = runtime();
        let _in = runtime.enter();
        static SLOTS: Slots = Slots::new();
        let max = Duration::from_millis(20);
        let hot = Hot::within(max, Duration::ZERO, ConnectionHot::default());
        let started = Instant::now();
        // A call whose reply never comes, and more calls behind it every few milliseconds.
        while running(&hot) || started.elapsed() < Duration::from_millis(5) {
            hot.keep_awake_within(Some(hot.mark()), None, &SLOTS, 1);
            std::thread::sleep(Duration::from_millis(3));
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the task never stopped"
            );
        }
        // The first call's wait was the bound, not the last's.
        let ran = started.elapsed();
        assert!(ran < max * 3, "ran {ran:?} against a ceiling of {max:?}");
    }
}
