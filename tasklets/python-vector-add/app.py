"""`python-vector-add`: tasklets/vector-add in Python. A persistent session: three buffers stay
on the device while three kernels run on them, and only the result comes back.

Input: a decimal element count `n` (1024 when the input is empty or whitespace).
On the device: `a[i] = i` and `b[i] = 2i` (`fill_linear` with k = 1 and 2), then `c = a + b`
(`vector_add`). Output: one line, the sum of `c`, followed by `\\n`.
"""

import tasklet_gpu as gpu
from tasklet_gpu import u32

# Read from kernels/ when the component is built: the component carries it.
VECTOR_ADD_PTX = gpu.include_text("vector_add.ptx")

DEFAULT_N = 1024


def run(data: bytes) -> bytes:
    n = gpu.input.count_or(data, DEFAULT_N)
    total = 0 if n == 0 else sum_of_a_plus_b(n)
    return f"{total}\n".encode()


def sum_of_a_plus_b(n):
    lease = gpu.Lease.builder().min_vram_for("u32", 3 * n).secs(30).acquire()
    session = lease.session()
    module = session.load_ptx(VECTOR_ADD_PTX)
    a, b, c = (session.alloc("u32", n) for _ in range(3))
    config = gpu.LaunchConfig.for_num_elems(n)
    session.launch(module, "fill_linear").config(config).args(a, u32(1), u32(n)).run()
    session.launch(module, "fill_linear").config(config).args(b, u32(2), u32(n)).run()
    session.launch(module, "vector_add").config(config).args(a, b, c, u32(n)).run()
    session.sync()
    return sum(c.read())


WitWorld = gpu.export(run)
