// `js-iota`: tasklets/iota in JavaScript, as one GPU call (the SDK's `GpuCall`: lease, copies and
// launch in one host call).
//
// Input: a decimal count `n` (256 when the input is empty or whitespace).
// Output: `n` lines, `1` to `n`, written on the device by the `iota` kernel.

import * as gpu from './tasklet-gpu/index.js';
import { IOTA_PTX } from './kernels.js';

const DEFAULT_N = 256;

export const run = gpu.exportRun((data) => {
  const n = gpu.input.countOr(data, DEFAULT_N);
  // extern "C" __global__ void iota(unsigned int* out, unsigned int n)
  const values = new gpu.GpuCall(IOTA_PTX, 'iota').data().lenArg().run(new Uint32Array(n));
  return Array.from(values, (v) => `${v}\n`).join('');
});
