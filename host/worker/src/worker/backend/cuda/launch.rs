//! Asynchronous launches with deadlines: the queue of launched-but-unfinished kernels, the
//! deadline-aware wait for it, and the watchdog thread that ends the process when a kernel runs
//! past its deadline with nobody waiting.
//!
//! Launches are tracked in *groups*: consecutive launches share one completion event, recorded
//! on the worker's stream when the group closes — when the worker is about to idle
//! ([`Timeline::flush`]), before any wait, or when the group reaches [`GROUP_MAX`] launches — so a
//! burst of launches costs one `cuEventRecord` per [`GROUP_MAX`] instead of one each. The queue
//! holds closed groups in launch order. A group's deadline clock starts when it could start: its
//! first launch, or the moment the group before it was *seen* finished, whichever is later (seen:
//! by a wait or by the watchdog, which looks every [`WATCHDOG_PERIOD`]); its deadline is the sum
//! of its members' deadlines plus the time from its first launch to its closing (which covers any
//! time between their launches; one clock read per group, not per launch). So a legitimate group always
//! gets at least what its kernels were granted, and a runaway kernel inside a burst is caught
//! within its group's summed deadline — the deadlines of at most [`GROUP_MAX`] kernels — plus one
//! watchdog period of the group becoming the head; the error names the group's kernels, since
//! the event cannot tell which of them overran.
//!
//! The open group has no event yet, so neither a wait nor the watchdog can see it: every wait
//! closes it first, and the serving thread closes it before it idles, so it is never left open
//! while nobody is looking.
//!
//! GPU time is the time the device holds the lease's work: a *segment*, a run of launches the
//! worker makes without idling or waiting in between, is charged from its first launch reaching
//! the driver (so neither the host's work on a launch nor the call itself is charged) to its
//! last kernel's end, less any part of that already charged to the segment before it (a segment
//! launched while the device is still busy with the one before starts being charged when that
//! one ends). The time the device sits idle between segments (the worker waiting for the host)
//! is charged to no one. Begins and ends are read on the host's monotonic clock; how a segment's
//! end is read depends on who sees it:
//!
//! - *Seen*: a sync whose completion word the worker saw within its spin, confirmed by the last
//!   group's completion event reading done (the word alone is only a hint: a kernel of the lease
//!   could forge it to be charged less). The end is the clock then, microseconds after the device
//!   finished. No driver call is made for the time but that one query: a launch + sync pays
//!   nothing else for its accounting.
//! - *Timed on the device*, every other end (the worker idles, a wait, a long run, a sync whose
//!   kernels outlast the spin): a timed *clock* event on a stream of its own that never waits,
//!   so the device stamps it as it is recorded, and behind it the clock read just before; then
//!   an end event on the *timing stream*, which waits (`cuStreamWaitEvent`) for the segment's
//!   last completion event. The end's time is the clock read plus the device's time between the
//!   two events. A timed event costs the device about 1.5 µs where a stream reaches it, so the
//!   worker's own stream carries only untimed events (the groups' completion events) and the
//!   sync's completion word.
//!
//! A segment also ends once it holds [`SEGMENT_GROUPS`] groups or has been open for
//! [`SEGMENT_SPAN`]: a tenant that keeps the worker busy without ever waiting is still charged
//! as its kernels finish, not at its next wait. Ended segments are counted in order (each
//! starts being charged no earlier than the one before ended): when an answer is written
//! ([`Timeline::gpu_time`], never while the host waits on a sync) and by the watchdog, every
//! [`FOLD_PERIOD`] while there are some. A segment whose end cannot be timed on the device
//! because the context faulted (its events report the fault, or the driver refuses to record
//! them) ends where the worker sees that (the count, within about a [`FOLD_PERIOD`] of the
//! fault, or the end itself): its kernels held the device until then at the latest, and a
//! kernel that faults at its end must not have its time free. A segment in which no launch
//! reached the device goes uncounted.
//!
//! A host that gives the worker up while its work runs (its lease ended) gets no report of it:
//! the channel carries from when the launched-but-unfinished work is in no GPU time reported yet
//! ([`Queue::publish_uncharged`]), and the lease is charged from there.
//!
//! A wait (`sync`, and every op that must see the kernels finished first) polls the head event:
//! tightly for [`SPIN`], then with sleeps growing to [`MAX_NAP`]. Past the head's deadline it
//! fails with `DeadlineExceeded` — the kernel is still running, and only ending the process stops
//! it: the host kills the worker on that error. If nobody waits, the watchdog ends
//! the process itself [`WATCHDOG_GRACE`] after the deadline, with exit status
//! [`crate::contract::EXIT_DEADLINE`], which the host reports as `DeadlineExceeded`.

use crate::contract::channel::worker_end::{
    monotonic_nanos, publish_counted_gpu_time, publish_uncharged_since,
};
use std::collections::VecDeque;
use std::ffi::{c_uint, c_void};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Acquire, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::driver::*;
use super::errors;
use super::graphs::Chains;
use crate::contract::{quote, ErrorKind};
use crate::worker::backend::BackendError;

/// Most launches in flight; a launch past it first waits for the oldest (deadline-aware), so
/// `cuLaunchKernel` never blocks on a full driver queue behind a runaway kernel.
pub const MAX_PENDING: usize = 512;
/// How often the watchdog looks at the queue.
pub const WATCHDOG_PERIOD: Duration = Duration::from_millis(20);
/// How long past a deadline the watchdog waits for a `sync` to report it before ending the process.
pub const WATCHDOG_GRACE: Duration = Duration::from_millis(250);
/// Tight polling at the start of a wait (a short kernel finishes within it).
const SPIN: Duration = Duration::from_micros(50);
const MAX_NAP: Duration = Duration::from_millis(1);

/// The groups' completion events: no timestamp (see the module's docs).
const CU_EVENT_DISABLE_TIMING: c_uint = 2;
/// The clock and timing streams' events (flags 0: timed, not blocking sync).
const CU_EVENT_TIMED: c_uint = 0;
/// How long [`Timeline::gpu_time`] waits for the end of a segment whose kernels are known
/// finished (it follows them by microseconds).
const FOLD_WAIT: Duration = Duration::from_millis(2);
/// A segment ends at the close of its group number [`SEGMENT_GROUPS`] (512 launches at most), or
/// of the first group closed [`SEGMENT_SPAN`] after it began: two driver calls on the timing
/// stream per segment, and a busy worker's time is counted within about that span of its
/// kernels finishing.
pub const SEGMENT_GROUPS: u64 = 64;
pub const SEGMENT_SPAN: Duration = Duration::from_millis(1);
/// How often the watchdog counts ended segments while the worker launches (else it looks every
/// [`WATCHDOG_PERIOD`]).
const FOLD_PERIOD: Duration = Duration::from_millis(1);

/// Most launches that share one completion event (see the module docs).
pub const GROUP_MAX: usize = 8;

/// Most kernel names a group's message lists.
const NAMES_SHOWN: usize = 3;

/// The launches of one group, in launch order: their kernels (names shared with their modules:
/// no allocation per launch) and their ordinals in the lease ([`ReadyLaunch::ordinal`]).
#[derive(Default)]
struct Members {
    names: [Option<Arc<str>>; GROUP_MAX],
    ordinals: [u64; GROUP_MAX],
    n: usize,
    /// What a group of one graph replay says it is, in place of its launches
    /// ([`Timeline::launch_graph`]).
    label: Option<Arc<str>>,
}

impl Members {
    fn push(&mut self, kernel: Arc<str>, ordinal: u64) {
        if let (Some(slot), Some(at)) = (self.names.get_mut(self.n), self.ordinals.get_mut(self.n))
        {
            *slot = Some(kernel);
            *at = ordinal;
            self.n += 1;
        }
    }

    /// Where the group stands among the lease's launches: its first launch's ordinal, or for a
    /// graph replay's group the ordinal the next launch after it gets. A wait for the launches
    /// through `n` ([`Timeline::drain_through`]) needs every group at or below `n` finished.
    fn position(&self) -> u64 {
        self.ordinals[0]
    }

    /// For messages: "launch #4 of kernel `a`", or "one of launches #4 to #6 (kernels `a`, `b`;
    /// 3 launched together)". Names are quoted in part ([`quote::name`]), and at most
    /// [`NAMES_SHOWN`] of them: a group's message repeats no more of a tenant's names than that.
    fn describe(&self) -> String {
        if let Some(label) = &self.label {
            return label.to_string();
        }
        let mut names: Vec<&str> = Vec::with_capacity(self.n);
        for name in self.names.iter().flatten() {
            if !names.contains(&&**name) {
                names.push(name);
            }
        }
        let ordinals = &self.ordinals[..self.n.min(GROUP_MAX)];
        match (ordinals, names.as_slice()) {
            ([], _) => "a kernel".into(),
            ([one], [name]) => format!("launch #{one} of kernel {}", quote::name(name)),
            ([first, .., last], names) => {
                let mut listed = String::new();
                for (i, name) in names.iter().take(NAMES_SHOWN).enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    let _ = write!(listed, "{sep}{}", quote::name(name));
                }
                if names.len() > NAMES_SHOWN {
                    let _ = write!(listed, " and {} more", names.len() - NAMES_SHOWN);
                }
                format!(
                    "one of launches #{first} to #{last} (kernels {listed}; {} launched together)",
                    self.n
                )
            }
            (_, _) => "a kernel".into(),
        }
    }
}

/// Launches since the last group closed; no completion event yet.
struct Open {
    /// When its first kernel was launched.
    start: Instant,
    /// Its kernels' deadlines, summed.
    deadlines: Duration,
    members: Members,
}

/// A closed group: its kernels, then its event, on the stream.
struct Group {
    /// Its number among the groups closed so far (from 1).
    seq: u64,
    /// Its completion event, or what `cuEventRecord`/`cuEventCreate` answered instead (its
    /// kernels then run untracked: reported as a fault at the next wait).
    event: Result<CuEvent, CuResult>,
    start: Instant,
    budget: Duration,
    members: Members,
}

/// One kernel launch, checked and resolved, ready for its driver call.
///
/// Not the contract's [`crate::contract::Launch`], which the backend checks and then turns into
/// this: that one names its kernel by index and borrows the argument block from the request
/// frame, unaligned; this one holds what the driver calls take — the resolved function, the
/// argument block copied to 16-byte aligned scratch — and the kernel's name, shared with its
/// module, for the messages of a group that overran.
pub struct ReadyLaunch {
    pub function: CuFunction,
    pub kernel: Arc<str>,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
    /// Its argument block, 16-byte aligned, valid until [`Timeline::launch_all`] returns; null
    /// with `args_len` 0 for a kernel without parameters.
    pub args: *mut c_void,
    pub args_len: usize,
    pub deadline: Duration,
    /// Its number among the lease's launches (see `Backend::number_launches_from`), for
    /// messages about it that come after it was launched.
    pub ordinal: u64,
}

impl ReadyLaunch {
    /// `cuLaunchKernel`'s (and a kernel node's) `extra` array for this launch, written into
    /// `extra` and `size`, which must outlive the driver call: null for a kernel without
    /// parameters, else the packed argument block and its size.
    pub fn extra(&self, extra: &mut [*mut c_void; 5], size: &mut usize) -> *mut *mut c_void {
        if self.args_len == 0 {
            return std::ptr::null_mut();
        }
        *size = self.args_len;
        *extra = [
            CU_LAUNCH_PARAM_BUFFER_POINTER,
            self.args,
            CU_LAUNCH_PARAM_BUFFER_SIZE,
            (size as *mut usize).cast(),
            CU_LAUNCH_PARAM_END,
        ];
        extra.as_mut_ptr()
    }
}

// SAFETY: a `ReadyLaunch` only lives within one `launch_batch` call of the backend that made it; its
// pointers are plain handles and addresses of that backend's memory.
unsafe impl Send for ReadyLaunch {}

/// Why [`Timeline::launch_all`] stopped.
pub enum Refused {
    /// `cuLaunchKernel` refused the launch.
    Driver {
        code: CuResult,
        function: CuFunction,
    },
    /// Waiting for room in the queue failed (a fault or a missed deadline of earlier work).
    Wait(BackendError),
}

/// The state of the head of the queue.
enum Head {
    Idle,
    /// Running (or waiting to), due by this instant.
    Busy(Instant),
    /// Its event reported this error: the work faulted.
    Fault(CuResult),
}

struct Queue {
    items: VecDeque<Group>,
    open: Option<Open>,
    /// Kernels in `items` and `open`.
    kernels: usize,
    free_events: Vec<CuEvent>,
    /// When the last completion was seen; the next group's clock starts no earlier.
    last_done: Instant,
    /// Graphs that launch runs of kernels at once (see [`Chains`]).
    chains: Chains,
    /// Groups closed so far: the latest one's `seq`.
    closed: u64,
    /// Timed events not in use (the clock and timing streams').
    free_timed: Vec<CuEvent>,
    /// The open segment (see the module's docs).
    segment: Option<Segment>,
    /// The completion event of the group closed last: the open segment ends behind it.
    last_completion: Option<CuEvent>,
    /// Ended segments whose time is not yet counted, oldest first.
    spans: VecDeque<Span>,
    /// Device time of the segments counted so far, in nanoseconds (see the module's docs).
    gpu_nanos: u64,
    /// Where the last segment counted in `gpu_nanos` ended: the device's time is charged up to
    /// there (see [`Timeline::fold`], the only writer, which holds `Timeline::folding`).
    counted_through: Option<Instant>,
    /// The uncharged-since word as last published (see [`Queue::publish_uncharged`]).
    uncharged: u64,
}

/// An open segment (see the module's docs).
struct Segment {
    /// When its first launch had reached the driver: where its charge begins.
    since: Instant,
    /// Groups closed before it began (`Queue::closed`): its groups are the ones after.
    after: u64,
}

/// An ended segment, not counted yet: when it began, how its end is read, and the last group
/// it holds.
struct Span {
    since: Instant,
    end: SpanEnd,
    through: u64,
}

/// How an ended segment's end is read (see the module's docs).
enum SpanEnd {
    /// The worker saw its last group finished at this instant.
    Seen(Instant),
    /// `clock`, recorded on the clock stream at `at`, and `end`, recorded on the timing stream
    /// behind the segment's last group: the end is `at` plus the device's time between them.
    Timed {
        clock: CuEvent,
        at: Instant,
        end: CuEvent,
    },
}

impl Span {
    /// Where the span ends on the host's clock: `Ok(None)` where it cannot be told (its events
    /// report a fault); the driver's `CUDA_ERROR_NOT_READY` while its end is not done.
    fn ends(&self, drv: &Driver) -> Result<Option<Instant>, CuResult> {
        match self.end {
            SpanEnd::Seen(at) => Ok(Some(at)),
            SpanEnd::Timed { clock, at, end } => match elapsed(drv, clock, end) {
                Ok(nanos) => Ok(at.checked_add(Duration::from_nanos(nanos))),
                Err(CUDA_ERROR_NOT_READY) => Err(CUDA_ERROR_NOT_READY),
                Err(_) => Ok(None),
            },
        }
    }

    /// Its timed events, for reuse.
    fn events(&self) -> Option<[CuEvent; 2]> {
        match self.end {
            SpanEnd::Seen(_) => None,
            SpanEnd::Timed { clock, end, .. } => Some([clock, end]),
        }
    }
}

// SAFETY: CUDA events are plain handles usable from any thread of the process.
unsafe impl Send for Queue {}

/// `t + d`, saturating far in the future (a deadline is at most u64::MAX ns: centuries).
fn after(t: Instant, d: Duration) -> Instant {
    t.checked_add(d).unwrap_or(t + Duration::from_secs(1 << 34))
}

impl Queue {
    /// Publishes, for the host, from when the work launched and not seen finished is in no GPU
    /// time reported (see [`publish_uncharged_since`]): a lease ended with the worker given up
    /// while it runs is charged from there. Set as a segment begins with none unfinished (the
    /// segments after it are charged no earlier than it, see [`Timeline::fold`]), moved up to
    /// the end of the last segment in the GPU time an answer carries ([`Queue::reported`]: the
    /// host never charges a reported segment twice), cleared once the work is seen finished.
    fn publish_uncharged(&mut self, nanos: u64) {
        if self.uncharged != nanos {
            self.uncharged = nanos;
            publish_uncharged_since(nanos);
        }
    }

    /// A segment began at `since`: where its work's charge begins, unless unfinished work
    /// already holds the word.
    fn began(&mut self, since: Instant) {
        if self.uncharged == 0 {
            self.publish_uncharged(monotonic_nanos(since));
        }
    }

    /// The GPU time an answer carries, having moved the word past the segments in it.
    fn reported(&mut self) -> u64 {
        if let Some(end) = self.counted_through.filter(|_| self.uncharged != 0) {
            let end = monotonic_nanos(end);
            if end > self.uncharged {
                self.publish_uncharged(end);
            }
        }
        self.gpu_nanos
    }

    /// No work is left unfinished where every closed group is done and no launch waits in the
    /// open one.
    fn all_done(&mut self) {
        if self.open.as_ref().is_none_or(|o| o.members.n == 0) {
            self.publish_uncharged(0);
        }
    }

    /// Pops every finished group off the front and says what the head is doing.
    ///
    /// The newest group is looked at first: the stream runs in order, so once its event is done
    /// every group's is, and a queue of many finished groups (syncs the completion word
    /// answered leave theirs queued) is emptied with one driver call instead of one per group.
    fn poll(&mut self, drv: &Driver, now: Instant) -> Head {
        if self.items.len() > 1 && self.items.iter().all(|g| g.event.is_ok()) {
            if let Some(Ok(newest)) = self.items.back().map(|g| g.event) {
                // SAFETY: a live event created by this queue.
                if unsafe { (drv.event_query)(newest) } == CUDA_SUCCESS {
                    for g in self.items.drain(..) {
                        self.kernels -= g.members.n;
                        if let Ok(e) = g.event {
                            self.free_events.push(e);
                        }
                    }
                    self.last_done = now;
                    self.all_done();
                    return Head::Idle;
                }
            }
        }
        while let Some(head) = self.items.front() {
            let event = match head.event {
                Ok(e) => e,
                Err(code) => return Head::Fault(code),
            };
            // SAFETY: a live event created by this queue.
            match unsafe { (drv.event_query)(event) } {
                CUDA_SUCCESS => {
                    if let Some(g) = self.items.pop_front() {
                        self.kernels -= g.members.n;
                        self.free_events.push(event);
                    }
                    self.last_done = now;
                }
                CUDA_ERROR_NOT_READY => {
                    return Head::Busy(after(head.start.max(self.last_done), head.budget))
                }
                err => return Head::Fault(err),
            }
        }
        self.all_done();
        Head::Idle
    }

    /// Adds a launch just made to the open group ([`Timeline::open`] opened it before the
    /// launch); says whether the group is full.
    fn add(&mut self, l: &ReadyLaunch) -> bool {
        let Some(open) = self.open.as_mut() else {
            // Not reached: every launch is made into an open group.
            return false;
        };
        open.deadlines = open.deadlines.saturating_add(l.deadline);
        open.members.push(Arc::clone(&l.kernel), l.ordinal);
        self.kernels += 1;
        open.members.n >= GROUP_MAX
    }

    fn head_kernels(&self) -> String {
        self.items
            .front()
            .map_or_else(|| "a kernel".into(), |g| g.members.describe())
    }

    /// The kernels a fault seen at the head is blamed on: the first group not known finished.
    /// After a fault every event of the context reports it, finished or not, so the head may be
    /// a group that finished before the fault: one a signalled sync saw done (`seen_done`: the
    /// latest group whose completion the device signalled) is passed over.
    fn faulted_kernels(&self, seen_done: u64) -> String {
        self.items
            .iter()
            .find(|g| g.seq > seen_done)
            .or(self.items.front())
            .map_or_else(|| "a kernel".into(), |g| g.members.describe())
    }

    fn head_budget(&self) -> (Duration, bool) {
        self.items
            .front()
            .map_or((Duration::ZERO, false), |g| (g.budget, g.members.n > 1))
    }
}

/// The launch queue, shared by the serving thread and the watchdog.
pub struct Timeline {
    drv: &'static Driver,
    stream: WorkStream,
    q: Mutex<Queue>,
    /// The latest group a signalled sync saw finished ([`Timeline::drain_signalled`]): for
    /// naming the launch a later fault came from, never for deadlines.
    signalled_done: AtomicU64,
    /// Where the segments' end events wait for their kernels (see the module's docs).
    timing: WorkStream,
    /// Where the segments' clock events are recorded: nothing on it ever waits.
    clock: WorkStream,
    /// Held by whoever counts ended segments ([`Timeline::fold`]): the watchdog in the
    /// background, or the serving thread for an answer, which so never misses segments the
    /// watchdog is counting at that moment.
    folding: Mutex<()>,
}

impl Timeline {
    /// A timeline with its watchdog thread running (made current on `ctx`).
    pub fn start(
        drv: &'static Driver,
        ctx: CuContext,
        stream: WorkStream,
    ) -> Result<Arc<Timeline>, String> {
        let new_stream = |what: &str| {
            let mut s: CuStream = std::ptr::null_mut();
            // SAFETY: valid out-pointer; `ctx` is current on this thread.
            match unsafe { (drv.stream_create)(&mut s, CU_STREAM_NON_BLOCKING) } {
                CUDA_SUCCESS => Ok(WorkStream(s)),
                r => Err(format!(
                    "cuStreamCreate (the {what} stream) failed: {}",
                    drv.describe(r)
                )),
            }
        };
        let timing = new_stream("timing")?;
        let clock = new_stream("clock")?;
        let t = Arc::new(Timeline {
            drv,
            stream,
            q: Mutex::new(Queue {
                items: VecDeque::with_capacity(MAX_PENDING),
                open: None,
                kernels: 0,
                free_events: Vec::with_capacity(64),
                last_done: Instant::now(),
                chains: Chains::new(drv),
                closed: 0,
                free_timed: Vec::with_capacity(16),
                segment: None,
                last_completion: None,
                spans: VecDeque::new(),
                gpu_nanos: 0,
                counted_through: None,
                uncharged: 0,
            }),
            signalled_done: AtomicU64::new(0),
            timing,
            clock,
            folding: Mutex::new(()),
        });
        // Events up front, so the first launches do not pay for them.
        {
            let mut q = t.lock();
            for _ in 0..16 {
                let e = t
                    .new_event(CU_EVENT_DISABLE_TIMING)
                    .map_err(|e| format!("cuEventCreate failed: {}", drv.describe(e.code)))?;
                q.free_events.push(e);
            }
            for _ in 0..4 {
                let e = t
                    .new_event(CU_EVENT_TIMED)
                    .map_err(|e| format!("cuEventCreate failed: {}", drv.describe(e.code)))?;
                q.free_timed.push(e);
            }
        }
        let ctx_addr = ctx as usize;
        let w = Arc::clone(&t);
        std::thread::Builder::new()
            .name("tasklet-cuda-watchdog".into())
            .spawn(move || w.watchdog(ctx_addr as CuContext))
            .map_err(|e| format!("cannot start the kernel watchdog thread: {e}"))?;
        Ok(t)
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Nothing under the lock leaves the queue inconsistent; a panic elsewhere does not matter.
        self.q.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn new_event(&self, flags: c_uint) -> Result<CuEvent, CallError> {
        let mut e: CuEvent = std::ptr::null_mut();
        // SAFETY: valid out-pointer; context current on this thread.
        check("cuEventCreate", unsafe {
            (self.drv.event_create)(&mut e, flags)
        })?;
        Ok(e)
    }

    /// A timed event from the pool, or a new one.
    fn timed_event(&self, q: &mut Queue) -> Option<CuEvent> {
        q.free_timed
            .pop()
            .or_else(|| self.new_event(CU_EVENT_TIMED).ok())
    }

    /// Opens a group unless one with launches in it is open, reading the clock (once per group,
    /// not per launch). An open group without launches (the driver refused its first) starts
    /// again: its clock from now.
    fn open(&self, q: &mut Queue) {
        if q.open.as_ref().is_some_and(|o| o.members.n > 0) {
            return;
        }
        q.open = Some(Open {
            start: Instant::now(),
            deadlines: Duration::ZERO,
            members: Members::default(),
        });
    }

    /// Begins a segment unless one is open, called right after a launch reached the driver: a
    /// clock read, no driver call.
    fn begin_segment(&self, q: &mut Queue) {
        if q.segment.is_none() {
            let since = Instant::now();
            q.segment = Some(Segment {
                since,
                after: q.closed,
            });
            q.began(since);
        } else if q.uncharged == 0 {
            // The segment's earlier groups were seen done (a mark, a full group or a graph
            // closed them, and an answer or the watchdog polled), which cleared the word: this
            // launch's work is unreported from now, or a lease dropped while it runs pays nothing.
            q.began(Instant::now());
        }
    }

    /// Ends the open segment, if any (its groups are closed: every caller closes the open group
    /// first), timed on the device ([`Timeline::record_end`]). Nothing is queued on the worker's
    /// stream. Where that cannot be done, the segment ends now, on the host's clock: after a
    /// fault the driver refuses every call, and the kernels held the device until then at the
    /// latest. A segment of which no group was closed (no launch reached the device) goes
    /// uncounted.
    fn end_segment(&self, q: &mut Queue) {
        let Some(Segment { since, after }) = q.segment.take() else {
            return;
        };
        if q.closed == after {
            return;
        }
        let end = self
            .record_end(q)
            .unwrap_or_else(|| SpanEnd::Seen(Instant::now()));
        q.spans.push_back(Span {
            since,
            end,
            through: q.closed,
        });
    }

    /// The open segment's end timed on the device: its clock event, then its end behind the
    /// completion event of the group closed last (see the module's docs). None where a driver
    /// call failed (its events go back to the pool) or that group has no event.
    fn record_end(&self, q: &mut Queue) -> Option<SpanEnd> {
        let last = q.last_completion?;
        let clock = self.timed_event(q)?;
        let Some(end) = self.timed_event(q) else {
            q.free_timed.push(clock);
            return None;
        };
        let at = Instant::now();
        // SAFETY: live events; the clock and timing streams. The wait is on the completion
        // event's latest record, which is the segment's last group's or a later one's.
        let r = unsafe {
            match (self.drv.event_record)(clock, self.clock.0) {
                CUDA_SUCCESS => match (self.drv.stream_wait_event)(self.timing.0, last, 0) {
                    CUDA_SUCCESS => (self.drv.event_record)(end, self.timing.0),
                    r => r,
                },
                r => r,
            }
        };
        if r == CUDA_SUCCESS {
            Some(SpanEnd::Timed { clock, at, end })
        } else {
            q.free_timed.extend([clock, end]);
            None
        }
    }

    /// Ends the open segment, if any, as seen finished now: its last group's completion event
    /// reads done (see the module's docs). Where it does not yet, the segment is timed on the
    /// device instead ([`Timeline::end_segment`]).
    fn end_segment_seen(&self, q: &mut Queue) {
        let Some(segment) = q.segment.as_ref() else {
            return;
        };
        if q.closed == segment.after {
            q.segment = None;
            return;
        }
        // SAFETY: a live event created by this queue.
        let done = q
            .last_completion
            .is_some_and(|last| unsafe { (self.drv.event_query)(last) } == CUDA_SUCCESS);
        if !done {
            return self.end_segment(q);
        }
        let at = Instant::now();
        if let Some(Segment { since, .. }) = q.segment.take() {
            q.spans.push_back(Span {
                since,
                end: SpanEnd::Seen(at),
                through: q.closed,
            });
        }
        // The stream runs in order: every closed group is done.
        q.all_done();
    }

    /// Closes the open group, if any: records its event after its kernels. A failure to record
    /// leaves the group untracked, which the next wait reports as a fault.
    ///
    /// A group without launches (the driver refused its first) is dropped, not queued: its
    /// budget would be only the host's time since it opened, with no kernel's deadline in it,
    /// which the device's processing of a bare event can outlast.
    fn close(&self, q: &mut Queue) {
        let Some(open) = q.open.take() else { return };
        if open.members.n == 0 {
            return;
        }
        q.closed += 1;
        let event = match q.free_events.pop() {
            Some(e) => Ok(e),
            None => self.new_event(CU_EVENT_DISABLE_TIMING).map_err(|e| e.code),
        };
        let event = event.and_then(|e| {
            // SAFETY: a live event; the worker's stream.
            match unsafe { (self.drv.event_record)(e, self.stream.0) } {
                CUDA_SUCCESS => Ok(e),
                r => {
                    q.free_events.push(e);
                    Err(r)
                }
            }
        });
        // Each kernel may take its whole deadline, and none starts before it was launched: the
        // time from the group's first launch to its closing (which covers every gap between its
        // launches, and is microseconds) plus every deadline bounds the group from above.
        let now = Instant::now();
        let budget = now
            .saturating_duration_since(open.start)
            .saturating_add(open.deadlines);
        q.last_completion = event.ok();
        q.items.push_back(Group {
            seq: q.closed,
            event,
            start: open.start,
            budget,
            members: open.members,
        });
        // A long run of launches without an idle or a wait is charged as it goes (see the
        // module's docs). The clock was read for the budget anyway.
        if q.segment.as_ref().is_some_and(|s| {
            q.closed - s.after >= SEGMENT_GROUPS
                || now.saturating_duration_since(s.since) >= SEGMENT_SPAN
        }) {
            self.end_segment(q);
        }
    }

    /// Launches in flight (not yet seen finished), counting the open group's.
    pub fn pending(&self) -> usize {
        self.lock().kernels
    }

    /// The worker is about to idle: closes the open group so the watchdog can see it, and the
    /// open segment, so the time the device then sits idle is charged to no one.
    pub fn flush(&self) {
        let mut q = self.lock();
        self.close(&mut q);
        self.end_segment(&mut q);
    }

    /// Closes the open group (see [`Timeline::flush`]) but leaves its segment open: a sync
    /// queues its completion word right behind the group's event, and its wait
    /// ([`Timeline::drain_signalled`]) ends the segment.
    pub fn close_group(&self) {
        self.close(&mut self.lock());
    }

    /// Launches `launches` in order on the worker's stream, adding each to the open group and
    /// closing groups as they fill. The queue's lock is taken once for them all. Each run of
    /// launches that fits the open group goes to the driver as one graph launch ([`Chains`]);
    /// where the driver refuses that, the run goes one `cuLaunchKernel` at a time. Stops at the
    /// first failure, with its index: the driver's refusal (that kernel is then not tracked), or
    /// a failed wait for room in the queue.
    pub fn launch_all(&self, launches: &[ReadyLaunch]) -> Result<(), (usize, Refused)> {
        let mut q = self.lock();
        let mut at = 0;
        while at < launches.len() {
            let open = q.open.as_ref().map_or(0, |o| o.members.n);
            let n = (launches.len() - at).min(GROUP_MAX - open);
            if q.kernels + n > MAX_PENDING {
                drop(q);
                self.wait_for(|q| q.kernels + n <= MAX_PENDING)
                    .map_err(|e| (at, Refused::Wait(e)))?;
                q = self.lock();
                continue;
            }
            let run = &launches[at..at + n];
            self.open(&mut q);
            if q.chains.launch(run, self.stream.0).is_ok() {
                self.begin_segment(&mut q);
                for l in run {
                    if q.add(l) {
                        self.close(&mut q);
                    }
                }
            } else {
                for (i, l) in run.iter().enumerate() {
                    self.launch_one(l).map_err(|code| {
                        (
                            at + i,
                            Refused::Driver {
                                code,
                                function: l.function,
                            },
                        )
                    })?;
                    self.begin_segment(&mut q);
                    if q.add(l) {
                        self.close(&mut q);
                    }
                }
            }
            at += n;
        }
        Ok(())
    }

    /// Launches an instantiated graph (a tenant's recorded graph, see `user_graphs`) on the
    /// worker's stream as a group of its own: one completion event after it, a deadline that is
    /// the sum of its kernels' (`deadline`), and `label` for messages about it. It counts as one
    /// launch in flight.
    pub fn launch_graph(
        &self,
        exec: CuGraphExec,
        deadline: Duration,
        label: &Arc<str>,
        next_ordinal: u64,
    ) -> Result<(), BackendError> {
        let Some(api) = self.drv.graphs.as_ref() else {
            return Err(BackendError::new(
                ErrorKind::Unsupported,
                "this CUDA driver has no graph API",
            ));
        };
        let mut q = self.lock();
        self.close(&mut q);
        if q.kernels + 1 > MAX_PENDING {
            drop(q);
            self.wait_for(|q| q.kernels < MAX_PENDING)?;
            q = self.lock();
        }
        self.open(&mut q);
        // SAFETY: an instantiated graph of this context; the worker's stream.
        let r = unsafe { (api.launch)(exec, self.stream.0) };
        if r != CUDA_SUCCESS {
            return Err(BackendError::new(
                ErrorKind::LaunchFailed,
                format!(
                    "{label}: cuGraphLaunch refused it: {}",
                    self.drv.describe(r)
                ),
            ));
        }
        self.begin_segment(&mut q);
        if let Some(open) = q.open.as_mut() {
            open.deadlines = open.deadlines.saturating_add(deadline);
            open.members.n = 1;
            open.members.label = Some(Arc::clone(label));
            // Not a launch of its own: it stands before the next one (`Members::position`).
            open.members.ordinals[0] = next_ordinal;
        }
        q.kernels += 1;
        self.close(&mut q);
        Ok(())
    }

    /// One `cuLaunchKernel`.
    fn launch_one(&self, l: &ReadyLaunch) -> Result<(), CuResult> {
        let (mut slots, mut size) = ([std::ptr::null_mut(); 5], 0usize);
        let extra = l.extra(&mut slots, &mut size);
        // SAFETY: a resolved function; `extra` and what it points to live across the call, which
        // copies the argument block before returning (`Launch::args`).
        let r = unsafe {
            (self.drv.launch_kernel)(
                l.function,
                l.grid[0],
                l.grid[1],
                l.grid[2],
                l.block[0],
                l.block[1],
                l.block[2],
                l.shared_mem_bytes,
                self.stream.0,
                std::ptr::null_mut(),
                extra,
            )
        };
        if r == CUDA_SUCCESS {
            Ok(())
        } else {
            Err(r)
        }
    }

    /// The device time of the segments counted so far ([`Queue::gpu_nanos`]), after counting
    /// the ended ones whose end is done: a segment whose kernels are known finished is counted
    /// now (its end is waited for, briefly), one still running at a later look.
    pub fn gpu_time(&self) -> Duration {
        let mut q = self.lock();
        if !q.items.is_empty() {
            q.poll(self.drv, Instant::now());
        }
        drop(q);
        self.fold(FOLD_WAIT);
        Duration::from_nanos(self.lock().reported())
    }

    /// Counts the ended segments whose end is known, oldest first, without holding the queue's
    /// lock while it reads their times (a driver call each for those timed on the device: the
    /// serving thread's launches never wait behind the watchdog's count). One whose kernels are
    /// known finished (no group up to its last is queued, or a signalled sync saw them done) has
    /// its end a few microseconds behind: that one is waited for, up to `wait`. Never blocks on
    /// running kernels.
    fn fold(&self, wait: Duration) {
        let _folding = self.folding.lock().unwrap_or_else(|p| p.into_inner());
        let (mut spans, known, mut charged) = {
            let mut q = self.lock();
            if q.spans.is_empty() {
                return;
            }
            // The groups up to this one are known finished.
            let queued = q.items.front().map_or(q.closed, |g| g.seq - 1);
            let known = queued.max(self.signalled_done.load(Relaxed));
            (std::mem::take(&mut q.spans), known, q.counted_through)
        };
        let start = Instant::now();
        let (mut nanos, mut freed) = (0u64, Vec::new());
        while let Some(span) = spans.front() {
            // Its end; where the context faulted, the fault is seen now: the kernels held the
            // device until it at the latest, and a fault must not make their time free.
            match span
                .ends(self.drv)
                .map(|end| end.unwrap_or_else(Instant::now))
            {
                Ok(end) => {
                    // Charged from its begin, or from where the segment before it ended, if
                    // the device was still busy with that one then.
                    let from = charged.map_or(span.since, |c| c.max(span.since));
                    let took = end.saturating_duration_since(from);
                    nanos =
                        nanos.saturating_add(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
                    charged = Some(charged.map_or(end, |c| c.max(end)));
                }
                Err(_) => {
                    if span.through <= known && start.elapsed() < wait {
                        std::hint::spin_loop();
                        continue;
                    }
                    break;
                }
            }
            if let Some(span) = spans.pop_front() {
                freed.extend(span.events().into_iter().flatten());
            }
        }
        let mut q = self.lock();
        q.gpu_nanos = q.gpu_nanos.saturating_add(nanos);
        q.counted_through = charged;
        // Published as counted, not only with answers, and the uncharged word moved past it: a
        // lease given up unasked is charged for work that finished with no answer to report it.
        let counted = q.reported();
        publish_counted_gpu_time(counted);
        q.free_timed.extend(freed);
        // Those not counted yet go back before any ended meanwhile (in the same deque, which
        // keeps its room).
        spans.extend(q.spans.drain(..));
        q.spans = spans;
    }

    /// The device time of the segments counted so far, without looking for more.
    pub fn gpu_time_seen(&self) -> Duration {
        Duration::from_nanos(self.lock().reported())
    }

    /// Forgets every cached graph: they hold functions, so this comes before a module is unloaded.
    pub fn forget_graphs(&self) {
        self.lock().chains.clear();
    }

    /// Waits until every launch has finished, each group within its deadline.
    pub fn drain(&self) -> Result<(), BackendError> {
        self.wait_for(|q| q.items.is_empty())
    }

    /// Waits until the launches numbered through `last` have finished (0: none), each group
    /// within its deadline; later ones may still run. Groups finish in order, so this holds once
    /// the oldest unfinished group stands past `last` ([`Members::position`]).
    pub fn drain_through(&self, last: u64) -> Result<(), BackendError> {
        self.wait_for(|q| q.items.front().is_none_or(|g| g.members.position() > last))
    }

    /// [`Timeline::drain`] after [`Timeline::flush`] and a request to the device to store
    /// `value` into `word` behind every launch so far (the channel's completion word): spins on
    /// the word for up to [`SPIN`] without calling the driver — nothing of ours then competes with
    /// the device's store, which the host is waiting for too, and the worker is ready for the next
    /// request as soon as the device is. The groups stay queued with their events: a word that
    /// reads `value` is only a hint (a kernel of this lease could forge it), and the next wait or
    /// the watchdog still looks at every event, so a forged word cannot hide a runaway. Past the
    /// spin, the wait is [`Timeline::drain`]'s, with its deadlines. `Ok(true)`: the word was seen
    /// within the spin (the host, spinning on it too, most likely saw it first and skips this
    /// worker's answer); `Ok(false)`: the wait went on as a drain.
    pub fn drain_signalled(&self, word: &AtomicU32, value: u32) -> Result<bool, BackendError> {
        // Read while the kernels run, not on the way out: the groups the word stands for.
        let through = self.lock().closed;
        let start = Instant::now();
        let mut turns = 0u32;
        loop {
            if word.load(Acquire) == value {
                // A hint, like the word itself: a forged word only misnames which of the lease's
                // own launches a later fault came from, and the segment's end is taken from it
                // only once the device's own event agrees.
                self.signalled_done.store(through, Relaxed);
                self.end_segment_seen(&mut self.lock());
                return Ok(true);
            }
            std::hint::spin_loop();
            turns = turns.wrapping_add(1);
            if turns.is_multiple_of(64) && start.elapsed() >= SPIN {
                // The kernels outlast the spin: their end is timed on the device.
                self.end_segment(&mut self.lock());
                return self.drain().map(|()| false);
            }
        }
    }

    /// Closes the open group, then polls until `done(queue)`, failing at the first fault or
    /// missed deadline.
    fn wait_for(&self, done: impl Fn(&Queue) -> bool) -> Result<(), BackendError> {
        {
            let mut q = self.lock();
            self.close(&mut q);
            // The device may idle once the wait is over (see the module's docs); the segment's
            // end follows the group's event, so the wait below does not wait for it.
            self.end_segment(&mut q);
        }
        let started = Instant::now();
        let mut nap = Duration::from_micros(20);
        loop {
            let now = Instant::now();
            let (head, overran) = {
                let mut q = self.lock();
                let head = q.poll(self.drv, now);
                if done(&q) {
                    return Ok(());
                }
                match head {
                    Head::Idle => return Ok(()),
                    Head::Busy(due) if now < due => (Some(due), None),
                    Head::Busy(_) => (None, Some((q.head_kernels(), q.head_budget()))),
                    Head::Fault(code) => {
                        return Err(errors::async_error(
                            self.drv,
                            code,
                            &format!(
                                "{} (or work queued before it)",
                                q.faulted_kernels(self.signalled_done.load(Relaxed))
                            ),
                        ))
                    }
                }
            };
            if let Some((kernels, budget)) = overran {
                return Err(overran_error(&kernels, budget));
            }
            let due = head.unwrap_or(now);
            if now.duration_since(started) < SPIN {
                std::hint::spin_loop();
                continue;
            }
            std::thread::sleep(
                nap.min(due.saturating_duration_since(now))
                    .max(Duration::from_micros(1)),
            );
            nap = (nap * 2).min(MAX_NAP);
        }
    }

    fn watchdog(&self, ctx: CuContext) {
        // SAFETY: making this process's context current on this thread.
        if unsafe { (self.drv.ctx_set_current)(ctx) } != CUDA_SUCCESS {
            eprintln!("tasklet worker {}: the kernel watchdog could not use the CUDA context; deadlines are enforced at sync only", std::process::id());
            return;
        }
        let (mut period, mut closed_seen) = (WATCHDOG_PERIOD, 0);
        loop {
            std::thread::sleep(period);
            // Ended segments are counted here, off the serving thread, so a worker busy with
            // kernels has its time counted while it runs, whatever answers it gives (see the
            // module's docs); every [`FOLD_PERIOD`] while there are some.
            self.fold(Duration::ZERO);
            let now = Instant::now();
            // Only closed groups are looked at: the open one has no event to tell whether it
            // finished, and is closed before the worker idles.
            let mut q = self.lock();
            // Every FOLD_PERIOD while launches come or segments wait to be counted; an idle
            // worker is looked at every WATCHDOG_PERIOD.
            period = if q.spans.is_empty() && q.closed == closed_seen {
                WATCHDOG_PERIOD
            } else {
                FOLD_PERIOD
            };
            closed_seen = q.closed;
            if q.items.is_empty() {
                continue;
            }
            match q.poll(self.drv, now) {
                Head::Busy(due) if now.checked_sub(WATCHDOG_GRACE).is_some_and(|t| t >= due) => {
                    eprintln!(
                        "tasklet worker {}: {} with no sync waiting for it; ending this worker to stop it",
                        std::process::id(),
                        overran(&q.head_kernels(), q.head_budget())
                    );
                    // The host reads why at once: the exit may take the driver a while.
                    crate::contract::channel::worker_end::announce_deadline_exit();
                    // SAFETY: ends the process at once: no destructors or atexit handlers, which
                    // could block on the running kernel. The driver frees the context's memory.
                    unsafe { libc::_exit(crate::contract::EXIT_DEADLINE) };
                }
                // A fault is reported by the next wait on the serving thread; the process stays
                // until the host ends it.
                Head::Busy(_) | Head::Idle | Head::Fault(_) => {}
            }
        }
    }
}

/// Nanoseconds between two timed events recorded on one stream, `begin` first: the driver's
/// refusal where either is not done (`CUDA_ERROR_NOT_READY`) or the context faulted; 0 where
/// its answer is no positive time.
fn elapsed(drv: &Driver, begin: CuEvent, end: CuEvent) -> Result<u64, CuResult> {
    let mut ms: f32 = 0.0;
    // SAFETY: two live timed events of this context; valid out-pointer. One call, no query
    // first: the driver says itself whether both are done.
    let r = unsafe { (drv.event_elapsed_time)(&mut ms, begin, end) };
    if r != CUDA_SUCCESS {
        return Err(r);
    }
    if !ms.is_finite() || ms <= 0.0 {
        return Ok(0);
    }
    // `as` saturates.
    Ok((f64::from(ms) * 1e6) as u64)
}

/// "kernel `k` ran past its deadline of …", or a group's "… their summed deadline …".
fn overran(kernels: &str, (budget, group): (Duration, bool)) -> String {
    let whose = if group {
        "their summed deadline"
    } else {
        "its deadline"
    };
    format!("{kernels} ran past {whose} of {budget:?}")
}

fn overran_error(kernels: &str, budget: (Duration, bool)) -> BackendError {
    BackendError::new(
        ErrorKind::DeadlineExceeded,
        format!(
            "{}; a running kernel can only be stopped with its process, so this lease's worker is ended (raise \
             `kernel-deadline` in the node policy if kernels legitimately run longer)",
            overran(kernels, budget)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(launches: &[(&str, u64)]) -> Members {
        let mut m = Members::default();
        for &(name, ordinal) in launches {
            m.push(Arc::from(name), ordinal);
        }
        m
    }

    #[test]
    fn a_group_is_described_by_its_launches_ordinals_and_kernels() {
        assert_eq!(members(&[]).describe(), "a kernel");
        assert_eq!(
            members(&[("iota", 3)]).describe(),
            "launch #3 of kernel `iota`"
        );
        assert_eq!(
            members(&[("empty", 4), ("spin", 5), ("empty", 6)]).describe(),
            "one of launches #4 to #6 (kernels `empty`, `spin`; 3 launched together)"
        );
        // At most three names, each quoted in part.
        let long = "x".repeat(1000);
        let names = ["a", "b", "c", "d", long.as_str()];
        let group: Vec<(&str, u64)> = names.iter().zip(1..).map(|(&n, i)| (n, i)).collect();
        assert_eq!(
            members(&group).describe(),
            "one of launches #1 to #5 (kernels `a`, `b`, `c` and 2 more; 5 launched together)"
        );
        let d = members(&[(long.as_str(), 9)]).describe();
        assert!(d.ends_with("…` (1000 bytes)") && d.len() < 120, "{d}");
        // Past a full group, pushes are ignored rather than panicking.
        let many: Vec<(&str, u64)> = (1..=GROUP_MAX as u64 + 2).map(|i| ("k", i)).collect();
        assert_eq!(
            members(&many).describe(),
            format!(
                "one of launches #1 to #{GROUP_MAX} (kernels `k`; {GROUP_MAX} launched together)"
            )
        );
    }
}
