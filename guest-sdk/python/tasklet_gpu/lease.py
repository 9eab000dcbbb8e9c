"""Leases: a grant of device memory for a time, asked for through `Lease.builder()`."""

from dataclasses import dataclass

from wit_world.imports import inventory as _inventory
from wit_world.imports import leases as _leases

from . import elements
from .errors import host

#: The device memory asked for when `min_vram` is not set, and the granularity of
#: `min_vram_for`: 1 MiB (the host refuses a lease of 0 bytes).
VRAM_GRANULE = 1 << 20
#: The lease time when `secs` is not set: a tasklet's default wall time.
DEFAULT_SECS = 30


def round_vram(nbytes):
    """`nbytes` rounded up to whole `VRAM_GRANULE`s, at least one."""
    return max(1, -(-nbytes // VRAM_GRANULE)) * VRAM_GRANULE


@dataclass(frozen=True)
class DeviceInfo:
    """A device this tasklet may lease."""

    index: int
    name: str
    backend: str
    total_memory: int
    free_memory: int
    compute_capability: tuple
    #: `GPU-…`, `MIG-…`, or `emu-N` for an emulated device: what `LeaseBuilder.uuid` takes.
    uuid: str
    #: Leases on the device now.
    leases: int


def inventory():
    """The devices this tasklet may lease."""
    return [
        DeviceInfo(
            d.index,
            d.name,
            d.backend,
            d.total_memory,
            d.free_memory,
            tuple(d.compute_capability),
            d.uuid,
            d.leases,
        )
        for d in _inventory.devices()
    ]


@dataclass(frozen=True)
class LeaseInfo:
    """A lease's state: its device, bytes granted and held, and milliseconds left."""

    device: int
    granted_bytes: int
    used_bytes: int
    remaining_ms: int

    @property
    def free_bytes(self):
        return max(0, self.granted_bytes - self.used_bytes)


class LeaseBuilder:
    """What a lease asks for: `Lease.builder().min_vram_for("u32", n).secs(30).acquire()`."""

    def __init__(self):
        self._min_vram = VRAM_GRANULE
        self._secs = DEFAULT_SECS
        self._device = None
        self._uuid = None
        self._model = None
        self._min_cc = None
        self._min_total = None

    def min_vram(self, nbytes):
        """At least this many bytes of device memory."""
        self._min_vram = int(nbytes)
        return self

    def min_vram_for(self, elem, count):
        """Enough device memory for `count` elements of type `elem` (`"u32"`), in whole MiB."""
        return self.min_vram(round_vram(int(count) * elements.size_of(elem)))

    def secs(self, secs):
        """For this many seconds from now."""
        self._secs = int(secs)
        return self

    def device(self, index):
        """On this device (an index from `inventory()`); any device when not called."""
        self._device = int(index)
        return self

    def uuid(self, uuid):
        """On the device with this UUID (`DeviceInfo.uuid`)."""
        self._uuid = str(uuid)
        return self

    def model(self, model):
        """On a device whose name contains `model`, case aside (`"H100"`)."""
        self._model = str(model)
        return self

    def min_compute_capability(self, major, minor):
        """On a device of at least this compute capability (`9, 0` for Hopper)."""
        self._min_cc = (int(major), int(minor))
        return self

    def min_total_memory(self, nbytes):
        """On a device that lends at least this many bytes in all (`DeviceInfo.total_memory`)."""
        self._min_total = int(nbytes)
        return self

    def request(self):
        """The WIT request this builder describes."""
        return _leases.LeaseRequest(min_vram=self._min_vram, secs=self._secs, device=self._device)

    def requirements(self):
        """The WIT device requirements this builder describes, or None when it has none
        besides the device index."""
        if (self._uuid, self._model, self._min_cc, self._min_total) == (None, None, None, None):
            return None
        return _leases.DeviceRequirements(
            uuid=self._uuid,
            model=self._model,
            min_compute_capability=self._min_cc,
            min_total_memory=self._min_total,
        )

    def acquire(self):
        """Asks the host for the lease: `CapacityExceeded` when the node cannot serve it (no
        device meets the requirements with room for it: the message names what each lacked),
        `QuotaExceeded` when the tasklet's grant does not allow it."""
        requires = self.requirements()
        if requires is None:
            return Lease(host(_leases.Lease.acquire, self.request()))
        return Lease(host(_leases.Lease.acquire_with, self.request(), requires))

    def acquire_group(self, count):
        """`count` leases of this request on `count` distinct devices that meet its requirements
        (WIT `lease.acquire-group`), all granted or none, in the order the host ranks their
        devices (most memory free, then fewest leases, then lowest index). Open a session on
        each, and copy between them with `Session.copy_from` (staged through the host's memory).
        A group of more
        than one cannot name a `device`; count 0 is `InvalidArgument`, too few devices
        `CapacityExceeded`, past `max-leases` `QuotaExceeded`."""
        requires = self.requirements() or _leases.DeviceRequirements(
            uuid=None, model=None, min_compute_capability=None, min_total_memory=None
        )
        raws = host(_leases.Lease.acquire_group, self.request(), requires, int(count))
        return [Lease(raw) for raw in raws]


class Lease:
    """A grant of device memory for a time. Ends when dropped, or at the end of a `with` block."""

    def __init__(self, raw):
        self.raw = raw

    @staticmethod
    def builder():
        return LeaseBuilder()

    def session(self):
        """Opens a session on this lease."""
        from .session import Session

        return Session.open(self)

    def renew(self, secs):
        """Extends the lease to `secs` seconds from now, within the tasklet's ceiling."""
        host(self.raw.renew, int(secs))

    def info(self):
        i = host(self.raw.info)
        return LeaseInfo(i.device, i.granted_bytes, i.used_bytes, i.remaining_ms)

    def gpu_time_ns(self):
        """Nanoseconds of device time the lease's kernels have used so far."""
        return host(self.raw.gpu_time)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.raw.__exit__(*exc)
        return False
