// `js-launches`: what a kernel launch costs a JavaScript tasklet through the SDK, in the figures
// and units of `testing/gpubench`'s `launch-sync` and `launch-async` (docs/guest-languages.md
// sets them side by side).
//
// Input: `N` (default 1000). Output, times in whole nanoseconds:
// `launch_sync_ns` (median over N of one launch of `empty()` on 1x1, then `sync`) and
// `launch_async_ns` (median over 10 batches of: N launches then one `sync`, divided by N).

import * as gpu from './tasklet-gpu/index.js';
import { FAULTS_PTX } from './kernels.js';

const WARMUP = 10;
const BATCHES = 10;

/** Nanoseconds from an arbitrary origin. */
const now = () => Math.round(performance.now() * 1e6);

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

export const run = gpu.exportRun((data) => {
  const n = gpu.input.countOr(data, 1000);
  const lease = gpu.Lease.builder().secs(600).acquire();
  const session = lease.session();
  const empty = session.loadPtx(FAULTS_PTX).kernel('empty');
  const one = gpu.LaunchConfig.linear(1, 1);
  const launch = () => session.launch(empty).config(one).run();
  for (let i = 0; i < WARMUP; i++) {
    launch();
    session.sync();
  }
  const each = [];
  for (let i = 0; i < n; i++) {
    const start = now();
    launch();
    session.sync();
    each.push(now() - start);
  }
  const batches = [];
  for (let b = 0; b < BATCHES; b++) {
    const start = now();
    for (let i = 0; i < n; i++) launch();
    session.sync();
    batches.push(Math.round((now() - start) / Math.max(n, 1)));
  }
  return `launch_sync_ns ${median(each)}\nlaunch_async_ns ${median(batches)}\n`;
});
