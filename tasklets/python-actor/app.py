"""`python-actor`: tasklets/actor in Python: a persistent kernel that serves requests through
rings in mapped memory, with no kernel launch per request: the tasklet puts messages on an inbox
ring, the kernel (one block, started once) transforms each (`out[i] = in[i] * 2 + 1` over 64
floats) and puts the result on an outbox ring, until the tasklet stops it.

Input: a decimal message count `n` (1000 when the input is empty or whitespace).
Output: `served n messages` when every result checks out, the kernel's own count of the messages
it handled, and how the kernel ended (tasklets/actor's output, byte for byte).
"""

import struct
from array import array

import tasklet_gpu as gpu

# kernels/actor.ptx (on the build's module path), read when the component is built: the
# component carries it.
ACTOR_PTX = gpu.include_text("actor.ptx")
DEFAULT_N = 1000
#: Floats in one message.
WIDTH = 64
#: Slots of each ring.
SLOTS = 256


def f32(x):
    """`x` rounded to an f32, as the Rust example computes its answers."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def run(data: bytes) -> bytes:
    n = gpu.input.count_or(data, DEFAULT_N)
    return serve(n)


def requests(first, stop):
    """Messages `first` to `stop` (exclusive), concatenated: message `k` is all `k`; its answer is
    all `2k + 1`."""
    out = array("f")
    for k in range(first, stop):
        out.extend(array("f", [k]) * WIDTH)
    return out


def serve(n):
    lease = gpu.Lease.builder().secs(30).acquire()
    session = lease.session()
    kernel = session.load_ptx(ACTOR_PTX).kernel("actor_scale")
    inbox = session.ring_to_device("f32", WIDTH, SLOTS)
    outbox = session.ring_from_device("f32", WIDTH, SLOTS)
    actor = (
        session.launch_persistent(kernel, gpu.LaunchConfig.linear(1, 64))
        .ring(inbox)
        .ring(outbox)
        .control()
        .arg(gpu.f32(2.0))
        .start()
    )

    # Keep the inbox topped up and the outbox drained: the kernel works while we send.
    sent = received = wrong = 0
    while received < n:
        sent += inbox.send(requests(sent, min(n, sent + SLOTS)))
        answers = outbox.recv(SLOTS, timeout=0.1)
        if not answers and actor.status().has_terminated:
            break
        for answer in answers:
            want = f32(2.0 * f32(received) + 1.0)
            wrong += any(x != want for x in answer)
            received += 1
    status = actor.stop(grace=0.5)
    if status.failure is not None:
        ended = f"failed: {status.failure}"
    elif status.has_terminated:
        ended = "returned when asked"
    else:
        ended = "still running"
    if received == n and wrong == 0:
        verdict = f"served {n} messages"
    else:
        verdict = f"error: {received} of {n} answers came back, {wrong} of them wrong"
    return (
        f"{verdict}\nthe kernel counted {status.messages_processed} messages, "
        f"{status.errors_encountered} errors\nthe kernel {ended}\n"
    )


WitWorld = gpu.export(run)
