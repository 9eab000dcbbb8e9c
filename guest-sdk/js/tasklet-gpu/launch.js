// Kernel launches: a launch configuration, typed scalar arguments, and the `Launch` builder.

import { BufferAt, DeviceBuffer } from './buffer.js';
import { InvalidArgument, InvalidInput, host } from './errors.js';

/** The block size `LaunchConfig.forNumElems` uses. */
export const BLOCK = 256;

export class LaunchConfig {
  constructor(grid = [1, 1, 1], block = [BLOCK, 1, 1], sharedMemBytes = 0) {
    this.grid = grid;
    this.block = block;
    this.sharedMemBytes = sharedMemBytes;
  }

  /** One thread per element: blocks of 256 threads, enough to cover `n` (at least one). */
  static forNumElems(n) {
    return new LaunchConfig([Math.max(1, Math.ceil(n / BLOCK)), 1, 1], [BLOCK, 1, 1], 0);
  }

  /** `grid` blocks of `block` threads, in one dimension. */
  static linear(grid, block) {
    return new LaunchConfig([grid, 1, 1], [block, 1, 1], 0);
  }

  withSharedMem(bytes) {
    return new LaunchConfig(this.grid, this.block, bytes);
  }

  raw() {
    return { grid: this.grid, block: this.block, sharedMemBytes: this.sharedMemBytes };
  }
}

const RANGES = {
  i32: [-(2n ** 31n), 2n ** 31n - 1n],
  u32: [0n, 2n ** 32n - 1n],
  i64: [-(2n ** 63n), 2n ** 63n - 1n],
  u64: [0n, 2n ** 64n - 1n],
};

/** A kernel scalar of a C type: made by `u32(n)`, `i32(n)`, `u64(n)`, `i64(n)`, `f32(x)`,
 * `f64(x)`. A JS number carries no C type, so a bare number is not an argument. */
export class Scalar {
  constructor(kind, value) {
    if (kind in RANGES) {
      const [low, high] = RANGES[kind];
      const whole = typeof value === 'bigint' || Number.isInteger(value);
      if (!whole || BigInt(value) < low || BigInt(value) > high) {
        throw new InvalidInput(`${value} is not a ${kind} (from ${low} to ${high})`);
      }
      // The bindings take 64-bit integers as bigints, 32-bit ones as numbers.
      value = kind.endsWith('64') ? BigInt(value) : Number(value);
    } else {
      value = Number(value);
    }
    this.kind = kind;
    this.value = value;
  }

  /** The WIT `kernel-arg` (and `submit-arg`) case. */
  raw() {
    return { tag: this.kind, val: this.value };
  }
}

export const i32 = (v) => new Scalar('i32', v);
export const u32 = (v) => new Scalar('u32', v);
export const i64 = (v) => new Scalar('i64', v);
export const u64 = (v) => new Scalar('u64', v);
export const f32 = (v) => new Scalar('f32', v);
export const f64 = (v) => new Scalar('f64', v);

/** The error for an argument that is not one: a bare number says how to type it. */
export function untyped(value) {
  if (typeof value === 'number' || typeof value === 'bigint') {
    return new InvalidInput(
      `kernel argument ${value} needs a C type: u32(...), i32(...), u64(...), i64(...), f32(...) or f64(...)`,
    );
  }
  return new InvalidInput(`${value} is not a kernel argument`);
}

/** The WIT `kernel-arg` for `value` (see `Launch.arg`). A buffer must be `session`'s
 * (`InvalidArgument` naming `what()`, e.g. "argument 2", otherwise), as the host would refuse it
 * anyway, later and with less to say. */
export function kernelArg(session, value, what) {
  if (value instanceof DeviceBuffer) value = value.at(0);
  if (value instanceof BufferAt) {
    if (session !== undefined && value.buffer.session !== session) {
      throw new InvalidArgument(`${what()} is a buffer of another session`);
    }
    return { tag: 'buffer', val: { buffer: value.buffer.raw, offset: BigInt(value.byteOffset) } };
  }
  if (value instanceof Scalar) return value.raw();
  if (value instanceof Uint8Array) return { tag: 'bytes', val: value };
  throw untyped(value);
}

/** A kernel launch being built: `session.launch(module, "name").config(cfg).arg(buf).arg(u32(n)).run()`.
 * Arguments go in parameter order; the host checks them against the kernel's declaration. */
export class Launch {
  constructor(session, moduleOrKernel, kernel) {
    this._session = session;
    this._target = moduleOrKernel;
    this._kernel = kernel;
    this._config = undefined;
    this._args = [];
    this._stream = undefined;
  }

  config(config) {
    this._config = config;
    return this;
  }

  /** Queues the launch on `stream` (a `Stream` of the same session) instead of the session's
   * own queue. */
  on(stream) {
    if (stream.session !== this._session) {
      throw new InvalidArgument('the stream belongs to another session');
    }
    this._stream = stream;
    return this;
  }

  /** A `DeviceBuffer` (or `buf.at(i)`), a typed scalar (`u32(n)`), or a `Uint8Array` passed by value. */
  arg(value) {
    this._args.push(kernelArg(this._session, value, () => `argument ${this._args.length}`));
    return this;
  }

  args(...values) {
    values.forEach((v) => this.arg(v));
    return this;
  }

  /** Launches the kernel; returns its ordinal (a bigint). May return before the kernel ends: its
   * errors surface at the next `sync` or read at the latest. */
  run() {
    if (!this._config) {
      throw new InvalidInput('a launch needs .config(...) (e.g. LaunchConfig.forNumElems(n))');
    }
    const config = this._config.raw();
    const raw = this._session.raw;
    if (this._stream !== undefined) {
      // A stream launches kernel handles only: resolve a named kernel first.
      const kernel = this._kernel === undefined ? this._target : this._target.kernel(this._kernel);
      return host(() => this._stream.raw.launch(kernel.raw, config, this._args));
    }
    if (this._kernel === undefined) {
      return host(() => raw.launchKernel(this._target.raw, config, this._args));
    }
    return host(() => raw.launch(this._target.raw, this._kernel, config, this._args));
  }
}
