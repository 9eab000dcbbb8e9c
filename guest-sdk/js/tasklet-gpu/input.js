// Reading a tasklet's input bytes in the usual shapes, with errors (`InvalidInput`) that quote
// the word that did not parse, worded as the Rust SDK words them.

import { InvalidInput } from './errors.js';

const U32_MAX = 0xffffffff;

export function text(data) {
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(data);
  } catch (e) {
    throw new InvalidInput(`the input is not UTF-8 (${e.message})`);
  }
}

/** A decimal element count (0 to 2^32-1), or `defaultValue` when the input is only whitespace. */
export function countOr(data, defaultValue) {
  const word = text(data).trim();
  if (word === '') return defaultValue;
  if (/^[0-9]+$/.test(word) && Number(word) <= U32_MAX) return Number(word);
  throw new InvalidInput(`${JSON.stringify(word)} is not an element count from 0 to ${U32_MAX}`);
}

/** Whitespace-separated numbers. */
export function numbers(data) {
  return text(data)
    .split(/\s+/)
    .filter((w) => w !== '')
    .map((word) => {
      const value = Number(word);
      if (Number.isNaN(value)) throw new InvalidInput(`${JSON.stringify(word)} is not a number`);
      return value;
    });
}
