"""`python-jacobi`: tasklets/jacobi in Python, as a replayed graph with device scalars, or as
bursts of launches.

Input: `<n> <steps> [graph|burst|stream]` (grid points, at least 3; sweeps, even, at most 8192; how),
default `64 100 graph`. The field starts at 1 on the left end and 0 everywhere else; the ends
stay fixed; each sweep stores the midpoint's new value at its number in a history buffer.

- `graph`: a graph of two launches of `jacobi_step` (a -> b, then b -> a) is recorded once and
  replayed `steps / 2` times; two device scalars hold the numbers of the sweeps a replay makes,
  set before each replay without recording again (as tasklets/jacobi does).
- `burst`: every sweep is one launch of a burst (at most `MAX_BURST_LAUNCHES` a burst), each
  launch changing the buffers it reads and writes, and the sweep's number: a buffer of the
  numbers 0, 1, ... passed at that sweep's element.
- `stream`: the numbers are written on one stream, an event recorded after them; every sweep is
  one launch on a second stream that waits for that event, which then reads the results.

Output, either way: `history` and the midpoint after each sweep, then `field` and the final
field, values as Rust's `{:?}` writes an f32 (tasklets/jacobi's output, byte for byte).
"""

import math
import re
import struct
from array import array
from decimal import Decimal

from componentize_py_types import Err

import tasklet_gpu as gpu
from tasklet_gpu import elements
from tasklet_gpu.errors import quote

# tasklets/jacobi/src/jacobi.ptx (this folder's jacobi.ptx links to it), read when the component
# is built: the component carries it.
JACOBI_PTX = gpu.include_text("jacobi.ptx")
MAX_STEPS = 8192


def run(data: bytes) -> bytes:
    words = gpu.input.text(data).split()
    n = parse(words, 0, 64, "n")
    steps = parse(words, 1, 100, "steps")
    how = words[2] if len(words) > 2 else "graph"
    if n < 3 or steps % 2 or steps > MAX_STEPS:
        raise Err(f"need n >= 3 and an even number of steps up to {MAX_STEPS}; got n = {n}, steps = {steps}")
    if how not in ("graph", "burst", "stream"):
        raise Err(f"the third word says how: graph, burst or stream, not {quote(how)}")
    history, field = solve(n, steps, how)
    return f"history {join(history)}\nfield {join(field)}\n"


def parse(words, i, default, what):
    """Word `i` as a u32, as Rust's `str::parse::<u32>` reads it; `default` when there is none."""
    if i >= len(words):
        return default
    word = words[i]
    if re.fullmatch(r"\+?[0-9]+", word) and int(word) < 1 << 32:
        return int(word)
    raise Err(f"{what} must be a whole number, not {quote(word)}")


def solve(n, steps, how):
    lease = gpu.Lease.builder().min_vram(4 * (2 * n + steps) + 8 * steps + (1 << 20)).secs(30).acquire()
    session = lease.session()
    step = session.load_ptx(JACOBI_PTX).kernel("jacobi_step")
    start = array("f", [0.0]) * n
    start[0] = 1.0
    # Both buffers hold the fixed ends, as every sweep copies them.
    a, b = session.alloc_from(start), session.alloc_from(start)
    history = session.alloc("f32", max(steps, 1))
    config = gpu.LaunchConfig.for_num_elems(n)
    # jacobi_step(const float* from, float* to, unsigned n, const unsigned long long* step,
    #             float* history)
    if how == "graph":
        graph = session.graph()
        even, odd = graph.scalar(0), graph.scalar(1)
        graph.launch(step, config, a, b, gpu.u32(n), even, history)
        graph.launch(step, config, b, a, gpu.u32(n), odd, history)
        for pair in range(steps // 2):
            graph.set_scalar(even, 2 * pair)
            graph.set_scalar(odd, 2 * pair + 1)
            graph.replay()
    elif how == "stream" and steps:
        copies, compute, written = session.stream(), session.stream(), session.event()
        numbers = session.alloc("u64", steps)
        copies.write(numbers, array(elements.TYPECODE["u64"], range(steps)))
        copies.record(written)
        compute.wait(written)
        for i in range(steps):
            src, dst = (a, b) if i % 2 == 0 else (b, a)
            session.launch(step).on(compute).config(config).args(src, dst, gpu.u32(n), numbers.at(i), history).run()
        return compute.read(history), compute.read(a)
    elif how == "burst" and steps:
        numbers = session.alloc_from(array(elements.TYPECODE["u64"], range(steps)))
        for first in range(0, steps, gpu.MAX_BURST_LAUNCHES):
            burst = session.burst(step).config(config).args(a, b, gpu.u32(n), numbers, history)
            for i in range(first, min(steps, first + gpu.MAX_BURST_LAUNCHES)):
                src, dst = (a, b) if i % 2 == 0 else (b, a)
                burst.launch({0: src, 1: dst, 3: numbers.at(i)})
            burst.run()
    session.sync()
    return (history.read() if steps else []), a.read()


def join(values):
    return " ".join(f32_debug(v) for v in values)


def _f32(x):
    """`x` rounded to the nearest f32 (infinity past the largest)."""
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def f32_debug(v):
    """The f32 `v` as Rust's `{:?}` writes it: the fewest significant digits that read back as
    `v` (the nearest such when there are several), in plain decimal from 1e-4 up to 1e16 with at
    least one digit after the point, in exponent form (`1e-5`, `2.5e-10`) outside it."""
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    sign = "-" if math.copysign(1.0, v) < 0 else ""
    v = abs(v)
    if v == 0:
        return sign + "0.0"
    digits, point = _shortest(v)
    # Rust compares in f32: 1e-4 and 1e16 rounded to f32.
    if _f32(1e-4) <= v < _f32(1e16):
        if point <= 0:
            text = "0." + "0" * -point + digits
        elif point < len(digits):
            text = digits[:point] + "." + digits[point:]
        else:
            text = digits + "0" * (point - len(digits)) + ".0"
    else:
        text = digits[0] + ("." + digits[1:] if len(digits) > 1 else "") + f"e{point - 1}"
    return sign + text


def _shortest(v):
    """(digits, point): the shortest decimal `0.digits * 10**point` that reads back as the f32 `v`
    (9 significant digits always do)."""
    for precision in range(1, 10):
        mantissa, exponent = f"{v:.{precision - 1}e}".split("e")
        m = int(mantissa.replace(".", ""))
        scale = int(exponent) - (precision - 1)
        # Python rounds a tie to even; Rust's shortest digits round it up.
        if m % 2 == 0 and Decimal(v) == (Decimal(m) + Decimal("0.5")).scaleb(scale):
            m += 1
        # The correctly rounded candidate, else a neighbour one unit away that still reads back.
        for candidate in (m, m - 1, m + 1):
            last = precision == 9 and candidate == m
            if last or candidate > 0 and _f32(float(f"{candidate}e{scale}")) == v:
                digits = str(candidate).rstrip("0") or "0"
                return digits, len(str(candidate)) + scale


WitWorld = gpu.export(run)
