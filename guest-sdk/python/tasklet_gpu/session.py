"""Sessions: device memory, modules and launches under one lease."""

from dataclasses import dataclass

from wit_world.imports import sessions as _sessions

from . import elements
from .actor import PersistentLaunch, Ring
from .buffer import DeviceBuffer
from .burst import Burst
from .errors import InvalidArgument, InvalidInput, host
from .graph import Graph
from .launch import Launch
from .stream import Event, Stream

_U32 = (1 << 32) - 1


class Session:
    """Device memory, modules and launches under one lease."""

    def __init__(self, lease, raw):
        self.lease = lease
        self.raw = raw

    @staticmethod
    def open(lease):
        return Session(lease, host(_sessions.Session.open, lease.raw))

    def alloc(self, elem, count):
        """A zeroed device buffer of `count` elements of type `elem` (`"u32"`, `"f32"`, ...)."""
        nbytes = int(count) * elements.size_of(elem)
        if nbytes == 0:
            raise InvalidInput("a device buffer needs at least one element")
        return DeviceBuffer(self, host(self.raw.mem_alloc, nbytes), elem, int(count))

    def alloc_from(self, values, elem=None):
        """A device buffer holding `values`: an `array` (its type follows the typecode), `bytes`
        (`u8`), or a list of numbers with `elem` naming their type."""
        elem = elements.check(elem or elements.name_of(values))
        data = elements.to_bytes(values, elem)
        buf = self.alloc(elem, len(data) // elements.size_of(elem))
        buf.write(data)
        return buf

    def copy(self, dst, src):
        """Copies all of `src` into `dst` on the device (same element type; `dst` at least as long)."""
        if dst.elem != src.elem or len(dst) < len(src):
            raise InvalidInput(f"cannot copy {len(src)} {src.elem} into {len(dst)} {dst.elem}")
        host(self.raw.mem_copy, dst.raw, 0, src.raw, 0, src.size_bytes)

    def copy_from(self, dst, src):
        """Copies all of `src`, a buffer of another session of this tasklet (typically under a
        lease on another device, as `LeaseBuilder.acquire_group` gives), into `dst`, a buffer of
        this session (same element type; `dst` at least as long). The host stages the bytes
        through its memory: a copy between devices, not a peer copy. Needs the `read` and `write`
        rights."""
        if dst.session is not self:
            raise InvalidArgument(
                "the destination buffer is not this session's; call copy_from on the session that holds it"
            )
        if dst.elem != src.elem or len(dst) < len(src):
            raise InvalidInput(f"cannot copy {len(src)} {src.elem} into {len(dst)} {dst.elem}")
        host(self.raw.mem_copy_from, dst.raw, 0, src.session.raw, src.raw, 0, src.size_bytes)

    def load_ptx(self, ptx):
        """Loads a PTX module."""
        return Module(self, host(self.raw.module_load, ptx))

    def load_cuda(self, source, options=()):
        """Compiles CUDA C with NVRTC (with `options`) and loads the result."""
        return Module(self, host(self.raw.module_load_source, source, list(options)))

    def launch(self, module_or_kernel, kernel=None):
        """A launch of `kernel` of `module`, or of a `Kernel` resolved with `module.kernel(name)`:
        `.config(...)`, `.arg(...)` for each parameter, then `.run()`."""
        return Launch(self, module_or_kernel, kernel)

    def burst(self, kernel):
        """A burst of launches of `kernel` (a `Kernel` of this session's module): many launches,
        each changing some arguments, in one host call; see `Burst`."""
        return Burst(self, kernel)

    def graph(self):
        """A new, empty graph of this session; see `Graph`."""
        return Graph(self, host(self.raw.new_graph))

    def stream(self):
        """A new stream of this session (at most 16 at once); see `Stream`."""
        return Stream(self, host(self.raw.new_stream))

    def event(self):
        """A new event of this session, not yet recorded (at most 64 at once); see `Event`."""
        return Event(self, host(self.raw.new_event))

    def ring_to_device(self, elem, width, capacity, sequenced=False):
        """A ring of `capacity` (a power of two) messages of `width` elements of type `elem` each,
        that the tasklet sends and a kernel receives; see `Ring`. Needs the `persistent` right.
        `sequenced=True`: each 4 bytes of a message travel beside the message's number, so a
        kernel reads the slots without reading the head first (one bus round trip a message on
        a GPU); the kernel must read that layout (the WIT's `new-sequenced-ring`)."""
        return self._ring(_sessions.RingDirection.TO_DEVICE, elem, width, capacity, sequenced)

    def ring_from_device(self, elem, width, capacity, sequenced=False):
        """A ring of `capacity` (a power of two) messages of `width` elements of type `elem` each,
        that a kernel sends and the tasklet receives; see `Ring`. `sequenced=True`: as for
        `ring_to_device`."""
        return self._ring(_sessions.RingDirection.FROM_DEVICE, elem, width, capacity, sequenced)

    def _ring(self, direction, elem, width, capacity, sequenced):
        size = elements.size_of(elem) * width if isinstance(width, int) and not isinstance(width, bool) else 0
        # A ring carries whole 4-byte words (the host would refuse it, later and with less to say).
        if size <= 0 or size % 4 or size > _U32:
            raise InvalidInput(f"a ring's message is a whole number of 4-byte words; {width!r} {elem} is not")
        if not isinstance(capacity, int) or isinstance(capacity, bool) or not 0 <= capacity <= _U32:
            raise InvalidInput(f"ring capacity {capacity!r} is not a whole number from 0 to {_U32}")
        new = self.raw.new_sequenced_ring if sequenced else self.raw.new_ring
        return Ring(self, host(new, direction, size, capacity), elem, width)

    def launch_persistent(self, kernel, config=None):
        """A persistent launch of `kernel` (a `Kernel` of this session's module):
        `.ring(r)`, `.control()`, `.arg(x)` in parameter order, then `.start()` (an `Actor`); see
        `PersistentLaunch`."""
        return PersistentLaunch(self, kernel, config)

    def sync(self):
        """Waits for all work of this session; a launch's errors surface here at the latest."""
        host(self.raw.sync)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.raw.__exit__(*exc)
        return False


@dataclass(frozen=True)
class KernelParam:
    """One kernel parameter: name, size and alignment in bytes, and whether it is a pointer."""

    name: str
    size: int
    align: int
    pointer: bool


def _params(raw_params):
    return [KernelParam(p.name, p.size, p.align, p.kind == _sessions.ParamKind.POINTER) for p in raw_params]


class Module:
    """A loaded module of kernels, usable in the session that loaded it."""

    def __init__(self, session, raw):
        self.session = session
        self.raw = raw

    def kernel_names(self):
        return list(self.raw.kernels())

    def kernels(self):
        """Each kernel's name and parameters: {name: [KernelParam, ...]}."""
        return {s.name: _params(s.params) for s in self.raw.signatures()}

    def kernel(self, name):
        """The kernel named `name`, resolved once for launches that do not name it again."""
        return Kernel(self, host(self.raw.kernel, name))


class Kernel:
    """A kernel of a loaded module."""

    def __init__(self, module, raw):
        self.module = module
        self.raw = raw

    @property
    def name(self):
        return self.raw.name()

    def params(self):
        return _params(self.raw.params())
