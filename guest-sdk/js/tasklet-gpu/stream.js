// Streams and events: ordered queues of a session's work beside its own, points in them to wait
// on from other streams, and the device time between two points.

import { fromBytes, sizeOf, toBytes } from './elements.js';
import { InvalidArgument, InvalidInput, host } from './errors.js';

/** An ordered queue of a session's work, from `session.stream()`: launches
 * (`session.launch(kernel).on(stream)`), writes, copies and reads queued on it run in the order
 * made; work of different streams is ordered only by `Event`s (`wait`).
 *
 *   const [copies, compute] = [session.stream(), session.stream()];
 *   const written = session.event();
 *   copies.write(x, values);
 *   copies.record(written);
 *   compute.wait(written);
 *   session.launch(kernel).on(compute).config(cfg).arg(x).arg(gpu.u32(n)).run();
 *   compute.synchronize();
 *
 * At most 16 streams a session (the host refuses more with `InvalidArgument`). */
export class Stream {
  constructor(session, raw) {
    this.session = session;
    this.raw = raw;
  }

  _owns(thing, what) {
    if (thing.session !== this.session) {
      throw new InvalidArgument(`the ${what} belongs to another session`);
    }
  }

  /** Writes `values` (as `DeviceBuffer.write` takes them) into `dst` from element `offset`,
   * queued on this stream. */
  write(dst, values, offset = 0) {
    this._owns(dst, 'destination buffer');
    const bytes = toBytes(values, dst.elem);
    const [byteOffset] = dst._byteSpan(offset, bytes.byteLength / sizeOf(dst.elem));
    if (bytes.byteLength > 0) {
      host(() => this.raw.memWrite(dst.raw, BigInt(byteOffset), bytes));
    }
  }

  /** Copies elements `start` to `stop` (exclusive; the end when left out) of `src` into `dst` from
   * element `dstOffset` on, queued on this stream (one element type). */
  copy(dst, src, dstOffset = 0, start = 0, stop = src.length) {
    this._owns(dst, 'destination buffer');
    this._owns(src, 'source buffer');
    if (dst.elem !== src.elem) throw new InvalidInput(`cannot copy ${src.elem} into ${dst.elem}`);
    const [srcOffset, bytes] = src._byteSpan(start, stop - start);
    const [dstByteOffset] = dst._byteSpan(dstOffset, stop - start);
    if (bytes > 0) {
      host(() => this.raw.memCopy(dst.raw, BigInt(dstByteOffset), src.raw, BigInt(srcOffset), BigInt(bytes)));
    }
  }

  /** Elements `start` to `stop` (exclusive; the end when left out) of `src`, as a typed array,
   * after all earlier work of this stream. */
  read(src, start = 0, stop = src.length) {
    this._owns(src, 'source buffer');
    const [byteOffset, bytes] = src._byteSpan(start, stop - start);
    const data = bytes > 0 ? host(() => this.raw.memRead(src.raw, BigInt(byteOffset), BigInt(bytes))) : new Uint8Array(0);
    return fromBytes(data, src.elem);
  }

  /** Records `event` after the work queued on this stream so far. */
  record(event) {
    this._owns(event, 'event');
    host(() => this.raw.record(event.raw));
  }

  /** Later work of this stream waits for the work before `event`'s latest record. */
  wait(event) {
    this._owns(event, 'event');
    host(() => this.raw.wait(event.raw));
  }

  /** Waits for all work of this stream, and reports the first error of the session's work queued
   * since the last wait. */
  synchronize() {
    host(() => this.raw.synchronize());
  }
}

/** A point in a stream's work, from `session.event()`: recorded with `Stream.record`, waited on
 * by other streams, queried, and timed against another event. At most 64 events a session. */
export class Event {
  constructor(session, raw) {
    this.session = session;
    this.raw = raw;
  }

  /** Whether the work before the latest record has completed (`true` if never recorded). */
  query() {
    return host(() => this.raw.query());
  }

  /** Waits for the work before the latest record. */
  synchronize() {
    host(() => this.raw.synchronize());
  }

  /** The device time, in nanoseconds (a bigint), of the lease's work between the latest records
   * of `start` and this event (the Rust SDK's `elapsed_since`). Both must be recorded, `start`
   * first. */
  elapsedNsSince(start) {
    if (start.session !== this.session) {
      throw new InvalidArgument('the start event belongs to another session');
    }
    return host(() => this.raw.elapsedSince(start.raw));
  }
}
