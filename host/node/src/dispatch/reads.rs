//! Replies that stream what they read from the device (MEM_READ, STREAM_READ, GPU_SUBMIT): the
//! device is read in pieces, each sent as it is read, so a large read needs neither the whole of
//! it in memory nor its whole time before the first byte leaves. A STREAM_READ's pieces are each
//! read on its stream, in order.
//!
//! A piece large enough for a direct transfer is read into the connection's staging memory (one
//! copy by the worker, a DMA on cuda) and handed to the stream's writer as it is, without a
//! copy: the buffer goes back to the pool once QUIC is done with the bytes (sent and
//! acknowledged). With several buffers, the device read of a piece overlaps the sending of the
//! ones before it.

use super::Dispatcher;
use crate::connection::STAGING_PIECE;
use crate::job::ReplyTo;
use crate::job::Work;
use crate::reply::{abort, fail, send_piece, start_reply, Failure};
use crate::shared::Unanswered;
use bytes::Bytes;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tasklet_runtime::gpu::{self, GpuService, DIRECT_MIN_BYTES};
use tasklet_runtime::guest_memory::staging::StagingBuffer;
use tasklet_runtime::GpuError;
use tasklet_wire::{DataEncoder, ErrorCode, Opcode, Reply, Request, RequestId};

/// Bytes read from the device at once: a buffer of staging memory.
pub(super) const READ_PIECE: u64 = STAGING_PIECE as u64;

/// How long a read waits for a staging buffer that QUIC still holds (the client reads slowly)
/// before it reads the piece into a plain buffer instead, in slices between which it looks
/// whether the connection closed.
const STAGING_WAIT: Duration = Duration::from_secs(1);
const STAGING_SLICE: Duration = Duration::from_millis(50);

/// MEM_READs of branches whose replies are streaming, at most one a stream, sent a piece each in
/// turn (and a piece for every batch the GPU thread takes, so that new reads do not hold back
/// open ones). The parts of a read spread over several streams (docs/wire.md, "One transfer
/// over several streams") come to the GPU thread one after another; were each sent whole before
/// the next began, only one stream would move at a time, waiting on QUIC for the staging
/// buffers of its pieces. Reads change nothing on the device, so they may go side by side; any
/// other job waits until every open read is sent (see `Dispatcher::run`).
///
/// Only a branch's reads: a client reads a spread read's streams side by side, as it sent them,
/// but one that sends large reads on two streams of its own may read one reply to its end
/// before it starts on the other, and interleaved, the other's pieces would fill that stream's
/// flow-control window and the connection's reply budget, and hold the GPU thread (and the
/// first reply) until the connection ends.
#[derive(Default)]
pub(super) struct OpenReads {
    reads: VecDeque<OpenRead>,
}

impl OpenReads {
    pub fn is_empty(&self) -> bool {
        self.reads.is_empty()
    }

    /// Drops every open read (the connection closed: their streams are gone).
    pub fn clear(&mut self) {
        self.reads.clear();
    }
}

struct OpenRead {
    to: ReplyTo,
    data: DataEncoder,
    read: Read,
    /// Bytes sent so far.
    sent: u64,
    began: Instant,
    /// The batch that carried the read stays counted as unanswered until its reads are sent.
    _batch: Rc<Unanswered>,
}

/// A read of `len` bytes at `offset` of a session's buffer: on `stream` of the session
/// (STREAM_READ), or after all of the session's work (MEM_READ, GPU_SUBMIT's output).
pub(super) struct Read {
    pub stream: Option<gpu::StreamId>,
    pub session: gpu::SessionId,
    pub buffer: gpu::BufferId,
    pub offset: u64,
    pub len: u64,
}

impl Dispatcher {
    /// MEM_READ or STREAM_READ, all of it: see [`Dispatcher::begin_read`].
    pub(super) fn stream_read(
        &mut self,
        to: &ReplyTo,
        request_id: RequestId,
        read: Read,
    ) -> Result<(), Failure> {
        if let Some((mut data, sent)) = self.begin_read(to, request_id, &read)? {
            self.stream_rest(to, &mut data, &read, sent);
        }
        Ok(())
    }

    /// A MEM_READ of several pieces, begun and left open in `open` to be sent a piece at a time
    /// between other streams' reads' pieces (see [`OpenReads`]). A read open on the same stream
    /// is sent to its end first: a reply's data frames follow it with nothing between.
    pub(super) fn open_read(
        &mut self,
        to: &ReplyTo,
        request_id: RequestId,
        read: Read,
        batch: &Rc<Unanswered>,
        open: &mut OpenReads,
    ) {
        while open.reads.iter().any(|r| r.to.same_stream(to)) {
            self.step_reads(open);
        }
        let began = Instant::now();
        match self.begin_read(to, request_id, &read) {
            Err(failure) => {
                fail(to, request_id, Opcode::MemRead, failure);
                self.observe_read(began);
            }
            Ok(None) => {}
            Ok(Some((data, sent))) => open.reads.push_back(OpenRead {
                to: to.clone(),
                data,
                read,
                sent,
                began,
                _batch: Rc::clone(batch),
            }),
        }
    }

    /// Sends the next piece of the first open read, which then goes to the back of the line
    /// (or is done).
    pub(super) fn step_reads(&mut self, open: &mut OpenReads) {
        let Some(mut next) = open.reads.pop_front() else {
            return;
        };
        next.sent = self
            .send_piece_at(&next.to, &mut next.data, &next.read, next.sent)
            .unwrap_or(next.read.len);
        if next.sent < next.read.len && !self.closed.load(Ordering::Acquire) {
            open.reads.push_back(next);
            return;
        }
        self.observe_read(next.began);
    }

    /// An open read's time, from its start to its last piece (or its refusal).
    fn observe_read(&mut self, began: Instant) {
        let shared = &self.shared;
        self.latency
            .get(Opcode::MemRead, || {
                shared.metrics.op_seconds(Opcode::MemRead)
            })
            .observe(began.elapsed().as_secs_f64());
    }

    /// Sends every open read to its end.
    pub(super) fn finish_reads(&mut self, open: &mut OpenReads) {
        while !open.reads.is_empty() {
            self.step_reads(open);
        }
    }

    /// MEM_READ or STREAM_READ: the whole span is checked, and the first piece read, before the
    /// OK reply is sent; a failure after that (the worker lost mid-read) can only close the
    /// connection. A barrier for the session's refused pipelined ops: one held is the read's
    /// answer (a refused write must not go unreported behind bytes it never wrote). Returns the
    /// reply's data encoder and the bytes sent, `None` when the reply could not begin.
    fn begin_read(
        &mut self,
        to: &ReplyTo,
        request_id: RequestId,
        read: &Read,
    ) -> Result<Option<(DataEncoder, u64)>, Failure> {
        if let Some(failure) = self.held.remove(&read.session) {
            return Err(Failure(failure));
        }
        let (offset, len) = (read.offset, read.len);
        // The same refusal the host gives a read too large for the reader's memory, for the read
        // as a whole rather than for a piece of it.
        let limit = self.grant.limits.memory;
        if len > limit {
            return Err(Failure::new(
                ErrorCode::OutOfBounds,
                format!("a read of {len} bytes cannot fit in the tasklet's {limit}-byte memory limit; read in pieces"),
            ));
        }
        let first_len = len.min(READ_PIECE);
        if len > first_len {
            // The span's end, checked before any piece is read.
            offset.checked_add(len).ok_or_else(|| {
                Failure::new(
                    ErrorCode::OutOfBounds,
                    format!(
                        "bytes {offset}..{} are outside the buffer",
                        offset as u128 + len as u128
                    ),
                )
            })?;
            self.read_piece(read, len, 0)?;
        }
        let first = self.read_piece(read, 0, first_len)?;
        let reply = match read.stream {
            None => Reply::MemRead { len },
            Some(_) => Reply::StreamRead { len },
        };
        let Some(mut data) = start_reply(to, request_id, &reply) else {
            return Ok(None);
        };
        send_piece(to, &mut data, first);
        Ok(Some((data, first_len)))
    }

    /// Sends the rest of a streamed read whose first `sent` bytes are on their way, piece by
    /// piece. A failure now can only abort the stream (the OK reply has begun). Returns the bytes
    /// sent in all.
    pub(super) fn stream_rest(
        &mut self,
        to: &ReplyTo,
        data: &mut DataEncoder,
        read: &Read,
        sent: u64,
    ) -> u64 {
        let mut at = sent;
        while at < read.len {
            match self.send_piece_at(to, data, read, at) {
                Some(next) => at = next,
                None => return at,
            }
        }
        read.len
    }

    /// Reads and sends the piece of `read` that starts `at` bytes in; the bytes sent after it,
    /// or `None` when the read failed (the reply had begun, so the connection is closed, saying
    /// why).
    fn send_piece_at(
        &mut self,
        to: &ReplyTo,
        data: &mut DataEncoder,
        read: &Read,
        at: u64,
    ) -> Option<u64> {
        let piece = (read.len - at).min(READ_PIECE);
        match self.read_piece(read, at, piece) {
            Ok(bytes) => {
                send_piece(to, data, bytes);
                Some(at + piece)
            }
            Err(err) => {
                abort(to, &err.to_string());
                None
            }
        }
    }

    /// Reads `len` bytes (at most [`READ_PIECE`]) `at` bytes into `read`'s span: into staging
    /// memory when the piece is large enough and a buffer comes free in time, else into a plain
    /// buffer. A piece on a stream is read into a plain buffer: the service reads into memory
    /// of its choosing only after all of the session's work.
    pub(super) fn read_piece(&mut self, read: &Read, at: u64, len: u64) -> Result<Bytes, GpuError> {
        let (session, buffer) = (read.session, read.buffer);
        // `at` is within the span, whose end was checked not to overflow.
        let offset = read.offset.saturating_add(at);
        if let Some(stream) = read.stream {
            return self
                .gpu()
                .stream_read(session, stream, buffer, offset, len)
                .map(Bytes::from);
        }
        let size = usize::try_from(len).unwrap_or(usize::MAX);
        if size >= DIRECT_MIN_BYTES && size <= self.staging.buffer_size() {
            if let Some(mut staged) = self.staging_buffer() {
                let into = staged.guest_bytes(size);
                self.gpu().mem_read_into(session, buffer, offset, into)?;
                return Ok(Bytes::from_owner(staged));
            }
        }
        self.gpu()
            .mem_read(session, buffer, offset, len)
            .map(Bytes::from)
    }

    /// A free staging buffer, waiting for one QUIC is done with up to [`STAGING_WAIT`] (less if
    /// the connection closes meanwhile).
    pub(super) fn staging_buffer(&self) -> Option<StagingBuffer> {
        if self.staging.limit() == 0 {
            return None;
        }
        let until = Instant::now() + STAGING_WAIT;
        loop {
            match self.staging.take(STAGING_SLICE) {
                Ok(Some(buffer)) => return Some(buffer),
                // Staging memory cannot be made (out of memory, or of descriptors): read plain.
                Err(_) => return None,
                Ok(None) => {}
            }
            if self.closed.load(Ordering::Acquire) || Instant::now() >= until {
                return None;
            }
        }
    }
}

/// The read a job is, when it is one [`OpenReads`] takes (from a branch): a MEM_READ of more
/// than one piece.
pub(super) fn interleaved(work: &Work) -> Option<Read> {
    match work {
        Work::Request(Request::MemRead {
            session,
            buffer,
            offset,
            len,
        }) if *len > READ_PIECE => Some(Read {
            stream: None,
            session: super::convert::session(*session),
            buffer: super::convert::buffer(*buffer),
            offset: *offset,
            len: *len,
        }),
        _ => None,
    }
}
