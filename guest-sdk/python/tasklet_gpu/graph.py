"""Graphs: a session's operations recorded once and replayed as a whole, with device scalars
that change between replays without recording anything again."""

from dataclasses import dataclass

from wit_world.imports import sessions as _sessions

from .errors import InvalidArgument, InvalidInput, OutOfBounds, host
from .launch import kernel_arg

_U32 = (1 << 32) - 1
_U64 = (1 << 64) - 1


@dataclass(frozen=True)
class Node:
    """A recorded operation of a `Graph`, by its index, for `Graph.set_args`."""

    index: int


@dataclass(frozen=True)
class DeviceScalar:
    """A device scalar of a `Graph` (the Rust SDK's `Scalar`): 8 bytes of device memory the
    graph holds, which a kernel recorded in it reads through a pointer parameter (pass it among
    the launch's arguments), and which `Graph.set_scalar` changes for the next replays."""

    graph: object
    index: int


def _whole(value, high, what):
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= high:
        raise InvalidInput(f"{what} {value!r} is not a whole number from 0 to {high}")
    return value


class Graph:
    """Operations recorded once and replayed as a whole, from `session.graph()`: launches, copies
    and fills, each checked when it is recorded as the session's operation of the same name,
    replayed with `replay(times)` with the results of running them one by one. On a GPU a replay
    is one CUDA graph launch.

        graph = session.graph()
        step = graph.scalar(0)
        # jacobi_step(const float* from, float* to, const unsigned long long* step)
        graph.launch(kernel, config, a, b, step)
        graph.launch(kernel, config, b, a, step)
        for i in range(100):
            graph.set_scalar(step, i)
            graph.replay()
        session.sync()

    At most 1024 operations and 32 device scalars a graph, 64 graphs a session (the host refuses
    more with `InvalidArgument`). Dropped with its session, or at the end of a `with` block."""

    def __init__(self, session, raw):
        self.session = session
        self.raw = raw

    def _args(self, values):
        args = []
        for i, value in enumerate(values):
            if isinstance(value, DeviceScalar):
                if value.graph is not self:
                    raise InvalidArgument(f"argument {i} is a device scalar of another graph")
                args.append(_sessions.GraphArg_Scalar(value.index))
            else:
                args.append(_sessions.GraphArg_Arg(kernel_arg(self.session, value, lambda: f"argument {i}")))
        return args

    def _owns(self, buf, what):
        if buf.session is not self.session:
            raise InvalidArgument(f"the {what} belongs to another session")

    def launch(self, kernel, config, *args):
        """Records a launch of `kernel` (of a module of the graph's session) with `args` in
        parameter order: what `Launch.arg` takes, or a `DeviceScalar` of this graph for a
        parameter that points at it. Returns its `Node`."""
        if kernel.module.session is not self.session:
            raise InvalidArgument("the kernel belongs to another session")
        return Node(host(self.raw.launch, kernel.raw, config.raw(), self._args(args)))

    def copy(self, dst, src):
        """Records a copy of all of `src` to the start of `dst` (buffers of the session of one
        element type that do not overlap; `dst` at least as long)."""
        self._owns(dst, "destination buffer")
        self._owns(src, "source buffer")
        if dst.elem != src.elem:
            raise InvalidInput(f"cannot copy {src.elem} into {dst.elem}")
        if len(dst) < len(src):
            raise OutOfBounds(f"a copy of {len(src)} elements into a buffer of {len(dst)}")
        return Node(host(self.raw.copy, dst.raw, 0, src.raw, 0, src.size_bytes))

    def fill(self, dst, value):
        """Records a fill of all of `dst` with the 32-bit `value` repeated (its size in bytes a
        multiple of 4)."""
        self._owns(dst, "buffer")
        _whole(value, _U32, "fill value")
        return Node(host(self.raw.fill, dst.raw, 0, dst.size_bytes, value))

    def scalar(self, value=0):
        """A new device scalar, holding the u64 `value` from the next replay on."""
        _whole(value, _U64, "device scalar value")
        return DeviceScalar(self, host(self.raw.scalar, value))

    def set_scalar(self, scalar, value):
        """Sets a device scalar for the next replays (nothing is recorded again)."""
        if not isinstance(scalar, DeviceScalar) or scalar.graph is not self:
            raise InvalidArgument(f"{scalar!r} is not a device scalar of this graph")
        _whole(value, _U64, "device scalar value")
        host(self.raw.set_scalar, scalar.index, value)

    def set_args(self, node, *args):
        """Replaces the arguments of the launch recorded at `node` for the next replays."""
        host(self.raw.set_args, node.index, self._args(args))

    def replay(self, times=1):
        """Replays the graph `times` times (1 to 4096), in order with the session's other work;
        errors of the work surface here or at the next `sync`."""
        host(self.raw.replay, _whole(times, _U32, "replay count"))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.raw.__exit__(*exc)
        return False
