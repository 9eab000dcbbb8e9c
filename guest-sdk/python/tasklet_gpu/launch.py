"""Kernel launches: a launch configuration, typed scalar arguments, and the `Launch` builder."""

from dataclasses import dataclass

from wit_world.imports import oneshot as _oneshot
from wit_world.imports import sessions as _sessions

from .errors import InvalidArgument, InvalidInput, host

#: The block size `LaunchConfig.for_num_elems` uses.
BLOCK = 256


@dataclass(frozen=True)
class LaunchConfig:
    """Blocks in the grid and threads in a block, (x, y, z), and dynamic shared memory per block."""

    grid: tuple = (1, 1, 1)
    block: tuple = (BLOCK, 1, 1)
    shared_mem_bytes: int = 0

    @staticmethod
    def for_num_elems(n):
        """One thread per element: blocks of 256 threads, enough to cover `n` (at least one)."""
        return LaunchConfig((max(1, -(-int(n) // BLOCK)), 1, 1), (BLOCK, 1, 1), 0)

    @staticmethod
    def linear(grid, block):
        """`grid` blocks of `block` threads, in one dimension."""
        return LaunchConfig((int(grid), 1, 1), (int(block), 1, 1), 0)

    def with_shared_mem(self, nbytes):
        return LaunchConfig(self.grid, self.block, int(nbytes))

    def raw(self):
        return _sessions.LaunchConfig(tuple(self.grid), tuple(self.block), self.shared_mem_bytes)


# Scalar kind -> (range check, session arg case, one-shot arg case).
_RANGES = {
    "i32": (-(1 << 31), (1 << 31) - 1),
    "u32": (0, (1 << 32) - 1),
    "i64": (-(1 << 63), (1 << 63) - 1),
    "u64": (0, (1 << 64) - 1),
}
_SESSION_CASE = {
    "i32": _sessions.KernelArg_I32, "u32": _sessions.KernelArg_U32,
    "i64": _sessions.KernelArg_I64, "u64": _sessions.KernelArg_U64,
    "f32": _sessions.KernelArg_F32, "f64": _sessions.KernelArg_F64,
}
_CALL_CASE = {
    "i32": _oneshot.SubmitArg_I32, "u32": _oneshot.SubmitArg_U32,
    "i64": _oneshot.SubmitArg_I64, "u64": _oneshot.SubmitArg_U64,
    "f32": _oneshot.SubmitArg_F32, "f64": _oneshot.SubmitArg_F64,
}


class Scalar:
    """A kernel scalar of a C type: made by `u32(n)`, `i32(n)`, `u64(n)`, `i64(n)`, `f32(x)`,
    `f64(x)`. Python numbers carry no C type, so a bare `int` or `float` is not an argument."""

    def __init__(self, kind, value):
        if kind in _RANGES:
            low, high = _RANGES[kind]
            if not isinstance(value, int) or not low <= value <= high:
                raise InvalidInput(f"{value!r} is not a {kind} (from {low} to {high})")
        else:
            value = float(value)
        self.kind = kind
        self.value = value

    def session_arg(self):
        return _SESSION_CASE[self.kind](self.value)

    def call_arg(self):
        return _CALL_CASE[self.kind](self.value)

    def __repr__(self):
        return f"{self.kind}({self.value!r})"


def i32(v):
    return Scalar("i32", v)


def u32(v):
    return Scalar("u32", v)


def i64(v):
    return Scalar("i64", v)


def u64(v):
    return Scalar("u64", v)


def f32(v):
    return Scalar("f32", v)


def f64(v):
    return Scalar("f64", v)


def untyped(value):
    """The error for an argument that is not one: a bare number says how to type it."""
    if isinstance(value, (int, float)):
        return InvalidInput(
            f"kernel argument {value!r} needs a C type: u32(...), i32(...), u64(...), i64(...), "
            "f32(...) or f64(...)"
        )
    return InvalidInput(f"{type(value).__name__} is not a kernel argument")


def kernel_arg(session, value, what):
    """The WIT `kernel-arg` for `value` (see `Launch.arg`). A buffer must be `session`'s
    (`InvalidArgument` naming `what()`, e.g. "argument 2", otherwise), as the host would refuse it
    anyway, later and with less to say."""
    from .buffer import BufferAt, DeviceBuffer

    if isinstance(value, DeviceBuffer):
        value = value.at(0)
    if isinstance(value, BufferAt):
        if session is not None and value.buffer.session is not session:
            raise InvalidArgument(f"{what()} is a buffer of another session")
        return _sessions.KernelArg_Buffer(_sessions.BufferArg(value.buffer.raw, value.byte_offset))
    if isinstance(value, Scalar):
        return value.session_arg()
    if isinstance(value, (bytes, bytearray)):
        return _sessions.KernelArg_Bytes(bytes(value))
    raise untyped(value)


class Launch:
    """A kernel launch being built: `session.launch(module, "name").config(cfg).arg(buf).arg(u32(n)).run()`.
    Arguments go in parameter order; the host checks them against the kernel's declaration."""

    def __init__(self, session, module_or_kernel, kernel=None):
        self._session = session
        self._target = module_or_kernel
        self._kernel = kernel
        self._config = None
        self._args = []
        self._stream = None

    def config(self, config):
        self._config = config
        return self

    def on(self, stream):
        """Queues the launch on `stream` (a `Stream` of the same session) instead of the
        session's own queue."""
        if stream.session is not self._session:
            raise InvalidArgument("the stream belongs to another session")
        self._stream = stream
        return self

    def arg(self, value):
        """A `DeviceBuffer` (or `buf.at(i)`), a typed scalar (`u32(n)`), or `bytes` passed by value."""
        self._args.append(kernel_arg(self._session, value, lambda: f"argument {len(self._args)}"))
        return self

    def args(self, *values):
        for v in values:
            self.arg(v)
        return self

    def run(self):
        """Launches the kernel; returns its ordinal (launches under the lease, from 1). May return
        before the kernel ends: its errors surface at the next `sync` or read at the latest."""
        if self._config is None:
            raise InvalidInput("a launch needs .config(...) (e.g. LaunchConfig.for_num_elems(n))")
        config = self._config.raw()
        raw = self._session.raw
        if self._stream is not None:
            # A stream launches kernel handles only: resolve a named kernel first.
            kernel = self._target if self._kernel is None else self._target.kernel(self._kernel)
            return host(self._stream.raw.launch, kernel.raw, config, self._args)
        if self._kernel is None:
            return host(raw.launch_kernel, self._target.raw, config, self._args)
        return host(raw.launch, self._target.raw, self._kernel, config, self._args)
