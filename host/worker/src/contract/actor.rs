//! Persistent kernels ("actors") and the memory they share with the host while they run: the
//! byte layouts of a control block and of a message ring, which the host, the worker and the
//! kernel all read and write, and a view of each over memory that several processes map.
//!
//! Both live in *mapped memory*: a memfd the host creates and maps, attaches to the lease's worker
//! like a guest memory, and the worker makes visible to kernels (`Request::MapDevice`: cuda
//! page-locks it with `CU_MEMHOSTREGISTER_DEVICEMAP`; the emulator makes it an allocation of its
//! own). The host then reads and writes rings and control blocks directly, without a request to
//! the worker per message, while a kernel on the device does the same.
//!
//! Every field is a naturally aligned little-endian integer read and written with atomics. What
//! the kernel writes is untrusted: the host checks every counter it reads against the ring's
//! capacity before using it.
//!
//! ```text
//! control block (CONTROL_BYTES)
//!   +0   u32 is_active           worker: 1 while the kernel runs, 0 once it has ended
//!   +4   u32 should_terminate    host: 1 asks the kernel to return
//!   +8   u32 has_terminated      worker: 1 once the kernel has ended (a kernel may set it too)
//!   +12  u32 errors_encountered  kernel: counts what its handler could not do
//!   +16  u64 messages_processed  kernel: counts the messages it handled
//!   +24  u32 exit                worker: EXIT_RUNNING, then how the kernel ended
//!   +28  u32 message_len         worker: bytes of `message`
//!   +32  message                 worker: why the kernel failed, UTF-8, at most MESSAGE_BYTES
//!
//! The worker writes its fields to a status block as well, in memory no kernel reaches; the
//! host reads them from there (see [`ControlBlock`]).
//!
//! ring (RING_HEADER + capacity * message_size)
//!   +0   u32 head                producer: messages ever put (wrapping)
//!   +64  u32 tail                consumer: messages ever taken (wrapping)
//!   +128 u32 capacity            host, at creation: slots, a power of two
//!   +132 u32 message_size        host, at creation: bytes of one message, a multiple of 4
//!   +136 u32 layout              host, at creation: LAYOUT_PLAIN or LAYOUT_SEQUENCED
//!   +256 slots                   message n is at slot n % capacity
//! ```
//!
//! **Plain** slots (`LAYOUT_PLAIN`) are the message's bytes, `message_size` of them. A producer
//! writes slot `head % capacity`, then (with release order: `st.release` or
//! `__threadfence_system()` before the store on a GPU) stores `head + 1`; a consumer reads
//! `head` (acquire), the slot, then stores `tail + 1`.
//!
//! **Sequenced** slots (`LAYOUT_SEQUENCED`) are `2 * message_size` bytes: each 4 bytes of the
//! message travel in a little-endian u64 whose upper half is the message's number plus one
//! (`n + 1`, wrapping), written and read whole. A consumer that reads the number it expects in a
//! word has that word's bytes, with no head to read first and no fence between the slot and the
//! head: on a GPU reading host memory across the bus, that is one bus round trip a message
//! instead of two (benches/probes/actor_ll.rs). A message is there once every word of its slot
//! carries its number. Producers still store `head` after the slots (the host does; a kernel may
//! leave it), and consumers still store `tail`, which is what frees slots for the producer.
//!
//! Either way the ring is full when `head - tail == capacity` (for a sequenced ring the kernel
//! producer counts its own head). A sequenced consumer takes any whole message, so its tail may
//! pass a producer's head that counts messages later than it writes them (actor_scale_seq
//! answers a message seen whole beyond one not yet whole, and counts it in a later pass), by at
//! most the capacity. Head and tail sit on cache lines of their own so that producer
//! and consumer do not contend for one line.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Bytes of a control block.
pub const CONTROL_BYTES: usize = 256;
/// Bytes of a control block's failure message at most.
pub const MESSAGE_BYTES: usize = CONTROL_BYTES - OFF_MESSAGE;

pub const OFF_IS_ACTIVE: usize = 0;
pub const OFF_SHOULD_TERMINATE: usize = 4;
pub const OFF_HAS_TERMINATED: usize = 8;
pub const OFF_ERRORS: usize = 12;
pub const OFF_MESSAGES: usize = 16;
pub const OFF_EXIT: usize = 24;
pub const OFF_MESSAGE_LEN: usize = 28;
pub const OFF_MESSAGE: usize = 32;

/// `exit`: the kernel has not ended (or was never started).
pub const EXIT_RUNNING: u32 = 0;
/// `exit`: the kernel returned.
pub const EXIT_RETURNED: u32 = 1;
/// `exit`: the kernel faulted; `message` says where.
pub const EXIT_FAULTED: u32 = 2;

/// Bytes of a ring's header, before its slots.
pub const RING_HEADER: usize = 256;
pub const OFF_HEAD: usize = 0;
pub const OFF_TAIL: usize = 64;
pub const OFF_CAPACITY: usize = 128;
pub const OFF_MESSAGE_SIZE: usize = 132;
pub const OFF_LAYOUT: usize = 136;

/// `layout`: slots hold the messages' bytes.
pub const LAYOUT_PLAIN: u32 = 0;
/// `layout`: each 4 bytes of a message in a u64 with the message's number + 1 above them.
pub const LAYOUT_SEQUENCED: u32 = 1;

/// How a ring's slots hold its messages (the module's documentation has both layouts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingLayout {
    Plain,
    Sequenced,
}

impl RingLayout {
    /// The `layout` word of the ring's header.
    pub fn word(self) -> u32 {
        match self {
            RingLayout::Plain => LAYOUT_PLAIN,
            RingLayout::Sequenced => LAYOUT_SEQUENCED,
        }
    }

    /// Bytes of slot per byte of message.
    fn slot_factor(self) -> usize {
        match self {
            RingLayout::Plain => 1,
            RingLayout::Sequenced => 2,
        }
    }
}

/// How a persistent kernel ended, as its control block says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    Running,
    Returned,
    Faulted(String),
}

/// The fields of a control block at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlSnapshot {
    pub is_active: bool,
    pub should_terminate: bool,
    pub has_terminated: bool,
    pub errors_encountered: u32,
    pub messages_processed: u64,
    pub exit: Exit,
}

/// A control block in memory this process maps (the host's mapping of the area, or the
/// worker's). Copyable: it is an address; whoever makes one keeps the memory mapped while any
/// copy is used.
///
/// What the worker writes (is_active, has_terminated, exit, message) goes to a *status* block
/// too, of the same layout, in memory no kernel can reach (attached to the worker, never mapped
/// for the device): a kernel can write its own control block, so the host believes only the
/// status block about whether and how the kernel ended, and the control block about what the
/// kernel counts. A view made with [`ControlBlock::at`] uses one block for both.
#[derive(Debug, Clone, Copy)]
pub struct ControlBlock {
    base: *mut u8,
    status: *mut u8,
}

// SAFETY: the blocks are only ever accessed through atomics, by any thread of any process.
unsafe impl Send for ControlBlock {}
unsafe impl Sync for ControlBlock {}

impl ControlBlock {
    /// # Safety
    /// `base` is 8-aligned and `CONTROL_BYTES` bytes from it stay mapped, readable and writable
    /// for as long as this view (or a copy) is used.
    pub unsafe fn at(base: *mut u8) -> ControlBlock {
        ControlBlock { base, status: base }
    }

    /// The kernel's block at `control`, whose status goes to `status` as well.
    ///
    /// # Safety
    /// As for [`ControlBlock::at`], for both blocks.
    pub unsafe fn split(control: *mut u8, status: *mut u8) -> ControlBlock {
        ControlBlock {
            base: control,
            status,
        }
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        // SAFETY: `at`'s contract; every offset used is 4-aligned and inside the block.
        unsafe { AtomicU32::from_ptr(self.base.add(off).cast()) }
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        // SAFETY: as in `u32_at`, 8-aligned.
        unsafe { AtomicU64::from_ptr(self.base.add(off).cast()) }
    }

    fn status_u32(&self, off: usize) -> &AtomicU32 {
        // SAFETY: as in `u32_at`, for the status block.
        unsafe { AtomicU32::from_ptr(self.status.add(off).cast()) }
    }

    /// The blocks the worker writes: the kernel's, and the status block when it is another.
    fn worker_blocks(&self) -> impl Iterator<Item = ControlBlock> {
        let one = ControlBlock {
            base: self.base,
            status: self.base,
        };
        let other = (self.status != self.base).then_some(ControlBlock {
            base: self.status,
            status: self.status,
        });
        std::iter::once(one).chain(other)
    }

    /// Worker, before the launch: running, nothing asked, nothing counted.
    pub fn start(&self) {
        for b in self.worker_blocks() {
            for off in [
                OFF_SHOULD_TERMINATE,
                OFF_HAS_TERMINATED,
                OFF_ERRORS,
                OFF_MESSAGE_LEN,
            ] {
                b.u32_at(off).store(0, Ordering::Relaxed);
            }
            b.u64_at(OFF_MESSAGES).store(0, Ordering::Relaxed);
            b.u32_at(OFF_EXIT).store(EXIT_RUNNING, Ordering::Relaxed);
            b.u32_at(OFF_IS_ACTIVE).store(1, Ordering::Release);
        }
    }

    /// Worker, once the kernel has ended: how, then `has_terminated` (release: whoever sees it
    /// sees the rest), in the kernel's block and the status block.
    pub fn finish(&self, exit: &Exit) {
        for b in self.worker_blocks() {
            b.finish_one(exit);
        }
    }

    fn finish_one(&self, exit: &Exit) {
        let (code, message) = match exit {
            Exit::Running => return,
            Exit::Returned => (EXIT_RETURNED, ""),
            Exit::Faulted(m) => (EXIT_FAULTED, m.as_str()),
        };
        let mut len = message.len().min(MESSAGE_BYTES);
        while !message.is_char_boundary(len) {
            len -= 1;
        }
        for (i, b) in message.as_bytes()[..len].iter().enumerate() {
            // SAFETY: OFF_MESSAGE + i < CONTROL_BYTES; bytes go through a byte atomic.
            unsafe {
                std::sync::atomic::AtomicU8::from_ptr(self.base.add(OFF_MESSAGE + i))
                    .store(*b, Ordering::Relaxed)
            };
        }
        self.u32_at(OFF_MESSAGE_LEN)
            .store(len as u32, Ordering::Relaxed);
        self.u32_at(OFF_EXIT).store(code, Ordering::Relaxed);
        self.u32_at(OFF_IS_ACTIVE).store(0, Ordering::Relaxed);
        self.u32_at(OFF_HAS_TERMINATED).store(1, Ordering::Release);
    }

    /// Host: asks the kernel to return.
    pub fn ask_to_terminate(&self) {
        self.u32_at(OFF_SHOULD_TERMINATE)
            .store(1, Ordering::Release);
    }

    /// Whether the worker has seen the kernel end (what `has_terminated` alone cannot say: a
    /// kernel may set that itself before it returns), as the status block says.
    pub fn ended(&self) -> bool {
        self.status_u32(OFF_EXIT).load(Ordering::Acquire) != EXIT_RUNNING
    }

    /// Reads every field: how the kernel runs or ended from the status block, what it counts
    /// from its own. The message is read only once the exit says there is one, and is cut to
    /// what is valid UTF-8.
    pub fn snapshot(&self) -> ControlSnapshot {
        let exit = match self.status_u32(OFF_EXIT).load(Ordering::Acquire) {
            EXIT_RUNNING => Exit::Running,
            EXIT_RETURNED => Exit::Returned,
            _ => {
                let len = (self.status_u32(OFF_MESSAGE_LEN).load(Ordering::Relaxed) as usize)
                    .min(MESSAGE_BYTES);
                let bytes: Vec<u8> = (0..len)
                    // SAFETY: inside the block; read through a byte atomic.
                    .map(|i| unsafe {
                        std::sync::atomic::AtomicU8::from_ptr(self.status.add(OFF_MESSAGE + i))
                            .load(Ordering::Relaxed)
                    })
                    .collect();
                Exit::Faulted(String::from_utf8_lossy(&bytes).into_owned())
            }
        };
        ControlSnapshot {
            is_active: self.status_u32(OFF_IS_ACTIVE).load(Ordering::Acquire) != 0,
            should_terminate: self.u32_at(OFF_SHOULD_TERMINATE).load(Ordering::Acquire) != 0,
            has_terminated: self.status_u32(OFF_HAS_TERMINATED).load(Ordering::Acquire) != 0,
            errors_encountered: self.u32_at(OFF_ERRORS).load(Ordering::Acquire),
            messages_processed: self.u64_at(OFF_MESSAGES).load(Ordering::Acquire),
            exit,
        }
    }
}

/// Bytes a ring of `capacity` messages of `message_size` bytes takes in `layout`, if that is
/// representable.
pub fn ring_bytes(layout: RingLayout, capacity: u32, message_size: u32) -> Option<usize> {
    (capacity as usize)
        .checked_mul(message_size as usize)?
        .checked_mul(layout.slot_factor())?
        .checked_add(RING_HEADER)
}

/// A ring in memory this process maps.
#[derive(Debug, Clone, Copy)]
pub struct Ring {
    base: *mut u8,
    layout: RingLayout,
    capacity: u32,
    message_size: u32,
}

// SAFETY: accessed only through atomics.
unsafe impl Send for Ring {}
unsafe impl Sync for Ring {}

/// A ring whose counters the other side left in a state no ring can be in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the ring's counters are broken: head {head}, tail {tail}, capacity {capacity}")]
pub struct BrokenRing {
    pub head: u32,
    pub tail: u32,
    pub capacity: u32,
}

impl Ring {
    /// Writes a fresh ring's header (empty, with its geometry) and returns a view of it.
    ///
    /// # Safety
    /// `base` is 64-aligned and `ring_bytes(layout, capacity, message_size)` bytes from it stay
    /// mapped, readable and writable while the view (or a copy) is used. `capacity` is a power
    /// of two and `message_size` a multiple of 4, both above zero (the caller checked).
    pub unsafe fn create(
        base: *mut u8,
        layout: RingLayout,
        capacity: u32,
        message_size: u32,
    ) -> Ring {
        let ring = Ring {
            base,
            layout,
            capacity,
            message_size,
        };
        if layout == RingLayout::Sequenced {
            // No word of a fresh ring may look like message 0's (number 1) or any other's of
            // the first lap: zero is no message's number.
            for off in (0..capacity as usize * ring.slot_bytes()).step_by(8) {
                ring.u64_at(RING_HEADER + off).store(0, Ordering::Relaxed);
            }
        }
        ring.u32_at(OFF_HEAD).store(0, Ordering::Relaxed);
        ring.u32_at(OFF_TAIL).store(0, Ordering::Relaxed);
        ring.u32_at(OFF_CAPACITY).store(capacity, Ordering::Relaxed);
        ring.u32_at(OFF_LAYOUT)
            .store(layout.word(), Ordering::Relaxed);
        ring.u32_at(OFF_MESSAGE_SIZE)
            .store(message_size, Ordering::Release);
        ring
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    pub fn message_size(&self) -> u32 {
        self.message_size
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        // SAFETY: `create`'s contract; every offset used is 4-aligned and inside the ring.
        unsafe { AtomicU32::from_ptr(self.base.add(off).cast()) }
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        // SAFETY: `create`'s contract; the slots start 256 bytes in (64-aligned base) and every
        // sequenced word is 8-aligned within them.
        unsafe { AtomicU64::from_ptr(self.base.add(off).cast()) }
    }

    /// Messages waiting (put, not yet taken), checked against the capacity.
    fn waiting(&self) -> Result<(u32, u32, u32), BrokenRing> {
        let head = self.u32_at(OFF_HEAD).load(Ordering::Acquire);
        let tail = self.u32_at(OFF_TAIL).load(Ordering::Acquire);
        let n = head.wrapping_sub(tail);
        if n > self.capacity {
            return Err(BrokenRing {
                head,
                tail,
                capacity: self.capacity,
            });
        }
        Ok((head, tail, n))
    }

    /// Producer: puts as many of `messages` (whole messages, concatenated) as there is room
    /// for, in order; how many went.
    pub fn push(&self, messages: &[u8]) -> Result<u32, BrokenRing> {
        let size = self.message_size as usize;
        let (head, _, waiting) = self.waiting()?;
        let room = (self.capacity - waiting) as usize;
        let n = (messages.len() / size).min(room);
        for (i, message) in messages.chunks_exact(size).take(n).enumerate() {
            let number = head.wrapping_add(i as u32);
            match self.layout {
                RingLayout::Plain => self.store_slot(number & (self.capacity - 1), message),
                RingLayout::Sequenced => self.store_sequenced(number, message),
            }
        }
        self.u32_at(OFF_HEAD)
            .store(head.wrapping_add(n as u32), Ordering::Release);
        Ok(n as u32)
    }

    /// Consumer: takes up to `max` waiting messages, appended to `out`; how many.
    pub fn pop(&self, max: u32, out: &mut Vec<u8>) -> Result<u32, BrokenRing> {
        if self.layout == RingLayout::Sequenced {
            return Ok(self.pop_sequenced(max, out));
        }
        let (_, tail, waiting) = self.waiting()?;
        let n = waiting.min(max);
        for i in 0..n {
            let slot = tail.wrapping_add(i) & (self.capacity - 1);
            self.load_slot(slot, out);
        }
        self.u32_at(OFF_TAIL)
            .store(tail.wrapping_add(n), Ordering::Release);
        Ok(n)
    }

    /// Messages waiting now.
    pub fn len(&self) -> Result<u32, BrokenRing> {
        if self.layout == RingLayout::Sequenced {
            let tail = self.u32_at(OFF_TAIL).load(Ordering::Acquire);
            return Ok((0..self.capacity)
                .take_while(|&i| self.sequenced_there(tail.wrapping_add(i)))
                .count() as u32);
        }
        Ok(self.waiting()?.2)
    }

    /// The words of message `number` in its sequenced slot, each with the number above it.
    fn store_sequenced(&self, number: u32, message: &[u8]) {
        let base = self.sequenced_slot(number);
        let tag = u64::from(number.wrapping_add(1)) << 32;
        for (w, bytes) in message.chunks_exact(4).enumerate() {
            let v = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            self.u64_at(base + w * 8)
                .store(tag | u64::from(v), Ordering::Release);
        }
    }

    /// Bytes of one slot.
    fn slot_bytes(&self) -> usize {
        self.message_size as usize * self.layout.slot_factor()
    }

    /// Where message `number`'s sequenced slot starts.
    fn sequenced_slot(&self, number: u32) -> usize {
        RING_HEADER + (number & (self.capacity - 1)) as usize * self.slot_bytes()
    }

    /// Whether every word of message `number`'s slot carries its number.
    fn sequenced_there(&self, number: u32) -> bool {
        let base = self.sequenced_slot(number);
        let want = number.wrapping_add(1);
        (0..self.message_size as usize / 4)
            .all(|w| (self.u64_at(base + w * 8).load(Ordering::Acquire) >> 32) as u32 == want)
    }

    /// Appends message `number`'s bytes to `out` if every word of its slot carries its number
    /// (each word read once: a word with its number has its bytes); else leaves `out` as it was.
    fn take_sequenced(&self, number: u32, out: &mut Vec<u8>) -> bool {
        let base = self.sequenced_slot(number);
        let want = number.wrapping_add(1);
        let kept = out.len();
        for w in 0..self.message_size as usize / 4 {
            let word = self.u64_at(base + w * 8).load(Ordering::Acquire);
            if (word >> 32) as u32 != want {
                out.truncate(kept);
                return false;
            }
            out.extend_from_slice(&(word as u32).to_le_bytes());
        }
        true
    }

    /// Takes the messages whose slots are whole, from `tail` on, up to `max`; then stores the
    /// new tail, which frees their slots for the producer's next lap.
    fn pop_sequenced(&self, max: u32, out: &mut Vec<u8>) -> u32 {
        let tail = self.u32_at(OFF_TAIL).load(Ordering::Acquire);
        let mut n = 0;
        while n < max.min(self.capacity) && self.take_sequenced(tail.wrapping_add(n), out) {
            n += 1;
        }
        if n > 0 {
            self.u32_at(OFF_TAIL)
                .store(tail.wrapping_add(n), Ordering::Release);
        }
        n
    }

    pub fn is_empty(&self) -> Result<bool, BrokenRing> {
        Ok(self.len()? == 0)
    }

    fn slot_word(&self, slot: u32, word: usize) -> &AtomicU32 {
        let off = RING_HEADER + slot as usize * self.message_size as usize + word * 4;
        self.u32_at(off)
    }

    fn store_slot(&self, slot: u32, message: &[u8]) {
        for (w, bytes) in message.chunks_exact(4).enumerate() {
            let v = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            self.slot_word(slot, w).store(v, Ordering::Relaxed);
        }
    }

    fn load_slot(&self, slot: u32, out: &mut Vec<u8>) {
        for w in 0..self.message_size as usize / 4 {
            let v = self.slot_word(slot, w).load(Ordering::Relaxed);
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C, align(64))]
    struct Mem([u8; 1024]);

    #[test]
    fn a_ring_carries_messages_in_order_and_says_when_it_is_full() {
        let mut mem = Box::new(Mem([0; 1024]));
        // SAFETY: 1024 bytes, 64-aligned, live for the test.
        let ring = unsafe { Ring::create(mem.0.as_mut_ptr(), RingLayout::Plain, 4, 8) };
        let msgs: Vec<u8> = (0u8..48).collect();
        assert_eq!(ring.push(&msgs).unwrap(), 4, "room for four of six");
        let mut out = Vec::new();
        assert_eq!(ring.pop(3, &mut out).unwrap(), 3);
        assert_eq!(out, msgs[..24]);
        assert_eq!(ring.push(&msgs[32..]).unwrap(), 2);
        out.clear();
        assert_eq!(ring.pop(10, &mut out).unwrap(), 3);
        assert_eq!(&out[..8], &msgs[24..32]);
        assert_eq!(&out[8..], &msgs[32..48]);
        assert!(ring.is_empty().unwrap());
    }

    #[test]
    fn a_sequenced_ring_carries_numbered_words_and_takes_only_whole_messages() {
        let mut mem = Box::new(Mem([0xff; 1024]));
        // SAFETY: 1024 bytes (256 + 4 slots of 2 * 8), 64-aligned, live for the test.
        let ring = unsafe { Ring::create(mem.0.as_mut_ptr(), RingLayout::Sequenced, 4, 8) };
        let word = |slot: usize, w: usize| ring.u64_at(RING_HEADER + slot * 16 + w * 8);
        assert_eq!(
            word(0, 0).load(Ordering::Relaxed),
            0,
            "a fresh slot is no message"
        );
        let msgs: Vec<u8> = (0u8..48).collect();
        assert_eq!(ring.push(&msgs).unwrap(), 4, "room for four of six");
        assert_eq!(
            word(1, 1).load(Ordering::Relaxed),
            (2u64 << 32) | u64::from(u32::from_le_bytes([12, 13, 14, 15])),
            "message 1's second word, number 2 above it"
        );
        assert_eq!(
            ring.u32_at(OFF_LAYOUT).load(Ordering::Relaxed),
            LAYOUT_SEQUENCED
        );
        assert_eq!(ring.len().unwrap(), 4);
        let mut out = Vec::new();
        assert_eq!(ring.pop(3, &mut out).unwrap(), 3);
        assert_eq!(out, msgs[..24]);
        // A message half there (its second word from the last lap) is not taken.
        word(3, 1).store(0, Ordering::Relaxed);
        out.clear();
        assert_eq!(ring.pop(10, &mut out).unwrap(), 0);
        assert_eq!(ring.len().unwrap(), 0);
        word(3, 1).store((4u64 << 32) | 7, Ordering::Relaxed);
        assert_eq!(ring.pop(10, &mut out).unwrap(), 1);
        assert_eq!(out, [24, 25, 26, 27, 7, 0, 0, 0]);
        // Around the ring: the next lap's numbers.
        assert_eq!(ring.push(&msgs[32..]).unwrap(), 2);
        out.clear();
        assert_eq!(ring.pop(10, &mut out).unwrap(), 2);
        assert_eq!(out, msgs[32..48]);
        assert_eq!(
            word(0, 0).load(Ordering::Relaxed) >> 32,
            5,
            "message 4 in slot 0"
        );
    }

    #[test]
    fn a_ring_whose_counters_were_broken_is_refused() {
        let mut mem = Box::new(Mem([0; 1024]));
        // SAFETY: as above.
        let ring = unsafe { Ring::create(mem.0.as_mut_ptr(), RingLayout::Plain, 4, 8) };
        ring.u32_at(OFF_HEAD).store(9, Ordering::Relaxed);
        assert!(ring.pop(1, &mut Vec::new()).is_err());
        assert!(ring.push(&[0; 8]).is_err());
    }

    #[test]
    fn a_kernel_cannot_pretend_through_its_control_block_that_it_ended() {
        let mut control = Box::new(Mem([0; 1024]));
        let mut status = Box::new(Mem([0; 1024]));
        // SAFETY: two blocks of 1024 bytes, 64-aligned, live for the test.
        let view = unsafe { ControlBlock::split(control.0.as_mut_ptr(), status.0.as_mut_ptr()) };
        view.start();
        // SAFETY: as above; the "kernel" writes its own block, every field of it.
        let kernels = unsafe { ControlBlock::at(control.0.as_mut_ptr()) };
        kernels.finish(&Exit::Returned);
        kernels.u64_at(OFF_MESSAGES).store(7, Ordering::Relaxed);
        let s = view.snapshot();
        assert!(!view.ended() && s.is_active && !s.has_terminated && s.exit == Exit::Running);
        assert_eq!(
            s.messages_processed, 7,
            "what the kernel counts is read from its block"
        );
        view.finish(&Exit::Faulted("fault".into()));
        assert!(view.ended());
        assert_eq!(view.snapshot().exit, Exit::Faulted("fault".into()));
        assert_eq!(
            kernels.snapshot().exit,
            Exit::Faulted("fault".into()),
            "mirrored"
        );
    }

    #[test]
    fn a_control_block_reports_how_its_kernel_ended() {
        let mut mem = Box::new(Mem([0xff; 1024]));
        // SAFETY: as above.
        let control = unsafe { ControlBlock::at(mem.0.as_mut_ptr()) };
        control.start();
        let s = control.snapshot();
        assert!(s.is_active && !s.has_terminated && s.exit == Exit::Running);
        control.ask_to_terminate();
        assert!(control.snapshot().should_terminate);
        control.finish(&Exit::Faulted("é".repeat(200)));
        let s = control.snapshot();
        assert!(!s.is_active && s.has_terminated);
        match s.exit {
            Exit::Faulted(m) => assert!(m.len() <= MESSAGE_BYTES && m.starts_with('é')),
            other => panic!("{other:?}"),
        }
    }
}
