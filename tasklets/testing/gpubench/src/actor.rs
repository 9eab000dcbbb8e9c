//! The actor commands (benches/speed/actors.rs): `actor_scale` of `kernels/actor.ptx` (each
//! message of 64 floats becomes `in * 2 + 1`) as a persistent kernel serving two rings of 256
//! slots, and the same kernel launched as a normal kernel over one message in device memory.
//!
//! | command | what is timed | lines |
//! | --- | --- | --- |
//! | `actor-rtt N` | `N` × (send one message, receive its answer), each timed | `actor_rtt_ns` (median), `actor_rtt_p99_ns` |
//! | `actor-batch B R` | `R` × (send `B` messages, receive their `B` answers), each timed; `B` at most 256 | `actor_batch_ns` (median batch), `actor_batch_p99_ns`, `actor_msgs_per_s` (`B` / median batch) |
//! | `actor-rtt-seq N`, `actor-batch-seq B R` | the same through sequenced rings (`actor_scale_seq`: each word beside its message's number) | the same names with `seq_` in front: `seq_actor_rtt_ns`, … |
//! | `ring-calls N` | `N` sends of one message into a sequenced ring no kernel takes from (at most its 16,384 slots), then `N` receives from one no kernel runs for (each answered at once): what one call of each costs through the sandbox, no device involved | `ring_send_ns`, `ring_recv_ns` (means) |
//! | `handler-launch N` | `N` × (launch `actor_scale` as a normal kernel over one message in device memory, then `sync`), each timed, the message put there untimed before each; then `N` × (write the message, launch, read the answer), each timed | `handler_launch_sync_ns` (median), `handler_launch_sync_p99_ns`, `handler_rtt_ns` (median write + launch + read) |
//!
//! Every answer is checked (after its clock read); a wrong one is `error mismatch`. An answer
//! that does not come within [`ANSWER_WAIT_US`] is `error timeout`.

use std::time::Instant;

use tasklet_gpu::raw::sessions::{
    ActorArg, BufferArg, Kernel, KernelArg, LaunchConfig, Ring, RingDirection, Session,
};
use tasklet_gpu::Error;

use super::{acquire, median, nanos, percentile, Out, Step, Stopped, MIB, WARMUP};

const ACTOR_PTX: &str = include_str!("../../../../kernels/actor.ptx");
/// Floats in one message, and its bytes.
const WIDTH: usize = 64;
const MESSAGE_BYTES: u32 = (WIDTH * 4) as u32;
/// Slots of each ring of the persistent kernel: the most one batch may hold.
const SLOTS: u32 = 256;
const FACTOR: f32 = 2.0;
/// The longest one receive waits for an answer: far past any round trip, on the emulator too.
const ANSWER_WAIT_US: u64 = 2_000_000;
/// The longest the kernel is given to return when asked.
const STOP_GRACE_MS: u32 = 2000;
/// One block of 256 threads, as the persistent kernel runs and as its normal launch does: a
/// batch of 256 messages of 256 bytes is then 16 loads of 16 bytes a thread, all in flight at once.
const BLOCK: LaunchConfig = LaunchConfig {
    grid: (1, 1, 1),
    block: (256, 1, 1),
    shared_mem_bytes: 0,
};

/// Message `k`: every float `k % 1024` (exact in f32, and so is its answer).
fn message(k: u32, into: &mut Vec<u8>) {
    let v = (k % 1024) as f32;
    for _ in 0..WIDTH {
        into.extend_from_slice(&v.to_le_bytes());
    }
}

/// Whether `answer` is message `k`'s.
fn answers(k: u32, answer: &[u8]) -> bool {
    let want = ((k % 1024) as f32 * FACTOR + 1.0).to_le_bytes();
    answer.len() == MESSAGE_BYTES as usize && answer.chunks_exact(4).all(|w| w == want)
}

fn mismatch(out: &mut Out, what: &str) -> Stopped {
    out.error(
        "mismatch",
        &format!("{what}: an answer differs from in * {FACTOR} + 1"),
    );
    Stopped
}

/// Which rings the persistent kernel serves.
#[derive(Clone, Copy)]
pub(super) enum Rings {
    /// `new-ring`'s, served by `actor_scale`.
    Plain,
    /// `new-sequenced-ring`'s, served by `actor_scale_seq`.
    Sequenced,
}

impl Rings {
    /// What the figures' names start with.
    fn prefix(self) -> &'static str {
        match self {
            Rings::Plain => "",
            Rings::Sequenced => "seq_",
        }
    }
}

/// A lease, a session, the kernel for `rings` resolved, and its two rings with the kernel
/// serving them; stops the kernel after `f`, reporting a failure of its own.
fn with_actor(
    out: &mut Out,
    rings: Rings,
    f: impl FnOnce(&mut Out, &Ring, &Ring) -> Step,
) -> Step {
    let lease = acquire(out, MIB)?;
    let session = out.check(Session::open(&lease))?;
    let module = out.check(session.module_load(ACTOR_PTX))?;
    let (kernel, inbox, outbox) = match rings {
        Rings::Plain => (
            module.kernel("actor_scale"),
            session.new_ring(RingDirection::ToDevice, MESSAGE_BYTES, SLOTS),
            session.new_ring(RingDirection::FromDevice, MESSAGE_BYTES, SLOTS),
        ),
        Rings::Sequenced => (
            module.kernel("actor_scale_seq"),
            session.new_sequenced_ring(RingDirection::ToDevice, MESSAGE_BYTES, SLOTS),
            session.new_sequenced_ring(RingDirection::FromDevice, MESSAGE_BYTES, SLOTS),
        ),
    };
    let kernel = out.check(kernel)?;
    let inbox = out.check(inbox)?;
    let outbox = out.check(outbox)?;
    let args = [
        ActorArg::Ring(&inbox),
        ActorArg::Ring(&outbox),
        ActorArg::Control,
        ActorArg::Arg(KernelArg::F32(FACTOR)),
    ];
    let actor = out.check(session.launch_persistent(&kernel, BLOCK, &args))?;
    let r = f(out, &inbox, &outbox);
    let status = out.check(actor.stop(STOP_GRACE_MS))?;
    if let Some(why) = status.failure {
        out.error(
            "kernel-fault",
            &format!("the persistent kernel failed: {why}"),
        );
        return Err(Stopped);
    }
    r
}

/// Receives exactly `n` messages into `into`, each receive waiting up to [`ANSWER_WAIT_US`]:
/// at most `n` receives, since each that does not time out brings one or more.
fn receive(outbox: &Ring, n: u32, into: &mut Vec<u8>) -> Result<bool, Error> {
    into.clear();
    let mut got = 0;
    while got < n {
        let bytes = outbox.recv(n - got, ANSWER_WAIT_US)?;
        if bytes.is_empty() {
            return Ok(false);
        }
        got += (bytes.len() / MESSAGE_BYTES as usize) as u32;
        into.extend_from_slice(&bytes);
    }
    Ok(true)
}

fn timeout(out: &mut Out, what: &str) -> Stopped {
    out.error(
        "timeout",
        &format!(
            "{what}: no answer within {} ms of waiting",
            ANSWER_WAIT_US / 1000
        ),
    );
    Stopped
}

pub(super) fn actor_rtt(out: &mut Out, rings: Rings, n: u32) -> Step {
    with_actor(out, rings, |out, inbox, outbox| {
        let (mut request, mut answer) = (Vec::new(), Vec::new());
        let mut times = Vec::with_capacity(n as usize);
        out.settle();
        for k in 0..WARMUP + n {
            request.clear();
            message(k, &mut request);
            let start = Instant::now();
            let r = inbox
                .send(&request)
                .and_then(|_| outbox.recv(1, ANSWER_WAIT_US));
            let t = start.elapsed();
            let back = out.check(r)?;
            if back.is_empty() {
                return Err(timeout(out, "actor-rtt"));
            }
            answer.clear();
            answer.extend_from_slice(&back);
            if !answers(k, &answer) {
                return Err(mismatch(out, "actor-rtt"));
            }
            if k >= WARMUP {
                times.push(nanos(t));
            }
        }
        times.sort_unstable();
        let p = rings.prefix();
        out.line(&format!("{p}actor_rtt_ns"), median(&times));
        out.line(&format!("{p}actor_rtt_p99_ns"), percentile(&times, 99.0));
        Ok(())
    })
}

/// Slots of `ring-calls`'s inbox: every send fills one (16,384 × 512 bytes is half a lease's
/// mapped memory).
const CALL_SLOTS: u32 = 16_384;

pub(super) fn ring_calls(out: &mut Out, n: u32) -> Step {
    let lease = acquire(out, MIB)?;
    let session = out.check(Session::open(&lease))?;
    let inbox = session.new_sequenced_ring(RingDirection::ToDevice, MESSAGE_BYTES, CALL_SLOTS);
    let inbox = out.check(inbox)?;
    let outbox = session.new_sequenced_ring(RingDirection::FromDevice, MESSAGE_BYTES, 2);
    let outbox = out.check(outbox)?;
    let mut request = Vec::new();
    message(0, &mut request);
    let sends = n.clamp(1, CALL_SLOTS);
    let start = Instant::now();
    for _ in 0..sends {
        if out.check(inbox.send(&request))? != 1 {
            out.error("ring-calls", "a send into a ring with room put nothing");
            return Err(Stopped);
        }
    }
    let send_ns = nanos(start.elapsed()) / u64::from(sends);
    let receives = n.max(1);
    let start = Instant::now();
    for _ in 0..receives {
        if !out.check(outbox.recv(1, 0))?.is_empty() {
            out.error("ring-calls", "a ring no kernel writes gave a message");
            return Err(Stopped);
        }
    }
    let recv_ns = nanos(start.elapsed()) / u64::from(receives);
    out.line("ring_send_ns", send_ns);
    out.line("ring_recv_ns", recv_ns);
    Ok(())
}

pub(super) fn actor_batch(out: &mut Out, rings: Rings, batch: u32, batches: u32) -> Step {
    if batch > SLOTS {
        out.error(
            "invalid-argument",
            &format!("actor-batch: a batch is at most the ring's {SLOTS} slots; {batch} asked"),
        );
        return Err(Stopped);
    }
    with_actor(out, rings, |out, inbox, outbox| {
        let (mut request, mut got) = (Vec::new(), Vec::new());
        let mut times = Vec::with_capacity(batches as usize);
        let mut k = 0u32;
        out.settle();
        for i in 0..WARMUP.min(batches) + batches {
            request.clear();
            for j in 0..batch {
                message(k.wrapping_add(j), &mut request);
            }
            let start = Instant::now();
            // The rings are empty between batches, so one send puts the whole batch.
            let r = inbox.send(&request).map_err(Error::from).and_then(|sent| {
                if sent == batch {
                    receive(outbox, batch, &mut got)
                } else {
                    Err(Error::InvalidArgument(format!(
                        "only {sent} of {batch} messages fit the inbox"
                    )))
                }
            });
            let t = start.elapsed();
            if !out.check(r)? {
                return Err(timeout(out, "actor-batch"));
            }
            let ok = got
                .chunks_exact(MESSAGE_BYTES as usize)
                .enumerate()
                .all(|(j, a)| answers(k.wrapping_add(j as u32), a));
            if !ok {
                return Err(mismatch(out, "actor-batch"));
            }
            k = k.wrapping_add(batch);
            if i >= WARMUP.min(batches) {
                times.push(nanos(t));
            }
        }
        times.sort_unstable();
        let per_batch = median(&times).max(1);
        let p = rings.prefix();
        out.line(&format!("{p}actor_batch_ns"), per_batch);
        out.line(&format!("{p}actor_batch_p99_ns"), percentile(&times, 99.0));
        out.line(
            &format!("{p}actor_msgs_per_s"),
            (f64::from(batch) * 1e9 / per_batch as f64).round() as u64,
        );
        Ok(())
    })
}

/// Where the normal launch's rings and control block lie in its device buffer: an inbox of one
/// slot holding the message, an outbox of one slot, a control block asking the kernel to return
/// once it has nothing to do (so it handles the message, then returns).
const IN_AT: u64 = 0;
const OUT_AT: u64 = 512;
const CONTROL_AT: u64 = 1024;
const HANDLER_BYTES: u64 = 1280;

/// The rings' headers and message `k`: bytes `0..CONTROL_AT` of the buffer, written before each
/// launch (the launch before consumed the message and filled the outbox).
fn handler_rings(k: u32, into: &mut Vec<u8>) {
    into.clear();
    let header = |head: u32| {
        let mut h = [0u8; 256];
        h[0..4].copy_from_slice(&head.to_le_bytes()); // head; tail at 64 stays 0
        h[128..132].copy_from_slice(&1u32.to_le_bytes()); // capacity
        h[132..136].copy_from_slice(&MESSAGE_BYTES.to_le_bytes());
        h
    };
    let (inbox, outbox) = (header(1), header(0));
    into.extend_from_slice(&inbox);
    message(k, into);
    into.extend_from_slice(&outbox);
    into.resize(CONTROL_AT as usize, 0);
}

pub(super) fn handler_launch(out: &mut Out, n: u32) -> Step {
    let lease = acquire(out, MIB)?;
    let session = out.check(Session::open(&lease))?;
    let module = out.check(session.module_load(ACTOR_PTX))?;
    let kernel = out.check(module.kernel("actor_scale"))?;
    let buf = out.check(session.mem_alloc(HANDLER_BYTES))?;
    let mut control = [0u8; 256];
    control[4..8].copy_from_slice(&1u32.to_le_bytes()); // should_terminate
    out.check(session.mem_write(&buf, CONTROL_AT, &control))?;
    let at = |offset| {
        KernelArg::Buffer(BufferArg {
            buffer: &buf,
            offset,
        })
    };
    let args = [
        at(IN_AT),
        at(OUT_AT),
        at(CONTROL_AT),
        KernelArg::F32(FACTOR),
    ];
    let launch = |kernel: &Kernel| session.launch_kernel(kernel, BLOCK, &args);
    let answer_at = OUT_AT + 256;
    let mut rings = Vec::new();
    out.settle();

    let mut launch_sync = Vec::with_capacity(n as usize);
    for k in 0..WARMUP + n {
        handler_rings(k, &mut rings);
        out.check(session.mem_write(&buf, 0, &rings))?;
        out.check(session.sync())?;
        let start = Instant::now();
        let r = launch(&kernel).and_then(|_| session.sync());
        let t = start.elapsed();
        out.check(r)?;
        if k >= WARMUP {
            launch_sync.push(nanos(t));
        }
    }
    let last = out.check(session.mem_read(&buf, answer_at, u64::from(MESSAGE_BYTES)))?;
    if !answers(WARMUP + n - 1, &last) {
        return Err(mismatch(out, "handler-launch"));
    }

    let mut rtt = Vec::with_capacity(n as usize);
    for k in 0..WARMUP + n {
        handler_rings(k, &mut rings);
        let start = Instant::now();
        let r = session
            .mem_write(&buf, 0, &rings)
            .and_then(|()| launch(&kernel))
            .and_then(|_| session.mem_read(&buf, answer_at, u64::from(MESSAGE_BYTES)));
        let t = start.elapsed();
        let back = out.check(r)?;
        if !answers(k, &back) {
            return Err(mismatch(out, "handler-launch"));
        }
        if k >= WARMUP {
            rtt.push(nanos(t));
        }
    }
    launch_sync.sort_unstable();
    rtt.sort_unstable();
    out.line("handler_launch_sync_ns", median(&launch_sync));
    out.line("handler_launch_sync_p99_ns", percentile(&launch_sync, 99.0));
    out.line("handler_rtt_ns", median(&rtt));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handlers_rings_are_what_the_kernel_reads() {
        let mut rings = Vec::new();
        handler_rings(3, &mut rings);
        assert_eq!(rings.len(), CONTROL_AT as usize);
        let word = |at: usize| u32::from_le_bytes(rings[at..at + 4].try_into().unwrap());
        // Inbox: one message waiting in a ring of one slot.
        assert_eq!((word(0), word(64), word(128), word(132)), (1, 0, 1, 256));
        assert_eq!(f32::from_bits(word(256)), 3.0);
        // Outbox: empty, one slot, after the inbox's slot.
        let o = OUT_AT as usize;
        assert_eq!((word(o), word(o + 64), word(o + 128)), (0, 0, 1));
        assert!(OUT_AT as usize >= 256 + MESSAGE_BYTES as usize);
        assert!(CONTROL_AT as usize >= o + 256 + MESSAGE_BYTES as usize);
        let mut m = Vec::new();
        message(3, &mut m);
        assert!(!answers(3, &m) && answers(1, &m), "1 * 2 + 1 = 3");
    }
}
