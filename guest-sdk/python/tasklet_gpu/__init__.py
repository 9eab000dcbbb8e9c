"""Guest-side SDK for tasklets in Python: components built with componentize-py against the WIT
package `tasklet:gpu` (`wit/gpu.wit`), in the shapes of the Rust SDK (`guest-sdk/src`).

A tasklet is one function from input bytes to output bytes, exported with `export`:

    import tasklet_gpu as gpu

    def run(data: bytes) -> bytes:
        n = gpu.input.count_or(data, 256)
        with gpu.Lease.builder().min_vram_for("u32", n).acquire() as lease:
            session = lease.session()
            out = session.alloc("u32", n)
            module = session.load_ptx(IOTA_PTX)
            session.launch(module, "iota").config(gpu.LaunchConfig.for_num_elems(n)).arg(out).arg(gpu.u32(n)).run()
            return "".join(f"{v}\\n" for v in out.read()).encode()

    WitWorld = gpu.export(run)

A `GpuError` raised out of `run` (any WIT `gpu-error` case, or `InvalidInput`) becomes the
tasklet's error, `"kind: message"`; any other exception traps the tasklet, with its traceback on
stderr. Buffers hold elements of one type (`"u32"`, `"f32"`, ...) and are written from and read
into `array.array`s (or `bytes`); no numpy is needed.
"""

from componentize_py_types import Err as _Err

from . import input
from .actor import Actor, ActorStatus, PersistentLaunch, Ring
from .buffer import BufferAt, DeviceBuffer
from .burst import MAX_BURST_LAUNCHES, Burst
from .call import GpuCall
from .errors import (
    CapacityExceeded,
    DeadlineExceeded,
    DeviceLost,
    GpuError,
    InvalidArgument,
    InvalidInput,
    KernelFault,
    LaunchFailed,
    LeaseExpired,
    LoadFailed,
    OutOfBounds,
    QuotaExceeded,
    Unauthorized,
    Unsupported,
)
from .graph import DeviceScalar, Graph, Node
from .launch import Launch, LaunchConfig, Scalar, f32, f64, i32, i64, u32, u64
from .lease import DeviceInfo, Lease, LeaseBuilder, LeaseInfo, inventory
from .session import Kernel, KernelParam, Module, Session
from .stream import Event, Stream


def include_text(name):
    """The text of the file `name` in a folder of the build's module path (componentize.sh puts
    the repository's kernels/ there): for PTX and CUDA C, read at the module's top level, which
    componentize-py runs when it builds the component. The component then carries the text, and
    reads no file when it runs (a tasklet has no file system)."""
    import sys
    from pathlib import Path

    for folder in sys.path:
        path = Path(folder) / name
        if path.is_file():
            return path.read_text()
    raise FileNotFoundError(f"{name} is in no folder of the module path ({', '.join(sys.path)})")


def export(run):
    """The world class componentize-py looks for (`WitWorld = export(run)` in the app module):
    its `run` calls `run(data)`, which returns `bytes` (or `str`, sent as UTF-8)."""

    class WitWorld:
        def run(self, data: bytes) -> bytes:
            try:
                out = run(bytes(data))
            except GpuError as e:
                raise _Err(str(e)) from None
            return out.encode() if isinstance(out, str) else bytes(out)

    return WitWorld
