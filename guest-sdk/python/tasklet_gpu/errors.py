"""Errors: one exception class per WIT `gpu-error` case, plus `InvalidInput` for mistakes the SDK
catches before calling the host. Every one is a `GpuError` carrying the case's kebab-case name
(`kind`) and its one-line message; `str(e)` is `"kind: message"`, as the Rust SDK prints it."""

from componentize_py_types import Err
from wit_world.imports import types as _types


class GpuError(Exception):
    """A GPU operation failed. `kind` names the WIT case (`"quota-exceeded"`), `message` says why
    and, where there is one, the fix."""

    kind = "gpu-error"

    def __init__(self, message):
        super().__init__(message)
        self.message = message

    def __str__(self):
        return f"{self.kind}: {self.message}"


def _case(kind, doc):
    name = "".join(part.capitalize() for part in kind.split("-"))
    return type(name, (GpuError,), {"kind": kind, "__doc__": doc})


Unauthorized = _case("unauthorized", "The manifest (or the node's policy) lacks a right; the text names it.")
LeaseExpired = _case("lease-expired", "The lease under this handle has ended.")
CapacityExceeded = _case("capacity-exceeded", "The node cannot grant a lease that large, or has no free worker.")
QuotaExceeded = _case("quota-exceeded", "The lease or the grant has no room for this allocation or lease.")
OutOfBounds = _case("out-of-bounds", "An offset or length falls outside the buffer it names.")
InvalidArgument = _case("invalid-argument", "An argument is malformed: a foreign handle, a wrong kernel argument, a zero size.")
LoadFailed = _case("load-failed", "A module did not parse, validate or compile; the text names the line.")
LaunchFailed = _case("launch-failed", "A launch was refused before it ran: unknown kernel, bad grid or block.")
KernelFault = _case("kernel-fault", "A kernel faulted (illegal address, misaligned access, trap).")
DeadlineExceeded = _case("deadline-exceeded", "A kernel or operation ran past its deadline and was stopped.")
DeviceLost = _case("device-lost", "The worker serving this lease died or stopped answering.")
Unsupported = _case("unsupported", "The operation is not supported by this node's backend.")
InvalidInput = _case("invalid-input", "Found by the SDK before any host call; not a WIT case.")

# The generated bindings' case classes, to the exceptions above.
_FROM_RAW = {
    _types.GpuError_Unauthorized: Unauthorized,
    _types.GpuError_LeaseExpired: LeaseExpired,
    _types.GpuError_CapacityExceeded: CapacityExceeded,
    _types.GpuError_QuotaExceeded: QuotaExceeded,
    _types.GpuError_OutOfBounds: OutOfBounds,
    _types.GpuError_InvalidArgument: InvalidArgument,
    _types.GpuError_LoadFailed: LoadFailed,
    _types.GpuError_LaunchFailed: LaunchFailed,
    _types.GpuError_KernelFault: KernelFault,
    _types.GpuError_DeadlineExceeded: DeadlineExceeded,
    _types.GpuError_DeviceLost: DeviceLost,
    _types.GpuError_Unsupported: Unsupported,
}


def from_raw(case):
    """The exception for a generated `GpuError_*` value."""
    return _FROM_RAW[type(case)](case.value)


def host(call, *args):
    """Calls a generated binding, raising its `gpu-error` as the matching `GpuError`."""
    try:
        return call(*args)
    except Err as e:
        raise from_raw(e.value) from None


def quote(word):
    """`word` quoted as the Rust SDK's messages quote it (`"ten"`)."""
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
