// Bursts: one kernel launched many times in one host call, each launch with some of its
// arguments changed.

import { InvalidArgument, InvalidInput, host } from './errors.js';
import { kernelArg } from './launch.js';

/** The most launches one burst may hold (the host refuses more with `InvalidArgument`): split a
 * longer series into several bursts. */
export const MAX_BURST_LAUNCHES = 4096;

/** A burst being built, from `session.burst(kernel)`: the kernel's arguments, given once in
 * parameter order as for a `Launch`, and one entry per launch saying which of them that launch
 * changes (a scalar such as a step or a row, or a buffer at another offset). Nothing happens
 * until `run()`, which queues every launch in order, in one host call, and returns the first
 * launch's ordinal (a bigint; the others follow it one by one).
 *
 *   const burst = session.burst(kernel).config(gpu.LaunchConfig.forNumElems(256))
 *     .args(m, gpu.f32(1), gpu.u32(256));
 *   for (let row = 0; row < 64; row++) burst.launch({ 0: m.at(row * 256), 1: gpu.f32(row) });
 *   burst.run();
 *
 * The host checks every launch as it checks a single one before it queues any: a refused launch
 * fails the whole burst, the error naming it ("launch 3 of the burst: ..."). */
export class Burst {
  constructor(session, kernel) {
    if (kernel.module.session !== session) {
      throw new InvalidArgument(`burst of ${JSON.stringify(kernel.name)}: the kernel's module belongs to another session`);
    }
    this._session = session;
    this._kernel = kernel;
    this._config = undefined;
    this._args = [];
    this._launches = [];
  }

  _what() {
    return `burst of ${JSON.stringify(this._kernel.name)}`;
  }

  /** Sets the grid, block and shared memory of every launch (required). */
  config(config) {
    this._config = config;
    return this;
  }

  /** Appends an argument every launch takes unless it changes it (as `Launch.arg` takes it). */
  arg(value) {
    const i = this._args.length;
    this._args.push(kernelArg(this._session, value, () => `${this._what()}: argument ${i}`));
    return this;
  }

  args(...values) {
    values.forEach((v) => this.arg(v));
    return this;
  }

  /** Adds one launch, changing the arguments at the given indices for it alone (an object
   * `{index: value}`, a `Map`, or `[index, value]` pairs, applied in the order given); the others
   * are the burst's. */
  launch(changes = []) {
    const n = this._launches.length;
    const entries = changes instanceof Map || Array.isArray(changes) ? [...changes] : Object.entries(changes);
    const own = entries.map(([key, value]) => {
      const index = Number(key);
      if (!(Number.isInteger(index) && index >= 0 && index < 2 ** 32)) {
        throw new InvalidInput(`${this._what()}: launch ${n} changes argument ${key}, not an index`);
      }
      const arg = kernelArg(this._session, value, () => `${this._what()}: launch ${n}'s argument ${index}`);
      return { index, arg };
    });
    this._launches.push(own);
    return this;
  }

  /** Adds `n` launches that change nothing. */
  repeat(n) {
    for (let i = 0; i < n; i++) this._launches.push([]);
    return this;
  }

  /** Launches so far. */
  get length() {
    return this._launches.length;
  }

  /** Queues every launch, in order, in one host call; returns the first one's ordinal (a bigint).
   * May return before the kernels complete: a fault surfaces at the next `sync` or read, naming
   * the launch by its ordinal. */
  run() {
    if (!this._config) {
      throw new InvalidInput(`${this._what()} has no LaunchConfig; call .config(...)`);
    }
    const config = this._config.raw();
    return host(() => this._session.raw.launchBurst(this._kernel.raw, config, this._args, this._launches));
  }
}
