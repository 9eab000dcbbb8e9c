//! The worker's end of the channel: takes the host's records in order, answers calls, and tells
//! the host how far it has got — refusing, never misreading, a ring the host could not have
//! written.

use std::sync::atomic::Ordering::*;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::layout::{
    SharedRegion, TransportError, LOC_DATA, LOC_INLINE, LOC_MSG, MSG_AREA, OFF_CLOSED, OFF_COUNTED,
    OFF_GPU_TIME, OFF_HEAD, OFF_HOST_SLEEPING, OFF_HOST_WANTS_SPACE, OFF_LIFE, OFF_LINGER,
    OFF_MAGIC, OFF_RESP_INLINE, OFF_RESP_LEN, OFF_RESP_LOC, OFF_RESP_SEQ, OFF_SIGNAL, OFF_STATE,
    OFF_TAIL, OFF_UNCHARGED, OFF_WORKER_SLEEPING, RESP_INLINE, RESP_OFF, RING, RING_OFF,
    STATE_DEADLINE_EXIT, STATE_FAILED, STATE_READY,
};
use super::ring::{
    record_size, stamp, ALIGN, KIND_CALL, KIND_CALL_IN_DATA, KIND_POSTED, KIND_WRAP, REC_HEADER,
};
use super::wake::{futex_wait, futex_wake, Spin};

/// What the worker's wait for a request came back with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    /// A call's frame was copied into the caller's buffer; answer it with [`WorkerEnd::respond`].
    Call,
    /// A posted frame was copied into the caller's buffer; it gets no response.
    Posted,
    /// The host closed the channel.
    Closed,
    /// The caller's idle check said the host is gone.
    HostGone,
    /// The ring holds something the host could not have written: nothing after it can be found.
    Corrupt(String),
}

/// Most bytes of served posted frames the worker leaves unpublished in `tail` (see
/// [`WorkerEnd::wait_request`]): small beside the ring, so with the worker caught up every record
/// still fits (the largest, wrap included, needs under half the ring).
const PUBLISH_EVERY: usize = RING / 8;

/// The worker's own ceiling on its spin for the next request: a host that is merely a little
/// slower than the worker (a burst of launches, a local loop) is caught without a sleep.
const SPIN_MIN: Duration = Duration::from_micros(2);
const SPIN_MAX: Duration = Duration::from_micros(50);

/// The most the host's linger word may raise that ceiling to, whatever it says.
const LINGER_MAX: Duration = Duration::from_millis(2);

/// The header page of the channel this process serves (its address; 0 while none is open), for
/// the words the launch queue's threads write outside any response ([`announce_deadline_exit`],
/// [`publish_uncharged_since`], [`publish_counted_gpu_time`]). Behind a lock, so the channel is
/// never unmapped between a thread reading the address and writing there.
static SERVING_HEADER: Mutex<usize> = Mutex::new(0);

/// Runs `write` on the open channel's header word at `off` (a u64 word's offset), if one is open.
fn on_serving_u64(off: usize, write: impl FnOnce(&AtomicU64)) {
    let header = SERVING_HEADER.lock().unwrap_or_else(|p| p.into_inner());
    if *header != 0 {
        // SAFETY: an aligned u64 word of the open channel's header page, which stays mapped
        // while the lock is held (`WorkerEnd`'s drop clears the address first).
        write(unsafe { AtomicU64::from_ptr((*header + off) as *mut u64) });
    }
}

/// Tells the host, through the channel, that this process is about to end over a kernel past
/// its deadline. The exit itself may take the driver a long while (it tears down a context
/// whose kernel still runs): the host, reading this, knows why at once, and a lease that ends
/// meanwhile charges the kernel its deadline. Called right before `_exit`.
pub fn announce_deadline_exit() {
    let header = SERVING_HEADER.lock().unwrap_or_else(|p| p.into_inner());
    if *header != 0 {
        // SAFETY: the open channel's state word, an aligned u32 of its header page, mapped while
        // the lock is held (as in `on_serving_u64`).
        let word = unsafe { AtomicU32::from_ptr((*header + OFF_STATE) as *mut u32) };
        word.store(STATE_DEADLINE_EXIT, Release);
    }
}

/// Tells the host the GPU time the worker has counted so far (nanoseconds; the word only grows),
/// as it counts it: a lease that ends with the worker given up unasked is charged for work that
/// finished without an answer to report it.
pub fn publish_counted_gpu_time(nanos: u64) {
    on_serving_u64(OFF_COUNTED, |w| {
        w.fetch_max(nanos, Release);
    });
}

/// Tells the host from when (`CLOCK_MONOTONIC` nanoseconds, see [`monotonic_nanos`]; 0: no
/// such time) the device time of the launched-but-unfinished work is in no GPU time reported
/// yet. A lease that ends while the work runs gives the worker up (its time would come only with
/// an answer nobody waits for), and is charged from here to then: a runaway dropped just before
/// its deadline does not run free.
pub fn publish_uncharged_since(nanos: u64) {
    on_serving_u64(OFF_UNCHARGED, |w| w.store(nanos, Release));
}

/// `t` in `CLOCK_MONOTONIC` nanoseconds, the clock the host reads too (an `Instant` has no
/// number of its own to share); at least 1, so that it never reads as none.
pub fn monotonic_nanos(t: Instant) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let now = (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64);
    let ago = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
    now.saturating_sub(ago).max(1)
}

/// The worker's end of the channel.
pub struct WorkerEnd {
    region: SharedRegion,
    /// Ring position of the next record to read.
    read: u32,
    /// Ring position up to which every frame has been served: published as `tail` (only then may
    /// the host reuse the space, and `tail == head` tells it the worker is done).
    served: u32,
    /// The seq of the call being served, if the last frame was a call.
    call: Option<u32>,
    /// Whether the last `wait_request` had to wait for its record (see [`WorkerEnd::behind`]).
    waited: bool,
    /// GPU nanoseconds measured so far, published with the next response
    /// ([`WorkerEnd::set_gpu_time`]).
    gpu_time: u64,
    spin: Spin,
}

impl WorkerEnd {
    pub fn new(region: SharedRegion) -> WorkerEnd {
        let tail = region.u32_at(OFF_TAIL).load(Acquire);
        WorkerEnd {
            region,
            read: tail,
            served: tail,
            call: None,
            waited: false,
            gpu_time: 0,
            spin: Spin::new(SPIN_MIN, SPIN_MAX),
        }
    }

    pub fn data_size(&self) -> usize {
        self.region.data_size()
    }

    /// Where the data region lies in this process and its size: page-aligned, for registering it
    /// with a device (`cuMemHostRegister`) so copies from and to it are DMA. Valid as long as this
    /// `WorkerEnd` lives.
    pub fn data_region(&self) -> (*mut u8, usize) {
        (
            self.region.ptr_at(self.region.data_off()),
            self.region.data_size(),
        )
    }

    /// Where the completion word lies in this process, for a device to store a signalled sync's
    /// seq into (see [`super`]). It sits in the header page, which starts the mapping: the
    /// page `(addr & !4095, 4096)` can be registered with a device on its own.
    pub fn completion_word(&self) -> usize {
        self.region.ptr_at(OFF_SIGNAL) as usize
    }

    /// The seq of the call being served (what its signal must carry), if the last frame taken was
    /// a call.
    pub fn call_seq(&self) -> Option<u32> {
        self.call
    }

    /// The GPU time the backend has measured since the worker started, in nanoseconds: published
    /// with the next response, in its cache line, so that the host learns it with the answer and
    /// at no cost of its own. Never goes back (a smaller value is ignored).
    pub fn set_gpu_time(&mut self, nanos: u64) {
        self.gpu_time = self.gpu_time.max(nanos);
    }

    /// The first `len` bytes of the data region, as the host wrote them for this call.
    /// The host leaves the data region alone while a call is outstanding, so handing out a slice
    /// is sound (posted frames never use it).
    pub fn data(&self, len: usize) -> Option<&[u8]> {
        (len <= self.region.data_size())
            // SAFETY: in bounds; the host does not touch the region until we respond.
            .then(|| unsafe {
                std::slice::from_raw_parts(self.region.ptr_at(self.region.data_off()), len)
            })
    }

    /// The first `len` bytes of the data region, to be filled for a read.
    pub fn data_mut(&mut self, len: usize) -> Option<&mut [u8]> {
        (len <= self.region.data_size())
            // SAFETY: as in `data`; `&mut self` keeps it unique on this side.
            .then(|| unsafe {
                std::slice::from_raw_parts_mut(self.region.ptr_at(self.region.data_off()), len)
            })
    }

    /// Announces that the worker is up. Called on the serving thread, which takes the life lock
    /// here and holds it for as long as it lives (see [`super::life`]).
    pub fn ready(&self) {
        // SAFETY: the life lock's own bytes of the header page, 64-byte aligned; `ready` is
        // called once, as the worker starts serving.
        unsafe { super::life::hold(self.region.ptr_at(OFF_LIFE)) };
        let s = self.region.u32_at(OFF_STATE);
        s.store(STATE_READY, Release);
        futex_wake(s);
        *SERVING_HEADER.lock().unwrap_or_else(|p| p.into_inner()) = self.header_address();
    }

    /// Where the channel's header page is mapped here ([`SERVING_HEADER`]).
    fn header_address(&self) -> usize {
        self.region.u32_at(OFF_MAGIC).as_ptr() as usize
    }

    /// Announces that the worker could not start, with a message for the host.
    pub fn fail(&self, message: &str) {
        let m = crate::contract::codec::truncate_utf8(message, MSG_AREA).as_bytes();
        self.region.put(RESP_OFF, m);
        self.region
            .u32_at(OFF_RESP_LEN)
            .store(m.len() as u32, Relaxed);
        let s = self.region.u32_at(OFF_STATE);
        s.store(STATE_FAILED, Release);
        futex_wake(s);
    }

    /// Tells the host that every frame before ring position `upto` has been served, waking it if
    /// it waits for room.
    fn publish_served(&mut self, upto: u32) {
        if self.served == upto {
            return;
        }
        self.clear_stamps(upto);
        self.served = upto;
        let r = &self.region;
        r.u32_at(OFF_TAIL).store(self.served, SeqCst);
        if r.u32_at(OFF_HOST_WANTS_SPACE).load(SeqCst) != 0 {
            futex_wake(r.u32_at(OFF_TAIL));
        }
    }

    /// [`WorkerEnd::publish_served`] while a call is being answered: the host waits for the
    /// response then, never for room, so no wake-up (and no fence) is needed.
    fn publish_served_in_call(&mut self) {
        if self.served != self.read {
            self.clear_stamps(self.read);
            self.served = self.read;
            self.region.u32_at(OFF_TAIL).store(self.served, Release);
        }
    }

    /// Marks the previous frame served and waits for the next, copying it into `out`. When the
    /// ring stays empty past the spin budget it calls `idle()` once, before sleeping; while idle
    /// it sleeps in one-second slices, calling `host_alive()` after each.
    ///
    /// `tail` is published lazily while posted frames keep coming — every `PUBLISH_EVERY` bytes
    /// (an eighth of the ring), when the ring runs empty, and before a call is performed — so a
    /// burst of launches does not pay a fence per launch, while the host still learns what was
    /// served whenever it could be waiting on it (for room, for an answer, or to see the worker
    /// idle).
    pub fn wait_request(
        &mut self,
        out: &mut Vec<u8>,
        host_alive: &mut dyn FnMut() -> bool,
        idle: &mut dyn FnMut(),
    ) -> Incoming {
        if self.read.wrapping_sub(self.served) as usize >= PUBLISH_EVERY {
            self.publish_served(self.read);
        }
        self.call = None;
        self.waited = false;
        loop {
            if self.region.u32_at(OFF_CLOSED).load(Acquire) != 0 {
                return Incoming::Closed;
            }
            if !self.published() {
                self.waited = true;
                if !self.wait_for_record(host_alive, idle) {
                    return Incoming::HostGone;
                }
                continue;
            }
            match self.take_record(out) {
                Some(Ok(incoming)) => return incoming,
                // A wrap record: look again at the ring's start.
                None => continue,
                Some(Err(why)) => return Incoming::Corrupt(why),
            }
        }
    }

    /// Whether the host was ahead of the worker: the record `wait_request` last returned was
    /// already there when the worker came to it, so more may be waiting behind it. A worker that
    /// had to wait for it was caught up, and looking for another would only cost the hot path (one
    /// launch, then its sync) a cache-line transfer from the host before the launch is made.
    pub fn behind(&self) -> bool {
        !self.waited
    }

    /// Takes the next record only if the host has already published it and it is a posted frame,
    /// copying it into `out`; otherwise leaves it and returns false (a call, an empty ring, or
    /// something [`WorkerEnd::wait_request`] will report). Never waits: the worker takes the
    /// launches of a burst the host got ahead with together, after the first from `wait_request`.
    pub fn take_ready_posted(&mut self, out: &mut Vec<u8>) -> bool {
        loop {
            if !self.published() {
                return false;
            }
            let pos = self.read as usize % RING;
            match self.region.get_record_header(pos).0 {
                KIND_WRAP => self.consume(RING - pos),
                KIND_POSTED => return matches!(self.take_record(out), Some(Ok(Incoming::Posted))),
                _ => return false,
            }
        }
    }

    /// Whether the host has published the record at `read` (its stamp is there).
    fn published(&self) -> bool {
        self.region
            .stamp_at(self.read as usize % RING)
            .load(Acquire)
            == stamp(self.read)
    }

    /// Waits until the record at `read` is published or the channel closes; false if the host is
    /// gone. `idle` runs once the spin gave up, before the first sleep: a host that is merely a
    /// little slower than us (a burst of launches) does not make the backend close a launch group
    /// per launch, and one that went quiet still finds the group closed within the spin budget.
    fn wait_for_record(
        &mut self,
        host_alive: &mut dyn FnMut() -> bool,
        idle: &mut dyn FnMut(),
    ) -> bool {
        // Caught up: the host may be waiting for room (or to see everything served).
        self.publish_served(self.read);
        let r = &self.region;
        let slot = r.stamp_at(self.read as usize % RING);
        let want = stamp(self.read);
        let head = r.u32_at(OFF_HEAD);
        let closed = r.u32_at(OFF_CLOSED);
        let began = Instant::now();
        // The host may let us spin longer (a remote client's requests come a network round trip
        // apart, and a sleeping worker pays a wake-up on each); the adaptive budget still shrinks
        // back when requests stop coming within it, so an idle worker does not burn its core.
        let linger = Duration::from_micros(u64::from(r.u32_at(OFF_LINGER).load(Relaxed)));
        self.spin.set_max(linger.min(LINGER_MAX).max(SPIN_MAX));
        if self
            .spin
            .run(|| slot.load(Acquire) == want || closed.load(Relaxed) != 0)
        {
            self.spin.hit();
            return true;
        }
        self.spin.miss();
        idle();
        if slot.load(Acquire) == want || closed.load(Acquire) != 0 {
            self.spin.late(began.elapsed());
            return true;
        }
        loop {
            // Dekker with the host's `append` (stamp, then `head`, then our flag): either it sees
            // the flag and wakes us, or our read of `head` (and so of the stamp) sees its record.
            r.u32_at(OFF_WORKER_SLEEPING).store(1, SeqCst);
            let v = head.load(SeqCst);
            if slot.load(Acquire) != want && closed.load(SeqCst) == 0 {
                futex_wait(head, v, Duration::from_secs(1));
            }
            r.u32_at(OFF_WORKER_SLEEPING).store(0, Relaxed);
            if slot.load(Acquire) == want || closed.load(Acquire) != 0 {
                self.spin.late(began.elapsed());
                return true;
            }
            if !host_alive() {
                return false;
            }
        }
    }

    /// Reads the published record at `self.read`: None for a wrap record (skipped), else the
    /// frame copied into `out`, or why the ring cannot be what the host wrote.
    fn take_record(&mut self, out: &mut Vec<u8>) -> Option<Result<Incoming, String>> {
        let r = &self.region;
        let pos = self.read as usize % RING;
        let to_end = RING - pos;
        let (kind, len, seq) = r.get_record_header(pos);
        let len = len as usize;
        let (size, off, incoming) = match kind {
            KIND_WRAP => {
                self.consume(to_end);
                return None;
            }
            KIND_POSTED | KIND_CALL => {
                let size = record_size(len);
                if len > MSG_AREA || size > to_end {
                    return Some(Err(format!("a {len}-byte frame at ring position {pos}")));
                }
                let incoming = if kind == KIND_CALL {
                    Incoming::Call
                } else {
                    Incoming::Posted
                };
                (size, RING_OFF + pos + REC_HEADER, incoming)
            }
            KIND_CALL_IN_DATA if len <= r.data_size() => {
                (record_size(0), r.data_off(), Incoming::Call)
            }
            _ => {
                return Some(Err(format!(
                    "a record of kind {kind} and {len} bytes at ring position {pos}"
                )))
            }
        };
        out.clear();
        out.resize(len, 0);
        r.get(off, out);
        let start = self.read;
        self.consume(size);
        if incoming == Incoming::Call {
            // Everything before the call is served: say so before performing it (the host's
            // wait for the answer may ask, `HostEnd::served_past`).
            self.publish_served(start);
            self.call = Some(seq);
        }
        Some(Ok(incoming))
    }

    /// Moves past `size` bytes of the ring.
    fn consume(&mut self, size: usize) {
        self.read = self.read.wrapping_add(size as u32);
    }

    /// Zeroes the stamp slots from `served` up to `upto`, which is about to be published: the host
    /// may write there once `tail` covers it, and must find no stale stamp. Done here, not as each
    /// record is read, so that the worker does not write to ring lines the host may be filling
    /// right then (the next record often shares a cache line with the one just read).
    fn clear_stamps(&self, upto: u32) {
        let mut at = self.served;
        while at != upto {
            self.region.stamp_at(at as usize % RING).store(0, Relaxed);
            at = at.wrapping_add(ALIGN as u32);
        }
    }

    /// Publishes the response to the call last returned by `wait_request`.
    pub fn respond(&mut self, frame: &[u8]) -> Result<(), TransportError> {
        let Some(seq) = self.call else {
            return Err(TransportError::Layout("no call to respond to".into()));
        };
        let r = &self.region;
        let loc = if frame.len() <= RESP_INLINE {
            r.put(OFF_RESP_INLINE, frame);
            LOC_INLINE
        } else if frame.len() <= MSG_AREA {
            r.put(RESP_OFF, frame);
            LOC_MSG
        } else if frame.len() <= r.data_size() {
            r.put(r.data_off(), frame);
            LOC_DATA
        } else {
            return Err(TransportError::TooLarge {
                len: frame.len(),
                cap: r.data_size(),
            });
        };
        r.u32_at(OFF_RESP_LOC).store(loc, Relaxed);
        r.u32_at(OFF_RESP_LEN).store(frame.len() as u32, Relaxed);
        // Published by the seq's store below, like the frame.
        r.u64_at(OFF_GPU_TIME).store(self.gpu_time, Relaxed);
        // The call is served once answered: the host may count on `tail` covering it then.
        self.publish_served_in_call();
        self.call = None;
        let r = &self.region;
        r.u32_at(OFF_RESP_SEQ).store(seq, SeqCst);
        if r.u32_at(OFF_HOST_SLEEPING).load(SeqCst) != 0 {
            futex_wake(r.u32_at(OFF_RESP_SEQ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

impl Drop for WorkerEnd {
    fn drop(&mut self) {
        // Before the region is unmapped (its field drops after this).
        let mut header = SERVING_HEADER.lock().unwrap_or_else(|p| p.into_inner());
        if *header == self.header_address() {
            *header = 0;
        }
    }
}
