//! QUEUE_OP: one operation on a session's streams and events (protocol version 7; contract
//! 0.2's `gpu-stream` and `event` over the fabric). Stream and event ids are the node's,
//! checked by the node's GPU service against the session, and so against the connection.

use crate::codec::{Reader, Writer};
use crate::error::DecodeError;
use crate::ids::SessionId;

/// What a QUEUE_OP does; each op is its tag, then its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueOp {
    /// Tag 0: a new stream; the reply is its id.
    NewStream,
    /// Tag 1: drop a stream.
    DropStream { stream: u64 },
    /// Tag 2: refused unless the stream is the session's.
    CheckStream { stream: u64 },
    /// Tag 3: the stream's later work waits for the work before the event's latest record.
    Wait { stream: u64, event: u64 },
    /// Tag 4: waits for all work of the stream.
    SyncStream { stream: u64 },
    /// Tag 5: a new event; the reply is its id.
    NewEvent,
    /// Tag 6: drop an event.
    DropEvent { event: u64 },
    /// Tag 7: record the event after the work queued so far on the stream.
    Record { event: u64, stream: u64 },
    /// Tag 8: whether the work before the event's latest record has completed.
    Query { event: u64 },
    /// Tag 9: waits for the work before the event's latest record.
    SyncEvent { event: u64 },
    /// Tag 10: the GPU time between the records of `start` and `end`.
    Elapsed { start: u64, end: u64 },
}

/// QUEUE_OP's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queue {
    pub session: SessionId,
    pub op: QueueOp,
}

/// QUEUE_OP's OK reply: its tag, then its field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueAnswer {
    /// Tag 0: done, nothing to say.
    Done,
    /// Tag 1: a new stream's id.
    Stream(u64),
    /// Tag 2: a new event's id.
    Event(u64),
    /// Tag 3: whether the event's work has completed.
    Ready(bool),
    /// Tag 4: nanoseconds of GPU time between two events.
    ElapsedNs(u64),
}

impl Queue {
    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u64(self.session.0);
        match self.op {
            QueueOp::NewStream => w.u8(0),
            QueueOp::DropStream { stream } => {
                w.u8(1);
                w.u64(stream);
            }
            QueueOp::CheckStream { stream } => {
                w.u8(2);
                w.u64(stream);
            }
            QueueOp::Wait { stream, event } => {
                w.u8(3);
                w.u64(stream);
                w.u64(event);
            }
            QueueOp::SyncStream { stream } => {
                w.u8(4);
                w.u64(stream);
            }
            QueueOp::NewEvent => w.u8(5),
            QueueOp::DropEvent { event } => {
                w.u8(6);
                w.u64(event);
            }
            QueueOp::Record { event, stream } => {
                w.u8(7);
                w.u64(event);
                w.u64(stream);
            }
            QueueOp::Query { event } => {
                w.u8(8);
                w.u64(event);
            }
            QueueOp::SyncEvent { event } => {
                w.u8(9);
                w.u64(event);
            }
            QueueOp::Elapsed { start, end } => {
                w.u8(10);
                w.u64(start);
                w.u64(end);
            }
        }
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<Queue, DecodeError> {
        let session = SessionId(r.u64("session")?);
        let op = match r.u8("queue op")? {
            0 => QueueOp::NewStream,
            1 => QueueOp::DropStream {
                stream: r.u64("stream")?,
            },
            2 => QueueOp::CheckStream {
                stream: r.u64("stream")?,
            },
            3 => QueueOp::Wait {
                stream: r.u64("stream")?,
                event: r.u64("event")?,
            },
            4 => QueueOp::SyncStream {
                stream: r.u64("stream")?,
            },
            5 => QueueOp::NewEvent,
            6 => QueueOp::DropEvent {
                event: r.u64("event")?,
            },
            7 => QueueOp::Record {
                event: r.u64("event")?,
                stream: r.u64("stream")?,
            },
            8 => QueueOp::Query {
                event: r.u64("event")?,
            },
            9 => QueueOp::SyncEvent {
                event: r.u64("event")?,
            },
            10 => QueueOp::Elapsed {
                start: r.u64("start")?,
                end: r.u64("end")?,
            },
            tag => {
                return Err(DecodeError::InvalidValue {
                    field: "op",
                    value: tag.into(),
                })
            }
        };
        Ok(Queue { session, op })
    }
}

impl QueueAnswer {
    pub(crate) fn encode(&self, w: &mut Writer) {
        match *self {
            QueueAnswer::Done => w.u8(0),
            QueueAnswer::Stream(id) => {
                w.u8(1);
                w.u64(id);
            }
            QueueAnswer::Event(id) => {
                w.u8(2);
                w.u64(id);
            }
            QueueAnswer::Ready(ready) => {
                w.u8(3);
                w.bool(ready);
            }
            QueueAnswer::ElapsedNs(ns) => {
                w.u8(4);
                w.u64(ns);
            }
        }
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<QueueAnswer, DecodeError> {
        Ok(match r.u8("answer")? {
            0 => QueueAnswer::Done,
            1 => QueueAnswer::Stream(r.u64("stream")?),
            2 => QueueAnswer::Event(r.u64("event")?),
            3 => QueueAnswer::Ready(r.bool("ready")?),
            4 => QueueAnswer::ElapsedNs(r.u64("elapsed_ns")?),
            tag => {
                return Err(DecodeError::InvalidValue {
                    field: "answer",
                    value: tag.into(),
                })
            }
        })
    }
}
