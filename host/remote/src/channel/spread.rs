//! One large write or read spread over several streams of the connection (docs/wire.md, "One
//! transfer over several streams"): a FORK on the channel's stream, then on each of the
//! channel's branch streams a BRANCH, one part's request (a MEM_WRITE with its data, or a
//! MEM_READ), and a BRANCH_END. On some machines a QUIC connection moves more bytes a second
//! over several streams than over one; the node serves the parts in the session's order all the
//! same.
//!
//! The branch streams are opened when first needed and kept for the channel's life. Every part's
//! request id comes from the channel's tracker, so that a barrier on the channel's own stream
//! settles a spread write's parts as it settles any other write.

use super::{
    block_until, client_decoder, data_frame, encode, Bulk, Channel, Handed, Stop, WRITE_FRAMES,
};
use crate::error::ClientError;
use crate::sink::Spread;
use bytes::Bytes;
use std::sync::OnceLock;
use tasklet_wire::limits::{MAX_BRANCHES, MAX_CHUNK};
use tasklet_wire::{Decoder, Reply, Request, RequestId};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Transfers of at least this many bytes are spread, when the client is set to spread them: each
/// part then still moves many MiB, and a smaller transfer's time is mostly its round trip, which
/// spreading does not shorten.
pub(crate) const SPREAD_MIN: u64 = 32 << 20;

/// The streams a client spreads a write or read of 32 MiB or more over unless told otherwise:
/// `TASKLET_TRANSFER_STREAMS` (1 to 16), read once, else 1 (not spread). On loopback spreading
/// measured no faster (an H200 machine: within its noise, and the spread transfers lost packets
/// one stream did not) and slower on 2 cores (4 streams 20–45 % below one); a stream's
/// flow-control window (16 MiB) per round trip is what it lifts, on long paths.
pub fn streams() -> usize {
    static STREAMS: OnceLock<usize> = OnceLock::new();
    *STREAMS.get_or_init(|| {
        std::env::var("TASKLET_TRANSFER_STREAMS")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .map_or(1, clamp_streams)
    })
}

/// `count` within 1 to 16 (`MAX_BRANCHES`).
pub fn clamp_streams(count: usize) -> usize {
    count.clamp(1, usize::from(MAX_BRANCHES))
}

/// `len` bytes cut into the parts a transfer spread over `count` streams sends (offset into the
/// transfer, length), each at most `most` bytes (the node's limit on one message's data);
/// `None` when the transfer goes whole on the channel's stream.
pub(crate) fn parts(len: u64, most: u64, count: usize) -> Option<Vec<(u64, u64)>> {
    let count = count as u64;
    if count < 2 || len < SPREAD_MIN || len.div_ceil(count) > most {
        return None;
    }
    let mut at = 0;
    Some(
        (0..count)
            .map(|i| {
                let part = len / count + u64::from(i < len % count);
                at += part;
                (at - part, part)
            })
            .collect(),
    )
}

/// One of the channel's branch streams.
pub(super) struct Branch {
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    decoder: Decoder,
    /// Bytes read past the last reply, for the next.
    pending: Bytes,
}

/// What a branch's task hands back: the branch (to keep), and how its part went.
type Joined<E> = (Branch, Result<(), E>);

/// A spread read's parts' request ids, and their tasks.
type StartedReads = (Vec<RequestId>, Vec<JoinHandle<Joined<Stop>>>);

impl Channel {
    /// Sends `parts` (each a MEM_WRITE and its data, all of one session), each on a branch
    /// stream of its own; returns once their data is with QUIC, as a write on this stream does.
    /// Their failure comes back from the session's next barrier, on this stream.
    pub fn post_spread(&mut self, parts: &[(Request, &[u8])]) -> Result<(), ClientError> {
        self.usable()?;
        let branches = self.take_branches(parts.len())?;
        let fork = self.fork(parts.len())?;
        let mut queues = Vec::with_capacity(parts.len());
        let mut tasks = Vec::with_capacity(parts.len());
        for mut branch in branches {
            let (frames, mut queued) = mpsc::channel::<Bytes>(WRITE_FRAMES);
            queues.push(frames);
            tasks.push(self.runtime.spawn(async move {
                while let Some(frame) = queued.recv().await {
                    if let Err(err) = branch.send.write_chunk(frame).await {
                        return (branch, Err(err));
                    }
                }
                (branch, Ok(()))
            }));
        }
        // Once the FORK is out, a part that cannot be sent would leave the node waiting for it.
        let sent = self
            .feed_parts(fork, parts, &queues)
            .map_err(|err| self.abandon(err));
        drop(queues);
        let joined = self.join(tasks);
        let written = joined.and_then(|written| {
            written
                .into_iter()
                .try_for_each(|outcome| outcome.map_err(|err| self.write_failed(err)))
        });
        // The cause first: a part that could not be sent closed the connection (`abandon`),
        // which the branches' writes then fail with.
        sent.and(written)
    }

    /// Puts each part's frames on its branch's queue: a BRANCH and the request first, then the
    /// data a chunk of each part in turn (so that every stream has some), then BRANCH_END.
    fn feed_parts(
        &mut self,
        fork: u64,
        parts: &[(Request, &[u8])],
        queues: &[mpsc::Sender<Bytes>],
    ) -> Result<(), ClientError> {
        let mut encoders = Vec::with_capacity(parts.len());
        for ((request, _), queue) in parts.iter().zip(queues) {
            let mut head = self.marker(&Request::Branch { fork })?;
            let id = self.start(request)?;
            let encoder = encode(id, request, &mut head)?;
            encoders.push(encoder);
            self.queue(queue, head.into())?;
        }
        let mut at = 0;
        loop {
            let mut more = false;
            for (((_, data), encoder), queue) in parts.iter().zip(&mut encoders).zip(queues) {
                let (Some(encoder), Some(chunk)) = (encoder.as_mut(), data.get(at..)) else {
                    continue;
                };
                let chunk = &chunk[..chunk.len().min(MAX_CHUNK as usize)];
                if chunk.is_empty() {
                    continue;
                }
                let frame = data_frame(encoder, chunk)?;
                self.queue(queue, frame)?;
                more = true;
            }
            if !more {
                break;
            }
            at += MAX_CHUNK as usize;
        }
        for queue in queues {
            let end = self.marker(&Request::BranchEnd { fork })?;
            self.queue(queue, end.into())?;
        }
        Ok(())
    }

    /// Sends `parts` (MEM_READs of one session, each with where its bytes go in `into`), each on
    /// a branch stream of its own, and puts their data in `into` as it arrives. The first
    /// failed part's error is returned, once every part's reply has come.
    pub fn call_spread(
        &mut self,
        parts: &[(Request, usize)],
        into: &mut dyn Spread,
    ) -> Result<(), ClientError> {
        self.usable()?;
        // A read reports a refused pipelined op before it; which part's reply would is not
        // known, so a SYNC of its own reports it first.
        if let Some(session) = parts.first().and_then(|(request, _)| request.session()) {
            if !self.tracker.unsynced(session).is_empty() {
                self.call(&Request::Sync { session })?;
            }
        }
        let branches = self.take_branches(parts.len())?;
        let fork = self.fork(parts.len())?;
        let (handed, mut arriving) = mpsc::channel(super::HAND_OVER_BATCHES * parts.len());
        // As for a write: once the FORK is out, every part goes, or the connection is closed.
        let (ids, tasks) = self
            .start_reads(fork, parts, branches, handed)
            .map_err(|err| self.abandon(err))?;
        let mut at: Vec<usize> = parts.iter().map(|(_, at)| *at).collect();
        let mut failed = None;
        loop {
            let Some(next) = block_until(&self.runtime, self.deadline, arriving.recv()) else {
                tasks.iter().for_each(JoinHandle::abort);
                return Err(self.out_of_time());
            };
            // None: every task is done.
            let Some((index, next)) = next else { break };
            match next {
                Handed::Reply(request_id, reply) => {
                    if request_id != ids[index] {
                        return Err(self.protocol(format!(
                            "a reply to request {request_id} on the stream of request {}",
                            ids[index]
                        )));
                    }
                    if let Err(err) = self.tracker.complete(request_id, &reply) {
                        return Err(self.protocol(err.to_string()));
                    }
                    if let Reply::Error { opcode, error } = reply {
                        failed.get_or_insert(ClientError::Failed { opcode, error });
                    }
                }
                Handed::Data(pieces) => {
                    for piece in pieces {
                        if let Err(err) = into.put_at(at[index], &piece) {
                            // The other parts' data would wait for readers that are gone.
                            tasks.iter().for_each(JoinHandle::abort);
                            return Err(self.abandon(err));
                        }
                        at[index] += piece.len();
                    }
                }
            }
        }
        let joined = self.join(tasks)?;
        for outcome in joined {
            outcome.map_err(|stop| self.stopped(stop))?;
        }
        match failed {
            None => Ok(()),
            Some(err) => Err(err),
        }
    }

    /// Starts each part's task on its branch: the part's frames written, then its reply read
    /// and handed over. Returns the parts' request ids and the tasks.
    fn start_reads(
        &mut self,
        fork: u64,
        parts: &[(Request, usize)],
        branches: Vec<Branch>,
        handed: mpsc::Sender<(usize, Handed)>,
    ) -> Result<StartedReads, ClientError> {
        let mut ids = Vec::with_capacity(parts.len());
        let mut tasks = Vec::with_capacity(parts.len());
        for (index, ((request, _), branch)) in parts.iter().zip(branches).enumerate() {
            let mut frames = self.marker(&Request::Branch { fork })?;
            let id = self.start(request)?;
            encode(id, request, &mut frames)?;
            frames.extend_from_slice(&self.marker(&Request::BranchEnd { fork })?);
            ids.push(id);
            let handed = handed.clone();
            tasks.push(self.runtime.spawn(read_part(branch, frames, index, handed)));
        }
        Ok((ids, tasks))
    }

    /// `count` branch streams, opened where the channel has fewer; they come back with
    /// [`Channel::join`].
    fn take_branches(&mut self, count: usize) -> Result<Vec<Branch>, ClientError> {
        while self.branches.len() < count {
            let opened = block_until(&self.runtime, self.deadline, self.connection.open_bi());
            let Some(opened) = opened else {
                return Err(self.out_of_time());
            };
            let (send, recv) =
                opened.map_err(|err| self.fail(crate::connect::refusal_or_loss(&err)))?;
            self.branches.push(Branch {
                send,
                recv,
                decoder: client_decoder(),
                pending: Bytes::new(),
            });
        }
        Ok(self.branches.drain(..count).collect())
    }

    /// Writes a FORK of `branches` on this stream, after what was gathered; returns its number.
    fn fork(&mut self, branches: usize) -> Result<u64, ClientError> {
        let fork = self.next_fork;
        self.next_fork += 1;
        let branches = u8::try_from(branches).unwrap_or(u8::MAX);
        let frame = self.marker(&Request::Fork { fork, branches })?;
        self.gathered.extend_from_slice(&frame);
        self.flush()?;
        Ok(fork)
    }

    /// A spread transfer that cannot go on once its FORK is out leaves the node waiting for
    /// branches that will not come (or sending data no one reads): the connection is closed, so
    /// that the node ends what it held for it at once, and every later call fails as
    /// disconnected.
    fn abandon(&mut self, error: ClientError) -> ClientError {
        self.connection
            .close(0u32.into(), b"a spread transfer could not be completed");
        self.fail(error)
    }

    /// A FORK, BRANCH or BRANCH_END, encoded.
    fn marker(&mut self, marker: &Request) -> Result<Vec<u8>, ClientError> {
        let id = self.start(marker)?;
        let mut frame = Vec::new();
        encode(id, marker, &mut frame)?;
        Ok(frame)
    }

    /// Hands `frame` to a branch's task; an error only when the wait passed the deadline (a
    /// task that ended early says why when it is joined).
    fn queue(&mut self, queue: &mpsc::Sender<Bytes>, frame: Bytes) -> Result<(), ClientError> {
        match block_until(&self.runtime, self.deadline, queue.send(frame)) {
            Some(_) => Ok(()),
            None => Err(self.out_of_time()),
        }
    }

    /// Waits for every branch's task, keeping the branches (in order) and returning each
    /// part's outcome.
    fn join<E>(
        &mut self,
        tasks: Vec<JoinHandle<Joined<E>>>,
    ) -> Result<Vec<Result<(), E>>, ClientError> {
        let mut outcomes = Vec::with_capacity(tasks.len());
        let mut tasks = tasks.into_iter();
        while let Some(mut task) = tasks.next() {
            let Some(joined) = block_until(&self.runtime, self.deadline, &mut task) else {
                task.abort();
                tasks.for_each(|t| t.abort());
                return Err(self.out_of_time());
            };
            match joined {
                Ok((branch, outcome)) => {
                    self.branches.push(branch);
                    outcomes.push(outcome);
                }
                // The task panicked or the runtime is shutting down: its stream went with it.
                Err(err) => {
                    tasks.for_each(|t| t.abort());
                    let why = format!("a transfer's stream was lost: {err}");
                    return Err(self.fail(ClientError::Disconnected(why)));
                }
            }
        }
        Ok(outcomes)
    }
}

/// A branch's task for one part of a spread read: writes its frames, then reads the reply and
/// its data, handing them to the calling thread.
async fn read_part(
    mut branch: Branch,
    frames: Vec<u8>,
    index: usize,
    handed: mpsc::Sender<(usize, Handed)>,
) -> Joined<Stop> {
    if let Err(err) = branch.send.write_all(&frames).await {
        // Told as the same failure on the stream's other half would be.
        let read = match err {
            quinn::WriteError::ConnectionLost(lost) => quinn::ReadError::ConnectionLost(lost),
            quinn::WriteError::Stopped(code) => quinn::ReadError::Reset(code),
            quinn::WriteError::ZeroRttRejected => quinn::ReadError::ZeroRttRejected,
            quinn::WriteError::ClosedStream => quinn::ReadError::ClosedStream,
        };
        return (branch, Err(Stop::Read(read)));
    }
    let Branch {
        send,
        recv,
        decoder,
        pending,
    } = branch;
    let mut bulk = Bulk::new(recv, decoder, pending, index);
    bulk.awaiting_reply = true;
    let (bulk, outcome) = bulk.run(handed).await;
    let branch = Branch {
        send,
        recv: bulk.recv,
        decoder: bulk.decoder,
        pending: bulk.pending,
    };
    (branch, outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_the_transfer_in_order_or_it_goes_whole() {
        let most = 1 << 30;
        assert_eq!(
            parts(SPREAD_MIN - 1, most, 4),
            None,
            "small transfers go whole"
        );
        let len = SPREAD_MIN * 3 + 5;
        assert_eq!(parts(len, most, 1), None, "one stream: whole");
        for count in [2, 3, 4, 16] {
            let Some(parts) = parts(len, most, count) else {
                panic!("{count} streams, and a {len}-byte transfer not spread");
            };
            assert_eq!(parts.len(), count);
            let mut at = 0;
            for (offset, part) in &parts {
                assert_eq!(*offset, at, "{parts:?}");
                assert!(part.abs_diff(len / count as u64) <= 1, "{parts:?}");
                at += part;
            }
            assert_eq!(at, len);
            // A part over the node's limit on one message: whole (the node then says so).
            assert_eq!(super::parts(len, len / count as u64 - 1, count), None);
        }
        assert_eq!((clamp_streams(0), clamp_streams(17)), (1, 16));
    }
}
