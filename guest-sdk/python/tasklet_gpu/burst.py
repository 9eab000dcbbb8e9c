"""Bursts: one kernel launched many times in one host call, each launch with some of its
arguments changed."""

from wit_world.imports import sessions as _sessions

from .errors import InvalidArgument, InvalidInput, host, quote
from .launch import kernel_arg

#: The most launches one burst may hold (the host refuses more with `InvalidArgument`): split a
#: longer series into several bursts.
MAX_BURST_LAUNCHES = 4096


class Burst:
    """A burst being built, from `session.burst(kernel)`: the kernel's arguments, given once in
    parameter order as for a `Launch`, and one entry per launch saying which of them that launch
    changes (a scalar such as a step or a row, or a buffer at another offset). Nothing happens
    until `run()`, which queues every launch in order, in one host call, and returns the first
    launch's ordinal (the others follow it one by one).

        burst = session.burst(kernel).config(gpu.LaunchConfig.for_num_elems(256))
        burst.arg(m).arg(gpu.f32(1.0)).arg(gpu.u32(256))
        for row in range(64):
            burst.launch({0: m.at(row * 256), 1: gpu.f32(row)})
        burst.run()

    The host checks every launch as it checks a single one before it queues any: a refused
    launch fails the whole burst, the error naming it ("launch 3 of the burst: ...")."""

    def __init__(self, session, kernel):
        if kernel.module.session is not session:
            raise InvalidArgument(f"burst of {quote(kernel.name)}: the kernel's module belongs to another session")
        self._session = session
        self._kernel = kernel
        self._config = None
        self._args = []
        self._launches = []

    def _what(self):
        return f"burst of {quote(self._kernel.name)}"

    def config(self, config):
        """Sets the grid, block and shared memory of every launch (required)."""
        self._config = config
        return self

    def arg(self, value):
        """Appends an argument every launch takes unless it changes it (as `Launch.arg` takes it)."""
        i = len(self._args)
        self._args.append(kernel_arg(self._session, value, lambda: f"{self._what()}: argument {i}"))
        return self

    def args(self, *values):
        for v in values:
            self.arg(v)
        return self

    def launch(self, changes=()):
        """Adds one launch, changing the arguments at the given indices for it alone (a mapping
        `{index: value}` or `(index, value)` pairs, applied in the order given); the others are the
        burst's."""
        n = len(self._launches)
        items = changes.items() if hasattr(changes, "items") else changes
        own = []
        for index, value in items:
            if not isinstance(index, int) or not 0 <= index < 1 << 32:
                raise InvalidInput(f"{self._what()}: launch {n} changes argument {index!r}, not an index")
            arg = kernel_arg(self._session, value, lambda: f"{self._what()}: launch {n}'s argument {index}")
            own.append(_sessions.BurstArg(index, arg))
        self._launches.append(own)
        return self

    def repeat(self, n):
        """Adds `n` launches that change nothing."""
        self._launches.extend([] for _ in range(int(n)))
        return self

    def __len__(self):
        """Launches so far."""
        return len(self._launches)

    def run(self):
        """Queues every launch, in order, in one host call; returns the first one's ordinal. May
        return before the kernels complete: a fault surfaces at the next `sync` or read, naming
        the launch by its ordinal."""
        if self._config is None:
            raise InvalidInput(f"{self._what()} has no LaunchConfig; call .config(...)")
        return host(
            self._session.raw.launch_burst, self._kernel.raw, self._config.raw(), self._args, self._launches
        )
