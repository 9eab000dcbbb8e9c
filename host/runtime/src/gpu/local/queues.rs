//! Streams and events on a [`LocalGpu`].
//!
//! A lease's worker executes one in-order queue of kernels, and every stream of a session is
//! ordered onto it: the work of one stream stays in its order, and a wait on an event is met
//! because the work before the event's record was queued before the waiting stream's later work.
//! Launches naming a stream are the session's launches, checked and run as those are, so the
//! worker's deadlines, its watchdog and the GPU time charged to the lease hold unchanged.
//!
//! Copies between host and device memory naming a stream (`stream_write`, `stream_read`) wait
//! only for the launches that stream's work depends on: its own launches, those before the
//! events it waits on, and the session's launches and graph replays made outside any stream
//! (which every stream's later work comes after, as on CUDA's default stream). The worker is told
//! the last such launch's ordinal and copies beside the later kernels (cuda: on a copy stream of
//! its own), so a copy on one stream overlaps a kernel on another.
//!
//! Recording an event waits for all work queued before it and reads the device time the
//! lease's worker has spent so far: the elapsed time between two events is the device time of
//! the lease's work between their records (kernels; idle time does not count). A query is
//! answered from the record (complete once recorded); a never-recorded event is complete, as on
//! CUDA.

use super::LocalGpu;
use crate::error::{invalid, GpuError};
use crate::gpu::queues::{
    EventId, QueueOp, QueueReply, StreamId, MAX_SESSION_EVENTS, MAX_SESSION_STREAMS,
};
use crate::gpu::types::SessionId;
use rustc_hash::FxHashMap;
use std::time::Duration;

/// A session's streams and events.
#[derive(Default)]
pub(super) struct Queues {
    /// Each stream, with the ordinal of the last launch its later copies must see finished (its
    /// own launches' and those of the events it waited on).
    streams: FxHashMap<StreamId, u64>,
    events: FxHashMap<EventId, Option<Mark>>,
    /// Records made in the session so far: orders marks.
    records: u64,
    /// The last launch (or the place of the last graph replay) the session made outside any
    /// stream: every stream's later copies wait for it too.
    barrier: u64,
}

/// An event's latest record: its place among the session's records, the lease's device time by
/// then, and the last launch the work before it includes.
#[derive(Debug, Clone, Copy)]
struct Mark {
    seq: u64,
    gpu_time: Duration,
    through: u64,
}

impl Queues {
    /// The last launch the stream's next copy must see finished; refused unless the stream is
    /// the session's.
    fn stream(&self, id: StreamId) -> Result<u64, GpuError> {
        if let Some(&through) = self.streams.get(&id) {
            return Ok(through.max(self.barrier));
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
                self.queues_mut(session)?.streams.insert(id, 0);
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
                // Launches are met by the one in-order queue; copies wait for what it names.
                if let Some(mark) = q.event(event)? {
                    let q = self.queues_mut(session)?;
                    if let Some(through) = q.streams.get_mut(&stream) {
                        *through = (*through).max(mark.through);
                    }
                }
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
                let through = q.stream(stream)?;
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
                q.events.insert(
                    event,
                    Some(Mark {
                        seq,
                        gpu_time,
                        through,
                    }),
                );
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

    /// The last launch a copy on `stream` must see finished; refused unless the stream is the
    /// session's.
    pub(super) fn stream_needs(
        &self,
        session: SessionId,
        stream: StreamId,
    ) -> Result<u64, GpuError> {
        self.session(session)?.queues.stream(stream)
    }

    /// Launch `ordinal` was made on `stream`: its later copies wait for it.
    pub(super) fn stream_launched(&mut self, session: SessionId, stream: StreamId, ordinal: u64) {
        if let Ok(q) = self.queues_mut(session) {
            if let Some(through) = q.streams.get_mut(&stream) {
                *through = (*through).max(ordinal);
            }
        }
    }

    /// Work outside any stream up to launch `through` (or a graph replay placed before it): every
    /// stream's later copies wait for it.
    pub(super) fn default_launched(&mut self, session: SessionId, through: u64) {
        if let Ok(q) = self.queues_mut(session) {
            q.barrier = q.barrier.max(through);
        }
    }

    fn sync_session(&mut self, session: SessionId) -> Result<(), GpuError> {
        let s = self.session(session)?;
        self.run(&s.lease, |w| w.sync())?;
        self.usage.synced();
        Ok(())
    }
}
