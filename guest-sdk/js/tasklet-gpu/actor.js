// Persistent kernels ("actors") and the rings they exchange messages through: a kernel that runs
// as long as its lease, taking messages from a ring the tasklet fills and putting its answers on
// a ring the tasklet empties, with no launch per message.
//
// A ring lives in memory the host and the device both see; `Ring.send` and `Ring.recv` are loads
// and stores there, not requests to the device. The kernel reads the layout the WIT documents
// (`ring`, `actor-arg.control`). Load every module the lease needs before its persistent kernel
// starts: while one runs, a module load on the lease fails with `LoadFailed`.
//
//   const serve = module.kernel('actor_scale');
//   const inbox = session.ringToDevice('f32', 64, 256);    // 256 slots of 64 f32s
//   const outbox = session.ringFromDevice('f32', 64, 256);
//   const actor = session.launchPersistent(serve, gpu.LaunchConfig.linear(1, 64))
//     .ring(inbox).ring(outbox).control().arg(gpu.f32(2)).start();
//   inbox.send(new Float32Array(64 * 8).fill(1));           // 8 messages
//   const answers = outbox.recv(8, 100);                    // Float32Arrays of 64, within 100 ms
//   const status = actor.stop(500);

import { fromBytes, sizeOf, toBytes } from './elements.js';
import { InvalidArgument, InvalidInput, host } from './errors.js';
import { kernelArg } from './launch.js';

const U32_MAX = 2 ** 32 - 1;

/** `value` if it is a whole number from 0 to 2^32 - 1; else `InvalidInput` naming `what`. */
function u32Count(value, what) {
  if (!Number.isInteger(value) || value < 0 || value > U32_MAX) {
    throw new InvalidInput(`${what} ${value} is not a whole number from 0 to ${U32_MAX}`);
  }
  return value;
}

/** `ms` (a number, at least 0) in whole `unit`s (per millisecond), at most `max` (the host caps
 * it lower anyway). */
function span(ms, unit, max, what) {
  if (typeof ms !== 'number' || !(ms >= 0)) {
    throw new InvalidInput(`${what} ${ms} is not a number of milliseconds, at least 0`);
  }
  return Math.min(Math.round(Math.min(ms, max / unit) * unit), max);
}

/** A new ring of `session` (`Session.ringToDevice`, `ringFromDevice`): `direction` is the WIT
 * `ring-direction` (`'to-device'`, `'from-device'`); `sequenced`: each 4 bytes of a message beside
 * the message's number (the WIT's `new-sequenced-ring`), which the kernel must read. */
export function newRing(session, direction, elem, width, capacity, sequenced = false) {
  const size = Number.isInteger(width) ? sizeOf(elem) * width : 0;
  // A ring carries whole 4-byte words (the host would refuse it, later and with less to say).
  if (!(size > 0) || size % 4 !== 0 || size > U32_MAX) {
    throw new InvalidInput(`a ring's message is a whole number of 4-byte words; ${width} ${elem} is not`);
  }
  const slots = u32Count(capacity, 'ring capacity');
  const raw = sequenced
    ? host(() => session.raw.newSequencedRing(direction, size, slots))
    : host(() => session.raw.newRing(direction, size, slots));
  return new Ring(session, raw, elem, width);
}

/** A ring of messages of `width` elements of type `elem` each, from `session.ringToDevice` or
 * `session.ringFromDevice`. Single producer, single consumer: one side sends, the other
 * receives. */
export class Ring {
  constructor(session, raw, elem, width) {
    this.session = session;
    this.raw = raw;
    this.elem = elem;
    this.width = width;
  }

  /** Bytes of one message. */
  get messageSize() {
    return this.width * sizeOf(this.elem);
  }

  /** Slots: how many messages fit at once. */
  get capacity() {
    return this.raw.capacity();
  }

  /** Puts as many of the messages in `values` (whole messages, concatenated: a typed array, or an
   * array of numbers) as there is room for, in order; how many went. To-device rings only. */
  send(values) {
    const bytes = toBytes(values, this.elem);
    if (bytes.byteLength % this.messageSize !== 0) {
      throw new InvalidInput(
        `${bytes.byteLength} bytes are not whole messages of ${this.width} ${this.elem} (${this.messageSize} bytes)`,
      );
    }
    if (bytes.byteLength === 0) return 0;
    return host(() => this.raw.send(bytes));
  }

  /** Takes up to `maxMessages` waiting messages, waiting up to `timeoutMs` milliseconds (at most
   * 10 s) for the first: an array of typed arrays of `width` elements, empty when the timeout
   * passes, or at once when no persistent kernel of the session runs. From-device rings only. */
  recv(maxMessages, timeoutMs = 100) {
    const max = u32Count(maxMessages, 'message count');
    const micros = BigInt(span(timeoutMs, 1000, Number.MAX_SAFE_INTEGER, 'timeout'));
    const bytes = host(() => this.raw.recv(max, micros));
    const size = this.messageSize;
    const out = [];
    for (let at = 0; at + size <= bytes.byteLength; at += size) {
      out.push(fromBytes(bytes.subarray(at, at + size), this.elem));
    }
    return out;
  }

  /** The messages waiting now, up to `maxMessages`, without waiting. */
  tryRecv(maxMessages) {
    return this.recv(maxMessages, 0);
  }
}

/** An actor's control block as read now (the WIT `actor-status`): `isActive`,
 * `shouldTerminate`, `hasTerminated`, `errorsEncountered`, `messagesProcessed` (a bigint), and
 * `failure` (why it ended, when it failed; else `undefined`). */
function status(raw) {
  const { isActive, shouldTerminate, hasTerminated, errorsEncountered, messagesProcessed, failure } = raw;
  return { isActive, shouldTerminate, hasTerminated, errorsEncountered, messagesProcessed, failure: failure ?? undefined };
}

/** A persistent kernel, from `PersistentLaunch.start()`. One not stopped is stopped with its
 * session or lease (at the end of the run at the latest); call `stop` to choose how long it may
 * take to return and to see how it ended. */
export class Actor {
  constructor(session, raw) {
    this.session = session;
    this.raw = raw;
  }

  /** Its control block now. */
  status() {
    return status(host(() => this.raw.status()));
  }

  /** Asks it to return and waits up to `graceMs` milliseconds (at most 10 s) for it; one that has
   * not returned by then is ended with its worker, and the lease with it. Its status. */
  stop(graceMs = 500) {
    const ms = span(graceMs, 1, U32_MAX, 'grace');
    return status(host(() => this.raw.stop(ms)));
  }
}

/** A persistent launch being built, from `session.launchPersistent(kernel, config)`: arguments in
 * the kernel's parameter order, rings (`.ring(r)`) and the control block (`.control()`) among
 * them; nothing runs until `.start()`. The whole grid runs at once. */
export class PersistentLaunch {
  constructor(session, kernel, config) {
    if (kernel.module.session !== session) {
      throw new InvalidArgument(
        `persistent launch of ${JSON.stringify(kernel.name)}: the kernel's module belongs to another session`,
      );
    }
    this._session = session;
    this._kernel = kernel;
    this._config = config;
    this._args = [];
  }

  _what() {
    return `persistent launch of ${JSON.stringify(this._kernel.name)}`;
  }

  /** Sets the grid, block and shared memory (required, here or in `launchPersistent`). */
  config(config) {
    this._config = config;
    return this;
  }

  /** Appends an argument as `Launch.arg` takes it. */
  arg(value) {
    const i = this._args.length;
    this._args.push({ tag: 'arg', val: kernelArg(this._session, value, () => `${this._what()}: argument ${i}`) });
    return this;
  }

  args(...values) {
    for (const v of values) this.arg(v);
    return this;
  }

  /** Appends a ring's device address (a `Ring` of this session). */
  ring(ring) {
    const i = this._args.length;
    if (!(ring instanceof Ring)) {
      throw new InvalidInput(`${this._what()}: argument ${i} is not a Ring`);
    }
    if (ring.session !== this._session) {
      throw new InvalidArgument(`${this._what()}: argument ${i} is a ring of another session`);
    }
    this._args.push({ tag: 'ring', val: ring.raw });
    return this;
  }

  /** Appends the device address of the actor's control block. */
  control() {
    this._args.push({ tag: 'control' });
    return this;
  }

  /** Starts the kernel; its `Actor`. Needs the `persistent` right. */
  start() {
    if (this._config === undefined) {
      throw new InvalidInput(`${this._what()} has no LaunchConfig; call .config(...)`);
    }
    const raw = host(() => this._session.raw.launchPersistent(this._kernel.raw, this._config.raw(), this._args));
    return new Actor(this._session, raw);
  }
}
