"""One kernel over one region of device memory, start to finish, in one host call."""

from array import array

from wit_world.imports import oneshot as _oneshot

from . import elements
from .errors import InvalidInput, host
from .launch import LaunchConfig, Scalar, untyped
from .lease import LeaseBuilder, round_vram

_DATA = object()
_LEN = object()


class GpuCall:
    """`GpuCall(PTX, "scale").data().arg(f32(2.0)).len_arg().run(xs)`: the host acquires a lease
    sized for `xs`, copies it to the device, runs the kernel over it in place, reads it back and
    ends the lease, in one call (one request where the GPU is on a node).

    Arguments go in parameter order: `data()` for the buffer holding the input, `len_arg()` for
    its element count as a u32, `arg(...)` for typed scalars. The launch configuration defaults
    to `LaunchConfig.for_num_elems(len(xs))`."""

    def __init__(self, ptx, kernel):
        self._module = _oneshot.ModuleSource_Ptx(ptx)
        self._kernel = kernel
        self._args = []
        self._config = None
        self._lease = LeaseBuilder()

    @staticmethod
    def cuda(source, options, kernel):
        """A call of a kernel in CUDA C, compiled by the host (NVRTC) with `options`."""
        call = GpuCall("", kernel)
        call._module = _oneshot.ModuleSource_Cuda(_oneshot.CudaSource(source, list(options)))
        return call

    def data(self):
        self._args.append(_DATA)
        return self

    def len_arg(self):
        self._args.append(_LEN)
        return self

    def arg(self, value):
        if not isinstance(value, Scalar):
            raise untyped(value)
        self._args.append(value)
        return self

    def config(self, config):
        self._config = config
        return self

    def lease(self, min_vram=None, secs=None, device=None):
        """Asks for more device memory, another lease time, or a particular device."""
        if min_vram is not None:
            self._lease.min_vram(min_vram)
        if secs is not None:
            self._lease.secs(secs)
        if device is not None:
            self._lease.device(device)
        return self

    def run(self, values, elem=None):
        """Runs the kernel over a device copy of `values` (an `array`, `bytes`, or numbers with
        `elem`) and returns the buffer afterwards, as an `array` of the same type."""
        elem = elements.check(elem or elements.name_of(values))
        data = elements.to_bytes(values, elem)
        n = len(data) // elements.size_of(elem)
        if n == 0:
            return array(elements.TYPECODE[elem])
        if n > 0xFFFF_FFFF:
            raise InvalidInput(f"{n} elements do not fit a kernel's u32 count")
        args = [
            _oneshot.SubmitArg_Region(0) if a is _DATA
            else _oneshot.SubmitArg_U32(n) if a is _LEN
            else a.call_arg()
            for a in self._args
        ]
        request = self._lease.request()
        request.min_vram = max(request.min_vram, round_vram(len(data)))
        call = _oneshot.Submission(
            lease=request,
            module=self._module,
            kernel=self._kernel,
            config=(self._config or LaunchConfig.for_num_elems(n)).raw(),
            args=args,
            input=data,
            output_offset=0,
            output_size=len(data),
        )
        out = host(_oneshot.submit, call)
        if len(out) != len(data):
            raise InvalidInput(f"the host returned {len(out)} bytes for a {len(data)}-byte output")
        return elements.from_bytes(out, elem)
