// Graphs: a session's operations recorded once and replayed as a whole, with device scalars that
// change between replays without recording anything again.

import { InvalidArgument, InvalidInput, OutOfBounds, host } from './errors.js';
import { kernelArg } from './launch.js';

const U32_MAX = 2n ** 32n - 1n;
const U64_MAX = 2n ** 64n - 1n;

/** A recorded operation of a `Graph`, by its index, for `Graph.setArgs`. */
export class Node {
  constructor(index) {
    this.index = index;
  }
}

/** A device scalar of a `Graph` (the Rust SDK's `Scalar`): 8 bytes of device memory the graph
 * holds, which a kernel recorded in it reads through a pointer parameter (pass it among the
 * launch's arguments), and which `Graph.setScalar` changes for the next replays. */
export class DeviceScalar {
  constructor(graph, index) {
    this.graph = graph;
    this.index = index;
  }
}

/** `value` (a number or a bigint) as a whole number from 0 to `max`, a bigint. */
function whole(value, max, what) {
  const ok = typeof value === 'bigint' || Number.isInteger(value);
  if (!ok || BigInt(value) < 0n || BigInt(value) > max) {
    throw new InvalidInput(`${what} ${value} is not a whole number from 0 to ${max}`);
  }
  return BigInt(value);
}

/** Operations recorded once and replayed as a whole, from `session.graph()`: launches, copies and
 * fills, each checked when it is recorded as the session's operation of the same name, replayed
 * with `replay(times)` with the results of running them one by one. On a GPU a replay is one
 * CUDA graph launch.
 *
 *   const graph = session.graph();
 *   const step = graph.scalar(0);
 *   // jacobi_step(const float* from, float* to, const unsigned long long* step)
 *   graph.launch(kernel, config, a, b, step);
 *   graph.launch(kernel, config, b, a, step);
 *   for (let i = 0; i < 100; i++) {
 *     graph.setScalar(step, i);
 *     graph.replay();
 *   }
 *   session.sync();
 *
 * At most 1024 operations and 32 device scalars a graph, 64 graphs a session (the host refuses
 * more with `InvalidArgument`). */
export class Graph {
  constructor(session, raw) {
    this.session = session;
    this.raw = raw;
  }

  _args(values) {
    return values.map((value, i) => {
      if (value instanceof DeviceScalar) {
        if (value.graph !== this) {
          throw new InvalidArgument(`argument ${i} is a device scalar of another graph`);
        }
        return { tag: 'scalar', val: value.index };
      }
      return { tag: 'arg', val: kernelArg(this.session, value, () => `argument ${i}`) };
    });
  }

  _owns(buf, what) {
    if (buf.session !== this.session) {
      throw new InvalidArgument(`the ${what} belongs to another session`);
    }
  }

  /** Records a launch of `kernel` (of a module of the graph's session) with `args` in parameter
   * order: what `Launch.arg` takes, or a `DeviceScalar` of this graph for a parameter that points
   * at it. Returns its `Node`. */
  launch(kernel, config, ...args) {
    if (kernel.module.session !== this.session) {
      throw new InvalidArgument('the kernel belongs to another session');
    }
    const raw = this._args(args);
    return new Node(host(() => this.raw.launch(kernel.raw, config.raw(), raw)));
  }

  /** Records a copy of all of `src` to the start of `dst` (buffers of the session of one element
   * type that do not overlap; `dst` at least as long). */
  copy(dst, src) {
    this._owns(dst, 'destination buffer');
    this._owns(src, 'source buffer');
    if (dst.elem !== src.elem) throw new InvalidInput(`cannot copy ${src.elem} into ${dst.elem}`);
    if (dst.length < src.length) {
      throw new OutOfBounds(`a copy of ${src.length} elements into a buffer of ${dst.length}`);
    }
    return new Node(host(() => this.raw.copy(dst.raw, 0n, src.raw, 0n, BigInt(src.sizeBytes))));
  }

  /** Records a fill of all of `dst` with the 32-bit `value` repeated (its size in bytes a
   * multiple of 4). */
  fill(dst, value) {
    this._owns(dst, 'buffer');
    const v = Number(whole(value, U32_MAX, 'fill value'));
    return new Node(host(() => this.raw.fill(dst.raw, 0n, BigInt(dst.sizeBytes), v)));
  }

  /** A new device scalar, holding the u64 `value` (a number or a bigint) from the next replay on. */
  scalar(value = 0) {
    const v = whole(value, U64_MAX, 'device scalar value');
    return new DeviceScalar(this, host(() => this.raw.scalar(v)));
  }

  /** Sets a device scalar for the next replays (nothing is recorded again). */
  setScalar(scalar, value) {
    if (!(scalar instanceof DeviceScalar) || scalar.graph !== this) {
      throw new InvalidArgument(`${scalar} is not a device scalar of this graph`);
    }
    const v = whole(value, U64_MAX, 'device scalar value');
    host(() => this.raw.setScalar(scalar.index, v));
  }

  /** Replaces the arguments of the launch recorded at `node` for the next replays. */
  setArgs(node, ...args) {
    const raw = this._args(args);
    host(() => this.raw.setArgs(node.index, raw));
  }

  /** Replays the graph `times` times (1 to 4096), in order with the session's other work; errors
   * of the work surface here or at the next `sync`. */
  replay(times = 1) {
    const n = Number(whole(times, U32_MAX, 'replay count'));
    host(() => this.raw.replay(n));
  }
}
