// Leases: a grant of device memory for a time, asked for through `Lease.builder()`.

import { devices } from 'tasklet:gpu/inventory@0.2.0';
import { Lease as RawLease } from 'tasklet:gpu/leases@0.2.0';

import { sizeOf } from './elements.js';
import { host } from './errors.js';
import { Session } from './session.js';

/** The device memory asked for when `minVram` is not set, and the granularity of `minVramFor`. */
export const VRAM_GRANULE = 1 << 20;
/** The lease time when `secs` is not set: a tasklet's default wall time. */
export const DEFAULT_SECS = 30;

/** `bytes` rounded up to whole `VRAM_GRANULE`s, at least one. */
export function roundVram(bytes) {
  return Math.max(1, Math.ceil(Number(bytes) / VRAM_GRANULE)) * VRAM_GRANULE;
}

/** The devices this tasklet may lease: `{ index, name, backend, totalMemory, freeMemory,
 * computeCapability, uuid, leases }` (`uuid` is what `LeaseBuilder.uuid` takes). */
export function inventory() {
  return devices();
}

export class LeaseBuilder {
  constructor() {
    this._minVram = VRAM_GRANULE;
    this._secs = DEFAULT_SECS;
    this._device = undefined;
    this._uuid = undefined;
    this._model = undefined;
    this._minCc = undefined;
    this._minTotal = undefined;
  }

  /** At least this many bytes of device memory. */
  minVram(bytes) {
    this._minVram = Number(bytes);
    return this;
  }

  /** Enough device memory for `count` elements of type `elem` (`"u32"`), in whole MiB. */
  minVramFor(elem, count) {
    return this.minVram(roundVram(count * sizeOf(elem)));
  }

  /** For this many seconds from now. */
  secs(secs) {
    this._secs = secs;
    return this;
  }

  /** On this device (an index from `inventory()`); any device when not called. */
  device(index) {
    this._device = index;
    return this;
  }

  /** On the device with this UUID (`uuid` of an `inventory()` entry). */
  uuid(uuid) {
    this._uuid = String(uuid);
    return this;
  }

  /** On a device whose name contains `model`, case aside (`"H100"`). */
  model(model) {
    this._model = String(model);
    return this;
  }

  /** On a device of at least this compute capability (`9, 0` for Hopper). */
  minComputeCapability(major, minor) {
    this._minCc = [major, minor];
    return this;
  }

  /** On a device that lends at least this many bytes in all (`totalMemory`). */
  minTotalMemory(bytes) {
    this._minTotal = Number(bytes);
    return this;
  }

  /** The WIT request this builder describes. */
  request() {
    return { minVram: BigInt(this._minVram), secs: this._secs, device: this._device };
  }

  /** The WIT device requirements this builder describes, or `undefined` when it has none
   * besides the device index. */
  requirements() {
    if ([this._uuid, this._model, this._minCc, this._minTotal].every((v) => v === undefined)) {
      return undefined;
    }
    return {
      uuid: this._uuid,
      model: this._model,
      minComputeCapability: this._minCc,
      minTotalMemory: this._minTotal === undefined ? undefined : BigInt(this._minTotal),
    };
  }

  /** Asks the host for the lease: `CapacityExceeded` when the node cannot serve it (no device
   * meets the requirements with room for it: the message names what each lacked),
   * `QuotaExceeded` when the tasklet's grant does not allow it. */
  acquire() {
    const requires = this.requirements();
    if (requires === undefined) {
      return new Lease(host(() => RawLease.acquire(this.request())));
    }
    return new Lease(host(() => RawLease.acquireWith(this.request(), requires)));
  }

  /** `count` leases of this request on `count` distinct devices that meet its requirements
   * (WIT `lease.acquire-group`), all granted or none, in the order the host ranks their devices
   * (most memory free, then fewest leases, then lowest index). Open a session on each, and copy
   * between them with `Session.copyFrom` (staged through the host's memory). A group of more
   * than one cannot name a
   * `device`; count 0 is `InvalidArgument`, too few devices `CapacityExceeded`, past
   * `max-leases` `QuotaExceeded`. */
  acquireGroup(count) {
    const requires = this.requirements() ?? {
      uuid: undefined,
      model: undefined,
      minComputeCapability: undefined,
      minTotalMemory: undefined,
    };
    const raws = host(() => RawLease.acquireGroup(this.request(), requires, count));
    return raws.map((raw) => new Lease(raw));
  }
}

/** A grant of device memory for a time. */
export class Lease {
  constructor(raw) {
    this.raw = raw;
  }

  static builder() {
    return new LeaseBuilder();
  }

  /** Opens a session on this lease. */
  session() {
    return Session.open(this);
  }

  renew(secs) {
    host(() => this.raw.renew(secs));
  }

  /** `{device, grantedBytes, usedBytes, remainingMs}` (bigints where the WIT has u64). */
  info() {
    return host(() => this.raw.info());
  }

  /** Nanoseconds of device time the lease's kernels have used so far (a bigint). */
  gpuTimeNs() {
    return host(() => this.raw.gpuTime());
  }
}
