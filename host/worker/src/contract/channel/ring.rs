//! The request ring's records.
//!
//! Each record is a 16-byte header (kind, length, call seq, stamp) and the frame, starting on a
//! cache line and padded to whole lines; a record that would straddle the ring's end is preceded by
//! a wrap record that skips to its start. Whole lines because every line of a record is a transfer
//! from the host's core to the worker's on the way to the driver: a launch with a small argument
//! block is one line (see the codec's launch encoding), which `benches/probes/ring_lines.rs` found
//! faster per hand-off than the two lines, shared with their neighbours, that a record at 16-byte
//! alignment touches; and records never share a line, so the host writing the next record never
//! takes away the line the worker is reading.
//!
//! `head` (bytes ever published by the host) and `tail` (bytes the worker has *finished*, not
//! merely read) are free-running `u32`s; the ring's size divides 2³², so `pos % RING` stays
//! consistent across their wrap-around. Because `tail` only moves once a frame was served,
//! `tail == head` means the worker has done everything it was sent.
//!
//! The worker learns that a record is there from the record itself, not from `head`: the host
//! writes the stamp — the record's free-running position, `| 1` — last, with release ordering, and
//! the worker spins on the stamp where the next record will be. One cache-line transfer then
//! brings the news and the record's first 48 frame bytes together; reading `head` first would cost
//! a transfer of its own. A stale stamp can never pass for a fresh one, because the worker zeroes
//! every stamp slot of the span it consumed (one word per line) as it hands the span back through
//! `tail`, so the host only ever writes into space whose stamp slots are zero. `head` still
//! exists: for the host's own books, and as the futex word a sleeping worker waits on.

use std::sync::atomic::AtomicU32;

use super::layout::{SharedRegion, MSG_AREA, RING, RING_OFF};

/// Ring records: a header, then (for inline kinds) the frame, padded to `ALIGN` (a cache line).
pub(super) const REC_HEADER: usize = 16;
pub(super) const ALIGN: usize = 64;
/// A frame the worker serves without responding.
pub(super) const KIND_POSTED: u32 = 1;
/// A frame that gets a response tagged with the header's seq.
pub(super) const KIND_CALL: u32 = 2;
/// A call whose frame lies at the start of the data region.
pub(super) const KIND_CALL_IN_DATA: u32 = 3;
/// Nothing here: the next record starts at the ring's start.
pub(super) const KIND_WRAP: u32 = 4;

const _: () =
    assert!(RING.is_power_of_two() && RING <= 1 << 31 && MSG_AREA + REC_HEADER <= RING / 2);

/// The stamp that marks a record at ring position `at` (free-running) as published: never zero,
/// because positions are multiples of [`ALIGN`].
pub(super) fn stamp(at: u32) -> u32 {
    at | 1
}

/// Bytes a record for a frame of `len` bytes takes in the ring when inline (whole cache lines):
/// public for encoders that keep hot frames to one line.
pub const fn record_size(len: usize) -> usize {
    (REC_HEADER + len).next_multiple_of(ALIGN)
}

impl SharedRegion {
    /// The stamp slot of a record header at ring position `pos` (reduced mod `RING`, aligned).
    pub(super) fn stamp_at(&self, pos: usize) -> &AtomicU32 {
        assert!(
            pos.is_multiple_of(ALIGN) && pos + REC_HEADER <= RING,
            "stamp slot at ring position {pos}"
        );
        // SAFETY: in bounds of the ring (checked), 4-byte aligned, accessed atomically by both
        // ends (the header's other bytes are plain copies, ordered by this word).
        unsafe { AtomicU32::from_ptr(self.ptr_at(RING_OFF + pos + 12) as *mut u32) }
    }

    /// Writes a ring record header at ring position `pos` (already reduced mod `RING`), its stamp
    /// slot zero (the caller stamps it once the frame is in place).
    pub(super) fn put_record_header(&self, pos: usize, kind: u32, len: u32, seq: u32) {
        let mut h = [0u8; REC_HEADER];
        h[0..4].copy_from_slice(&kind.to_le_bytes());
        h[4..8].copy_from_slice(&len.to_le_bytes());
        h[8..12].copy_from_slice(&seq.to_le_bytes());
        self.put(RING_OFF + pos, &h);
    }

    pub(super) fn get_record_header(&self, pos: usize) -> (u32, u32, u32) {
        let mut h = [0u8; REC_HEADER];
        self.get(RING_OFF + pos, &mut h);
        let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        (word(0), word(4), word(8))
    }
}
