// Errors: one class per WIT `gpu-error` case, plus `InvalidInput` for mistakes the SDK catches
// before calling the host. Every one is a `GpuError` carrying the case's kebab-case name (`kind`)
// and its one-line message; `String(e)` is `"kind: message"`, as the Rust SDK prints it.

export class GpuError extends Error {
  constructor(kind, message) {
    super(message);
    this.kind = kind;
    this.name = 'GpuError';
  }

  toString() {
    return `${this.kind}: ${this.message}`;
  }
}

const CASES = [
  'unauthorized', 'lease-expired', 'capacity-exceeded', 'quota-exceeded', 'out-of-bounds',
  'invalid-argument', 'load-failed', 'launch-failed', 'kernel-fault', 'deadline-exceeded',
  'device-lost', 'unsupported', 'invalid-input',
];

function caseClass(kind) {
  const name = kind.split('-').map((w) => w[0].toUpperCase() + w.slice(1)).join('');
  const cls = class extends GpuError {
    constructor(message) {
      super(kind, message);
      this.name = name;
    }
  };
  Object.defineProperty(cls, 'name', { value: name });
  return cls;
}

/** The class of each case, by kebab-case name. */
export const ERROR_CLASSES = Object.fromEntries(CASES.map((kind) => [kind, caseClass(kind)]));
export const Unauthorized = ERROR_CLASSES['unauthorized'];
export const LeaseExpired = ERROR_CLASSES['lease-expired'];
export const CapacityExceeded = ERROR_CLASSES['capacity-exceeded'];
export const QuotaExceeded = ERROR_CLASSES['quota-exceeded'];
export const OutOfBounds = ERROR_CLASSES['out-of-bounds'];
export const InvalidArgument = ERROR_CLASSES['invalid-argument'];
export const LoadFailed = ERROR_CLASSES['load-failed'];
export const LaunchFailed = ERROR_CLASSES['launch-failed'];
export const KernelFault = ERROR_CLASSES['kernel-fault'];
export const DeadlineExceeded = ERROR_CLASSES['deadline-exceeded'];
export const DeviceLost = ERROR_CLASSES['device-lost'];
export const Unsupported = ERROR_CLASSES['unsupported'];
export const InvalidInput = ERROR_CLASSES['invalid-input'];

/** Calls a generated binding, throwing its `gpu-error` (`{tag, val}` in the thrown value's
 * `payload`) as the matching `GpuError`. */
export function host(call) {
  try {
    return call();
  } catch (e) {
    const tag = e && e.payload && e.payload.tag;
    if (tag in ERROR_CLASSES) {
      throw new ERROR_CLASSES[tag](e.payload.val);
    }
    throw e;
  }
}
