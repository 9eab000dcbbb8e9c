// `js-vector-add`: tasklets/vector-add in JavaScript. A persistent session: three buffers stay on
// the device while three kernels run on them, and only the result comes back.
//
// Input: a decimal element count `n` (1024 when the input is empty or whitespace).
// On the device: `a[i] = i` and `b[i] = 2i` (`fill_linear` with k = 1 and 2), then `c = a + b`
// (`vector_add`). Output: one line, the sum of `c`, followed by `\n`.

import * as gpu from './tasklet-gpu/index.js';
import { VECTOR_ADD_PTX } from './kernels.js';

const { u32 } = gpu;
const DEFAULT_N = 1024;

function sumOfAPlusB(n) {
  const lease = gpu.Lease.builder().minVramFor('u32', 3 * n).secs(30).acquire();
  const session = lease.session();
  const module = session.loadPtx(VECTOR_ADD_PTX);
  const [a, b, c] = [0, 1, 2].map(() => session.alloc('u32', n));
  const config = gpu.LaunchConfig.forNumElems(n);
  session.launch(module, 'fill_linear').config(config).args(a, u32(1), u32(n)).run();
  session.launch(module, 'fill_linear').config(config).args(b, u32(2), u32(n)).run();
  session.launch(module, 'vector_add').config(config).args(a, b, c, u32(n)).run();
  session.sync();
  return c.read().reduce((sum, v) => sum + BigInt(v), 0n);
}

export const run = gpu.exportRun((data) => {
  const n = gpu.input.countOr(data, DEFAULT_N);
  return `${n === 0 ? 0n : sumOfAPlusB(n)}\n`;
});
