//! Streams and events on a [`LocalGpu`].
//!
//! A lease's worker executes one in-order queue, and every stream of a session is ordered onto
//! it: the work of one stream stays in its order, and a wait on an event is met because the work
//! before the event's record was queued before the waiting stream's later work. Launches and
//! copies naming a stream are the session's launches and copies, checked and run as those are,
//! so the worker's deadlines, its watchdog and the GPU time charged to the lease hold unchanged.
//!
//! Recording an event waits for the work queued before it and reads the device time the lease's
//! worker has spent so far: the elapsed time between two events is the device time of the
//! lease's work between their records (kernels; idle time does not count). A query is answered
//! from the record (complete once recorded); a never-recorded event is complete, as on CUDA.

use super::LocalGpu;
use crate::error::{invalid, GpuError};
use crate::gpu::queues::{
    EventId, QueueOp, QueueReply, StreamId, MAX_SESSION_EVENTS, MAX_SESSION_STREAMS,
};
use crate::gpu::types::SessionId;
use rustc_hash::{FxHashMap, FxHashSet};
use std::time::Duration;

/// A session's streams and events.
#[derive(Default)]
pub(super) struct Queues {
    streams: FxHashSet<StreamId>,
    events: FxHashMap<EventId, Option<Mark>>,
    /// Records made in the session so far: orders marks.
    records: u64,
}

/// An event's latest record: its place among the session's records and the lease's device time
/// by then.
#[derive(Debug, Clone, Copy)]
struct Mark {
    seq: u64,
    gpu_time: Duration,
}

impl Queues {
    fn stream(&self, id: StreamId) -> Result<(), GpuError> {
        if self.streams.contains(&id) {
            return Ok(());
        }
        Err(invalid(format!(
            "stream {} belongs to another session, or was dropped; a stream is usable only in the session that made it",
            id.0
        )))
    }

    fn event(&self, id: EventId) -> Result<Option<Mark>, GpuError> {
        self.events.get(&id).copied().ok_or_else(|| {
            invalid(format!(
                "event {} belongs to another session, or was dropped; an event is usable only in the session that made it",
                id.0
            ))
        })
    }
}

impl LocalGpu {
    pub(super) fn queue(
        &mut self,
        session: SessionId,
        op: QueueOp,
    ) -> Result<QueueReply, GpuError> {
        let s = self.session(session)?;
        let q = &s.queues;
        let reply = match op {
            QueueOp::NewStream => {
                if q.streams.len() >= MAX_SESSION_STREAMS {
                    return Err(invalid(format!(
                        "a session holds at most {MAX_SESSION_STREAMS} streams; drop one first"
                    )));
                }
                let id = StreamId(self.ids.fresh());
                self.queues_mut(session)?.streams.insert(id);
                QueueReply::Stream(id)
            }
            QueueOp::DropStream(id) => {
                self.queues_mut(session)?.streams.remove(&id);
                QueueReply::Done
            }
            QueueOp::CheckStream(id) => {
                q.stream(id)?;
                QueueReply::Done
            }
            QueueOp::Wait { stream, event } => {
                q.stream(stream)?;
                q.event(event)?;
                // Met by the one in-order queue (see the module's docs).
                QueueReply::Done
            }
            QueueOp::SyncStream(stream) => {
                q.stream(stream)?;
                self.sync_session(session)?;
                QueueReply::Done
            }
            QueueOp::NewEvent => {
                if q.events.len() >= MAX_SESSION_EVENTS {
                    return Err(invalid(format!(
                        "a session holds at most {MAX_SESSION_EVENTS} events; drop one first"
                    )));
                }
                let id = EventId(self.ids.fresh());
                self.queues_mut(session)?.events.insert(id, None);
                QueueReply::Event(id)
            }
            QueueOp::DropEvent(id) => {
                self.queues_mut(session)?.events.remove(&id);
                QueueReply::Done
            }
            QueueOp::Record { event, stream } => {
                q.stream(stream)?;
                q.event(event)?;
                let lease = std::sync::Arc::clone(&s.lease);
                // A ping after the sync: a sync the device signalled carries no time report.
                let gpu_time = self.run(&lease, |w| {
                    w.sync()?;
                    w.ping()?;
                    Ok(w.gpu_time())
                })?;
                self.usage.synced();
                let q = self.queues_mut(session)?;
                q.records += 1;
                let seq = q.records;
                q.events.insert(event, Some(Mark { seq, gpu_time }));
                QueueReply::Done
            }
            QueueOp::Query(event) => {
                q.event(event)?;
                QueueReply::Ready(true)
            }
            QueueOp::SyncEvent(event) => {
                q.event(event)?;
                QueueReply::Done
            }
            QueueOp::Elapsed { start, end } => {
                let (Some(a), Some(b)) = (q.event(start)?, q.event(end)?) else {
                    return Err(invalid(
                        "both events must be recorded before the time between them is asked for",
                    ));
                };
                if b.seq < a.seq {
                    return Err(invalid(
                        "the end event was recorded before the start event; swap them",
                    ));
                }
                QueueReply::Elapsed(b.gpu_time.saturating_sub(a.gpu_time))
            }
        };
        Ok(reply)
    }

    fn queues_mut(&mut self, id: SessionId) -> Result<&mut Queues, GpuError> {
        self.sessions
            .get_mut(&id)
            .map(|s| &mut s.queues)
            .ok_or_else(|| invalid(format!("no session {id} here")))
    }

    fn sync_session(&mut self, session: SessionId) -> Result<(), GpuError> {
        let s = self.session(session)?;
        self.run(&s.lease, |w| w.sync())?;
        self.usage.synced();
        Ok(())
    }
}
