//! A stream's way out: how whoever serves a request (the connection's GPU thread, a deployment's
//! thread) puts bytes on the stream, in the order it sends them.
//!
//! Every stream has a writer task that owns the waiting: it takes queued bytes and writes them,
//! waiting for QUIC's flow control as long as it takes. But a reply to a launch + sync is a few
//! dozen bytes on a stream that has nothing else queued, and handing it to the writer task costs
//! a task wake-up on the runtime (and, when the runtime's threads have parked, a thread's) before
//! quinn's connection task is woken to send it. So a sender first tries to write to the stream
//! itself: when nothing it or anyone sent earlier is still queued and the writer is not in the
//! middle of a write, it hands the bytes to quinn at once (quinn copies nothing; the connection
//! task is woken to send them). Whatever quinn does not take at once (its flow control is
//! exhausted) is left for the writer task, ahead of anything queued after it, so a frame is never
//! split by another's bytes.
//!
//! A sender on one of the node's own threads waking quinn's connection task puts that task on
//! the runtime's shared queue and wakes a parked runtime thread for it, which on a virtual
//! machine takes a while. So when one of the runtime's threads is awake waiting for this
//! stream's reply (`connection::hot`), the sender leaves the bytes for it instead ("handing
//! off"): that thread writes them, and the connection task it wakes runs next on the same
//! thread. If the waiting thread gives up at that moment, the writer task is woken for the
//! bytes instead, so none are ever left behind.
//!
//! `TASKLET_NODE_DIRECT_REPLY=0` turns both off (every reply through the writer task), and
//! `TASKLET_NODE_HOT_HANDOFF=0` the hand-off alone, for comparison.

use crate::job::Outgoing;
use crate::reply_budget::ReplyBudget;
use bytes::Bytes;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tasklet_wire::{encode_goaway, ErrorReply};
use tokio::sync::mpsc;

/// Sends queued for a stream's writer before a sender waits.
const QUEUE: usize = 256;

/// How long a closing stream waits for its GOAWAY, or a finished one for its last replies, to
/// reach the client before its writer ends anyway.
const FINISH_GRACE: Duration = Duration::from_millis(500);

fn switched_on(name: &str) -> bool {
    std::env::var(name).map_or(true, |v| v.trim() != "0")
}

fn direct_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| switched_on("TASKLET_NODE_DIRECT_REPLY"))
}

fn handoff_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| direct_enabled() && switched_on("TASKLET_NODE_HOT_HANDOFF"))
}

/// A stream's writes: how many, and when the last was, for the runtime thread kept awake for a
/// reply (`connection::hot`), which learns from when replies come.
#[derive(Debug)]
pub(crate) struct Writes {
    count: AtomicU64,
    /// Nanoseconds after `epoch`.
    last: AtomicU64,
    epoch: Instant,
}

impl Writes {
    pub fn new() -> Writes {
        Writes {
            count: AtomicU64::new(0),
            last: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// Something was put on the stream.
    fn note(&self) {
        self.last.store(self.now(), Ordering::SeqCst);
        self.count.fetch_add(1, Ordering::SeqCst);
    }

    /// Writes so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    /// When the last write was, in [`now`](Self::now)'s terms.
    pub fn last(&self) -> u64 {
        self.last.load(Ordering::SeqCst)
    }

    /// Nanoseconds since this count began.
    pub fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Counts a write (tests of the hot wait).
    #[cfg(test)]
    pub fn note_for_test(&self) {
        self.note();
    }
}

/// What the senders and the writer task of one stream share.
struct Outlet {
    /// The stream. Held by the writer task for each of its writes, and by a sender for its
    /// direct attempt (which never waits for it).
    send: tokio::sync::Mutex<quinn::SendStream>,
    /// Sends queued for the writer task or left in `rest`, not yet written: a direct write
    /// is tried only when this is 0, so that nothing overtakes what was sent before it.
    pending: AtomicUsize,
    /// Bytes to write before anything else: the unwritten end of a direct write, or a send
    /// handed off to a runtime thread. Whoever holds the stream next writes them.
    rest: Mutex<Option<Bytes>>,
    /// Whether `rest` holds bytes (read without its lock by a waiting runtime thread).
    rest_ready: AtomicBool,
    /// Runtime threads awake waiting for this stream's reply, which a send may be handed to.
    hot_waiters: AtomicUsize,
    /// Counted up for every write to the stream, by either path (the runtime thread kept awake
    /// for a reply watches it).
    written: Arc<Writes>,
    direct: bool,
    handoff: bool,
}

/// Where a request's reply goes: the stream that carried it.
#[derive(Clone)]
pub(crate) struct ReplyTo {
    queue: mpsc::Sender<Outgoing>,
    outlet: Arc<Outlet>,
    /// The connection's queued reply bytes: a send that must queue waits for room there.
    budget: Arc<ReplyBudget>,
}

/// The writer task's end.
pub(crate) struct Writer {
    connection: quinn::Connection,
    queue: mpsc::Receiver<Outgoing>,
    outlet: Arc<Outlet>,
}

/// A stream's outlet: the senders' end, and the writer task's, which the stream spawns.
/// `written` is counted up for every write; what waits for the writer counts in `budget`, the
/// connection's.
pub(crate) fn outlet(
    connection: quinn::Connection,
    send: quinn::SendStream,
    written: Arc<Writes>,
    budget: Arc<ReplyBudget>,
) -> (ReplyTo, Writer) {
    let (tx, rx) = mpsc::channel(QUEUE);
    let outlet = Arc::new(Outlet {
        send: tokio::sync::Mutex::new(send),
        pending: AtomicUsize::new(0),
        rest: Mutex::new(None),
        rest_ready: AtomicBool::new(false),
        hot_waiters: AtomicUsize::new(0),
        written,
        direct: direct_enabled(),
        handoff: handoff_enabled(),
    });
    (
        ReplyTo {
            queue: tx,
            outlet: Arc::clone(&outlet),
            budget,
        },
        Writer {
            connection,
            queue: rx,
            outlet,
        },
    )
}

impl ReplyTo {
    /// Whether `other` puts its replies on the same stream as this.
    pub fn same_stream(&self, other: &ReplyTo) -> bool {
        Arc::ptr_eq(&self.outlet, &other.outlet)
    }

    /// Puts `bytes` on the stream after everything sent before: directly when nothing is
    /// queued, else through the writer task (blocking while its queue is full). Called from the
    /// node's own threads, never from an async task.
    pub fn put(&self, bytes: Bytes) {
        if self.outlet.direct {
            if let Ok(mut send) = self.outlet.send.try_lock() {
                if self.outlet.pending.load(Ordering::Acquire) == 0 {
                    if self.outlet.handoff && self.outlet.hot_waiters.load(Ordering::SeqCst) > 0 {
                        // Left while the stream is held, so no other sender's direct write
                        // can come between and leave bytes of its own.
                        self.leave(bytes);
                        tracing::trace!(name: "left", target: crate::TIMELINE, "");
                        drop(send);
                        self.wake_writer_unless_waited();
                    } else {
                        self.write_direct(&mut send, bytes);
                    }
                    return;
                }
            }
        }
        let queued = self.budget.hold(bytes.len());
        self.queue_blocking(Outgoing::Bytes(bytes, queued));
    }

    /// Ends the connection: GOAWAY with `error`, then a close, after everything sent before.
    pub fn close(&self, error: ErrorReply) {
        self.queue_blocking(Outgoing::Close(error));
    }

    /// [`close`](Self::close) from an async task.
    pub async fn close_async(&self, error: ErrorReply) {
        self.outlet.pending.fetch_add(1, Ordering::AcqRel);
        // The writer is gone only with the connection.
        let _ = self.queue.send(Outgoing::Close(error)).await;
    }

    fn queue_blocking(&self, out: Outgoing) {
        self.outlet.pending.fetch_add(1, Ordering::AcqRel);
        // The writer is gone only with the connection.
        let _ = self.queue.blocking_send(out);
    }

    /// One attempt, without waiting, to hand `bytes` to quinn; the stream is held and nothing
    /// is pending. What quinn does not take is left for the writer task, still under the lock,
    /// so nothing can be written between the two parts.
    fn write_direct(&self, send: &mut quinn::SendStream, bytes: Bytes) {
        let unsent = write_once(&self.outlet, send, bytes);
        tracing::trace!(name: "written", target: crate::TIMELINE, "");
        // Blocked, or taken in part: the rest goes to the writer task, first.
        if let Some(rest) = unsent {
            self.leave(rest);
            // Wakes a writer idle on its queue; a full queue means it is busy and takes the
            // rest before its next item, and a closed one that it is gone.
            let _ = self.queue.try_send(Outgoing::Flush);
        }
    }

    /// Leaves `bytes` in `rest`, to be written before anything else. Called only with the
    /// stream held and nothing pending, so `rest` is empty.
    fn leave(&self, bytes: Bytes) {
        let mut rest = self
            .outlet
            .rest
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *rest = Some(bytes);
        self.outlet.pending.fetch_add(1, Ordering::AcqRel);
        self.outlet.rest_ready.store(true, Ordering::SeqCst);
    }

    /// After bytes were left for a runtime thread that waits for them: if every such thread has
    /// just given up, wakes the writer task for them instead. (A thread that gives up first
    /// stops counting itself, then looks at `rest_ready`; a sender sets `rest_ready`, then looks
    /// at the count: one of the two sees the other, and `rest` is taken once.)
    fn wake_writer_unless_waited(&self) {
        if self.outlet.hot_waiters.load(Ordering::SeqCst) == 0 {
            let _ = self.queue.try_send(Outgoing::Flush);
        }
    }

    /// A runtime thread starts waiting for this stream's reply: sends may be handed to it while
    /// the returned [`HotWait`] lives.
    pub fn hot_wait(&self) -> HotWait {
        self.outlet.hot_waiters.fetch_add(1, Ordering::SeqCst);
        HotWait {
            reply: self.clone(),
        }
    }
}

/// A runtime thread's wait for a stream's reply, during which sends may be handed to it. When it
/// ends (dropped, also with its task), anything handed to it and not written goes to the writer
/// task.
pub(crate) struct HotWait {
    reply: ReplyTo,
}

impl HotWait {
    /// Whether bytes wait to be written by [`write`](Self::write).
    pub fn ready(&self) -> bool {
        self.reply.outlet.rest_ready.load(Ordering::Acquire)
    }

    /// Writes the bytes left to be written first, if any, without waiting: while the writer
    /// task holds the stream, this tries again at the next call (and the writer takes them first
    /// when it ends this wait); what QUIC's flow control does not take at once is left where it
    /// was, so a client that withholds credit holds this thread no longer than its wait.
    pub fn write(&self) {
        let outlet = &self.reply.outlet;
        let Ok(mut send) = outlet.send.try_lock() else {
            return;
        };
        let taken = {
            let mut rest = outlet.rest.lock().unwrap_or_else(PoisonError::into_inner);
            outlet.rest_ready.store(false, Ordering::SeqCst);
            rest.take()
        };
        let Some(bytes) = taken else {
            return;
        };
        let unsent = write_once(outlet, &mut send, bytes);
        tracing::trace!(name: "written-hot", target: crate::TIMELINE, "");
        // Blocked, or taken in part: the rest stays first in line, still counted pending.
        match unsent {
            Some(unsent) => {
                let mut rest = outlet.rest.lock().unwrap_or_else(PoisonError::into_inner);
                *rest = Some(unsent);
                outlet.rest_ready.store(true, Ordering::SeqCst);
            }
            None => {
                outlet.pending.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

impl Drop for HotWait {
    fn drop(&mut self) {
        let outlet = &self.reply.outlet;
        outlet.hot_waiters.fetch_sub(1, Ordering::SeqCst);
        if outlet.rest_ready.load(Ordering::SeqCst) {
            // A full queue means the writer is busy and takes `rest` before its next item; a
            // closed one that it is gone.
            let _ = self.reply.queue.try_send(Outgoing::Flush);
        }
    }
}

impl Writer {
    /// Writes what the senders queue, in order, until they are all gone; a `Close` ends the
    /// connection after a GOAWAY.
    pub async fn run(mut self) {
        let outlet = Arc::clone(&self.outlet);
        while let Some(out) = self.queue.recv().await {
            let mut send = outlet.send.lock().await;
            if !write_rest(&outlet, &mut send).await {
                return;
            }
            match out {
                Outgoing::Flush => {}
                Outgoing::Bytes(bytes, _queued) => {
                    outlet.written.note();
                    if send.write_chunk(bytes).await.is_err() {
                        return;
                    }
                    tracing::trace!(name: "written-queued", target: crate::TIMELINE, "");
                    outlet.pending.fetch_sub(1, Ordering::AcqRel);
                }
                Outgoing::Close(error) => {
                    let mut frame = Vec::new();
                    if encode_goaway(&error, &mut frame).is_ok()
                        && send.write_all(&frame).await.is_ok()
                    {
                        let _ = send.finish();
                        let _ = tokio::time::timeout(FINISH_GRACE, send.stopped()).await;
                    }
                    self.connection.close(
                        crate::connection::close_code(error.code),
                        error.to_string().as_bytes(),
                    );
                    return;
                }
            }
        }
        let mut send = outlet.send.lock().await;
        if write_rest(&outlet, &mut send).await && send.finish().is_ok() {
            // Until the client has everything: a connection closed sooner may lose the last
            // replies (QUIC drops what is unsent, and the client may drop what it has not read).
            let _ = tokio::time::timeout(FINISH_GRACE, send.stopped()).await;
        }
    }
}

/// One attempt, without waiting, to hand `bytes` to quinn, counted as a write: what quinn did
/// not take (it is blocked, or took a part), or `None` when it took them all or the stream is
/// gone (nothing more to send). A noop waker: when quinn is blocked it keeps this waker for the
/// stream, and the writer task's own poll of the rest replaces it.
fn write_once(outlet: &Outlet, send: &mut quinn::SendStream, bytes: Bytes) -> Option<Bytes> {
    let mut chunks = [bytes];
    let attempt = {
        let write = pin!(send.write_chunks(&mut chunks));
        write.poll(&mut Context::from_waker(Waker::noop()))
    };
    outlet.written.note();
    match attempt {
        Poll::Ready(Ok(_)) if chunks[0].is_empty() => None,
        Poll::Ready(Err(_)) => None,
        Poll::Ready(Ok(_)) | Poll::Pending => {
            let [rest] = chunks;
            Some(rest)
        }
    }
}

/// Writes the bytes left to be written first, if any; false when the stream is gone.
async fn write_rest(outlet: &Outlet, send: &mut quinn::SendStream) -> bool {
    let rest = {
        let mut rest = outlet.rest.lock().unwrap_or_else(PoisonError::into_inner);
        outlet.rest_ready.store(false, Ordering::SeqCst);
        rest.take()
    };
    let Some(rest) = rest else {
        return true;
    };
    outlet.written.note();
    if send.write_chunk(rest).await.is_err() {
        return false;
    }
    outlet.pending.fetch_sub(1, Ordering::AcqRel);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connected stream pair on loopback whose receiving end grants `window` bytes of
    /// stream credit at a time: the node's end (the SendStream) and the client's.
    async fn pair(
        dir: &std::path::Path,
        window: u32,
    ) -> (
        quinn::Connection,
        quinn::SendStream,
        quinn::RecvStream,
        quinn::Endpoint,
    ) {
        tasklet_tls::init(dir, &[]).unwrap();
        let server = quinn::Endpoint::server(
            tasklet_tls::server_config(dir).unwrap(),
            ([127, 0, 0, 1], 0).into(),
        )
        .unwrap();
        let mut client = quinn::Endpoint::client(([127, 0, 0, 1], 0).into()).unwrap();
        let tenant = tasklet_tls::Tenant::new(tasklet_tls::DEFAULT_TENANT).unwrap();
        let mut config = tasklet_tls::client_config(dir, &tenant).unwrap();
        let mut transport = quinn::TransportConfig::default();
        transport.stream_receive_window(window.into());
        config.transport_config(Arc::new(transport));
        client.set_default_client_config(config);
        let addr = server.local_addr().unwrap();
        let (to_server, at_server) = tokio::join!(
            async { client.connect(addr, "localhost").unwrap().await.unwrap() },
            async { server.accept().await.unwrap().await.unwrap() }
        );
        // The client opens the stream (as a client of the node does) and says something first,
        // so that the node's end learns of it.
        let (mut out, recv) = to_server.open_bi().await.unwrap();
        out.write_all(b"x").await.unwrap();
        let (send, mut inbound) = at_server.accept_bi().await.unwrap();
        let mut one = [0u8; 1];
        inbound.read_exact(&mut one).await.unwrap();
        std::mem::forget(out);
        std::mem::forget(inbound);
        std::mem::forget(to_server);
        (at_server, send, recv, client)
    }

    fn payload(tag: u8, len: usize) -> Bytes {
        Bytes::from(
            (0..len)
                .map(|i| tag.wrapping_add(i as u8))
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn a_small_reply_goes_out_without_the_writer_task_and_a_blocked_one_waits_for_it() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (connection, send, mut recv, _client) = runtime.block_on(pair(dir.path(), 4096));
        let written = Arc::new(Writes::new());
        let (reply, writer) = outlet(connection, send, Arc::clone(&written), Arc::default());
        assert!(reply.outlet.direct, "on unless TASKLET_NODE_DIRECT_REPLY=0");

        // With no writer task running, a small reply still reaches the client.
        let small = payload(1, 100);
        let sender = reply.clone();
        let first = small.clone();
        std::thread::spawn(move || sender.put(first))
            .join()
            .unwrap();
        let mut got = vec![0u8; small.len()];
        runtime
            .block_on(async {
                tokio::time::timeout(Duration::from_secs(10), recv.read_exact(&mut got)).await
            })
            .expect("the direct write arrives within 10 s")
            .unwrap();
        assert_eq!(got, small);
        assert_eq!(reply.outlet.pending.load(Ordering::Acquire), 0);

        // More than the client's 4 KiB of credit: quinn takes part, the rest waits for the
        // writer, and what is sent after it is queued behind it, not written before it.
        let big = payload(2, 64 << 10);
        let after = payload(3, 50);
        let sender = reply.clone();
        let (b, a) = (big.clone(), after.clone());
        std::thread::spawn(move || {
            sender.put(b);
            // The rest is pending, so this one must not go directly.
            assert!(sender.outlet.pending.load(Ordering::Acquire) > 0);
            // The queue has room, so this does not block though the writer is not running.
            sender.put(a);
        })
        .join()
        .unwrap();
        drop(reply);
        let writer = runtime.spawn(writer.run());
        let got = runtime
            .block_on(async {
                tokio::time::timeout(Duration::from_secs(10), recv.read_to_end(1 << 20)).await
            })
            .expect("the writer finishes within 10 s")
            .unwrap();
        let mut want = big.to_vec();
        want.extend_from_slice(&after);
        assert_eq!(got.len(), want.len());
        assert!(got == want, "the bytes arrive whole and in the order sent");
        runtime.block_on(writer).unwrap();
        assert!(written.count() >= 3);
    }

    #[test]
    fn many_senders_threads_interleave_whole_sends_only() {
        interleave_whole_sends(false);
    }

    #[test]
    fn many_senders_threads_interleave_whole_sends_with_waiting_threads_coming_and_going() {
        interleave_whole_sends(true);
    }

    /// Three threads send records; with `waiters`, runtime tasks keep waiting for the stream's
    /// replies and giving up, so sends are also handed off, some to a wait that just ended.
    fn interleave_whole_sends(waiters: bool) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (connection, send, mut recv, _client) = runtime.block_on(pair(dir.path(), 8192));
        let (reply, writer) = outlet(connection, send, Arc::new(Writes::new()), Arc::default());
        let writer = runtime.spawn(writer.run());
        let stop = Arc::new(AtomicBool::new(false));
        let waiting: Vec<_> = (0..if waiters { 2 } else { 0 })
            .map(|n| {
                let (reply, stop) = (reply.clone(), Arc::clone(&stop));
                runtime.spawn(async move {
                    let mut turn = 0u32;
                    while !stop.load(Ordering::Relaxed) {
                        let wait = reply.hot_wait();
                        // Waits of different lengths, some ending with bytes handed to them.
                        for _ in 0..(turn + n) % 5 {
                            if wait.ready() {
                                wait.write();
                            }
                            tokio::task::yield_now().await;
                        }
                        drop(wait);
                        turn = turn.wrapping_add(1);
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        // Each send is a record: a tag byte, a 2-byte length, then that many copies of the tag.
        // Sizes from a few bytes past the client's credit make some sends go directly, some
        // in part and some through the queue.
        const SENDS: usize = 300;
        let threads: Vec<_> = (0..3u8)
            .map(|t| {
                let reply = reply.clone();
                std::thread::spawn(move || {
                    for i in 0..SENDS {
                        let len = [8usize, 100, 3000, 20_000][(i + t as usize) % 4];
                        let mut record = vec![t];
                        record.extend_from_slice(&(len as u16).to_be_bytes());
                        record.extend(std::iter::repeat_n(t, len));
                        reply.put(Bytes::from(record));
                    }
                })
            })
            .collect();
        drop(reply);
        let reading = runtime.spawn(async move {
            tokio::time::timeout(Duration::from_secs(30), recv.read_to_end(64 << 20)).await
        });
        for thread in threads {
            thread.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        for task in waiting {
            runtime.block_on(task).unwrap();
        }
        let got = runtime
            .block_on(reading)
            .unwrap()
            .expect("everything arrives within 30 s")
            .unwrap();
        runtime.block_on(writer).unwrap();
        let mut at = 0;
        let mut counts = [0usize; 3];
        while at < got.len() {
            let tag = got[at];
            assert!(tag < 3, "a record starts at {at}");
            let len = u16::from_be_bytes([got[at + 1], got[at + 2]]) as usize;
            let body = &got[at + 3..at + 3 + len];
            assert!(body.iter().all(|b| *b == tag), "record at {at} is whole");
            counts[tag as usize] += 1;
            at += 3 + len;
        }
        assert_eq!(counts, [SENDS; 3]);
    }

    #[test]
    fn a_reply_handed_to_a_waiting_runtime_thread_is_written_by_it_or_by_the_writer() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (connection, send, mut recv, _client) = runtime.block_on(pair(dir.path(), 1 << 20));
        let (reply, writer) = outlet(connection, send, Arc::new(Writes::new()), Arc::default());
        assert!(reply.outlet.handoff, "on unless switched off");
        let put_from_a_thread = |bytes: Bytes| {
            let reply = reply.clone();
            std::thread::spawn(move || reply.put(bytes)).join().unwrap();
        };
        let read = |recv: &mut quinn::RecvStream, len: usize| {
            let mut got = vec![0u8; len];
            runtime
                .block_on(async {
                    tokio::time::timeout(Duration::from_secs(10), recv.read_exact(&mut got)).await
                })
                .expect("the bytes arrive within 10 s")
                .unwrap();
            got
        };

        // A waiting thread: the send is left for it, and it writes it.
        let wait = reply.hot_wait();
        let first = payload(4, 40);
        put_from_a_thread(first.clone());
        assert!(wait.ready(), "handed off, not written");
        assert_eq!(reply.outlet.pending.load(Ordering::Acquire), 1);
        wait.write();
        assert!(!wait.ready());
        assert_eq!(reply.outlet.pending.load(Ordering::Acquire), 0);
        assert_eq!(read(&mut recv, first.len()), first);

        // The waiting thread gives up with a send handed to it: the writer task writes it.
        let second = payload(5, 40);
        put_from_a_thread(second.clone());
        drop(wait);
        let writer = runtime.spawn(writer.run());
        assert_eq!(read(&mut recv, second.len()), second);

        // No thread waits: the send goes out directly.
        let fourth = payload(7, 40);
        put_from_a_thread(fourth.clone());
        assert_eq!(read(&mut recv, fourth.len()), fourth);
        drop(reply);
        runtime.block_on(writer).unwrap();
    }
}
