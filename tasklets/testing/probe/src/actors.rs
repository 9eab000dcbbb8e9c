//! Persistent kernels (contract 0.2, issue 20): kernels/actor.cu's `actor_scale` serving messages
//! through the SDK's `Ring` and `Actor`, and the misuses the SDK or the host must refuse (through
//! the raw bindings where the SDK would refuse first).

use std::time::Duration;

use tasklet_gpu::raw::sessions as raw;
use tasklet_gpu::{ActorStatus, Error, LaunchConfig, Lease};

use super::{Out, Step, MIB};

const ACTOR_PTX: &str = include_str!("../../../../kernels/actor.ptx");

/// Floats in one message.
const FLOATS: usize = 16;
/// Slots of each ring.
const SLOTS: u32 = 64;
/// Empty receives (100 ms each) in a row after which `actor` gives up.
const MOST_IDLE: u32 = 100;

type Message = [f32; FLOATS];

/// Message `k`: word `w` is `(k % 4096) * FLOATS + w` (exact in f32, and doubled plus one too).
fn request(k: u32) -> Message {
    core::array::from_fn(|w| ((k % 4096) as usize * FLOATS + w) as f32)
}

fn how_it_ended(s: &ActorStatus) -> &'static str {
    match (&s.failure, s.has_terminated) {
        (Some(_), _) => "failed",
        (None, true) => "returned",
        (None, false) => "running",
    }
}

/// `actor <n>`: lease; an inbox and an outbox of 64 messages of 16 floats; `actor_scale` (by 2,
/// plus 1) on one block of 64; `n` messages sent and their answers received (the inbox kept
/// topped up), each checked → `ok served <n>` (or `error wrong-answer <k>`, `error stalled
/// <received> of <n>`); stopped with 500 ms of grace → `ok processed <count>` (the kernel's own)
/// and `ok stopped <returned|failed|running>`.
pub(super) fn actor(out: &mut Out, n: u32) -> Step {
    let lease = out.setup(Lease::acquire(MIB, 60))?;
    let session = out.setup(lease.session())?;
    let module = out.setup(session.load_ptx(ACTOR_PTX))?;
    let kernel = out.setup(module.kernel("actor_scale"))?;
    let inbox = out.setup(session.ring_to_device::<Message>(SLOTS))?;
    let outbox = out.setup(session.ring_from_device::<Message>(SLOTS))?;
    let actor = out.setup(
        session
            .launch_persistent(&kernel)
            .config(LaunchConfig::linear(1, 64))
            .ring(&inbox)
            .ring(&outbox)
            .control()
            .arg(2.0f32)
            .start(),
    )?;
    let (mut sent, mut received, mut idle) = (0u32, 0u32, 0u32);
    let mut batch = Vec::with_capacity(SLOTS as usize);
    while received < n {
        batch.clear();
        batch.extend((sent..n.min(sent + SLOTS)).map(request));
        sent += out.setup(inbox.send(&batch))? as u32;
        let answers = out.setup(outbox.recv(SLOTS, Duration::from_millis(100)))?;
        if answers.is_empty() {
            idle += 1;
            if idle > MOST_IDLE {
                out.line(format!("error stalled {received} of {n}"));
                return Ok(());
            }
        } else {
            idle = 0;
        }
        for answer in &answers {
            let want = request(received).map(|x| x.mul_add(2.0, 1.0));
            if *answer != want {
                out.line(format!("error wrong-answer {received}"));
                return Ok(());
            }
            received += 1;
        }
    }
    out.ok(format!("served {n}"));
    let status = out.setup(actor.stop(Duration::from_millis(500)))?;
    out.ok(format!("processed {}", status.messages_processed));
    out.ok(format!("stopped {}", how_it_ended(&status)));
    Ok(())
}

/// One refusal: `ok <what> <kind>` when `r` failed, `error <what> accepted` when it did not.
fn refusal<T>(out: &mut Out, what: &str, r: Result<T, Error>) {
    match r {
        Err(e) => out.ok(format!("{what} {}", e.kind().as_str())),
        Ok(_) => out.line(format!("error {what} accepted")),
    }
}

/// `actor-misuse`: each misuse → `ok <what> <kind>` (or `error <what> accepted`), in order:
/// a message of 6 bytes (`message-size`, the SDK's), a capacity of 3 (`capacity`), a ring of
/// 1024 messages of 16 KiB (`too-large`), a persistent launch without a config (`no-config`, the
/// SDK's), a ring of another session named in a raw launch (`foreign-ring`), a second actor past
/// `max-persistent = 1` (`second-actor`), a send on a from-device ring (`send-wrong-way`), a
/// receive waiting 11 s (`recv-too-long`), a stop with 11 s of grace (`stop-too-long`); then the
/// actor stopped → `ok stopped <how>`.
pub(super) fn actor_misuse(out: &mut Out) -> Step {
    let lease = out.setup(Lease::acquire(MIB, 60))?;
    let session = out.setup(lease.session())?;
    let module = out.setup(session.load_ptx(ACTOR_PTX))?;
    let kernel = out.setup(module.kernel("actor_scale"))?;

    refusal(out, "message-size", session.ring_to_device::<[u16; 3]>(4));
    refusal(out, "capacity", session.ring_to_device::<Message>(3));
    refusal(
        out,
        "too-large",
        session.ring_to_device::<[f32; 4096]>(1024),
    );
    let inbox = out.setup(session.ring_to_device::<Message>(SLOTS))?;
    let outbox = out.setup(session.ring_from_device::<Message>(SLOTS))?;
    refusal(
        out,
        "no-config",
        session
            .launch_persistent(&kernel)
            .ring(&inbox)
            .ring(&outbox)
            .control()
            .arg(2.0f32)
            .start(),
    );

    // Another session's rings, named through the raw bindings (the SDK refuses them first).
    let other = out.setup(lease.session())?;
    let their_module = out.setup(other.load_ptx(ACTOR_PTX))?;
    let their_kernel = out.setup(their_module.kernel("actor_scale"))?;
    let foreign = other.raw().launch_persistent(
        their_kernel.raw(),
        LaunchConfig::linear(1, 64).to_raw(),
        &[
            raw::ActorArg::Ring(inbox.raw()),
            raw::ActorArg::Ring(outbox.raw()),
            raw::ActorArg::Control,
            raw::ActorArg::Arg(raw::KernelArg::F32(2.0)),
        ],
    );
    refusal(out, "foreign-ring", foreign.map_err(Error::from));

    let start = || {
        session
            .launch_persistent(&kernel)
            .config(LaunchConfig::linear(1, 64))
            .ring(&inbox)
            .ring(&outbox)
            .control()
            .arg(2.0f32)
            .start()
    };
    let actor = out.setup(start())?;
    refusal(out, "second-actor", start());
    refusal(out, "send-wrong-way", outbox.send(&[request(0)]));
    refusal(
        out,
        "recv-too-long",
        outbox.recv(1, Duration::from_secs(11)),
    );
    refusal(out, "stop-too-long", actor.stop(Duration::from_secs(11)));
    let status = out.setup(actor.stop(Duration::from_millis(500)))?;
    out.ok(format!("stopped {}", how_it_ended(&status)));
    Ok(())
}
