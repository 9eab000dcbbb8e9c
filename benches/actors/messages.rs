//! What every path exchanges, as gpubench's `actor` module does inside the guest: `actor_scale`
//! of `kernels/actor.ptx` over rings of 256 slots of 64-float messages (each answered with
//! `in * 2 + 1`), and the layout of the one-message rings its normal launch works on.

use std::time::Duration;

use tasklet_worker::contract::actor::RingLayout;

pub const ACTOR_PTX: &str = include_str!("../../kernels/actor.ptx");
pub const KERNEL: &str = "actor_scale";

/// The persistent kernel serving rings of `layout`: `actor_scale`, or the same handler over
/// sequenced rings (each word beside its message's number).
pub fn persistent_kernel(layout: RingLayout) -> &'static str {
    match layout {
        RingLayout::Plain => KERNEL,
        RingLayout::Sequenced => "actor_scale_seq",
    }
}
/// Floats in one message, and its bytes.
pub const WIDTH: usize = 64;
pub const MESSAGE_BYTES: u32 = (WIDTH * 4) as u32;
/// Slots of each ring of the persistent kernel: the largest batch.
pub const SLOTS: u32 = 256;
pub const FACTOR: f32 = 2.0;
/// Threads of the one block every launch of the kernel runs.
pub const THREADS: u32 = 256;
/// The longest any path waits for one answer (or one batch's next answer).
pub const ANSWER_WAIT: Duration = Duration::from_secs(2);
/// The longest a persistent kernel is given to return when asked.
pub const STOP_GRACE: Duration = Duration::from_secs(2);
/// Untimed iterations before each timed loop (gpubench's too).
pub const WARMUP: u32 = 10;

/// Message `k`: every float `k % 1024` (exact in f32, and so is its answer).
pub fn message(k: u32, into: &mut Vec<u8>) {
    let v = (k % 1024) as f32;
    for _ in 0..WIDTH {
        into.extend_from_slice(&v.to_le_bytes());
    }
}

/// Whether `answer` is message `k`'s.
pub fn answers(k: u32, answer: &[u8]) -> bool {
    let want = ((k % 1024) as f32 * FACTOR + 1.0).to_le_bytes();
    answer.len() == MESSAGE_BYTES as usize && answer.chunks_exact(4).all(|w| w == want)
}

/// Whether `answers_` are the answers to messages `first..`, one after another.
pub fn all_answer(first: u32, answers_: &[u8]) -> bool {
    answers_
        .chunks(MESSAGE_BYTES as usize)
        .enumerate()
        .all(|(j, a)| answers(first.wrapping_add(j as u32), a))
}

/// The normal launch's device buffer: an inbox of one slot holding the message at `IN_AT`, an
/// outbox of one slot at `OUT_AT` (its answer at `ANSWER_AT`), and a control block at
/// `CONTROL_AT` asking the kernel to return once it has nothing to do: so the kernel handles
/// the message, then returns.
pub const IN_AT: u64 = 0;
pub const OUT_AT: u64 = 512;
pub const ANSWER_AT: u64 = OUT_AT + 256;
pub const CONTROL_AT: u64 = 1024;
pub const HANDLER_BYTES: u64 = 1280;

/// Bytes `0..CONTROL_AT` of the normal launch's buffer with message `k` waiting: written before
/// each launch, since the launch before consumed its message and filled the outbox.
pub fn handler_rings(k: u32, into: &mut Vec<u8>) {
    into.clear();
    let header = |head: u32| {
        let mut h = [0u8; 256];
        h[0..4].copy_from_slice(&head.to_le_bytes()); // head; tail at 64 stays 0
        h[128..132].copy_from_slice(&1u32.to_le_bytes()); // capacity
        h[132..136].copy_from_slice(&MESSAGE_BYTES.to_le_bytes());
        h
    };
    into.extend_from_slice(&header(1));
    message(k, into);
    into.extend_from_slice(&header(0));
    into.resize(CONTROL_AT as usize, 0);
}

/// The normal launch's control block: `should_terminate` set.
pub fn handler_control() -> [u8; 256] {
    let mut control = [0u8; 256];
    control[4..8].copy_from_slice(&1u32.to_le_bytes());
    control
}
