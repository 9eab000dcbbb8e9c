"""`python-iota`: tasklets/iota in Python, as one GPU call (the SDK's `GpuCall`: lease, copies
and launch in one host call).

Input: a decimal count `n` (256 when the input is empty or whitespace).
Output: `n` lines, `1` to `n`, written on the device by the `iota` kernel.
"""

from array import array

import tasklet_gpu as gpu

# Read from kernels/ when the component is built: the component carries it.
IOTA_PTX = gpu.include_text("iota.ptx")
DEFAULT_N = 256


def run(data: bytes) -> bytes:
    n = gpu.input.count_or(data, DEFAULT_N)
    # extern "C" __global__ void iota(unsigned int* out, unsigned int n)
    values = gpu.GpuCall(IOTA_PTX, "iota").data().len_arg().run(array("I", [0]) * n)
    return "".join(f"{v}\n" for v in values).encode()


WitWorld = gpu.export(run)
