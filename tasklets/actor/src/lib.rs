//! `actor`: a persistent kernel that serves requests through rings in mapped memory, with no
//! kernel launch per request: the tasklet puts messages on an inbox ring, the kernel (one block,
//! started once) transforms each (`out[i] = in[i] * 2 + 1` over 64 floats) and puts the result
//! on an outbox ring, until the tasklet stops it.
//!
//! Input: a decimal message count `n` (1000 when the input is empty or whitespace).
//! Output: `served n messages` when every result checks out, the kernel's own count of the
//! messages it handled, and how the kernel ended.

use std::time::Duration;

use tasklet_gpu::{input, LaunchConfig, Lease};

const ACTOR_PTX: &str = include_str!("../../../kernels/actor.ptx");
const DEFAULT_N: u32 = 1000;
/// Floats in one message.
const WIDTH: usize = 64;
/// Slots of each ring.
const SLOTS: u32 = 256;

type Message = [f32; WIDTH];

fn run(input: Vec<u8>) -> Result<Vec<u8>, String> {
    let n = input::count_or(&input, DEFAULT_N)?;
    Ok(serve(n)?.into_bytes())
}

tasklet_gpu::export!(run);

/// Message `k` is all `k`; its answer is all `2k + 1`.
fn request(k: u32) -> Message {
    [k as f32; WIDTH]
}

fn serve(n: u32) -> Result<String, tasklet_gpu::Error> {
    let lease = Lease::builder().secs(30).acquire()?;
    let session = lease.session()?;
    let module = session.load_ptx(ACTOR_PTX)?;
    let kernel = module.kernel("actor_scale")?;
    let inbox = session.ring_to_device::<Message>(SLOTS)?;
    let outbox = session.ring_from_device::<Message>(SLOTS)?;
    let actor = session
        .launch_persistent(&kernel)
        .config(LaunchConfig::linear(1, 64))
        .ring(&inbox)
        .ring(&outbox)
        .control()
        .arg(2.0f32)
        .start()?;

    // Keep the inbox topped up and the outbox drained: the kernel works while we send.
    let (mut sent, mut received, mut wrong) = (0u32, 0u32, 0u32);
    let mut batch = Vec::with_capacity(SLOTS as usize);
    while received < n {
        batch.clear();
        batch.extend((sent..n.min(sent + SLOTS)).map(request));
        sent += inbox.send(&batch)? as u32;
        let answers = outbox.recv(SLOTS, Duration::from_millis(100))?;
        if answers.is_empty() && actor.status()?.has_terminated {
            break;
        }
        for answer in &answers {
            let want = 2.0 * received as f32 + 1.0;
            wrong += u32::from(answer.iter().any(|&x| x != want));
            received += 1;
        }
    }
    let status = actor.stop(Duration::from_millis(500))?;
    let ended = match &status.failure {
        Some(why) => format!("failed: {why}"),
        None if status.has_terminated => "returned when asked".to_string(),
        None => "still running".to_string(),
    };
    let verdict = if received == n && wrong == 0 {
        format!("served {n} messages")
    } else {
        format!("error: {received} of {n} answers came back, {wrong} of them wrong")
    };
    Ok(format!(
        "{verdict}\nthe kernel counted {} messages, {} errors\nthe kernel {ended}\n",
        status.messages_processed, status.errors_encountered
    ))
}
