// Typed device memory: a buffer of elements of one type, written from and read into typed arrays.

import { fromBytes, sizeOf, toBytes } from './elements.js';
import { InvalidInput, host } from './errors.js';

/** Device memory of `length` elements of type `elem`, usable in the session that allocated it.
 * Offsets are in elements. */
export class DeviceBuffer {
  constructor(session, raw, elem, length) {
    this.session = session;
    this.raw = raw;
    this.elem = elem;
    this.length = length;
  }

  get sizeBytes() {
    return this.length * sizeOf(this.elem);
  }

  _byteSpan(start, count) {
    if (!(start >= 0 && count >= 0 && start + count <= this.length)) {
      throw new InvalidInput(`elements ${start}..${start + count} are outside a buffer of ${this.length} ${this.elem}`);
    }
    const size = sizeOf(this.elem);
    return [start * size, count * size];
  }

  /** Writes `values` (a typed array, an array of numbers, or a `Uint8Array` of raw bytes) from
   * element `offset`. */
  write(values, offset = 0) {
    const bytes = toBytes(values, this.elem);
    const [byteOffset] = this._byteSpan(offset, bytes.byteLength / sizeOf(this.elem));
    host(() => this.session.raw.memWrite(this.raw, BigInt(byteOffset), bytes));
  }

  /** The buffer's elements, as a typed array, after all earlier work of the session. */
  read() {
    return this.readRange(0, this.length);
  }

  /** Elements `start` to `stop` (exclusive), as a typed array. */
  readRange(start, stop) {
    const [byteOffset, bytes] = this._byteSpan(start, stop - start);
    const data = host(() => this.session.raw.memRead(this.raw, BigInt(byteOffset), BigInt(bytes)));
    return fromBytes(data, this.elem);
  }

  /** This buffer from element `index` on, as a kernel argument. */
  at(index) {
    const [byteOffset] = this._byteSpan(index, 0);
    return new BufferAt(this, byteOffset);
  }
}

/** A kernel argument pointing `byteOffset` bytes into a buffer (see `DeviceBuffer.at`). */
export class BufferAt {
  constructor(buffer, byteOffset) {
    this.buffer = buffer;
    this.byteOffset = byteOffset;
  }
}
