// `js-jacobi`: tasklets/jacobi in JavaScript, as a replayed graph with device scalars, or as
// bursts of launches.
//
// Input: `<n> <steps> [graph|burst|stream]` (grid points, at least 3; sweeps, even, at most 8192; how),
// default `64 100 graph`. The field starts at 1 on the left end and 0 everywhere else; the ends
// stay fixed; each sweep stores the midpoint's new value at its number in a history buffer.
//
// - `graph`: a graph of two launches of `jacobi_step` (a -> b, then b -> a) is recorded once and
//   replayed `steps / 2` times; two device scalars hold the numbers of the sweeps a replay makes,
//   set before each replay without recording again (as tasklets/jacobi does).
// - `burst`: every sweep is one launch of a burst (at most `MAX_BURST_LAUNCHES` a burst), each
//   launch changing the buffers it reads and writes, and the sweep's number: a buffer of the
//   numbers 0, 1, ... passed at that sweep's element.
// - `stream`: the numbers are written on one stream, an event recorded after them; every sweep is
//   one launch on a second stream that waits for that event, which then reads the results.
//
// Output, either way: `history` and the midpoint after each sweep, then `field` and the final
// field, values as Rust's `{:?}` writes an f32 (tasklets/jacobi's output, byte for byte).

import * as gpu from './tasklet-gpu/index.js';
// tasklets/jacobi/src/jacobi.ptx: this folder's jacobi.ptx links to it.
import { JACOBI_PTX } from './kernels.js';

const MAX_STEPS = 8192;

export const run = gpu.exportRun((data) => {
  const words = gpu.input.text(data).split(/\s+/).filter((w) => w !== '');
  const n = parse(words, 0, 64, 'n');
  const steps = parse(words, 1, 100, 'steps');
  const how = words.length > 2 ? words[2] : 'graph';
  if (n < 3 || steps % 2 !== 0 || steps > MAX_STEPS) {
    // A string thrown is the tasklet's error as it is, as the Rust example returns it.
    throw `need n >= 3 and an even number of steps up to ${MAX_STEPS}; got n = ${n}, steps = ${steps}`;
  }
  if (!['graph', 'burst', 'stream'].includes(how)) {
    throw `the third word says how: graph, burst or stream, not ${JSON.stringify(how)}`;
  }
  const [history, field] = solve(n, steps, how);
  return `history ${join(history)}\nfield ${join(field)}\n`;
});

/** Word `i` as a u32, as Rust's `str::parse::<u32>` reads it; `fallback` when there is none. */
function parse(words, i, fallback, what) {
  if (i >= words.length) return fallback;
  const word = words[i];
  if (/^\+?[0-9]+$/.test(word) && BigInt(word) < 2n ** 32n) return Number(word);
  throw `${what} must be a whole number, not ${JSON.stringify(word)}`;
}

function solve(n, steps, how) {
  const lease = gpu.Lease.builder().minVram(4 * (2 * n + steps) + 8 * steps + (1 << 20)).secs(30).acquire();
  const session = lease.session();
  const step = session.loadPtx(JACOBI_PTX).kernel('jacobi_step');
  const start = new Float32Array(n);
  start[0] = 1;
  // Both buffers hold the fixed ends, as every sweep copies them.
  const [a, b] = [session.allocFrom(start), session.allocFrom(start)];
  const history = session.alloc('f32', Math.max(steps, 1));
  const config = gpu.LaunchConfig.forNumElems(n);
  // jacobi_step(const float* from, float* to, unsigned n, const unsigned long long* step,
  //             float* history)
  if (how === 'graph') {
    const graph = session.graph();
    const [even, odd] = [graph.scalar(0), graph.scalar(1)];
    graph.launch(step, config, a, b, gpu.u32(n), even, history);
    graph.launch(step, config, b, a, gpu.u32(n), odd, history);
    for (let pair = 0; pair < steps / 2; pair++) {
      graph.setScalar(even, 2 * pair);
      graph.setScalar(odd, 2 * pair + 1);
      graph.replay();
    }
  } else if (how === 'stream' && steps > 0) {
    const [copies, compute, written] = [session.stream(), session.stream(), session.event()];
    const numbers = session.alloc('u64', steps);
    copies.write(numbers, BigUint64Array.from({ length: steps }, (_, i) => BigInt(i)));
    copies.record(written);
    compute.wait(written);
    for (let i = 0; i < steps; i++) {
      const [src, dst] = i % 2 === 0 ? [a, b] : [b, a];
      session.launch(step).on(compute).config(config).args(src, dst, gpu.u32(n), numbers.at(i), history).run();
    }
    return [compute.read(history), compute.read(a)];
  } else if (how === 'burst' && steps > 0) {
    const numbers = session.allocFrom(BigUint64Array.from({ length: steps }, (_, i) => BigInt(i)));
    for (let first = 0; first < steps; first += gpu.MAX_BURST_LAUNCHES) {
      const burst = session.burst(step).config(config).args(a, b, gpu.u32(n), numbers, history);
      for (let i = first; i < Math.min(steps, first + gpu.MAX_BURST_LAUNCHES); i++) {
        const [src, dst] = i % 2 === 0 ? [a, b] : [b, a];
        burst.launch({ 0: src, 1: dst, 3: numbers.at(i) });
      }
      burst.run();
    }
  }
  session.sync();
  return [steps > 0 ? history.read() : [], a.read()];
}

function join(values) {
  return Array.from(values, f32Debug).join(' ');
}

/** The f32 `v` as Rust's `{:?}` writes it: the fewest significant digits that read back as `v`
 * (the nearest such when there are several), in plain decimal from 1e-4 up to 1e16 with at least
 * one digit after the point, in exponent form (`1e-5`, `2.5e-10`) outside it. */
export function f32Debug(v) {
  if (Number.isNaN(v)) return 'NaN';
  if (!Number.isFinite(v)) return v > 0 ? 'inf' : '-inf';
  const sign = v < 0 || Object.is(v, -0) ? '-' : '';
  v = Math.abs(v);
  if (v === 0) return `${sign}0.0`;
  const [digits, point] = shortest(v);
  let text;
  // Rust compares in f32: 1e-4 and 1e16 rounded to f32.
  if (v >= Math.fround(1e-4) && v < Math.fround(1e16)) {
    if (point <= 0) text = `0.${'0'.repeat(-point)}${digits}`;
    else if (point < digits.length) text = `${digits.slice(0, point)}.${digits.slice(point)}`;
    else text = `${digits}${'0'.repeat(point - digits.length)}.0`;
  } else {
    text = `${digits[0]}${digits.length > 1 ? `.${digits.slice(1)}` : ''}e${point - 1}`;
  }
  return sign + text;
}

/** `[digits, point]`: the shortest decimal `0.digits * 10**point` that reads back as the f32 `v`
 * (9 significant digits always do). `toExponential` rounds a tie up, as Rust's digits do. */
function shortest(v) {
  for (let precision = 1; precision <= 9; precision++) {
    const [mantissa, exponent] = v.toExponential(precision - 1).split('e');
    const m = BigInt(mantissa.replace('.', ''));
    const scale = Number(exponent) - (precision - 1);
    // The correctly rounded candidate, else a neighbour one unit away that still reads back.
    for (const candidate of [m, m - 1n, m + 1n]) {
      const last = precision === 9 && candidate === m;
      if (last || (candidate > 0n && Math.fround(Number(`${candidate}e${scale}`)) === v)) {
        const all = candidate.toString();
        return [all.replace(/0+$/, '') || '0', all.length + scale];
      }
    }
  }
}
