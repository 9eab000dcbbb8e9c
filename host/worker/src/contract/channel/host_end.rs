//! The host's end of the channel: posts launches, sends calls, waits for their answers — never
//! trusting what the worker wrote, never waiting without a deadline and a liveness check.

use std::sync::atomic::Ordering::*;
use std::time::{Duration, Instant};

use super::layout::{
    SharedRegion, TransportError, LOC_DATA, LOC_INLINE, LOC_MSG, MSG_AREA, OFF_CLOSED, OFF_COUNTED,
    OFF_GPU_TIME, OFF_HEAD, OFF_HOST_SLEEPING, OFF_HOST_WANTS_SPACE, OFF_LIFE, OFF_LINGER,
    OFF_RESP_INLINE, OFF_RESP_LEN, OFF_RESP_LOC, OFF_RESP_SEQ, OFF_SIGNAL, OFF_STATE, OFF_TAIL,
    OFF_UNCHARGED, OFF_WORKER_SLEEPING, RESP_INLINE, RESP_OFF, RING, RING_OFF, STATE_DEADLINE_EXIT,
    STATE_FAILED, STATE_READY, STATE_STARTING,
};
use super::ring::{
    record_size, stamp, KIND_CALL, KIND_CALL_IN_DATA, KIND_POSTED, KIND_WRAP, REC_HEADER,
};
use super::wake::{futex_wait, futex_wake, Spin};

/// Why a host-side wait ended without a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitError {
    /// The deadline passed.
    Timeout,
    /// The liveness check said the worker is gone.
    Dead(String),
    /// The worker wrote something impossible.
    Protocol(String),
    /// The worker reported that it could not start (start handshake only).
    Failed(String),
}

/// How a call's wait ended (see [`HostEnd::wait_signalled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The worker's response was copied out.
    Response,
    /// The completion word carried the call's seq: the call succeeded; there is no frame.
    Signalled,
}

/// Why a request could not be put on the channel.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// It can never fit (nothing was sent).
    #[error(transparent)]
    TooLarge(#[from] TransportError),
    /// The ring stayed full until the deadline, or the worker died or broke the protocol while
    /// the host waited for room.
    #[error("waiting for room in the request ring: {0:?}")]
    Wait(WaitError),
}

/// Whether `bytes` more fit in the ring between the host's `head` and the worker's `tail`; an
/// error if `tail` cannot be right (the worker claims to have served more than was sent).
fn fits(head: u32, tail: u32, bytes: usize) -> Result<bool, WaitError> {
    let used = head.wrapping_sub(tail) as usize;
    if used > RING {
        return Err(WaitError::Protocol(format!(
            "ring tail {tail} is not within {RING} bytes before head {head}"
        )));
    }
    Ok(RING - used >= bytes)
}

/// Whether `frame` may be posted: it must fit the ring (see [`HostEnd::post`]).
fn postable(frame: &[u8]) -> Result<(), SendError> {
    if frame.len() > MSG_AREA {
        return Err(TransportError::TooLarge {
            len: frame.len(),
            cap: MSG_AREA,
        }
        .into());
    }
    Ok(())
}

/// Host-side wait on one shared word: spin, then futex sleeps announced through `flag`, in
/// slices that each end with `alive()`, until `check` says done (Ok(true)) or fails, or `deadline`.
fn host_wait(
    r: &SharedRegion,
    spin: &mut Spin,
    word_off: usize,
    flag_off: usize,
    deadline: Instant,
    alive: &mut dyn FnMut() -> Option<String>,
    mut check: impl FnMut(u32) -> Result<bool, WaitError>,
) -> Result<(), WaitError> {
    let word = r.u32_at(word_off);
    let mut ok = Ok(false);
    let began = Instant::now();
    if spin.run(|| {
        ok = check(word.load(Acquire));
        !matches!(ok, Ok(false))
    }) {
        spin.hit();
        return ok.map(|_| ());
    }
    spin.miss();
    let mut slice = Duration::from_micros(500);
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Err(WaitError::Timeout);
        }
        r.u32_at(flag_off).store(1, SeqCst);
        let v = word.load(SeqCst);
        ok = check(v);
        if matches!(ok, Ok(false)) {
            futex_wait(word, v, slice.min(deadline - now));
            ok = check(word.load(SeqCst));
        }
        r.u32_at(flag_off).store(0, Relaxed);
        if !matches!(ok, Ok(false)) {
            spin.late(began.elapsed());
            return ok.map(|_| ());
        }
        if let Some(why) = alive() {
            // It may have done it just before dying; that still counts.
            return match check(word.load(SeqCst)) {
                Ok(true) => Ok(()),
                _ => Err(WaitError::Dead(why)),
            };
        }
        slice = (slice * 2).min(Duration::from_millis(20));
    }
}

/// The host's end of one worker's channel.
pub struct HostEnd {
    region: SharedRegion,
    /// Bytes published to the ring (mirrors the shared `head`, which only we write).
    head: u32,
    /// The worker's `tail` when last read (checked then): while it shows enough room, sending
    /// does not touch the cache line the worker writes.
    tail_seen: u32,
    /// Calls sent; the response to a call carries its number.
    seq: u32,
    /// The last call the worker answered with a response that we waited for: every call after it
    /// up to `seq` may still be answered (a signalled sync's response comes late).
    answered: u32,
    /// The GPU time the worker published with the last response waited for, in nanoseconds
    /// ([`HostEnd::gpu_time`]).
    gpu_time: u64,
    spin: Spin,
    space_spin: Spin,
}

impl HostEnd {
    pub fn new(region: SharedRegion) -> HostEnd {
        let head = region.u32_at(OFF_HEAD).load(Acquire);
        HostEnd {
            region,
            head,
            tail_seen: head,
            seq: 0,
            answered: 0,
            gpu_time: 0,
            spin: Spin::new(Duration::from_micros(5), Duration::from_micros(100)),
            space_spin: Spin::new(Duration::from_micros(5), Duration::from_micros(50)),
        }
    }

    pub fn region(&self) -> &SharedRegion {
        &self.region
    }

    /// Lets the worker keep spinning for the next request up to `micros` after activity, instead
    /// of its own short budget (0: its own budget only). The worker reads it before each wait.
    pub fn set_linger(&self, micros: u32) {
        self.region.u32_at(OFF_LINGER).store(micros, Relaxed);
    }

    pub fn data_size(&self) -> usize {
        self.region.data_size()
    }

    /// Copies a payload into the start of the data region. Only while no call is outstanding
    /// (posted frames never use the data region, so queued launches do not mind).
    pub fn write_data(&mut self, src: &[u8]) -> Result<(), TransportError> {
        if src.len() > self.region.data_size() {
            return Err(TransportError::TooLarge {
                len: src.len(),
                cap: self.region.data_size(),
            });
        }
        self.region.put(self.region.data_off(), src);
        Ok(())
    }

    /// Copies the start of the data region out (what the worker answered a read with).
    pub fn read_data(&self, dst: &mut [u8]) -> Result<(), TransportError> {
        if dst.len() > self.region.data_size() {
            return Err(TransportError::TooLarge {
                len: dst.len(),
                cap: self.region.data_size(),
            });
        }
        self.region.get(self.region.data_off(), dst);
        Ok(())
    }

    /// Whether a call frame of `len` bytes can be sent at all, and whether it would need the data
    /// region (so it must not be combined with a payload).
    pub fn frame_needs_data_region(&self, len: usize) -> Result<bool, TransportError> {
        if len <= MSG_AREA {
            Ok(false)
        } else if len <= self.region.data_size() {
            Ok(true)
        } else {
            Err(TransportError::TooLarge {
                len,
                cap: self.region.data_size(),
            })
        }
    }

    /// Queues a frame the worker serves without responding. It must fit the ring ([`MSG_AREA`]):
    /// posted frames stay queued while later calls use the data region, so they cannot live there.
    /// Waits (until `deadline`, checking `alive`) while the ring is full.
    pub fn post(
        &mut self,
        frame: &[u8],
        deadline: Instant,
        alive: &mut dyn FnMut() -> Option<String>,
    ) -> Result<(), SendError> {
        postable(frame)?;
        self.append(KIND_POSTED, frame, frame.len() as u32, 0, deadline, alive)
    }

    /// [`HostEnd::post`] if the ring has room for the frame now; `Ok(false)` (nothing posted)
    /// if it would have to wait. Needs no deadline, so a caller reads the clock only when the ring
    /// is full.
    pub fn try_post(&mut self, frame: &[u8]) -> Result<bool, SendError> {
        postable(frame)?;
        let (skip, total) = self.placement(record_size(frame.len()));
        if !self.has_room(total).map_err(SendError::Wait)? {
            return Ok(false);
        }
        self.write_record(skip, total, KIND_POSTED, frame, frame.len() as u32, 0);
        Ok(true)
    }

    /// Sends a call frame; returns the seq its response will carry (see [`HostEnd::wait`]).
    /// Waits (until `deadline`, checking `alive`) while the ring is full.
    pub fn send(
        &mut self,
        frame: &[u8],
        deadline: Instant,
        alive: &mut dyn FnMut() -> Option<String>,
    ) -> Result<u32, SendError> {
        let seq = self.seq.wrapping_add(1);
        if self.frame_needs_data_region(frame.len())? {
            self.region.put(self.region.data_off(), frame);
            // The record's length says how much of the data region is the frame.
            self.append(
                KIND_CALL_IN_DATA,
                &[],
                frame.len() as u32,
                seq,
                deadline,
                alive,
            )?;
        } else {
            self.append(KIND_CALL, frame, frame.len() as u32, seq, deadline, alive)?;
        }
        self.seq = seq;
        Ok(seq)
    }

    /// Whether the worker has served everything sent so far (never waits). The worker says so
    /// through `tail`, so this is a hint: a lying worker only makes the host wait where it need not.
    pub fn all_served(&self) -> bool {
        self.region.u32_at(OFF_TAIL).load(Acquire) == self.head
    }

    /// The ring position after everything sent so far: pass it to [`HostEnd::served_past`].
    pub fn mark(&self) -> u32 {
        self.head
    }

    /// Whether the worker says it has served everything sent before `mark` (never waits). As
    /// with [`HostEnd::all_served`], a hint from an untrusted peer; a `tail` that cannot be right
    /// reads as "not yet".
    pub fn served_past(&self, mark: u32) -> bool {
        let unserved = self
            .head
            .wrapping_sub(self.region.u32_at(OFF_TAIL).load(Acquire));
        unserved as usize <= RING && unserved <= self.head.wrapping_sub(mark)
    }

    /// Appends one record holding `inline` (after a wrap record if it would straddle the ring's
    /// end) and publishes it.
    fn append(
        &mut self,
        kind: u32,
        inline: &[u8],
        len: u32,
        seq: u32,
        deadline: Instant,
        alive: &mut dyn FnMut() -> Option<String>,
    ) -> Result<(), SendError> {
        let (skip, total) = self.placement(record_size(inline.len()));
        self.wait_for_space(total, deadline, alive)
            .map_err(SendError::Wait)?;
        self.write_record(skip, total, kind, inline, len, seq);
        Ok(())
    }

    /// Where a record of `need` bytes goes: the bytes to skip to the ring's start first (a wrap
    /// record) if it would straddle the end, and the ring bytes it takes in all.
    fn placement(&self, need: usize) -> (usize, usize) {
        let to_end = RING - self.head as usize % RING;
        if need > to_end {
            (to_end, to_end + need)
        } else {
            (0, need)
        }
    }

    /// Writes and publishes a record placed by [`HostEnd::placement`], once there is room.
    fn write_record(
        &mut self,
        skip: usize,
        total: usize,
        kind: u32,
        inline: &[u8],
        len: u32,
        seq: u32,
    ) {
        let r = &self.region;
        let mut at = self.head as usize % RING;
        if skip > 0 {
            r.put_record_header(at, KIND_WRAP, 0, 0);
            r.stamp_at(at).store(stamp(self.head), Release);
            at = 0;
        }
        r.put_record_header(at, kind, len, seq);
        r.put(RING_OFF + at + REC_HEADER, inline);
        // Last: the worker may read the record as soon as it sees this.
        r.stamp_at(at)
            .store(stamp(self.head.wrapping_add(skip as u32)), Release);
        self.head = self.head.wrapping_add(total as u32);
        r.u32_at(OFF_HEAD).store(self.head, SeqCst);
        if r.u32_at(OFF_WORKER_SLEEPING).load(SeqCst) != 0 {
            futex_wake(r.u32_at(OFF_HEAD));
        }
    }

    /// Whether `bytes` more fit in the ring now (never waits). The worker's `tail` is checked: it
    /// may never claim to have served more than was sent.
    fn has_room(&mut self, bytes: usize) -> Result<bool, WaitError> {
        // (A cached tail was checked when read and only understates the room since.)
        if fits(self.head, self.tail_seen, bytes)? {
            return Ok(true);
        }
        let seen = self.region.u32_at(OFF_TAIL).load(Acquire);
        let room = fits(self.head, seen, bytes)?;
        self.tail_seen = seen;
        Ok(room)
    }

    /// Waits until `bytes` more fit in the ring (see [`HostEnd::has_room`]).
    fn wait_for_space(
        &mut self,
        bytes: usize,
        deadline: Instant,
        alive: &mut dyn FnMut() -> Option<String>,
    ) -> Result<(), WaitError> {
        if self.has_room(bytes)? {
            return Ok(());
        }
        let head = self.head;
        let room = |tail: u32| fits(head, tail, bytes);
        host_wait(
            &self.region,
            &mut self.space_spin,
            OFF_TAIL,
            OFF_HOST_WANTS_SPACE,
            deadline,
            alive,
            room,
        )?;
        let seen = self.region.u32_at(OFF_TAIL).load(Acquire);
        if !fits(head, seen, bytes)? {
            return Err(WaitError::Protocol(format!(
                "ring tail moved back to {seen}"
            )));
        }
        self.tail_seen = seen;
        Ok(())
    }

    /// Waits for the response to call `seq` and copies its frame into `out`. Spins, then sleeps
    /// in slices that each end with `alive()` (None: alive; Some(why): gone) until `deadline`.
    ///
    /// While it waits, the response slot may still show the answer to an earlier call that was
    /// signalled (a sync answered through the completion word): any seq after the last answer
    /// waited for and before `seq` means "not yet"; anything else is a protocol violation.
    pub fn wait(
        &mut self,
        seq: u32,
        deadline: Instant,
        alive: &mut dyn FnMut() -> Option<String>,
        out: &mut Vec<u8>,
    ) -> Result<(), WaitError> {
        self.wait_for(seq, false, deadline, alive, out).map(|_| ())
    }

    /// [`HostEnd::wait`] for a `sync`, which the completion word may answer first: then the call
    /// succeeded, `out` is left alone, and the worker's own response is skipped later.
    pub fn wait_signalled(
        &mut self,
        seq: u32,
        deadline: Instant,
        alive: &mut dyn FnMut() -> Option<String>,
        out: &mut Vec<u8>,
    ) -> Result<Answer, WaitError> {
        self.wait_for(seq, true, deadline, alive, out)
    }

    fn wait_for(
        &mut self,
        seq: u32,
        signalled: bool,
        deadline: Instant,
        alive: &mut dyn FnMut() -> Option<String>,
        out: &mut Vec<u8>,
    ) -> Result<Answer, WaitError> {
        let open = seq.wrapping_sub(self.answered);
        let signal = self.region.u32_at(OFF_SIGNAL);
        let mut answer = Answer::Response;
        let arrived = |v: u32| -> Result<bool, WaitError> {
            let behind = seq.wrapping_sub(v);
            if behind == 0 {
                answer = Answer::Response;
                Ok(true)
            } else if behind > open {
                Err(WaitError::Protocol(format!(
                    "response seq {v} while waiting for {seq}"
                )))
            } else if signalled && signal.load(Acquire) == seq {
                answer = Answer::Signalled;
                Ok(true)
            } else {
                Ok(false)
            }
        };
        host_wait(
            &self.region,
            &mut self.spin,
            OFF_RESP_SEQ,
            OFF_HOST_SLEEPING,
            deadline,
            alive,
            arrived,
        )?;
        if answer == Answer::Signalled {
            return Ok(answer);
        }
        self.answered = seq;
        let r = &self.region;
        let loc = r.u32_at(OFF_RESP_LOC).load(Relaxed);
        let len = r.u32_at(OFF_RESP_LEN).load(Relaxed) as usize;
        let off = match loc {
            LOC_INLINE if len <= RESP_INLINE => OFF_RESP_INLINE,
            LOC_MSG if len <= MSG_AREA => RESP_OFF,
            LOC_DATA if len <= r.data_size() => r.data_off(),
            _ => {
                return Err(WaitError::Protocol(format!(
                    "response frame at location {loc} of {len} bytes"
                )))
            }
        };
        out.clear();
        out.resize(len, 0);
        r.get(off, out);
        // In the cache line the seq came in; as untrusted as the frame: a worker can only
        // misreport its own lease's time, and never make it go back.
        self.gpu_time = self.gpu_time.max(r.u64_at(OFF_GPU_TIME).load(Relaxed));
        Ok(answer)
    }

    /// Whether the worker's serving thread has ended, as its life lock tells with no system call
    /// (see [`super::life`]): `Some(true)` ended, `Some(false)` still serving, `None` not known
    /// (the worker is not ready yet, or could not take the lock): ask the kernel. A worker can
    /// only make itself look dead this way (which its host then treats it as).
    pub fn worker_ended(&self) -> Option<bool> {
        super::life::ended(self.region.u32_at(OFF_LIFE))
    }

    /// Whether the worker announced that its watchdog is ending it over a kernel past its
    /// deadline (its process may still be going away).
    pub fn deadline_exit_announced(&self) -> bool {
        self.region.u32_at(OFF_STATE).load(Acquire) == STATE_DEADLINE_EXIT
    }

    /// The GPU time, in nanoseconds, the worker has counted so far, as it counts it (see
    /// [`super::worker_end::publish_counted_gpu_time`]), answers or not. As untrusted as the
    /// time in a response: a worker can only misreport its own lease's.
    pub fn counted_gpu_time(&self) -> u64 {
        self.region.u64_at(OFF_COUNTED).load(Acquire)
    }

    /// From when, on the host's clock, the device time of the worker's launched-but-unfinished
    /// work is in no GPU time it reported (see
    /// [`super::worker_end::publish_uncharged_since`]); None while it has none. As untrusted as
    /// the GPU time: the caller bounds it by what it posted.
    pub fn uncharged_since(&self) -> Option<Instant> {
        let nanos = self.region.u64_at(OFF_UNCHARGED).load(Acquire);
        if nanos == 0 {
            return None;
        }
        let now = super::worker_end::monotonic_nanos(Instant::now());
        Instant::now().checked_sub(Duration::from_nanos(now.saturating_sub(nanos)))
    }

    /// The GPU time, in nanoseconds, the worker had measured since it started when it sent the
    /// last response waited for (a call the completion word answered carries none: the next
    /// response does). Never goes back.
    pub fn gpu_time(&self) -> u64 {
        self.gpu_time
    }

    /// Waits for the worker to report that it started (or failed to, with its message).
    pub fn wait_ready(
        &self,
        deadline: Instant,
        alive: &mut dyn FnMut() -> Option<String>,
    ) -> Result<(), WaitError> {
        let r = &self.region;
        let state = r.u32_at(OFF_STATE);
        loop {
            match state.load(Acquire) {
                STATE_READY => return Ok(()),
                STATE_FAILED => {
                    let len = (r.u32_at(OFF_RESP_LEN).load(Relaxed) as usize).min(MSG_AREA);
                    let mut msg = vec![0u8; len];
                    r.get(RESP_OFF, &mut msg);
                    return Err(WaitError::Failed(
                        String::from_utf8_lossy(&msg).into_owned(),
                    ));
                }
                STATE_STARTING => {}
                s => return Err(WaitError::Protocol(format!("start state {s}"))),
            }
            if let Some(why) = alive() {
                // A worker that wrote its failure and exited: report the failure, not the exit.
                if state.load(Acquire) == STATE_FAILED {
                    continue;
                }
                return Err(WaitError::Dead(why));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(WaitError::Timeout);
            }
            futex_wait(
                state,
                STATE_STARTING,
                (deadline - now).min(Duration::from_millis(2)),
            );
        }
    }

    /// Tells the worker to exit at its next wait.
    pub fn close(&self) {
        let r = &self.region;
        r.u32_at(OFF_CLOSED).store(1, SeqCst);
        futex_wake(r.u32_at(OFF_HEAD));
    }
}

#[cfg(test)]
mod tests;
