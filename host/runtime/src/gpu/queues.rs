//! Streams and events of a session (contract 0.2): the operations on them as one request type,
//! so a service that wraps another forwards them all through one method
//! ([`super::GpuService::queue_op`]).

/// A stream of a session: an ordered queue of its work beside the session's default queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId(pub u64);

/// An event of a session: a point recorded in a stream's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId(pub u64);

/// The most streams a session may hold at once.
pub const MAX_SESSION_STREAMS: usize = 16;
/// The most events a session may hold at once.
pub const MAX_SESSION_EVENTS: usize = 64;

/// An operation on a session's streams and events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueOp {
    NewStream,
    DropStream(StreamId),
    /// Refused unless the stream is the session's (before a launch or copy naming it).
    CheckStream(StreamId),
    /// Later work of `stream` waits for the work before `event`'s latest record.
    Wait {
        stream: StreamId,
        event: EventId,
    },
    /// Waits for all work of the stream.
    SyncStream(StreamId),
    NewEvent,
    DropEvent(EventId),
    /// Records `event` after the work queued so far on `stream`.
    Record {
        event: EventId,
        stream: StreamId,
    },
    /// Whether the work before the event's latest record has completed.
    Query(EventId),
    /// Waits for the work before the event's latest record.
    SyncEvent(EventId),
    /// GPU time between the records of `start` and `end`.
    Elapsed {
        start: EventId,
        end: EventId,
    },
}

/// What a [`QueueOp`] answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueReply {
    Done,
    Stream(StreamId),
    Event(EventId),
    Ready(bool),
    Elapsed(std::time::Duration),
}
