// Guest-side SDK for tasklets in JavaScript: components built with componentize-js against the
// WIT package `tasklet:gpu` (wit/gpu.wit), in the shapes of the Rust SDK (guest-sdk/src).
//
//   import * as gpu from './tasklet-gpu/index.js';
//   import { IOTA_PTX } from './kernels.js';
//
//   export const run = gpu.exportRun((data) => {
//     const n = gpu.input.countOr(data, 256);
//     const out = new gpu.GpuCall(IOTA_PTX, 'iota').data().lenArg().run(new Uint32Array(n));
//     return Array.from(out, (v) => `${v}\n`).join('');
//   });
//
// A `GpuError` thrown out of `run` (any WIT `gpu-error` case, or `InvalidInput`) becomes the
// tasklet's error, `"kind: message"`, and a string thrown becomes it as it is; anything else traps
// it, with the error on stderr. Buffers hold elements of one type (`"u32"`, `"f32"`, ...) and are
// written from and read into typed arrays.

import { GpuError } from './errors.js';

export * as input from './input.js';
export { Actor, PersistentLaunch, Ring } from './actor.js';
export { DeviceBuffer, BufferAt } from './buffer.js';
export { Burst, MAX_BURST_LAUNCHES } from './burst.js';
export { GpuCall } from './call.js';
export {
  GpuError, Unauthorized, LeaseExpired, CapacityExceeded, QuotaExceeded, OutOfBounds,
  InvalidArgument, LoadFailed, LaunchFailed, KernelFault, DeadlineExceeded, DeviceLost,
  Unsupported, InvalidInput,
} from './errors.js';
export { DeviceScalar, Graph, Node } from './graph.js';
export { Launch, LaunchConfig, Scalar, i32, u32, i64, u64, f32, f64 } from './launch.js';
export { Lease, LeaseBuilder, inventory } from './lease.js';
export { Kernel, Module, Session } from './session.js';
export { Event, Stream } from './stream.js';

/** The tasklet's exported `run` (`export const run = exportRun(fn)` in the app module): calls
 * `fn(data)`, which returns a `Uint8Array` or a string (sent as UTF-8). */
export function exportRun(fn) {
  return function run(data) {
    let out;
    try {
      out = fn(data);
    } catch (e) {
      // The WIT `result`'s error: a string, thrown. A string the tasklet throws is its error
      // as it is (its own message, such as a usage line).
      if (e instanceof GpuError) throw e.toString();
      if (typeof e === 'string') throw e;
      // Anything else is a bug in the tasklet: it traps, and what it was goes to stderr first
      // (the bindings would only say that the error is not a string).
      console.error(`${e && e.stack ? `${e}\n${e.stack}` : e}`);
      throw e;
    }
    return typeof out === 'string' ? new TextEncoder().encode(out) : out;
  };
}
