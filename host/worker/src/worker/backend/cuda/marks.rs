//! Marks (stream events, contract 0.2) on the GPU: one timed CUDA event per mark slot, made at
//! the slot's first record and kept until reset or exit, recorded on the worker's stream behind
//! everything handed over before it.
//!
//! A record closes the open launch group first (`Timeline::close_group`), so the event follows
//! every launch posted before it; it waits for nothing. A wait for a mark first waits, as a sync
//! does (deadlines, the watchdog, faults named by launch), for the launches numbered through the
//! last one before the record (`Timeline::drain_through`), then for the event itself, which is
//! then only behind copies or graph replays made since; where it is still not done within
//! [`EVENT_FOLLOWS`], for the whole queue (`Timeline::drain`): waiting for more than asked is
//! allowed, and bounded.
//! The time between two marks is `cuEventElapsedTime`: the device's clock between the records,
//! idle time on the stream included, as CUDA's events measure.

use std::time::{Duration, Instant};

use super::driver::*;
use super::errors;
use super::{BackendError, CudaBackend};

/// Timed, not blocking sync (`cuEventCreate`'s flags).
const CU_EVENT_TIMED: std::ffi::c_uint = 0;

/// How long a mark's event may trail the launches before it (a staged copy's worth) before the
/// wait for it becomes a wait for the whole queue.
const EVENT_FOLLOWS: Duration = Duration::from_millis(5);

/// A mark's event and the last launch before its latest record (0: none).
#[derive(Clone, Copy)]
pub(super) struct Mark {
    event: CuEvent,
    through: u64,
    recorded: bool,
}

/// The marks' events, by slot.
#[derive(Default)]
pub(super) struct Marks {
    slots: Vec<Option<Mark>>,
}

impl Marks {
    fn recorded(&self, mark: u32) -> Option<Mark> {
        self.slots
            .get(mark as usize)
            .copied()
            .flatten()
            .filter(|m| m.recorded)
    }

    /// Destroys every event (at reset, with nothing queued, and at exit).
    pub(super) fn clear(&mut self, drv: &Driver) {
        for m in self.slots.drain(..).flatten() {
            // SAFETY: an event made here; nothing waits on it (the queue is idle or the process
            // ends).
            unsafe { (drv.event_destroy)(m.event) };
        }
    }
}

impl CudaBackend {
    pub(super) fn record_mark_now(&mut self, mark: u32) -> Result<(), BackendError> {
        self.usable()?;
        let i = mark as usize;
        if self.marks.slots.len() <= i {
            self.marks.slots.resize(i + 1, None);
        }
        let event = match self.marks.slots[i] {
            Some(m) => m.event,
            None => {
                let mut e: CuEvent = std::ptr::null_mut();
                // SAFETY: valid out-pointer; the worker's context is current.
                let r = unsafe { (self.drv.event_create)(&mut e, CU_EVENT_TIMED) };
                self.call(check("cuEventCreate", r), "making a stream event")?;
                e
            }
        };
        self.marks.slots[i] = Some(Mark {
            event,
            through: 0,
            recorded: false,
        });
        // The event must follow every launch handed over: the open group goes to the stream first.
        self.timeline.close_group();
        // SAFETY: a live event of this context; the worker's stream.
        let r = unsafe { (self.drv.event_record)(event, self.dev.stream.0) };
        self.call(check("cuEventRecord", r), "recording a stream event")?;
        self.marks.slots[i] = Some(Mark {
            event,
            through: self.next_ordinal.saturating_sub(1),
            recorded: true,
        });
        Ok(())
    }

    pub(super) fn mark_done_now(&mut self, mark: u32) -> Result<bool, BackendError> {
        self.usable()?;
        let Some(m) = self.marks.recorded(mark) else {
            return Ok(true);
        };
        // SAFETY: a live event of this context.
        match unsafe { (self.drv.event_query)(m.event) } {
            CUDA_SUCCESS => Ok(true),
            CUDA_ERROR_NOT_READY => Ok(false),
            code => {
                let e = errors::async_error(self.drv, code, &work_before(mark));
                Err(self.fail(e))
            }
        }
    }

    pub(super) fn wait_mark_now(&mut self, mark: u32) -> Result<(), BackendError> {
        self.usable()?;
        let Some(m) = self.marks.recorded(mark) else {
            return Ok(());
        };
        // The launches before the record, then the event itself, which follows their group's
        // event at once unless copies or graph replays came between (then the queue, below).
        self.timeline
            .drain_through(m.through)
            .map_err(|e| self.fail(e))?;
        let since = Instant::now();
        while since.elapsed() < EVENT_FOLLOWS {
            if self.mark_done_now(mark)? {
                return Ok(());
            }
            std::thread::sleep(Duration::from_micros(20));
        }
        self.timeline.drain().map_err(|e| self.fail(e))?;
        if self.mark_done_now(mark)? {
            return Ok(());
        }
        // Nothing is queued but copies, and the event follows them: done once the stream is.
        // SAFETY: the worker's stream; no kernel is queued on it.
        let r = unsafe { (self.drv.stream_synchronize)(self.dev.stream.0) };
        if r != CUDA_SUCCESS {
            let e = errors::async_error(self.drv, r, &work_before(mark));
            return Err(self.fail(e));
        }
        Ok(())
    }

    pub(super) fn mark_elapsed_now(
        &mut self,
        start: u32,
        end: u32,
    ) -> Result<Duration, BackendError> {
        let (Some(a), Some(_)) = (self.marks.recorded(start), self.marks.recorded(end)) else {
            let never = if self.marks.recorded(start).is_none() {
                start
            } else {
                end
            };
            return Err(super::super::never_recorded(never));
        };
        // The start mark was recorded first on the same stream: done once the end is.
        self.wait_mark_now(end)?;
        let Some(b) = self.marks.recorded(end) else {
            return Err(super::super::never_recorded(end));
        };
        let mut ms: f32 = 0.0;
        // SAFETY: two live timed events of this context, both done; valid out-pointer.
        let r = unsafe { (self.drv.event_elapsed_time)(&mut ms, a.event, b.event) };
        self.call(
            check("cuEventElapsedTime", r),
            "timing between stream events",
        )?;
        if !ms.is_finite() || ms <= 0.0 {
            return Ok(Duration::ZERO);
        }
        // `as` saturates.
        Ok(Duration::from_nanos((f64::from(ms) * 1e6) as u64))
    }
}

fn work_before(mark: u32) -> String {
    format!("the work before mark {mark}")
}
