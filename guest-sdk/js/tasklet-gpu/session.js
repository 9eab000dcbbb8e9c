// Sessions: device memory, modules and launches under one lease.

import { Session as RawSession } from 'tasklet:gpu/sessions@0.2.0';

import { PersistentLaunch, newRing } from './actor.js';
import { DeviceBuffer } from './buffer.js';
import { Burst } from './burst.js';
import { check, nameOf, sizeOf, toBytes } from './elements.js';
import { InvalidArgument, InvalidInput, host } from './errors.js';
import { Graph } from './graph.js';
import { Launch } from './launch.js';
import { Event, Stream } from './stream.js';

export class Session {
  constructor(lease, raw) {
    this.lease = lease;
    this.raw = raw;
  }

  static open(lease) {
    return new Session(lease, host(() => RawSession.open(lease.raw)));
  }

  /** A zeroed device buffer of `count` elements of type `elem` (`"u32"`, `"f32"`, ...). */
  alloc(elem, count) {
    const bytes = count * sizeOf(elem);
    if (!(bytes > 0)) {
      throw new InvalidInput('a device buffer needs at least one element');
    }
    return new DeviceBuffer(this, host(() => this.raw.memAlloc(BigInt(bytes))), elem, count);
  }

  /** A device buffer holding `values`: a typed array (its type follows the array's), or an
   * array of numbers with `elem` naming their type. */
  allocFrom(values, elem) {
    const type = check(elem || nameOf(values));
    const bytes = toBytes(values, type);
    const buf = this.alloc(type, bytes.byteLength / sizeOf(type));
    buf.write(bytes);
    return buf;
  }

  /** Copies all of `src` into `dst` on the device (same element type; `dst` at least as long). */
  copy(dst, src) {
    if (dst.elem !== src.elem || dst.length < src.length) {
      throw new InvalidInput(`cannot copy ${src.length} ${src.elem} into ${dst.length} ${dst.elem}`);
    }
    host(() => this.raw.memCopy(dst.raw, 0n, src.raw, 0n, BigInt(src.sizeBytes)));
  }

  /** Copies all of `src`, a buffer of another session of this tasklet (typically under a lease
   * on another device, as `LeaseBuilder.acquireGroup` gives), into `dst`, a buffer of this
   * session (same element type; `dst` at least as long). The host stages the bytes through its
   * memory: a copy between devices, not a peer copy. Needs the `read` and `write` rights. */
  copyFrom(dst, src) {
    if (dst.session !== this) {
      throw new InvalidArgument(
        "the destination buffer is not this session's; call copyFrom on the session that holds it",
      );
    }
    if (dst.elem !== src.elem || dst.length < src.length) {
      throw new InvalidInput(`cannot copy ${src.length} ${src.elem} into ${dst.length} ${dst.elem}`);
    }
    host(() =>
      this.raw.memCopyFrom(dst.raw, 0n, src.session.raw, src.raw, 0n, BigInt(src.sizeBytes)),
    );
  }

  loadPtx(ptx) {
    return new Module(this, host(() => this.raw.moduleLoad(ptx)));
  }

  /** Compiles CUDA C with NVRTC (with `options`) and loads the result. */
  loadCuda(source, options = []) {
    return new Module(this, host(() => this.raw.moduleLoadSource(source, options)));
  }

  /** A launch of `kernel` of `module`, or of a `Kernel` from `module.kernel(name)`:
   * `.config(...)`, `.arg(...)` per parameter, then `.run()`. */
  launch(moduleOrKernel, kernel) {
    return new Launch(this, moduleOrKernel, kernel);
  }

  /** A burst of launches of `kernel` (a `Kernel` of this session's module): many launches, each
   * changing some arguments, in one host call; see `Burst`. */
  burst(kernel) {
    return new Burst(this, kernel);
  }

  /** A new, empty graph of this session; see `Graph`. */
  graph() {
    return new Graph(this, host(() => this.raw.newGraph()));
  }

  /** A new stream of this session (at most 16 at once); see `Stream`. */
  stream() {
    return new Stream(this, host(() => this.raw.newStream()));
  }

  /** A new event of this session, not yet recorded (at most 64 at once); see `Event`. */
  event() {
    return new Event(this, host(() => this.raw.newEvent()));
  }

  /** A ring of `capacity` (a power of two) messages of `width` elements of type `elem` each, that
   * the tasklet sends and a kernel receives; see `Ring`. Needs the `persistent` right.
   * `{ sequenced: true }`: each 4 bytes of a message travel beside the message's number, so a
   * kernel reads the slots without reading the head first (one bus round trip a message on a
   * GPU); the kernel must read that layout (the WIT's `new-sequenced-ring`). */
  ringToDevice(elem, width, capacity, { sequenced = false } = {}) {
    return newRing(this, 'to-device', elem, width, capacity, sequenced);
  }

  /** A ring of `capacity` (a power of two) messages of `width` elements of type `elem` each, that
   * a kernel sends and the tasklet receives; see `Ring`. `{ sequenced: true }`: as for
   * `ringToDevice`. */
  ringFromDevice(elem, width, capacity, { sequenced = false } = {}) {
    return newRing(this, 'from-device', elem, width, capacity, sequenced);
  }

  /** A persistent launch of `kernel` (a `Kernel` of this session's module): `.ring(r)`,
   * `.control()`, `.arg(x)` in parameter order, then `.start()` (an `Actor`); see
   * `PersistentLaunch`. */
  launchPersistent(kernel, config) {
    return new PersistentLaunch(this, kernel, config);
  }

  /** Waits for all work of this session; a launch's errors surface here at the latest. */
  sync() {
    host(() => this.raw.sync());
  }
}

export class Module {
  constructor(session, raw) {
    this.session = session;
    this.raw = raw;
  }

  kernelNames() {
    return this.raw.kernels();
  }

  /** Each kernel's parameters: `{name: [{name, size, align, kind}], ...}`. */
  kernels() {
    return Object.fromEntries(this.raw.signatures().map((s) => [s.name, s.params]));
  }

  /** The kernel named `name`, resolved once for launches that do not name it again. */
  kernel(name) {
    return new Kernel(this, host(() => this.raw.kernel(name)));
  }
}

export class Kernel {
  constructor(module, raw) {
    this.module = module;
    this.raw = raw;
  }

  get name() {
    return this.raw.name();
  }

  params() {
    return this.raw.params();
  }
}
