"""Persistent kernels ("actors") and the rings they exchange messages through: a kernel that runs
as long as its lease, taking messages from a ring the tasklet fills and putting its answers on a
ring the tasklet empties, with no launch per message.

A ring lives in memory the host and the device both see; `Ring.send` and `Ring.recv` are loads
and stores there, not requests to the device. The kernel reads the layout the WIT documents
(`ring`, `actor-arg.control`). Load every module the lease needs before its persistent kernel
starts: while one runs, a module load on the lease fails with `LoadFailed`.

    serve = module.kernel("actor_scale")
    inbox = session.ring_to_device("f32", 64, 256)      # 256 slots of 64 f32s
    outbox = session.ring_from_device("f32", 64, 256)
    actor = (session.launch_persistent(serve, gpu.LaunchConfig.linear(1, 64))
             .ring(inbox).ring(outbox).control().arg(gpu.f32(2.0)).start())
    inbox.send(array("f", [1.0]) * (64 * 8))            # 8 messages
    answers = outbox.recv(8, timeout=0.1)               # a list of arrays of 64 f32s
    status = actor.stop(grace=0.5)
"""

from dataclasses import dataclass
from typing import Optional

from wit_world.imports import sessions as _sessions

from . import elements
from .errors import InvalidArgument, InvalidInput, host, quote
from .launch import kernel_arg

_U32 = (1 << 32) - 1


def _count(value, what):
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= _U32:
        raise InvalidInput(f"{what} {value!r} is not a whole number from 0 to {_U32}")
    return value


def _span(seconds, unit, high, what):
    """`seconds` (a number, at least 0) in whole `unit`s (per second), at most `high` (the host
    caps it lower anyway)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
        raise InvalidInput(f"{what} {seconds!r} is not a number of seconds, at least 0")
    return min(round(min(seconds, high / unit) * unit), high)


@dataclass(frozen=True)
class ActorStatus:
    """An actor's control block as read now (the WIT `actor-status`)."""

    #: The kernel runs.
    is_active: bool
    #: It has been asked to return.
    should_terminate: bool
    #: It has ended.
    has_terminated: bool
    #: What the kernel counted as errors of its handler.
    errors_encountered: int
    #: What the kernel counted as messages handled.
    messages_processed: int
    #: Why it ended, when it failed (a fault, or it did not return when asked); else `None`.
    failure: Optional[str]

    @staticmethod
    def of(raw):
        return ActorStatus(raw.is_active, raw.should_terminate, raw.has_terminated,
                           raw.errors_encountered, raw.messages_processed, raw.failure)


class Ring:
    """A ring of messages of `width` elements of type `elem` each, from `session.ring_to_device`
    or `session.ring_from_device`. Single producer, single consumer: one side sends, the other
    receives. Dropped with its session, or at the end of a `with` block."""

    def __init__(self, session, raw, elem, width):
        self.session = session
        self.raw = raw
        self.elem = elem
        self.width = width

    @property
    def message_size(self):
        """Bytes of one message."""
        return self.width * elements.size_of(self.elem)

    @property
    def capacity(self):
        """Slots: how many messages fit at once."""
        return self.raw.capacity()

    def send(self, values):
        """Puts as many of the messages in `values` (whole messages, concatenated: an `array`,
        `bytes`, or a list of numbers) as there is room for, in order; how many went. To-device
        rings only."""
        data = elements.to_bytes(values, self.elem)
        if len(data) % self.message_size:
            raise InvalidInput(
                f"{len(data)} bytes are not whole messages of {self.width} {self.elem} ({self.message_size} bytes)"
            )
        if not data:
            return 0
        return host(self.raw.send, data)

    def recv(self, max_messages, timeout=0.1):
        """Takes up to `max_messages` waiting messages, waiting up to `timeout` seconds (at most 10) for
        the first: a list of `array`s of `width` elements, empty when the timeout passes, or at
        once when no persistent kernel of the session runs. From-device rings only."""
        micros = _span(timeout, 1_000_000, (1 << 64) - 1, "timeout")
        data = host(self.raw.recv, _count(max_messages, "message count"), micros)
        size = self.message_size
        return [elements.from_bytes(data[i:i + size], self.elem) for i in range(0, len(data) - size + 1, size)]

    def try_recv(self, max_messages):
        """The messages waiting now, up to `max_messages`, without waiting."""
        return self.recv(max_messages, 0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.raw.__exit__(*exc)
        return False


class Actor:
    """A persistent kernel, from `PersistentLaunch.start()`. Dropping it (or the end of a `with`
    block) stops it: the host asks, then waits half a second before ending its worker and lease."""

    def __init__(self, session, raw):
        self.session = session
        self.raw = raw

    def status(self):
        """Its control block now, an `ActorStatus`."""
        return ActorStatus.of(host(self.raw.status))

    def stop(self, grace=0.5):
        """Asks it to return and waits up to `grace` seconds (at most 10) for it; one that has not
        returned by then is ended with its worker, and the lease with it. Its `ActorStatus`."""
        return ActorStatus.of(host(self.raw.stop, _span(grace, 1000, _U32, "grace")))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.raw.__exit__(*exc)
        return False


class PersistentLaunch:
    """A persistent launch being built, from `session.launch_persistent(kernel, config)`:
    arguments in the kernel's parameter order, rings (`.ring(r)`) and the control block
    (`.control()`) among them; nothing runs until `.start()`. The whole grid runs at once."""

    def __init__(self, session, kernel, config=None):
        if kernel.module.session is not session:
            raise InvalidArgument(
                f"persistent launch of {quote(kernel.name)}: the kernel's module belongs to another session"
            )
        self._session = session
        self._kernel = kernel
        self._config = config
        self._args = []

    def _what(self):
        return f"persistent launch of {quote(self._kernel.name)}"

    def config(self, config):
        """Sets the grid, block and shared memory (required, here or in `launch_persistent`)."""
        self._config = config
        return self

    def arg(self, value):
        """Appends an argument as `Launch.arg` takes it."""
        i = len(self._args)
        arg = kernel_arg(self._session, value, lambda: f"{self._what()}: argument {i}")
        self._args.append(_sessions.ActorArg_Arg(arg))
        return self

    def args(self, *values):
        for v in values:
            self.arg(v)
        return self

    def ring(self, ring):
        """Appends a ring's device address (a `Ring` of this session)."""
        if not isinstance(ring, Ring):
            raise InvalidInput(f"{self._what()}: argument {len(self._args)} is a {type(ring).__name__}, not a Ring")
        if ring.session is not self._session:
            raise InvalidArgument(f"{self._what()}: argument {len(self._args)} is a ring of another session")
        self._args.append(_sessions.ActorArg_Ring(ring.raw))
        return self

    def control(self):
        """Appends the device address of the actor's control block."""
        self._args.append(_sessions.ActorArg_Control())
        return self

    def start(self):
        """Starts the kernel; its `Actor`. Needs the `persistent` right."""
        if self._config is None:
            raise InvalidInput(f"{self._what()} has no LaunchConfig; call .config(...)")
        raw = host(self._session.raw.launch_persistent, self._kernel.raw, self._config.raw(), self._args)
        return Actor(self._session, raw)
