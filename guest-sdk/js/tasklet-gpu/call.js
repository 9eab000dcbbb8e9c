// One kernel over one region of device memory, start to finish, in one host call.

import { submit } from 'tasklet:gpu/oneshot@0.2.0';

import { ARRAYS, check, fromBytes, nameOf, sizeOf, toBytes } from './elements.js';
import { InvalidInput, host } from './errors.js';
import { LaunchConfig, Scalar, untyped } from './launch.js';
import { LeaseBuilder, roundVram } from './lease.js';

const DATA = Symbol('data');
const LEN = Symbol('len');

/** `new GpuCall(PTX, "scale").data().arg(f32(2)).lenArg().run(xs)`: the host acquires a lease
 * sized for `xs`, copies it to the device, runs the kernel over it in place, reads it back and
 * ends the lease, in one call (one request where the GPU is on a node).
 *
 * Arguments go in parameter order: `data()` for the buffer holding the input, `lenArg()` for its
 * element count as a u32, `arg(...)` for typed scalars. The launch configuration defaults to
 * `LaunchConfig.forNumElems(xs.length)`. */
export class GpuCall {
  constructor(ptx, kernel) {
    this._module = { tag: 'ptx', val: ptx };
    this._kernel = kernel;
    this._args = [];
    this._config = undefined;
    this._lease = new LeaseBuilder();
  }

  /** A call of a kernel in CUDA C, compiled by the host (NVRTC) with `options`. */
  static cuda(source, options, kernel) {
    const call = new GpuCall('', kernel);
    call._module = { tag: 'cuda', val: { source, options } };
    return call;
  }

  data() {
    this._args.push(DATA);
    return this;
  }

  lenArg() {
    this._args.push(LEN);
    return this;
  }

  arg(value) {
    if (!(value instanceof Scalar)) throw untyped(value);
    this._args.push(value);
    return this;
  }

  config(config) {
    this._config = config;
    return this;
  }

  /** Asks for more device memory, another lease time, or a particular device. */
  lease({ minVram, secs, device } = {}) {
    if (minVram !== undefined) this._lease.minVram(minVram);
    if (secs !== undefined) this._lease.secs(secs);
    if (device !== undefined) this._lease.device(device);
    return this;
  }

  /** Runs the kernel over a device copy of `values` (a typed array, or numbers with `elem`) and
   * returns the buffer afterwards, as a typed array of the same type. */
  run(values, elem) {
    const type = check(elem || nameOf(values));
    const bytes = toBytes(values, type);
    const n = bytes.byteLength / sizeOf(type);
    if (n === 0) return new ARRAYS[type](0);
    if (n > 0xffffffff) throw new InvalidInput(`${n} elements do not fit a kernel's u32 count`);
    const args = this._args.map((a) =>
      a === DATA ? { tag: 'region', val: 0n } : a === LEN ? { tag: 'u32', val: n } : a.raw(),
    );
    const lease = this._lease.request();
    lease.minVram = BigInt(Math.max(Number(lease.minVram), roundVram(bytes.byteLength)));
    const out = host(() =>
      submit({
        lease,
        module: this._module,
        kernel: this._kernel,
        config: (this._config || LaunchConfig.forNumElems(n)).raw(),
        args,
        input: bytes,
        outputOffset: 0n,
        outputSize: BigInt(bytes.byteLength),
      }),
    );
    if (out.byteLength !== bytes.byteLength) {
      throw new InvalidInput(`the host returned ${out.byteLength} bytes for a ${bytes.byteLength}-byte output`);
    }
    return fromBytes(out, type);
  }
}
