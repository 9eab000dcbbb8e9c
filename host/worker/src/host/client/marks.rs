//! Marks on a worker's queue (a tenant's stream events): the slots this host hands out, and the
//! requests that record them and ask about them. A record is posted like a launch: it waits for
//! nothing, and its failure comes back from the next call.

use std::time::Duration;

use super::Worker;
use crate::contract::marks::MAX_MARKS;
use crate::contract::{ErrorKind, Request, Response};
use crate::host::error::WorkerError;

/// The mark slots of one worker in use: `0..next` handed out once, `free` given back since.
#[derive(Debug, Default)]
pub(super) struct MarkSlots {
    next: u32,
    free: Vec<u32>,
}

impl Worker {
    /// A mark slot of this worker's, until [`Worker::drop_mark`] (or reset) gives it back; at
    /// most [`MAX_MARKS`] at once.
    pub fn new_mark(&mut self) -> Result<u32, WorkerError> {
        let slots = &mut self.marks;
        if let Some(m) = slots.free.pop() {
            return Ok(m);
        }
        if slots.next >= MAX_MARKS {
            return Err(WorkerError::op(
                ErrorKind::InvalidArgument,
                format!(
                    "this lease holds {MAX_MARKS} stream events' marks already; drop an event first"
                ),
            ));
        }
        slots.next += 1;
        Ok(slots.next - 1)
    }

    /// Gives mark slot `mark` back (a slot not handed out, or given back already, is ignored).
    pub fn drop_mark(&mut self, mark: u32) {
        let slots = &mut self.marks;
        if mark < slots.next && !slots.free.contains(&mark) {
            slots.free.push(mark);
        }
    }

    /// Mark slots handed out and not given back.
    pub fn marks_held(&self) -> usize {
        self.marks.next as usize - self.marks.free.len()
    }

    /// Records `mark` behind everything sent so far: posted, like a launch (no wait for the
    /// worker; a failure is reported by the next call). Beside a persistent kernel it is
    /// answered, as a write is there ([`Worker::write`]).
    pub fn record_mark(&mut self, mark: u32) -> Result<(), WorkerError> {
        self.usable()?;
        let req = Request::RecordMark { mark };
        if !self.persistent.is_empty() {
            return self.call_ok(&req);
        }
        self.encode(&req);
        self.post_frame("record-mark")
    }

    /// The device time between the latest records of `start` and `end` (recorded after
    /// `start`): waits for the work before `end` only. cuda: the device's clock between the
    /// records; the emulator: the time its launches between them took.
    pub fn mark_elapsed(&mut self, start: u32, end: u32) -> Result<Duration, WorkerError> {
        let req = Request::MarkElapsed { start, end };
        match self.call(&req, self.op_timeout)? {
            Response::Elapsed { nanos } => Ok(Duration::from_nanos(nanos)),
            other => Err(self.unexpected("mark-elapsed", &other)),
        }
    }

    /// Whether the work before the latest record of `mark` has finished (without waiting for it;
    /// a mark never recorded has).
    pub fn mark_done(&mut self, mark: u32) -> Result<bool, WorkerError> {
        match self.call(&Request::QueryMark { mark }, self.op_timeout)? {
            Response::MarkDone { done } => Ok(done),
            other => Err(self.unexpected("query-mark", &other)),
        }
    }

    /// Waits for the work before the latest record of `mark` only; a fault or missed deadline in
    /// it is the answer.
    pub fn wait_mark(&mut self, mark: u32) -> Result<(), WorkerError> {
        self.call_ok(&Request::WaitMark { mark })
    }

    /// Every slot back: the worker forgot its marks at reset.
    pub(super) fn forget_marks(&mut self) {
        self.marks = MarkSlots::default();
    }
}
