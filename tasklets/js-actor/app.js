// `js-actor`: tasklets/actor in JavaScript: a persistent kernel that serves requests through
// rings in mapped memory, with no kernel launch per request: the tasklet puts messages on an inbox
// ring, the kernel (one block, started once) transforms each (`out[i] = in[i] * 2 + 1` over 64
// floats) and puts the result on an outbox ring, until the tasklet stops it.
//
// Input: a decimal message count `n` (1000 when the input is empty or whitespace).
// Output: `served n messages` when every result checks out, the kernel's own count of the
// messages it handled, and how the kernel ended (tasklets/actor's output, byte for byte).

import * as gpu from './tasklet-gpu/index.js';
// kernels/actor.ptx, which guest-sdk/js/componentize.sh makes a constant of kernels.js.
import { ACTOR_PTX } from './kernels.js';

const DEFAULT_N = 1000;
/** Floats in one message. */
const WIDTH = 64;
/** Slots of each ring. */
const SLOTS = 256;

export const run = gpu.exportRun((data) => serve(gpu.input.countOr(data, DEFAULT_N)));

/** Messages `first` to `stop` (exclusive), concatenated: message `k` is all `k`; its answer is
 * all `2k + 1`. */
function requests(first, stop) {
  const out = new Float32Array((stop - first) * WIDTH);
  for (let k = first; k < stop; k++) out.fill(k, (k - first) * WIDTH, (k - first + 1) * WIDTH);
  return out;
}

function serve(n) {
  const lease = gpu.Lease.builder().secs(30).acquire();
  const session = lease.session();
  const kernel = session.loadPtx(ACTOR_PTX).kernel('actor_scale');
  const inbox = session.ringToDevice('f32', WIDTH, SLOTS);
  const outbox = session.ringFromDevice('f32', WIDTH, SLOTS);
  const actor = session
    .launchPersistent(kernel, gpu.LaunchConfig.linear(1, 64))
    .ring(inbox)
    .ring(outbox)
    .control()
    .arg(gpu.f32(2))
    .start();

  // Keep the inbox topped up and the outbox drained: the kernel works while we send.
  let [sent, received, wrong] = [0, 0, 0];
  while (received < n) {
    sent += inbox.send(requests(sent, Math.min(n, sent + SLOTS)));
    const answers = outbox.recv(SLOTS, 100);
    if (answers.length === 0 && actor.status().hasTerminated) break;
    for (const answer of answers) {
      // In f32, as the Rust example computes it.
      const want = Math.fround(2 * Math.fround(received) + 1);
      if (answer.some((x) => x !== want)) wrong++;
      received++;
    }
  }
  const status = actor.stop(500);
  let ended;
  if (status.failure !== undefined) ended = `failed: ${status.failure}`;
  else if (status.hasTerminated) ended = 'returned when asked';
  else ended = 'still running';
  const verdict = received === n && wrong === 0
    ? `served ${n} messages`
    : `error: ${received} of ${n} answers came back, ${wrong} of them wrong`;
  return `${verdict}\nthe kernel counted ${status.messagesProcessed} messages, ${status.errorsEncountered} errors\nthe kernel ${ended}\n`;
}
