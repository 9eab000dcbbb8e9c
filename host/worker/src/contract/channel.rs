//! Shared memory between a host and one worker: a memfd mapped `MAP_SHARED` by both processes.
//!
//! ```text
//! 0        header page: magic/sizes, then atomics on their own cache lines
//!          (ring head, worker-sleeping flag, ring tail, host-waiting-for-space flag,
//!           response seq + frame location, host-sleeping flag, start state, closed flag,
//!           completion word)
//! 4 KiB    request ring          (RING bytes)
//!          response message area (MSG_AREA bytes)
//!          data region           (data_size bytes: write payloads, read results, oversized frames)
//! ```
//!
//! Requests go through a ring of frames so that the host can queue many *posted* frames (kernel
//! launches, which get no response) while the worker is still working through earlier ones. Each
//! record is a 16-byte header (kind, length, call seq, stamp) and the frame, starting on a cache
//! line and padded to whole lines; a record that would straddle the ring's end is preceded by a
//! wrap record that skips to its start. Whole lines because every line of a record is a transfer
//! from the host's core to the worker's on the way to the driver: a launch of a kernel with a
//! small argument block is one line (see `protocol`'s launch encoding), which measured ~0.1 µs
//! faster per hand-off than the two lines, shared with its neighbours, that a 96-byte record at
//! 16-byte alignment touched (H100 machine, Intel Xeon vCPUs; `examples/ring_lines.rs`), and
//! records never share a line, so the host writing the next record never takes away the line the
//! worker is reading.
//! `head` (bytes ever published by the host) and `tail` (bytes the worker has *finished*, not
//! merely read) are free-running `u32`s; the ring's size divides 2³², so `pos % RING` stays
//! consistent across their wrap-around. Because `tail` only moves once a frame was served,
//! `tail == head` means the worker has done everything it was sent.
//!
//! The worker learns that a record is there from the record itself, not from `head`: the host
//! writes the stamp — the record's free-running position, `| 1` — last, with release ordering, and
//! the worker spins on the stamp where the next record will be. One cache-line transfer then
//! brings the news and the record's first 48 frame bytes together; reading `head` first would cost a
//! transfer of its own (~0.2 µs between the vCPUs of the GPU machines we measured on). A stale
//! stamp can never pass for a fresh one, because the worker zeroes every stamp slot of the span it
//! consumed (one word per line) as it hands the span back through `tail`, so the host only
//! ever writes into space whose stamp slots are zero. `head` still exists: for the host's own
//! books, and as the futex word a sleeping worker waits on.
//!
//! A *call* (every request but a launch) gets exactly one response, in the single response slot,
//! tagged with the call's seq; only one call is outstanding at a time. A call frame too large for
//! the ring goes to the data region, as before (only calls are ever that large: module text).
//!
//! A `sync` may also be answered by the *completion word*, on a cache line of its own in the header
//! page: a worker whose device can store into host memory in stream order (cuda:
//! `cuStreamWriteValue32` into the page-locked header page) asks it to store the sync's seq there
//! once every kernel before it has finished, and the host, spinning for the response, takes that
//! store as the `Ok` (one hand-off fewer on the hottest path, launch + sync). The worker still
//! answers the call as usual, later; the host then skips that answer while waiting for the next
//! one, so responses may now lag behind the calls sent by one signalled sync (see
//! [`HostEnd::wait`]). A sync that fails stores nothing: its error arrives as a response. The word
//! is as untrusted as every response: a worker or a kernel of its own lease that stores a seq early
//! only misleads its own tenant.
//!
//! Each waiting side spins for a short, adaptive while and then sleeps on a futex, announcing that
//! through its sleeping flag so the other side only pays for a `FUTEX_WAKE` syscall when someone
//! is actually asleep. The flag protocol is Dekker-style: the sleeper stores its flag then re-reads
//! the word, the publisher stores the word then reads the flag, all `SeqCst`, so at least one of
//! them sees the other and no wake-up is lost. There are three such pairs: the worker waiting for
//! `head`, the host waiting for ring space (`tail`), and the host waiting for a response.
//!
//! The worker is untrusted: the host never reads the ring back, copies a response frame out of the
//! mapping before decoding it, bounds-checks every location, length and counter the worker wrote,
//! and never waits without a deadline and a liveness check. The memfd is sealed against resizing
//! so a worker cannot truncate it under the host (which would turn host reads into SIGBUS).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};
use std::time::{Duration, Instant};

/// Bytes of the response area, and the largest frame that goes through the ring. Larger call
/// frames go to the data region instead (only frames without a payload can be that large: module
/// text, kernel lists).
pub const MSG_AREA: usize = 64 * 1024;
/// Bytes of the request ring: room for a few thousand queued launches.
pub const RING: usize = 256 * 1024;
/// Default size of the data region; writes and reads larger than this are chunked by the host.
pub const DEFAULT_DATA_SIZE: usize = 8 * 1024 * 1024;

const MAGIC: u64 = u64::from_le_bytes(*b"TASKLETW");
/// Bumped whenever the frames in `protocol` or this layout change, so a host and a worker built
/// from different sources refuse each other at start instead of misreading frames.
/// 2: launch deadline, richer info. 3: guest memory attachments (attach/detach-memory, write-from, read-into). 4: the request ring.
/// 5: stamps, inline responses. 6: the completion word.
pub const VERSION: u32 = 7;
const HEADER: usize = 4096;

const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_MSG_AREA: usize = 12;
const OFF_DATA_SIZE: usize = 16;
const OFF_RING: usize = 24;
const OFF_HEAD: usize = 64;
const OFF_WORKER_SLEEPING: usize = 128;
const OFF_TAIL: usize = 192;
const OFF_HOST_WANTS_SPACE: usize = 256;
const OFF_RESP_SEQ: usize = 320;
const OFF_RESP_LOC: usize = 324;
const OFF_RESP_LEN: usize = 328;
/// A small response frame (every `Ok`, most errors' kinds…) sits right after its seq, in the same
/// cache line: the host's wait then ends with one cache-line transfer, not two.
const OFF_RESP_INLINE: usize = 332;
const RESP_INLINE: usize = OFF_HOST_SLEEPING - OFF_RESP_INLINE;
const OFF_HOST_SLEEPING: usize = 384;
const OFF_STATE: usize = 448;
const OFF_CLOSED: usize = 512;
/// The completion word (see the module docs): its own cache line, since the device writes it.
const OFF_SIGNAL: usize = 576;

const RING_OFF: usize = HEADER;
const RESP_OFF: usize = HEADER + RING;
const DATA_OFF: usize = HEADER + RING + MSG_AREA;

/// Ring records: a header, then (for inline kinds) the frame, padded to `ALIGN` (a cache line).
const REC_HEADER: usize = 16;
const ALIGN: usize = 64;
/// A frame the worker serves without responding.
const KIND_POSTED: u32 = 1;
/// A frame that gets a response tagged with the header's seq.
const KIND_CALL: u32 = 2;
/// A call whose frame lies at the start of the data region.
const KIND_CALL_IN_DATA: u32 = 3;
/// Nothing here: the next record starts at the ring's start.
const KIND_WRAP: u32 = 4;

const LOC_MSG: u32 = 0;
const LOC_DATA: u32 = 1;
const LOC_INLINE: u32 = 2;

const STATE_STARTING: u32 = 0;
const STATE_READY: u32 = 1;
const STATE_FAILED: u32 = 2;

const _: () =
    assert!(RING.is_power_of_two() && RING <= 1 << 31 && MSG_AREA + REC_HEADER <= RING / 2);
const _: () = assert!(OFF_RESP_INLINE % 64 + RESP_INLINE <= 64);
const _: () = assert!(OFF_SIGNAL % 64 == 0 && OFF_SIGNAL > OFF_CLOSED && OFF_SIGNAL + 64 <= HEADER);
/// Most bytes of served posted frames the worker leaves unpublished in `tail` (see
/// [`WorkerEnd::wait_request`]): small beside the ring, so with the worker caught up every record
/// still fits (the largest, wrap included, needs under half the ring).
const PUBLISH_EVERY: usize = RING / 8;

/// The stamp that marks a record at ring position `at` (free-running) as published: never zero,
/// because positions are multiples of [`ALIGN`].
fn stamp(at: u32) -> u32 {
    at | 1
}

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
            return Err(TransportError::Layout(format!(
                "data region of {data_size} bytes"
            )));
        }
        let len = DATA_OFF + data_size;
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
        region
            .u64_at(OFF_DATA_SIZE)
            .store(data_size as u64, Relaxed);
        region.u32_at(OFF_MSG_AREA).store(MSG_AREA as u32, Relaxed);
        region.u32_at(OFF_RING).store(RING as u32, Relaxed);
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
            return Err(TransportError::Layout(format!(
                "fd {fd} is not open: {}",
                io::Error::last_os_error()
            )));
        }
        // SAFETY: the fd is open and handed to us for good.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let len = st.st_size as usize;
        if len < DATA_OFF + MSG_AREA {
            return Err(TransportError::Layout(format!(
                "region of {len} bytes is too small"
            )));
        }
        let mut region = Self::map(fd, len, 0)?;
        if region.u64_at(OFF_MAGIC).load(Acquire) != MAGIC {
            return Err(TransportError::Layout("bad magic".into()));
        }
        let version = region.u32_at(OFF_VERSION).load(Relaxed);
        if version != VERSION {
            return Err(TransportError::Layout(format!(
                "protocol version {version}, this worker speaks {VERSION}"
            )));
        }
        let msg = region.u32_at(OFF_MSG_AREA).load(Relaxed) as usize;
        let ring = region.u32_at(OFF_RING).load(Relaxed) as usize;
        let data = region.u64_at(OFF_DATA_SIZE).load(Relaxed) as usize;
        if msg != MSG_AREA || ring != RING || DATA_OFF.checked_add(data) != Some(len) {
            return Err(TransportError::Layout(format!(
                "sizes msg={msg} ring={ring} data={data} do not match a {len}-byte region"
            )));
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
        let base = NonNull::new(p as *mut u8)
            .ok_or_else(|| TransportError::Layout("null mapping".into()))?;
        Ok(SharedRegion {
            base,
            len,
            data_size,
            fd,
        })
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
        assert!(
            off.checked_add(src.len())
                .is_some_and(|end| end <= self.len),
            "shared region write out of bounds"
        );
        // SAFETY: bounds checked above; the peer may race on these bytes, which can corrupt only
        // the bytes themselves, never our memory.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.base.as_ptr().add(off), src.len())
        }
    }

    /// Copies bytes at `off` out of the mapping into `dst`. Bounds-checked.
    fn get(&self, off: usize, dst: &mut [u8]) {
        assert!(
            off.checked_add(dst.len())
                .is_some_and(|end| end <= self.len),
            "shared region read out of bounds"
        );
        // SAFETY: as in `put`.
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.as_ptr().add(off), dst.as_mut_ptr(), dst.len())
        }
    }

    fn data_off(&self) -> usize {
        DATA_OFF
    }

    /// The stamp slot of a record header at ring position `pos` (reduced mod `RING`, aligned).
    fn stamp_at(&self, pos: usize) -> &AtomicU32 {
        assert!(
            pos % ALIGN == 0 && pos + REC_HEADER <= RING,
            "stamp slot at ring position {pos}"
        );
        // SAFETY: in bounds of the ring (checked), 4-byte aligned, accessed atomically by both
        // ends (the header's other bytes are plain copies, ordered by this word).
        unsafe { AtomicU32::from_ptr(self.base.as_ptr().add(RING_OFF + pos + 12) as *mut u32) }
    }

    /// Writes a ring record header at ring position `pos` (already reduced mod `RING`), its stamp
    /// slot zero (the caller stamps it once the frame is in place).
    fn put_record_header(&self, pos: usize, kind: u32, len: u32, seq: u32) {
        let mut h = [0u8; REC_HEADER];
        h[0..4].copy_from_slice(&kind.to_le_bytes());
        h[4..8].copy_from_slice(&len.to_le_bytes());
        h[8..12].copy_from_slice(&seq.to_le_bytes());
        self.put(RING_OFF + pos, &h);
    }

    fn get_record_header(&self, pos: usize) -> (u32, u32, u32) {
        let mut h = [0u8; REC_HEADER];
        self.get(RING_OFF + pos, &mut h);
        let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        (word(0), word(4), word(8))
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
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            0usize,
            0u32,
        );
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a valid, aligned, mapped word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            0usize,
            0usize,
            0u32,
        );
    }
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

/// Bytes a record for a frame of `len` bytes takes in the ring when inline (whole cache lines):
/// public for encoders that keep hot frames to one line.
pub const fn record_size(len: usize) -> usize {
    (REC_HEADER + len).next_multiple_of(ALIGN)
}

/// Adaptive spin budget: grows while the other side keeps answering within it, shrinks when it
/// had to sleep anyway, so a chatty peer gets sub-microsecond hand-offs and an idle one costs no
/// CPU beyond `min`.
///
/// A wait that missed the budget but still ended within `max` restores the full budget
/// ([`Spin::late`]): without that, a peer whose answers take a little longer than the current
/// budget (a GPU kernel launch + sync, ~9 µs) would make every wait miss, shrink the budget to
/// `min`, and pay a futex sleep and wake-up (tens of µs on a VM) from then on. Seen on an H100:
/// launch + sync in bimodal rounds of 11 and 27 µs.
#[derive(Debug, Clone)]
struct Spin {
    budget: Duration,
    min: Duration,
    max: Duration,
}

impl Spin {
    fn new(min: Duration, max: Duration) -> Spin {
        Spin {
            budget: max,
            min,
            max,
        }
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

    /// After a miss: the wait ended `waited` after it began. Within `max`, spinning the whole
    /// budget would have caught it, so the next wait spins that long.
    fn late(&mut self, waited: Duration) {
        if waited <= self.max {
            self.budget = self.max;
        }
    }
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
            spin: Spin::new(Duration::from_micros(5), Duration::from_micros(100)),
            space_spin: Spin::new(Duration::from_micros(5), Duration::from_micros(50)),
        }
    }

    pub fn region(&self) -> &SharedRegion {
        &self.region
    }

    pub fn data_size(&self) -> usize {
        self.region.data_size
    }

    /// Copies a payload into the start of the data region. Only while no call is outstanding
    /// (posted frames never use the data region, so queued launches do not mind).
    pub fn write_data(&mut self, src: &[u8]) -> Result<(), TransportError> {
        if src.len() > self.region.data_size {
            return Err(TransportError::TooLarge {
                len: src.len(),
                cap: self.region.data_size,
            });
        }
        self.region.put(self.region.data_off(), src);
        Ok(())
    }

    /// Copies the start of the data region out (what the worker answered a read with).
    pub fn read_data(&self, dst: &mut [u8]) -> Result<(), TransportError> {
        if dst.len() > self.region.data_size {
            return Err(TransportError::TooLarge {
                len: dst.len(),
                cap: self.region.data_size,
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
        } else if len <= self.region.data_size {
            Ok(true)
        } else {
            Err(TransportError::TooLarge {
                len,
                cap: self.region.data_size,
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
            LOC_DATA if len <= r.data_size => r.data_off(),
            _ => {
                return Err(WaitError::Protocol(format!(
                    "response frame at location {loc} of {len} bytes"
                )))
            }
        };
        out.clear();
        out.resize(len, 0);
        r.get(off, out);
        Ok(answer)
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
            spin: Spin::new(Duration::from_micros(2), Duration::from_micros(50)),
        }
    }

    pub fn data_size(&self) -> usize {
        self.region.data_size
    }

    /// Where the data region lies in this process and its size: page-aligned, for registering it
    /// with a device (`cuMemHostRegister`) so copies from and to it are DMA. Valid as long as this
    /// `WorkerEnd` lives.
    pub fn data_region(&self) -> (*mut u8, usize) {
        // SAFETY: in bounds of the mapping (data_off + data_size == len).
        (
            unsafe { self.region.base.as_ptr().add(self.region.data_off()) },
            self.region.data_size,
        )
    }

    /// Where the completion word lies in this process, for a device to store a signalled sync's
    /// seq into (see the module docs). It sits in the header page, which starts the mapping: the
    /// page `(addr & !4095, 4096)` can be registered with a device on its own.
    pub fn completion_word(&self) -> usize {
        self.region.base.as_ptr() as usize + OFF_SIGNAL
    }

    /// The seq of the call being served (what its signal must carry), if the last frame taken was
    /// a call.
    pub fn call_seq(&self) -> Option<u32> {
        self.call
    }

    /// The first `len` bytes of the data region, as the host wrote them for this call.
    /// The host leaves the data region alone while a call is outstanding, so handing out a slice
    /// is sound (posted frames never use it).
    pub fn data(&self, len: usize) -> Option<&[u8]> {
        (len <= self.region.data_size)
            // SAFETY: in bounds; the host does not touch the region until we respond.
            .then(|| unsafe {
                std::slice::from_raw_parts(
                    self.region.base.as_ptr().add(self.region.data_off()),
                    len,
                )
            })
    }

    /// The first `len` bytes of the data region, to be filled for a read.
    pub fn data_mut(&mut self, len: usize) -> Option<&mut [u8]> {
        (len <= self.region.data_size)
            // SAFETY: as in `data`; `&mut self` keeps it unique on this side.
            .then(|| unsafe {
                std::slice::from_raw_parts_mut(
                    self.region.base.as_ptr().add(self.region.data_off()),
                    len,
                )
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
    /// `tail` is published lazily while posted frames keep coming — every [`PUBLISH_EVERY`]
    /// bytes, when the ring runs empty, and before a call is performed — so a burst of launches
    /// does not pay a fence per launch, while the host still learns what was served whenever it
    /// could be waiting on it (for room, for an answer, or to see the worker idle).
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
            KIND_CALL_IN_DATA if len <= r.data_size => {
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
        } else if frame.len() <= r.data_size {
            r.put(r.data_off(), frame);
            LOC_DATA
        } else {
            return Err(TransportError::TooLarge {
                len: frame.len(),
                cap: r.data_size,
            });
        };
        r.u32_at(OFF_RESP_LOC).store(loc, Relaxed);
        r.u32_at(OFF_RESP_LEN).store(frame.len() as u32, Relaxed);
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

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    /// An echo worker: answers each call with the frame reversed; collects posted frames, and
    /// answers a call with an empty frame by the number of posted frames seen so far.
    fn echo(mut w: WorkerEnd) -> thread::JoinHandle<Vec<Vec<u8>>> {
        thread::spawn(move || {
            let mut buf = Vec::new();
            let mut posted = Vec::new();
            loop {
                match w.wait_request(&mut buf, &mut || true, &mut || {}) {
                    Incoming::Call if buf.is_empty() => {
                        w.respond(&(posted.len() as u32).to_le_bytes()).unwrap()
                    }
                    Incoming::Call => {
                        buf.reverse();
                        w.respond(&buf).unwrap();
                    }
                    Incoming::Posted => posted.push(buf.clone()),
                    Incoming::Closed | Incoming::HostGone => return posted,
                    Incoming::Corrupt(why) => panic!("{why}"),
                }
            }
        })
    }

    fn call(h: &mut HostEnd, frame: &[u8]) -> Vec<u8> {
        let seq = h.send(frame, soon(), &mut || None).unwrap();
        let mut out = Vec::new();
        h.wait(seq, soon(), &mut || None, &mut out).unwrap();
        out
    }

    /// A frame of `len` bytes that says which one it is.
    fn numbered(i: u32, len: usize) -> Vec<u8> {
        let mut f = i.to_le_bytes().repeat(len.div_ceil(4));
        f.truncate(len.max(4));
        f
    }

    #[test]
    fn ping_pong_between_threads() {
        let (mut h, w) = pair(DEFAULT_DATA_SIZE);
        let t = echo(w);
        for i in 0..10_000u32 {
            let frame = i.to_le_bytes();
            let mut want = frame;
            want.reverse();
            assert_eq!(call(&mut h, &frame), want);
        }
        h.close();
        t.join().unwrap();
    }

    #[test]
    fn many_posted_frames_arrive_in_order_across_wrap_around() {
        posted_frames_arrive_in_order_across_wrap_around(echo);
    }

    #[test]
    fn posted_frames_taken_together_arrive_in_order_across_wrap_around() {
        posted_frames_arrive_in_order_across_wrap_around(echo_taking_ready);
    }

    /// [`echo`], but after each posted frame it takes every posted frame already published.
    fn echo_taking_ready(mut w: WorkerEnd) -> thread::JoinHandle<Vec<Vec<u8>>> {
        thread::spawn(move || {
            let mut buf = Vec::new();
            let mut posted = Vec::new();
            loop {
                match w.wait_request(&mut buf, &mut || true, &mut || {}) {
                    Incoming::Call => {
                        assert!(buf.is_empty());
                        w.respond(&(posted.len() as u32).to_le_bytes()).unwrap();
                        // A call is never taken for a posted frame, and the ring is empty now.
                        assert!(!w.take_ready_posted(&mut buf));
                    }
                    Incoming::Posted => {
                        posted.push(buf.clone());
                        while w.take_ready_posted(&mut buf) {
                            posted.push(buf.clone());
                        }
                    }
                    Incoming::Closed | Incoming::HostGone => return posted,
                    Incoming::Corrupt(why) => panic!("{why}"),
                }
            }
        })
    }

    fn posted_frames_arrive_in_order_across_wrap_around(
        worker: fn(WorkerEnd) -> thread::JoinHandle<Vec<Vec<u8>>>,
    ) {
        let (mut h, w) = pair(DEFAULT_DATA_SIZE);
        let t = worker(w);
        // Sizes that do not divide the ring, so records land at every offset and wrap many times.
        let sizes = [1usize, 7, 100, 333, 4000, 60_000];
        let n = 20_000u32;
        for i in 0..n {
            h.post(
                &numbered(i, sizes[i as usize % sizes.len()]),
                soon(),
                &mut || None,
            )
            .unwrap();
        }
        assert_eq!(call(&mut h, &[]), n.to_le_bytes());
        assert!(h.all_served());
        h.close();
        let posted = t.join().unwrap();
        assert_eq!(posted.len(), n as usize);
        for (i, f) in posted.iter().enumerate() {
            assert_eq!(f, &numbered(i as u32, sizes[i % sizes.len()]), "frame {i}");
        }
    }

    #[test]
    fn only_published_posted_frames_are_taken_without_waiting() {
        let (mut h, mut w) = pair(DEFAULT_DATA_SIZE);
        let mut buf = Vec::new();
        assert!(!w.take_ready_posted(&mut buf), "an empty ring");
        for f in [&b"a"[..], b"bb", b"ccc"] {
            h.post(f, soon(), &mut || None).unwrap();
        }
        h.send(b"call", soon(), &mut || None).unwrap();
        assert_eq!(
            w.wait_request(&mut buf, &mut || true, &mut || {}),
            Incoming::Posted
        );
        assert_eq!(buf, b"a");
        assert!(w.behind(), "it was there before the worker looked");
        assert!(w.take_ready_posted(&mut buf));
        assert_eq!(buf, b"bb");
        assert!(w.take_ready_posted(&mut buf));
        assert_eq!(buf, b"ccc");
        // The call stays for `wait_request`.
        assert!(!w.take_ready_posted(&mut buf));
        assert_eq!(
            w.wait_request(&mut buf, &mut || true, &mut || {}),
            Incoming::Call
        );
        assert_eq!(buf, b"call");
        // A record the worker had to wait for: it was caught up.
        let poster = thread::spawn(move || {
            thread::sleep(Duration::from_millis(20));
            h.post(b"late", soon(), &mut || None).unwrap();
            h
        });
        assert_eq!(
            w.wait_request(&mut buf, &mut || true, &mut || {}),
            Incoming::Posted
        );
        assert_eq!(buf, b"late");
        assert!(!w.behind());
        drop(poster.join().unwrap());
    }

    #[test]
    fn frame_bytes_that_look_like_a_later_laps_stamps_are_never_taken_for_a_record() {
        // Every 16-byte chunk of every frame carries, where a header's stamp would sit, the stamp
        // a record at that spot one lap later would have. Batches of varied sizes move the point
        // where the worker catches up with the host all over the ring, lap after lap: each time,
        // nothing past what was sent may look published.
        let (mut h, mut w) = pair(DEFAULT_DATA_SIZE);
        let mut buf = Vec::new();
        let mut sent = 0usize;
        let mut i = 0usize;
        while sent < 4 * RING {
            for _ in 0..1 + i % 3 {
                let len = 16 * (50 + (i * 37) % 90);
                let pos = h.head as usize % RING;
                let at = if record_size(len) > RING - pos {
                    h.head.wrapping_add((RING - pos) as u32)
                } else {
                    h.head
                };
                let mut frame = vec![0u8; len];
                for (k, chunk) in frame.chunks_exact_mut(16).enumerate() {
                    let future = at.wrapping_add((REC_HEADER + 16 * k + RING) as u32);
                    chunk[12..16].copy_from_slice(&stamp(future).to_le_bytes());
                    chunk[0..4].copy_from_slice(&(i as u32).to_le_bytes());
                }
                h.post(&frame, soon(), &mut || None).unwrap();
                assert_eq!(
                    w.wait_request(&mut buf, &mut || true, &mut || {}),
                    Incoming::Posted
                );
                assert_eq!(buf, frame, "frame {i}");
                sent += record_size(len);
                i += 1;
            }
            w.publish_served(w.read);
            assert!(
                !w.published(),
                "a stale stamp at ring position {} passed for a record",
                w.read as usize % RING
            );
        }
    }

    #[test]
    fn tail_covers_the_frames_before_a_call_while_it_is_performed_and_the_call_once_answered() {
        let (mut h, mut w) = pair(DEFAULT_DATA_SIZE);
        let mut buf = Vec::new();
        for i in 0..10 {
            h.post(&numbered(i, 100), soon(), &mut || None).unwrap();
        }
        let mark = h.mark();
        let seq = h.send(b"call", soon(), &mut || None).unwrap();
        for _ in 0..10 {
            assert_eq!(
                w.wait_request(&mut buf, &mut || true, &mut || {}),
                Incoming::Posted
            );
        }
        // Posted frames served, not yet published (lazily, while frames keep coming).
        assert!(!h.served_past(mark));
        assert_eq!(
            w.wait_request(&mut buf, &mut || true, &mut || {}),
            Incoming::Call
        );
        assert!(
            h.served_past(mark),
            "the frames before a call are published before it is performed"
        );
        assert!(
            !h.all_served(),
            "a call is not served before it is answered"
        );
        w.respond(b"done").unwrap();
        let mut out = Vec::new();
        h.wait(seq, soon(), &mut || None, &mut out).unwrap();
        assert_eq!(out, b"done");
        assert!(h.all_served());
    }

    /// A worker thread taking posted frames, each equal to `expect`, until the channel closes;
    /// joins with how many it took.
    fn count_posted(mut w: WorkerEnd, expect: Vec<u8>) -> thread::JoinHandle<usize> {
        thread::spawn(move || {
            let mut buf = Vec::new();
            let mut n = 0;
            while let Incoming::Posted = w.wait_request(&mut buf, &mut || true, &mut || {}) {
                assert_eq!(buf, expect);
                n += 1;
            }
            n
        })
    }

    /// Waits (a few seconds at most) until the worker says it has served everything sent.
    fn until_all_served(h: &HostEnd) {
        let deadline = soon();
        while !h.all_served() {
            assert!(Instant::now() < deadline, "the worker never caught up");
            thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_full_ring_waits_for_the_worker_and_then_drains() {
        let (mut h, w) = pair(DEFAULT_DATA_SIZE);
        let frame = [7u8; 1000];
        let per = record_size(frame.len());
        // Nobody serves yet: fill the ring until a post times out.
        let mut posted = 0;
        loop {
            match h.post(
                &frame,
                Instant::now() + Duration::from_millis(20),
                &mut || None,
            ) {
                Ok(()) => posted += 1,
                Err(SendError::Wait(WaitError::Timeout)) => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(posted, RING / per);
        assert!(!h.all_served());
        // A worker that starts late: the blocked post goes through once it has made room.
        let t = thread::spawn(move || {
            thread::sleep(Duration::from_millis(30));
            count_posted(w, vec![7u8; 1000]).join().unwrap()
        });
        let start = Instant::now();
        h.post(&frame, soon(), &mut || None).unwrap();
        assert!(start.elapsed() >= Duration::from_millis(20));
        until_all_served(&h);
        h.close();
        assert_eq!(t.join().unwrap(), posted + 1);
    }

    #[test]
    fn try_post_posts_while_the_ring_has_room_and_otherwise_posts_nothing() {
        let (mut h, w) = pair(DEFAULT_DATA_SIZE);
        let frame = [3u8; 1000];
        let mut posted = 0;
        while h.try_post(&frame).unwrap() {
            posted += 1;
        }
        assert_eq!(posted, RING / record_size(frame.len()));
        assert!(
            !h.try_post(&frame).unwrap(),
            "a full ring stays full until the worker serves"
        );
        assert!(matches!(
            h.try_post(&vec![0u8; MSG_AREA + 1]),
            Err(SendError::TooLarge(_))
        ));
        let t = count_posted(w, frame.to_vec());
        until_all_served(&h);
        assert!(h.try_post(&frame).unwrap(), "room again once served");
        until_all_served(&h);
        h.close();
        assert_eq!(t.join().unwrap(), posted + 1);
    }

    #[test]
    fn a_dead_worker_is_noticed_while_waiting_for_room() {
        let (mut h, _w) = pair(DEFAULT_DATA_SIZE);
        while h
            .post(
                &[1; 1000],
                Instant::now() + Duration::from_millis(5),
                &mut || None,
            )
            .is_ok()
        {}
        let start = Instant::now();
        match h.post(&[1; 1000], start + Duration::from_secs(10), &mut || {
            Some("gone".into())
        }) {
            Err(SendError::Wait(WaitError::Dead(why))) => assert_eq!(why, "gone"),
            other => panic!("{other:?}"),
        }
        assert!(start.elapsed() < Duration::from_millis(200));
    }

    #[test]
    fn sleeping_worker_is_woken() {
        let (mut h, w) = pair(DEFAULT_DATA_SIZE);
        let t = echo(w);
        for _ in 0..3 {
            // Long enough for the worker to give up spinning and sleep on the futex.
            thread::sleep(Duration::from_millis(5));
            assert_eq!(call(&mut h, b"abc"), b"cba");
            thread::sleep(Duration::from_millis(5));
            h.post(b"p", soon(), &mut || None).unwrap();
        }
        assert_eq!(call(&mut h, &[]), 3u32.to_le_bytes());
        h.close();
        t.join().unwrap();
    }

    #[test]
    fn idle_hook_runs_when_the_ring_empties() {
        let (mut h, mut w) = pair(DEFAULT_DATA_SIZE);
        for i in 0..5u32 {
            h.post(&i.to_le_bytes(), soon(), &mut || None).unwrap();
        }
        let mut buf = Vec::new();
        let mut idles = 0;
        for _ in 0..5 {
            assert_eq!(
                w.wait_request(&mut buf, &mut || true, &mut || idles += 1),
                Incoming::Posted
            );
        }
        assert_eq!(idles, 0, "frames were waiting: no idle");
        let closer = thread::spawn(move || {
            thread::sleep(Duration::from_millis(30));
            h.close();
            h
        });
        assert_eq!(
            w.wait_request(&mut buf, &mut || true, &mut || idles += 1),
            Incoming::Closed
        );
        assert_eq!(idles, 1, "once the spin gave up, before sleeping");
        closer.join().unwrap();
    }

    #[test]
    fn a_wait_that_ends_soon_after_the_spin_gave_up_restores_the_budget() {
        let (min, max) = (Duration::from_micros(5), Duration::from_micros(100));
        let mut s = Spin::new(min, max);
        for _ in 0..10 {
            s.miss();
        }
        assert_eq!(s.budget, min);
        // A 9 µs answer (a kernel launch + sync) missed a 5 µs budget: spin the whole ceiling next.
        s.late(Duration::from_micros(9));
        assert_eq!(s.budget, max);
        // An answer long after the ceiling (an idle peer) leaves the shrunk budget alone.
        s.miss();
        s.late(Duration::from_millis(3));
        assert_eq!(s.budget, max / 2);
    }

    #[test]
    fn oversized_frames_use_the_data_region() {
        let (mut h, w) = pair(MSG_AREA * 4);
        let t = echo(w);
        let big: Vec<u8> = (0..MSG_AREA * 2).map(|i| i as u8).collect();
        let out = call(&mut h, &big);
        assert_eq!(out.len(), big.len());
        assert!(out.iter().rev().eq(big.iter()));
        assert!(matches!(
            h.send(&vec![0; MSG_AREA * 5], soon(), &mut || None),
            Err(SendError::TooLarge(_))
        ));
        // Posted frames never go there (a later call's payload would overwrite them).
        assert!(matches!(
            h.post(&vec![0; MSG_AREA + 1], soon(), &mut || None),
            Err(SendError::TooLarge(_))
        ));
        h.post(&vec![9; MSG_AREA], soon(), &mut || None).unwrap();
        assert_eq!(call(&mut h, &[]), 1u32.to_le_bytes());
        h.close();
        assert_eq!(t.join().unwrap(), vec![vec![9; MSG_AREA]]);
    }

    #[test]
    fn silent_worker_times_out_and_dead_worker_is_noticed() {
        let (mut h, _w) = pair(DEFAULT_DATA_SIZE);
        let seq = h.send(b"x", soon(), &mut || None).unwrap();
        let start = Instant::now();
        let mut out = Vec::new();
        let r = h.wait(
            seq,
            start + Duration::from_millis(30),
            &mut || None,
            &mut out,
        );
        assert_eq!(r, Err(WaitError::Timeout));
        assert!(start.elapsed() >= Duration::from_millis(30));
        assert!(start.elapsed() < Duration::from_secs(1));

        // (After a timeout the host gives the channel up; a fresh one for the next case.)
        let (mut h, _w) = pair(DEFAULT_DATA_SIZE);
        let seq = h.send(b"y", soon(), &mut || None).unwrap();
        let start = Instant::now();
        let r = h.wait(
            seq,
            start + Duration::from_secs(10),
            &mut || Some("gone".into()),
            &mut out,
        );
        assert_eq!(r, Err(WaitError::Dead("gone".into())));
        assert!(start.elapsed() < Duration::from_millis(100));
    }

    /// A worker that signals each call's seq through the completion word at once, then answers
    /// `late` after `delay` (as a GPU worker does: the device's store lands first).
    fn signalling_worker(mut w: WorkerEnd, delay: Duration) -> thread::JoinHandle<()> {
        thread::spawn(move || {
            let mut buf = Vec::new();
            while let Incoming::Call = w.wait_request(&mut buf, &mut || true, &mut || {}) {
                let seq = w.call_seq().unwrap();
                // SAFETY: the word's address in this mapping, aligned (what a device would store to).
                unsafe { &*(w.completion_word() as *const AtomicU32) }.store(seq, Release);
                thread::sleep(delay);
                buf.reverse();
                w.respond(&buf).unwrap();
            }
        })
    }

    #[test]
    fn a_signalled_sync_ends_before_its_response_which_is_then_skipped() {
        let (mut h, w) = pair(DEFAULT_DATA_SIZE);
        let worker = signalling_worker(w, Duration::from_millis(200));
        let mut out = vec![7u8];
        let t = Instant::now();
        let seq = h.send(b"sync", soon(), &mut || None).unwrap();
        assert_eq!(
            h.wait_signalled(seq, soon(), &mut || None, &mut out)
                .unwrap(),
            Answer::Signalled
        );
        assert!(
            t.elapsed() < Duration::from_millis(150),
            "{:?}: the signal, not the response, ended it",
            t.elapsed()
        );
        assert_eq!(out, [7], "a signalled answer has no frame");
        // The next call's wait starts while the sync's response is still to come: it skips it.
        assert_eq!(call(&mut h, b"abc"), b"cba");
        assert!(
            t.elapsed() >= Duration::from_millis(400),
            "both responses were waited for in turn"
        );
        // Signalled twice in a row, then a plain wait, which ignores the word and takes the frame.
        for _ in 0..2 {
            let seq = h.send(b"s", soon(), &mut || None).unwrap();
            assert_eq!(
                h.wait_signalled(seq, soon(), &mut || None, &mut out)
                    .unwrap(),
                Answer::Signalled
            );
        }
        let seq = h.send(b"xy", soon(), &mut || None).unwrap();
        h.wait(seq, soon(), &mut || None, &mut out).unwrap();
        assert_eq!(out, b"yx");
        h.close();
        worker.join().unwrap();
    }

    #[test]
    fn a_response_from_before_the_last_answer_waited_for_is_refused() {
        let (mut h, w) = pair(DEFAULT_DATA_SIZE);
        let worker = echo(w);
        assert_eq!(call(&mut h, b"ab"), b"ba");
        let seq = h.send(b"x", soon(), &mut || None).unwrap();
        h.wait(seq, soon(), &mut || None, &mut Vec::new()).unwrap();
        h.close();
        worker.join().unwrap();
        // Answered up to `seq`: a response slot showing an older seq is a forgery.
        h.region
            .u32_at(OFF_RESP_SEQ)
            .store(seq.wrapping_sub(1), SeqCst);
        h.seq = seq.wrapping_add(1);
        let late = Instant::now() + Duration::from_millis(200);
        assert!(matches!(
            h.wait(h.seq, late, &mut || None, &mut Vec::new()),
            Err(WaitError::Protocol(_))
        ));
    }

    #[test]
    fn forged_response_descriptors_are_refused() {
        let (mut h, w) = pair(DEFAULT_DATA_SIZE);
        let mut out = Vec::new();
        // A response seq from nowhere.
        let seq = h.send(b"x", soon(), &mut || None).unwrap();
        w.region
            .u32_at(OFF_RESP_SEQ)
            .store(seq.wrapping_add(5), SeqCst);
        assert!(matches!(
            h.wait(
                seq,
                Instant::now() + Duration::from_secs(1),
                &mut || None,
                &mut out
            ),
            Err(WaitError::Protocol(_))
        ));
        // A frame length past its area.
        w.region.u32_at(OFF_RESP_SEQ).store(seq, SeqCst);
        let seq = h.send(b"x", soon(), &mut || None).unwrap();
        w.region.u32_at(OFF_RESP_LOC).store(LOC_MSG, Relaxed);
        w.region.u32_at(OFF_RESP_LEN).store(u32::MAX, Relaxed);
        w.region.u32_at(OFF_RESP_SEQ).store(seq, SeqCst);
        assert!(matches!(
            h.wait(
                seq,
                Instant::now() + Duration::from_secs(1),
                &mut || None,
                &mut out
            ),
            Err(WaitError::Protocol(_))
        ));
        // An inline frame longer than the inline area.
        let seq = h.send(b"x", soon(), &mut || None).unwrap();
        w.region.u32_at(OFF_RESP_LOC).store(LOC_INLINE, Relaxed);
        w.region
            .u32_at(OFF_RESP_LEN)
            .store(RESP_INLINE as u32 + 1, Relaxed);
        w.region.u32_at(OFF_RESP_SEQ).store(seq, SeqCst);
        assert!(matches!(
            h.wait(
                seq,
                Instant::now() + Duration::from_secs(1),
                &mut || None,
                &mut out
            ),
            Err(WaitError::Protocol(_))
        ));
        // An unknown location.
        let seq = h.send(b"x", soon(), &mut || None).unwrap();
        w.region.u32_at(OFF_RESP_LOC).store(7, Relaxed);
        w.region.u32_at(OFF_RESP_LEN).store(1, Relaxed);
        w.region.u32_at(OFF_RESP_SEQ).store(seq, SeqCst);
        assert!(matches!(
            h.wait(
                seq,
                Instant::now() + Duration::from_secs(1),
                &mut || None,
                &mut out
            ),
            Err(WaitError::Protocol(_))
        ));
    }

    #[test]
    fn garbage_ring_counters_from_the_worker_are_refused() {
        // A tail the host never sent up to (ahead of head, or far behind it): a protocol
        // violation as soon as the host looks, never an out-of-bounds write or a panic.
        for forged in [1u32, 17, RING as u32 + 16, u32::MAX, u32::MAX / 2] {
            let (mut h, w) = pair(DEFAULT_DATA_SIZE);
            h.post(b"a", soon(), &mut || None).unwrap();
            w.region
                .u32_at(OFF_TAIL)
                .store(h.head.wrapping_add(forged), SeqCst);
            let mut last = Ok(());
            // A tail ahead of head by less than a ring's worth reads as "more room"; it must
            // still never let the host write out of bounds, however much it posts.
            for _ in 0..(RING / 1024 + 2) {
                last = h.post(
                    &[3; 1000],
                    Instant::now() + Duration::from_millis(5),
                    &mut || None,
                );
                if last.is_err() {
                    break;
                }
            }
            match last {
                Err(SendError::Wait(WaitError::Protocol(_) | WaitError::Timeout)) => {}
                other => panic!("tail head+{forged}: {other:?}"),
            }
        }
        // Garbage everywhere else the worker may write: head/tail-adjacent words, response words.
        let (mut h, w) = pair(DEFAULT_DATA_SIZE);
        for off in [
            OFF_TAIL,
            OFF_HOST_WANTS_SPACE,
            OFF_RESP_LOC,
            OFF_RESP_LEN,
            OFF_HOST_SLEEPING,
        ] {
            w.region.u32_at(off).store(0xdead_beef, SeqCst);
        }
        // (The host reads `tail` only when its last reading shows too little room.)
        let refused = (0..RING / 1000 + 2)
            .map(|_| {
                h.post(
                    &[1; 1000],
                    Instant::now() + Duration::from_millis(5),
                    &mut || None,
                )
            })
            .find(|r| r.is_err());
        assert!(
            matches!(refused, Some(Err(SendError::Wait(WaitError::Protocol(_))))),
            "{refused:?}"
        );
    }

    #[test]
    fn a_corrupt_ring_is_reported_by_the_worker_not_misread() {
        let (h, mut w) = pair(DEFAULT_DATA_SIZE);
        let r = &h.region;
        // A record longer than any frame the ring carries.
        r.put_record_header(0, KIND_POSTED, MSG_AREA as u32 + 1, 0);
        r.stamp_at(0).store(stamp(0), Release);
        r.u32_at(OFF_HEAD).store(64, SeqCst);
        let mut buf = Vec::new();
        assert!(matches!(
            w.wait_request(&mut buf, &mut || true, &mut || {}),
            Incoming::Corrupt(_)
        ));
        // A record that would run past the ring's end.
        let (h, mut w) = pair(DEFAULT_DATA_SIZE);
        let last = RING - ALIGN;
        h.region
            .put_record_header(last, KIND_POSTED, ALIGN as u32, 0);
        h.region.stamp_at(last).store(stamp(last as u32), Release);
        w.read = last as u32;
        assert!(matches!(
            w.wait_request(&mut buf, &mut || true, &mut || {}),
            Incoming::Corrupt(_)
        ));
        // An unknown kind.
        let (h, mut w) = pair(DEFAULT_DATA_SIZE);
        h.region.put_record_header(0, 99, 1, 0);
        h.region.stamp_at(0).store(stamp(0), Release);
        h.region.u32_at(OFF_HEAD).store(32, SeqCst);
        assert!(matches!(
            w.wait_request(&mut buf, &mut || true, &mut || {}),
            Incoming::Corrupt(_)
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
        assert_eq!(
            h.wait_ready(Instant::now() + Duration::from_secs(5), &mut || None),
            Ok(())
        );
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
