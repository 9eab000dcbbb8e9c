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
//! Recording an event waits for nothing: it posts a mark behind the session's work so far to the
//! lease's worker (a slot of the worker's, taken at the event's first record and given back when
//! the event or its session is dropped), as a launch is posted, so a pipeline that records
//! between its chunks keeps its overlap. `SyncEvent` waits for the work before the record only,
//! `Query` asks the worker whether that work has finished (without waiting), and `Elapsed` waits
//! for the end event's work and returns the device time between the two records: on a GPU, the
//! device's clock between them (`cuEventElapsedTime`, time the stream sat idle included); on the
//! emulator, which runs each kernel before the next request, the time its kernels between them
//! took. A never-recorded event is complete, as on CUDA.

use super::LocalGpu;
use crate::error::{invalid, GpuError};
use crate::gpu::queues::{
    EventId, QueueOp, QueueReply, StreamId, MAX_SESSION_EVENTS, MAX_SESSION_STREAMS,
};
use crate::gpu::types::SessionId;
use rustc_hash::FxHashMap;

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

/// An event's latest record: its place among the session's records, the worker's mark slot it
/// was recorded into, and the last launch the work before it includes.
#[derive(Debug, Clone, Copy)]
struct Mark {
    seq: u64,
    slot: u32,
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
                let lease = std::sync::Arc::clone(&s.lease);
                if let Some(Some(mark)) = self.queues_mut(session)?.events.remove(&id) {
                    // Given back only here: the worker's record of it is overwritten by the next.
                    self.give_back_marks(&lease, [mark.slot]);
                }
                QueueReply::Done
            }
            QueueOp::Record { event, stream } => {
                let through = q.stream(stream)?;
                let held = q.event(event)?.map(|m| m.slot);
                let lease = std::sync::Arc::clone(&s.lease);
                // Posted behind the work so far: nothing is waited for.
                let slot = self.run(&lease, |w| {
                    let slot = match held {
                        Some(slot) => slot,
                        None => w.new_mark()?,
                    };
                    match w.record_mark(slot) {
                        Ok(()) => Ok(slot),
                        Err(e) => {
                            if held.is_none() {
                                w.drop_mark(slot);
                            }
                            Err(e)
                        }
                    }
                })?;
                let q = self.queues_mut(session)?;
                q.records += 1;
                let seq = q.records;
                q.events.insert(event, Some(Mark { seq, slot, through }));
                QueueReply::Done
            }
            QueueOp::Query(event) => match q.event(event)? {
                Some(mark) => {
                    let lease = std::sync::Arc::clone(&s.lease);
                    QueueReply::Ready(self.run(&lease, |w| w.mark_done(mark.slot))?)
                }
                None => QueueReply::Ready(true),
            },
            QueueOp::SyncEvent(event) => {
                if let Some(mark) = q.event(event)? {
                    let lease = std::sync::Arc::clone(&s.lease);
                    self.run(&lease, |w| w.wait_mark(mark.slot))?;
                }
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
                let lease = std::sync::Arc::clone(&s.lease);
                QueueReply::Elapsed(self.run(&lease, |w| w.mark_elapsed(a.slot, b.slot))?)
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

    /// Gives the worker's mark slots of `queues`' events back (their session is dropped).
    pub(super) fn drop_marks(&self, lease: &crate::lease::Lease, queues: &Queues) {
        self.give_back_marks(lease, queues.events.values().flatten().map(|m| m.slot));
    }

    /// Gives mark slots back to the lease's worker. Never fails: a lease that ended took its
    /// worker's slots with it.
    fn give_back_marks(&self, lease: &crate::lease::Lease, slots: impl IntoIterator<Item = u32>) {
        let mut slots = slots.into_iter().peekable();
        if slots.peek().is_none() {
            return;
        }
        let _ = self.manager.with_worker(lease, |w| {
            slots.for_each(|slot| w.drop_mark(slot));
            Ok(())
        });
    }

    fn sync_session(&mut self, session: SessionId) -> Result<(), GpuError> {
        let s = self.session(session)?;
        self.run(&s.lease, |w| w.sync())?;
        self.usage.synced();
        Ok(())
    }
}
