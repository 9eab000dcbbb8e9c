//! What a connection's streams hand its GPU thread, and what the GPU thread hands back.

use crate::shared::Unanswered;
use bytes::Bytes;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use tasklet_wire::{BufferId, ErrorReply, Request, RequestId, SessionId};
use tokio::sync::OwnedSemaphorePermit;

/// One piece of work for the connection's GPU thread, in the order its stream carried it.
pub(crate) struct Job {
    pub request_id: RequestId,
    pub work: Work,
    /// The share of the connection's queue budget this job's bytes hold; returned when the job
    /// is done.
    pub _budget: Option<OwnedSemaphorePermit>,
}

pub(crate) enum Work {
    /// A whole request (a MEM_WRITE or STREAM_WRITE only when it carries no data).
    Request(Request),
    /// Consecutive bytes of a MEM_WRITE's (or STREAM_WRITE's) data, written at `offset` of the
    /// buffer.
    WritePiece(WritePiece),
}

pub(crate) struct WritePiece {
    /// The stream a STREAM_WRITE names; `None` for a MEM_WRITE.
    pub stream: Option<u64>,
    pub session: SessionId,
    pub buffer: BufferId,
    pub offset: u64,
    /// The piece's bytes as they were read from the stream (shared with quinn's buffers, not
    /// copied): the GPU thread gathers them into staging memory.
    pub chunks: Vec<Bytes>,
    /// Their length in all.
    pub len: usize,
    /// The write's bytes from `offset` on, this piece's among them: the first piece of a write
    /// checks the whole span, so a write that does not fit changes nothing.
    pub rest: u64,
    pub first: bool,
    /// Set by the GPU thread when the write's first piece is refused (it does not fit): the
    /// write's later pieces are dropped, whatever the session's failure held meanwhile (a
    /// barrier on another stream may have reported and cleared it).
    pub refused: Arc<AtomicBool>,
}

/// What a stream's writer sends.
pub(crate) enum Outgoing {
    /// Encoded frames, counted in the connection's queued reply bytes until written.
    Bytes(Bytes, QueuedReply),
    /// Close the connection: GOAWAY with this error on the stream, then a QUIC close with the
    /// same code and message.
    Close(ErrorReply),
    /// Nothing to write but what a direct write left (`outlet`): wakes the writer for it.
    Flush,
}

pub(crate) use crate::outlet::ReplyTo;
use crate::reply_budget::QueuedReply;

/// The jobs a stream decoded from one read, in order, handed to the GPU thread together: a
/// burst of pipelined frames (a thousand LAUNCHes in one datagram train) then costs one channel
/// send and at most one wake of the GPU thread, not one of each per frame.
pub(crate) struct Batch {
    pub jobs: Vec<Job>,
    /// Where the replies go: the writer of the stream that carried the requests. One for the
    /// batch (its jobs all came on one stream), as is the count below: a job then takes no
    /// reference counts of its own, each of which the stream's task would raise and the GPU
    /// thread lower, passing their cache lines between two cores for every launch.
    pub reply: ReplyTo,
    /// Counts the batch's requests as unanswered until the batch is done.
    pub _unanswered: Unanswered,
    /// The jobs came from inside a branch of a fork (see `connection::forks`): a stream hands
    /// over what it read at every fork marker, so a batch is all inside one branch or all
    /// outside any. Only a branch's large reads are sent beside other streams' (see
    /// `dispatch::reads`).
    pub branch: bool,
}
