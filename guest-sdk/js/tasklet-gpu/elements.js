// Element types of device buffers: names (`"u32"`) and the typed arrays that hold them.

import { InvalidInput } from './errors.js';

export const ARRAYS = {
  u8: Uint8Array, i8: Int8Array, u16: Uint16Array, i16: Int16Array,
  u32: Uint32Array, i32: Int32Array, u64: BigUint64Array, i64: BigInt64Array,
  f32: Float32Array, f64: Float64Array,
};

/** `elem` if it names an element type; else `InvalidInput` listing them. */
export function check(elem) {
  if (!(elem in ARRAYS)) {
    throw new InvalidInput(`${JSON.stringify(elem)} is not an element type; use one of ${Object.keys(ARRAYS).join(', ')}`);
  }
  return elem;
}

/** Bytes of one element of type `elem`. */
export function sizeOf(elem) {
  return ARRAYS[check(elem)].BYTES_PER_ELEMENT;
}

/** The element type of a typed array (a `Uint8Array` is `u8`). */
export function nameOf(values) {
  for (const [name, ctor] of Object.entries(ARRAYS)) {
    if (values instanceof ctor) return name;
  }
  throw new InvalidInput('device data is a typed array (Uint32Array, Float32Array, ...)');
}

/** The little-endian bytes of `values` as `elem`s: a `Uint8Array` is taken as those bytes
 * already; another typed array, or an array of numbers, is converted. */
export function toBytes(values, elem) {
  const ctor = ARRAYS[check(elem)];
  if (values instanceof Uint8Array) {
    if (values.byteLength % ctor.BYTES_PER_ELEMENT !== 0) {
      throw new InvalidInput(`${values.byteLength} bytes are not whole ${elem} elements`);
    }
    return values;
  }
  const typed = values instanceof ctor ? values : ctor.from(values);
  return new Uint8Array(typed.buffer, typed.byteOffset, typed.byteLength);
}

/** A typed array of `elem`s read from little-endian `bytes`. */
export function fromBytes(bytes, elem) {
  const ctor = ARRAYS[elem];
  const copy = new Uint8Array(bytes.byteLength);
  copy.set(bytes);
  return new ctor(copy.buffer, 0, bytes.byteLength / ctor.BYTES_PER_ELEMENT);
}
