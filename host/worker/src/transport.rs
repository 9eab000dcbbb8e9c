//! Shared memory between a host and one worker: a memfd mapped `MAP_SHARED` by both processes.
//!
//! ```text
//! 0      header page: magic/sizes, then atomics on their own cache lines
//!        (request seq + frame location, worker-sleeping flag, response seq + frame location,
//!         host-sleeping flag, start state, closed flag)
//! 4 KiB  request message area  (MSG_AREA bytes)
//!        response message area (MSG_AREA bytes)
//!        data region           (data_size bytes: write payloads, read results, oversized frames)
//! ```
//!
//! One request is in flight at a time: the host writes a frame (and payload), publishes it by
//! storing the next request seq, and waits for the response seq to match. Each side spins for a
//! short, adaptive while (a round trip is a few hundred ns when both are on a core) and then sleeps
//! on a futex, announcing that through its sleeping flag so the other side only pays for a
//! `FUTEX_WAKE` syscall when someone is actually asleep. The flag protocol is Dekker-style: the
//! sleeper stores its flag then re-reads the seq, the publisher stores the seq then reads the flag,
//! all `SeqCst`, so at least one of them sees the other and no wake-up is lost.
//!
//! The worker is untrusted: the host copies a response frame out of the mapping before decoding
//! it, bounds-checks every location and length the worker wrote, and never waits without a
//! timeout and a liveness check. The memfd is sealed against resizing so a worker cannot truncate
//! it under the host (which would turn host reads into SIGBUS).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};
use std::time::{Duration, Instant};

/// Bytes of each message area. Frames that do not fit go to the data region instead (only
/// frames without a payload can be that large: module text, kernel lists).
pub const MSG_AREA: usize = 64 * 1024;
/// Default size of the data region; writes and reads larger than this are chunked by the host.
pub const DEFAULT_DATA_SIZE: usize = 8 * 1024 * 1024;

const MAGIC: u64 = u64::from_le_bytes(*b"TASKLETW");
/// Bumped whenever the frames in `protocol` change, so a host and a worker built from different
/// sources refuse each other at start instead of misreading frames. 2: launch deadline, richer info.
/// 3: guest memory attachments (attach/detach-memory, write-from, read-into).
const VERSION: u32 = 3;
const HEADER: usize = 4096;

const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_MSG_AREA: usize = 12;
const OFF_DATA_SIZE: usize = 16;
const OFF_REQ_SEQ: usize = 64;
const OFF_REQ_LOC: usize = 68;
const OFF_REQ_LEN: usize = 72;
const OFF_WORKER_SLEEPING: usize = 128;
const OFF_RESP_SEQ: usize = 192;
const OFF_RESP_LOC: usize = 196;
const OFF_RESP_LEN: usize = 200;
const OFF_HOST_SLEEPING: usize = 256;
const OFF_STATE: usize = 320;
const OFF_CLOSED: usize = 384;

const LOC_MSG: u32 = 0;
const LOC_DATA: u32 = 1;

const STATE_STARTING: u32 = 0;
const STATE_READY: u32 = 1;
const STATE_FAILED: u32 = 2;

#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("shared memory: {0}")]
    Io(#[from] io::Error),
    #[error("shared memory layout: {0}")]
    Layout(String),
    #[error("frame of {len} bytes does not fit the {cap}-byte region")]
    TooLarge { len: usize, cap: usize },
}

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

/// What the worker's wait for a request came back with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Incoming {
    /// A request frame was copied into the caller's buffer.
    Request,
    /// The host closed the channel.
    Closed,
    /// The caller's idle check said the host is gone.
    HostGone,
}

/// The mapping itself. Both ends hold one; only raw pointers into it are ever handed out.
pub struct SharedRegion {
    base: NonNull<u8>,
    len: usize,
    data_size: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is plain shared memory; all access goes through atomics or bounds-checked
// raw copies, and no references into it outlive a call.
unsafe impl Send for SharedRegion {}
unsafe impl Sync for SharedRegion {}

impl SharedRegion {
    /// Creates a fresh memfd of the full layout with a `data_size`-byte data region, sealed
    /// against resizing, and maps it. The fd is close-on-exec; the spawner clears that only in
    /// the child it starts.
    pub fn create(data_size: usize) -> Result<SharedRegion, TransportError> {
        if !(MSG_AREA..=1 << 30).contains(&data_size) {
            return Err(TransportError::Layout(format!("data region of {data_size} bytes")));
        }
        let len = HEADER + 2 * MSG_AREA + data_size;
        // SAFETY: plain syscalls with valid arguments; the fd is owned right after.
        let fd = unsafe {
            let raw = libc::memfd_create(
                c"tasklet-worker".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            );
            if raw < 0 {
                return Err(io::Error::last_os_error().into());
            }
            let fd = OwnedFd::from_raw_fd(raw);
            // A host that closed its stdio would get fd 0-2 here, which the child's stdio setup
            // (before exec) overwrites: move it above them.
            if raw < 3 {
                let high = libc::fcntl(raw, libc::F_DUPFD_CLOEXEC, 3);
                if high < 0 {
                    return Err(io::Error::last_os_error().into());
                }
                OwnedFd::from_raw_fd(high)
            } else {
                fd
            }
        };
        // SAFETY: valid fd.
        unsafe {
            if libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) != 0 {
                return Err(io::Error::last_os_error().into());
            }
            let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
            if libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) != 0 {
                return Err(io::Error::last_os_error().into());
            }
        }
        let region = Self::map(fd, len, data_size)?;
        region.u64_at(OFF_DATA_SIZE).store(data_size as u64, Relaxed);
        region.u32_at(OFF_MSG_AREA).store(MSG_AREA as u32, Relaxed);
        region.u32_at(OFF_VERSION).store(VERSION, Relaxed);
        region.u64_at(OFF_MAGIC).store(MAGIC, Release);
        Ok(region)
    }

    /// Maps a region created by [`SharedRegion::create`] in another process, from an inherited
    /// fd (which this takes ownership of), checking its layout.
    pub fn from_fd(fd: RawFd) -> Result<SharedRegion, TransportError> {
        // SAFETY: fstat on an arbitrary number is harmless; we only take ownership once it is
        // known to be an open fd.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if fd < 0 || unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(TransportError::Layout(format!("fd {fd} is not open: {}", io::Error::last_os_error())));
        }
        // SAFETY: the fd is open and handed to us for good.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let len = st.st_size as usize;
        if len < HEADER + 2 * MSG_AREA + MSG_AREA {
            return Err(TransportError::Layout(format!("region of {len} bytes is too small")));
        }
        let mut region = Self::map(fd, len, 0)?;
        if region.u64_at(OFF_MAGIC).load(Acquire) != MAGIC {
            return Err(TransportError::Layout("bad magic".into()));
        }
        let version = region.u32_at(OFF_VERSION).load(Relaxed);
        if version != VERSION {
            return Err(TransportError::Layout(format!("protocol version {version}, this worker speaks {VERSION}")));
        }
        let msg = region.u32_at(OFF_MSG_AREA).load(Relaxed) as usize;
        let data = region.u64_at(OFF_DATA_SIZE).load(Relaxed) as usize;
        if msg != MSG_AREA || HEADER + 2 * MSG_AREA + data != len {
            return Err(TransportError::Layout(format!("sizes msg={msg} data={data} do not match a {len}-byte region")));
        }
        region.data_size = data;
        Ok(region)
    }

    fn map(fd: OwnedFd, len: usize, data_size: usize) -> Result<SharedRegion, TransportError> {
        // SAFETY: mapping a file we own, whole, shared; checked for failure.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error().into());
        }
        let base = NonNull::new(p as *mut u8).ok_or_else(|| TransportError::Layout("null mapping".into()))?;
        Ok(SharedRegion { base, len, data_size, fd })
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub fn data_size(&self) -> usize {
        self.data_size
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off % 4 == 0 && off + 4 <= HEADER);
        // SAFETY: in bounds of the (page-aligned) mapping, aligned, and only accessed atomically.
        unsafe { AtomicU32::from_ptr(self.base.as_ptr().add(off) as *mut u32) }
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= HEADER);
        // SAFETY: as above.
        unsafe { AtomicU64::from_ptr(self.base.as_ptr().add(off) as *mut u64) }
    }

    /// Copies `src` into the mapping at `off`. Bounds-checked.
    fn put(&self, off: usize, src: &[u8]) {
        assert!(off.checked_add(src.len()).is_some_and(|end| end <= self.len), "shared region write out of bounds");
        // SAFETY: bounds checked above; the peer may race on these bytes, which can corrupt only
        // the bytes themselves, never our memory.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.base.as_ptr().add(off), src.len()) }
    }

    /// Copies bytes at `off` out of the mapping into `dst`. Bounds-checked.
    fn get(&self, off: usize, dst: &mut [u8]) {
        assert!(off.checked_add(dst.len()).is_some_and(|end| end <= self.len), "shared region read out of bounds");
        // SAFETY: as in `put`.
        unsafe { std::ptr::copy_nonoverlapping(self.base.as_ptr().add(off), dst.as_mut_ptr(), dst.len()) }
    }

    fn data_off(&self) -> usize {
        HEADER + 2 * MSG_AREA
    }
}

impl Drop for SharedRegion {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `map` mapped; no references into it survive (see above).
        unsafe {
            libc::munmap(self.base.as_ptr() as *mut libc::c_void, self.len);
        }
    }
}

fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT on a valid, aligned, mapped word (shared, so not FUTEX_PRIVATE).
    // EAGAIN/EINTR/ETIMEDOUT all just mean "look again".
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, &ts as *const libc::timespec, 0usize, 0u32);
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a valid, aligned, mapped word.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX, 0usize, 0usize, 0u32);
    }
}

/// Adaptive spin budget: grows while the other side keeps answering within it, shrinks when it
/// had to sleep anyway, so a chatty peer gets sub-microsecond hand-offs and an idle one costs no
/// CPU beyond `min`.
#[derive(Debug, Clone)]
struct Spin {
    budget: Duration,
    min: Duration,
    max: Duration,
}

impl Spin {
    fn new(min: Duration, max: Duration) -> Spin {
        Spin { budget: max, min, max }
    }

    /// Spins until `done()` or the budget runs out; says whether `done()` was seen.
    #[inline]
    fn run(&mut self, mut done: impl FnMut() -> bool) -> bool {
        let start = Instant::now();
        let mut i = 0u32;
        loop {
            if done() {
                return true;
            }
            std::hint::spin_loop();
            i = i.wrapping_add(1);
            // Reading the clock costs ~20 ns: do it every 64 turns.
            if i % 64 == 0 {
                let spent = start.elapsed();
                if spent >= self.budget {
                    return false;
                }
                // On a busy machine the peer may be waiting for *our* core: after a few µs of
                // spinning, let the scheduler run it.
                if spent > Duration::from_micros(4) && i % 1024 == 0 {
                    // SAFETY: plain syscall.
                    unsafe { libc::sched_yield() };
                }
            }
        }
    }

    fn hit(&mut self) {
        self.budget = (self.budget * 2).min(self.max).max(self.min);
    }

    fn miss(&mut self) {
        self.budget = (self.budget / 2).max(self.min);
    }
}

/// The host's end of one worker's channel.
pub struct HostEnd {
    region: SharedRegion,
    seq: u32,
    spin: Spin,
}

impl HostEnd {
    pub fn new(region: SharedRegion) -> HostEnd {
        HostEnd { region, seq: 0, spin: Spin::new(Duration::from_micros(5), Duration::from_micros(100)) }
    }

    pub fn region(&self) -> &SharedRegion {
        &self.region
    }

    pub fn data_size(&self) -> usize {
        self.region.data_size
    }

    /// Copies a payload into the start of the data region.
    pub fn write_data(&mut self, src: &[u8]) -> Result<(), TransportError> {
        if src.len() > self.region.data_size {
            return Err(TransportError::TooLarge { len: src.len(), cap: self.region.data_size });
        }
        self.region.put(self.region.data_off(), src);
        Ok(())
    }

    /// Copies the start of the data region out (what the worker answered a read with).
    pub fn read_data(&self, dst: &mut [u8]) -> Result<(), TransportError> {
        if dst.len() > self.region.data_size {
            return Err(TransportError::TooLarge { len: dst.len(), cap: self.region.data_size });
        }
        self.region.get(self.region.data_off(), dst);
        Ok(())
    }

    /// Whether a frame of `len` bytes can be sent at all, and whether it would need the data
    /// region (so it must not be combined with a payload).
    pub fn frame_needs_data_region(&self, len: usize) -> Result<bool, TransportError> {
        if len <= MSG_AREA {
            Ok(false)
        } else if len <= self.region.data_size {
            Ok(true)
        } else {
            Err(TransportError::TooLarge { len, cap: self.region.data_size })
        }
    }

    /// Publishes a request frame; returns the seq its response will carry.
    pub fn send(&mut self, frame: &[u8]) -> Result<u32, TransportError> {
        let r = &self.region;
        let loc = if self.frame_needs_data_region(frame.len())? {
            r.put(r.data_off(), frame);
            LOC_DATA
        } else {
            r.put(HEADER, frame);
            LOC_MSG
        };
        r.u32_at(OFF_REQ_LOC).store(loc, Relaxed);
        r.u32_at(OFF_REQ_LEN).store(frame.len() as u32, Relaxed);
        self.seq = self.seq.wrapping_add(1);
        r.u32_at(OFF_REQ_SEQ).store(self.seq, SeqCst);
        if r.u32_at(OFF_WORKER_SLEEPING).load(SeqCst) != 0 {
            futex_wake(r.u32_at(OFF_REQ_SEQ));
        }
        Ok(self.seq)
    }

    /// Whether the response to `seq` has been published (never waits). A seq other than `seq`
    /// or the one before it is left for [`HostEnd::wait`] to report as a protocol violation.
    pub fn answered(&self, seq: u32) -> bool {
        self.region.u32_at(OFF_RESP_SEQ).load(Acquire) != seq.wrapping_sub(1)
    }

    /// Waits for the response to `seq` and copies its frame into `out`. Spins, then sleeps in
    /// slices that each end with `alive()` (None: alive; Some(why): gone) until `deadline`.
    pub fn wait(
        &mut self,
        seq: u32,
        deadline: Instant,
        alive: &mut dyn FnMut() -> Option<String>,
        out: &mut Vec<u8>,
    ) -> Result<(), WaitError> {
        let r = &self.region;
        let resp = r.u32_at(OFF_RESP_SEQ);
        let prev = seq.wrapping_sub(1);
        let arrived = |v: u32| -> Result<bool, WaitError> {
            if v == seq {
                Ok(true)
            } else if v == prev {
                Ok(false)
            } else {
                Err(WaitError::Protocol(format!("response seq {v} while waiting for {seq}")))
            }
        };
        let mut ok = Ok(false);
        if self.spin.run(|| {
            ok = arrived(resp.load(Acquire));
            !matches!(ok, Ok(false))
        }) {
            self.spin.hit();
        } else {
            self.spin.miss();
            let mut slice = Duration::from_micros(500);
            loop {
                let now = Instant::now();
                if now >= deadline {
                    ok = Err(WaitError::Timeout);
                    break;
                }
                r.u32_at(OFF_HOST_SLEEPING).store(1, SeqCst);
                let v = resp.load(SeqCst);
                ok = arrived(v);
                if matches!(ok, Ok(false)) {
                    futex_wait(resp, v, slice.min(deadline - now));
                    ok = arrived(resp.load(SeqCst));
                }
                r.u32_at(OFF_HOST_SLEEPING).store(0, Relaxed);
                if !matches!(ok, Ok(false)) {
                    break;
                }
                if let Some(why) = alive() {
                    // It may have answered just before dying; an answer is still an answer.
                    ok = arrived(resp.load(SeqCst));
                    if !matches!(ok, Ok(true)) {
                        return Err(WaitError::Dead(why));
                    }
                    break;
                }
                slice = (slice * 2).min(Duration::from_millis(20));
            }
        }
        ok?;
        let loc = r.u32_at(OFF_RESP_LOC).load(Relaxed);
        let len = r.u32_at(OFF_RESP_LEN).load(Relaxed) as usize;
        let off = match loc {
            LOC_MSG if len <= MSG_AREA => HEADER + MSG_AREA,
            LOC_DATA if len <= r.data_size => r.data_off(),
            _ => return Err(WaitError::Protocol(format!("response frame at location {loc} of {len} bytes"))),
        };
        out.clear();
        out.resize(len, 0);
        r.get(off, out);
        Ok(())
    }

    /// Waits for the worker to report that it started (or failed to, with its message).
    pub fn wait_ready(&self, deadline: Instant, alive: &mut dyn FnMut() -> Option<String>) -> Result<(), WaitError> {
        let r = &self.region;
        let state = r.u32_at(OFF_STATE);
        loop {
            match state.load(Acquire) {
                STATE_READY => return Ok(()),
                STATE_FAILED => {
                    let len = (r.u32_at(OFF_RESP_LEN).load(Relaxed) as usize).min(MSG_AREA);
                    let mut msg = vec![0u8; len];
                    r.get(HEADER + MSG_AREA, &mut msg);
                    return Err(WaitError::Failed(String::from_utf8_lossy(&msg).into_owned()));
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
            futex_wait(state, STATE_STARTING, (deadline - now).min(Duration::from_millis(2)));
        }
    }

    /// Tells the worker to exit at its next wait.
    pub fn close(&self) {
        let r = &self.region;
        r.u32_at(OFF_CLOSED).store(1, SeqCst);
        futex_wake(r.u32_at(OFF_REQ_SEQ));
    }
}

/// The worker's end of the channel.
pub struct WorkerEnd {
    region: SharedRegion,
    seen: u32,
    spin: Spin,
}

impl WorkerEnd {
    pub fn new(region: SharedRegion) -> WorkerEnd {
        let seen = region.u32_at(OFF_REQ_SEQ).load(Acquire);
        WorkerEnd { region, seen, spin: Spin::new(Duration::from_micros(2), Duration::from_micros(50)) }
    }

    pub fn data_size(&self) -> usize {
        self.region.data_size
    }

    /// Where the data region lies in this process and its size: page-aligned, for registering it
    /// with a device (`cuMemHostRegister`) so copies from and to it are DMA. Valid as long as this
    /// `WorkerEnd` lives.
    pub fn data_region(&self) -> (*mut u8, usize) {
        // SAFETY: in bounds of the mapping (data_off + data_size == len).
        (unsafe { self.region.base.as_ptr().add(self.region.data_off()) }, self.region.data_size)
    }

    /// The first `len` bytes of the data region, as the host wrote them for this request.
    /// The host is quiescent while a request is in flight, so handing out a slice is sound.
    pub fn data(&self, len: usize) -> Option<&[u8]> {
        (len <= self.region.data_size)
            // SAFETY: in bounds; the host does not touch the region until we respond.
            .then(|| unsafe { std::slice::from_raw_parts(self.region.base.as_ptr().add(self.region.data_off()), len) })
    }

    /// The first `len` bytes of the data region, to be filled for a read.
    pub fn data_mut(&mut self, len: usize) -> Option<&mut [u8]> {
        (len <= self.region.data_size)
            // SAFETY: as in `data`; `&mut self` keeps it unique on this side.
            .then(|| unsafe {
                std::slice::from_raw_parts_mut(self.region.base.as_ptr().add(self.region.data_off()), len)
            })
    }

    /// Announces that the worker is up.
    pub fn ready(&self) {
        let s = self.region.u32_at(OFF_STATE);
        s.store(STATE_READY, Release);
        futex_wake(s);
    }

    /// Announces that the worker could not start, with a message for the host.
    pub fn fail(&self, message: &str) {
        let m = crate::protocol::truncate_utf8(message, MSG_AREA).as_bytes();
        self.region.put(HEADER + MSG_AREA, m);
        self.region.u32_at(OFF_RESP_LEN).store(m.len() as u32, Relaxed);
        let s = self.region.u32_at(OFF_STATE);
        s.store(STATE_FAILED, Release);
        futex_wake(s);
    }

    /// Waits for the next request and copies its frame into `out`. While idle it sleeps in
    /// one-second slices, calling `host_alive()` after each.
    pub fn wait_request(&mut self, out: &mut Vec<u8>, host_alive: &mut dyn FnMut() -> bool) -> Incoming {
        let r = &self.region;
        let req = r.u32_at(OFF_REQ_SEQ);
        let closed = r.u32_at(OFF_CLOSED);
        let seen = self.seen;
        if self.spin.run(|| req.load(Acquire) != seen || closed.load(Relaxed) != 0) {
            self.spin.hit();
        } else {
            self.spin.miss();
            loop {
                r.u32_at(OFF_WORKER_SLEEPING).store(1, SeqCst);
                let v = req.load(SeqCst);
                if v == seen && closed.load(SeqCst) == 0 {
                    futex_wait(req, v, Duration::from_secs(1));
                }
                r.u32_at(OFF_WORKER_SLEEPING).store(0, Relaxed);
                if req.load(Acquire) != seen || closed.load(Acquire) != 0 {
                    break;
                }
                if !host_alive() {
                    return Incoming::HostGone;
                }
            }
        }
        if closed.load(Acquire) != 0 {
            return Incoming::Closed;
        }
        self.seen = req.load(Acquire);
        let loc = r.u32_at(OFF_REQ_LOC).load(Relaxed);
        let len = r.u32_at(OFF_REQ_LEN).load(Relaxed) as usize;
        let off = match loc {
            LOC_MSG if len <= MSG_AREA => HEADER,
            LOC_DATA if len <= r.data_size => r.data_off(),
            // A corrupt descriptor: hand back an empty frame, which fails to decode and is
            // answered with an error.
            _ => {
                out.clear();
                return Incoming::Request;
            }
        };
        out.clear();
        out.resize(len, 0);
        r.get(off, out);
        Incoming::Request
    }

    /// Publishes the response to the request last returned by `wait_request`.
    pub fn respond(&mut self, frame: &[u8]) -> Result<(), TransportError> {
        let r = &self.region;
        let loc = if frame.len() <= MSG_AREA {
            r.put(HEADER + MSG_AREA, frame);
            LOC_MSG
        } else if frame.len() <= r.data_size {
            r.put(r.data_off(), frame);
            LOC_DATA
        } else {
            return Err(TransportError::TooLarge { len: frame.len(), cap: r.data_size });
        };
        r.u32_at(OFF_RESP_LOC).store(loc, Relaxed);
        r.u32_at(OFF_RESP_LEN).store(frame.len() as u32, Relaxed);
        r.u32_at(OFF_RESP_SEQ).store(self.seen, SeqCst);
        if r.u32_at(OFF_HOST_SLEEPING).load(SeqCst) != 0 {
            futex_wake(r.u32_at(OFF_RESP_SEQ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    fn pair(data: usize) -> (HostEnd, WorkerEnd) {
        let host = SharedRegion::create(data).unwrap();
        // SAFETY: dup of an fd we own, handed to from_fd as an independent mapping, as a child would.
        let dup = unsafe { libc::dup(host.fd()) };
        let worker = SharedRegion::from_fd(dup).unwrap();
        (HostEnd::new(host), WorkerEnd::new(worker))
    }

    /// An echo worker: answers each frame with the frame reversed, and fills reads with a pattern.
    fn echo(mut w: WorkerEnd) -> thread::JoinHandle<u32> {
        thread::spawn(move || {
            let mut buf = Vec::new();
            let mut n = 0;
            loop {
                match w.wait_request(&mut buf, &mut || true) {
                    Incoming::Request => {
                        n += 1;
                        buf.reverse();
                        w.respond(&buf).unwrap();
                    }
                    Incoming::Closed | Incoming::HostGone => return n,
                }
            }
        })
    }

    #[test]
    fn ping_pong_between_threads() {
        let (mut h, w) = pair(DEFAULT_DATA_SIZE);
        let t = echo(w);
        let mut out = Vec::new();
        for i in 0..10_000u32 {
            let frame = i.to_le_bytes();
            let seq = h.send(&frame).unwrap();
            h.wait(seq, Instant::now() + Duration::from_secs(5), &mut || None, &mut out).unwrap();
            let mut want = frame;
            want.reverse();
            assert_eq!(out, want);
        }
        h.close();
        assert_eq!(t.join().unwrap(), 10_000);
    }

    #[test]
    fn sleeping_worker_is_woken() {
        let (mut h, w) = pair(DEFAULT_DATA_SIZE);
        let t = echo(w);
        let mut out = Vec::new();
        for _ in 0..3 {
            // Long enough for the worker to give up spinning and sleep on the futex.
            thread::sleep(Duration::from_millis(5));
            let seq = h.send(b"abc").unwrap();
            h.wait(seq, Instant::now() + Duration::from_secs(5), &mut || None, &mut out).unwrap();
            assert_eq!(out, b"cba");
        }
        h.close();
        t.join().unwrap();
    }

    #[test]
    fn oversized_frames_use_the_data_region() {
        let (mut h, w) = pair(MSG_AREA * 4);
        let t = echo(w);
        let big: Vec<u8> = (0..MSG_AREA * 2).map(|i| i as u8).collect();
        let seq = h.send(&big).unwrap();
        let mut out = Vec::new();
        h.wait(seq, Instant::now() + Duration::from_secs(5), &mut || None, &mut out).unwrap();
        assert_eq!(out.len(), big.len());
        assert!(out.iter().rev().eq(big.iter()));
        assert!(matches!(h.send(&vec![0; MSG_AREA * 5]), Err(TransportError::TooLarge { .. })));
        h.close();
        t.join().unwrap();
    }

    #[test]
    fn silent_worker_times_out_and_dead_worker_is_noticed() {
        let (mut h, _w) = pair(DEFAULT_DATA_SIZE);
        let seq = h.send(b"x").unwrap();
        let start = Instant::now();
        let mut out = Vec::new();
        let r = h.wait(seq, start + Duration::from_millis(30), &mut || None, &mut out);
        assert_eq!(r, Err(WaitError::Timeout));
        assert!(start.elapsed() >= Duration::from_millis(30));
        assert!(start.elapsed() < Duration::from_secs(1));

        // (After a timeout the host gives the channel up; a fresh one for the next case.)
        let (mut h, _w) = pair(DEFAULT_DATA_SIZE);
        let seq = h.send(b"y").unwrap();
        let start = Instant::now();
        let r = h.wait(seq, start + Duration::from_secs(10), &mut || Some("gone".into()), &mut out);
        assert_eq!(r, Err(WaitError::Dead("gone".into())));
        assert!(start.elapsed() < Duration::from_millis(100));
    }

    #[test]
    fn forged_response_descriptors_are_refused() {
        let (mut h, w) = pair(DEFAULT_DATA_SIZE);
        let mut out = Vec::new();
        // A response seq from nowhere.
        let seq = h.send(b"x").unwrap();
        w.region.u32_at(OFF_RESP_SEQ).store(seq.wrapping_add(5), SeqCst);
        assert!(matches!(
            h.wait(seq, Instant::now() + Duration::from_secs(1), &mut || None, &mut out),
            Err(WaitError::Protocol(_))
        ));
        // A frame length past its area.
        w.region.u32_at(OFF_RESP_SEQ).store(seq, SeqCst);
        let seq = h.send(b"x").unwrap();
        w.region.u32_at(OFF_RESP_LOC).store(LOC_MSG, Relaxed);
        w.region.u32_at(OFF_RESP_LEN).store(u32::MAX, Relaxed);
        w.region.u32_at(OFF_RESP_SEQ).store(seq, SeqCst);
        assert!(matches!(
            h.wait(seq, Instant::now() + Duration::from_secs(1), &mut || None, &mut out),
            Err(WaitError::Protocol(_))
        ));
        // An unknown location.
        let seq = h.send(b"x").unwrap();
        w.region.u32_at(OFF_RESP_LOC).store(7, Relaxed);
        w.region.u32_at(OFF_RESP_LEN).store(1, Relaxed);
        w.region.u32_at(OFF_RESP_SEQ).store(seq, SeqCst);
        assert!(matches!(
            h.wait(seq, Instant::now() + Duration::from_secs(1), &mut || None, &mut out),
            Err(WaitError::Protocol(_))
        ));
    }

    #[test]
    fn start_handshake() {
        let (h, w) = pair(DEFAULT_DATA_SIZE);
        let t = thread::spawn(move || {
            thread::sleep(Duration::from_millis(10));
            w.fail("no device");
        });
        let r = h.wait_ready(Instant::now() + Duration::from_secs(5), &mut || None);
        assert_eq!(r, Err(WaitError::Failed("no device".into())));
        t.join().unwrap();

        let (h, w) = pair(DEFAULT_DATA_SIZE);
        w.ready();
        assert_eq!(h.wait_ready(Instant::now() + Duration::from_secs(5), &mut || None), Ok(()));
    }

    #[test]
    fn data_region_round_trip_and_bounds() {
        let (mut h, mut w) = pair(MSG_AREA);
        h.write_data(b"hello").unwrap();
        assert_eq!(w.data(5).unwrap(), b"hello");
        w.data_mut(3).unwrap().copy_from_slice(b"abc");
        let mut got = [0u8; 5];
        h.read_data(&mut got).unwrap();
        assert_eq!(&got, b"abclo");
        assert!(w.data(MSG_AREA + 1).is_none());
        assert!(h.write_data(&vec![0; MSG_AREA + 1]).is_err());
    }

    #[test]
    fn region_cannot_be_resized_by_the_peer() {
        let (h, _w) = pair(DEFAULT_DATA_SIZE);
        // SAFETY: plain syscall on our own fd.
        let r = unsafe { libc::ftruncate(h.region().fd(), 4096) };
        assert_ne!(r, 0, "the memfd must be sealed against shrinking");
    }

    #[test]
    fn bad_fds_are_refused() {
        assert!(SharedRegion::from_fd(-1).is_err());
        assert!(SharedRegion::from_fd(9999).is_err());
    }
}
