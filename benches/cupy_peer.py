#!/usr/bin/env python3
"""The CuPy peer of the speed benchmark (speed/gpu_speed.rs): the same kernels and
transfers through CuPy's RawModule / RawKernel, timed the same way, as a Python user would write
them.

The Rust benchmark runs this as a subprocess when `python3 -c 'import cupy'` works and shows a
CuPy column; it can also be run alone:

    python3 benches/cupy_peer.py [--ptx kernels/faults.ptx] [--launch-sync N] ...

Prints `name value` lines, the same names the native path of gpu_speed prints (times in whole
nanoseconds, throughputs in bytes per second):

    launch_sync_ns                       empty() on 1x1 + stream sync, in batches of 10 pairs; median batch / 10
    launch_sync_each_ns,                 the same, each pair timed; median, p99
      launch_sync_p99_ns
    clock_read_ns                        one time.perf_counter_ns() call
    launch_async_ns                      10 batches of N launches + one sync; median of batch/N
    rw4k_pinned_ns, rw4k_pageable_ns     4 KiB set + get + sync, each timed; median
    bulk_bytes, bulk_{write,read}_{pinned,pageable}_bps
                                         BYTES host->device (+ sync) and back, median over REPS
    module_load_ns, module_load_p99_ns   RawModule(path=PTX).get_function("empty") while the
                                         same PTX stays loaded; median, p99

PTX is loaded with `RawModule(path=...)`: `RawModule(code=...)` takes CUDA C for NVRTC, not PTX.
Everything runs on one non-blocking stream, like the native path. Errors go to stderr with a
non-zero exit.
"""

import argparse
import math
import os
import sys
import time

import cupy as cp
import cupyx
import numpy as np

WARMUP = 10
ASYNC_BATCHES = 10
PAIRS_PER_BATCH = 10  # launch + sync pairs per timed batch (gpu_speed.rs's PAIRS_PER_BATCH)


def median(values):
    v = sorted(values)
    n = len(v)
    if n == 0:
        return float("nan")
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def percentile(values, p):
    """Nearest-rank percentile, as the Rust side computes it."""
    v = sorted(values)
    if not v:
        return float("nan")
    rank = math.ceil(p / 100.0 * len(v))
    return v[min(max(rank, 1), len(v)) - 1]


def time_each(warmup, n, f):
    for _ in range(warmup):
        f()
    times = []
    clock = time.perf_counter_ns
    for _ in range(n):
        start = clock()
        f()
        times.append(clock() - start)
    return times


def line(name, value):
    print(f"{name} {int(round(value))}", flush=True)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ptx", default=os.path.join(here, "..", "kernels", "faults.ptx"))
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--launch-sync", type=int, default=2000, metavar="N")
    p.add_argument("--launch-async", type=int, default=1000, metavar="N")
    p.add_argument("--rw4k", type=int, default=2000, metavar="N")
    p.add_argument("--bulk-bytes", type=int, default=256 << 20, metavar="BYTES")
    p.add_argument("--bulk-reps", type=int, default=5, metavar="REPS")
    p.add_argument("--module-load", type=int, default=200, metavar="N")
    a = p.parse_args()
    ptx = os.path.abspath(a.ptx)
    if not os.path.isfile(ptx):
        sys.exit(f"cupy_peer: no PTX at {ptx}; pass --ptx")

    cp.cuda.Device(a.device).use()
    stream = cp.cuda.Stream(non_blocking=True)
    module = cp.RawModule(path=ptx)
    empty = module.get_function("empty")
    print(f"cupy_version {cp.__version__}", flush=True)

    with stream:
        # Launch + sync, each timed.
        def launch_sync():
            empty((1,), (1,), ())
            stream.synchronize()

        t = time_each(WARMUP, a.launch_sync, launch_sync)

        def launch_sync_batch():
            for _ in range(PAIRS_PER_BATCH):
                launch_sync()

        batches = time_each(1, -(-a.launch_sync // PAIRS_PER_BATCH), launch_sync_batch)
        line("launch_sync_ns", median(batches) // PAIRS_PER_BATCH)
        line("launch_sync_each_ns", median(t))
        line("launch_sync_p99_ns", percentile(t, 99))

        # One clock read (time.perf_counter_ns), as the timing above reads it.
        clock = time.perf_counter_ns
        reads = []
        for _ in range(200):
            start = clock()
            for _ in range(100):
                last = clock()
            reads.append(last - start)
        line("clock_read_ns", median(reads) / 100)

        # N launches, one sync.
        n = a.launch_async

        def batch():
            for _ in range(n):
                empty((1,), (1,), ())
            stream.synchronize()

        t = time_each(1, ASYNC_BATCHES, batch)
        line("launch_async_ns", median(t) / n)

        # 4 KiB write + read + sync, pinned and pageable host memory.
        d4k = cp.empty(4096, dtype=cp.uint8)
        for kind in ("pinned", "pageable"):
            if kind == "pinned":
                src = cupyx.empty_pinned((4096,), dtype=np.uint8)
                dst = cupyx.empty_pinned((4096,), dtype=np.uint8)
            else:
                src = np.empty(4096, dtype=np.uint8)
                dst = np.empty(4096, dtype=np.uint8)
            src[:] = 0x5A
            dst[:] = 0

            def rw4k():
                d4k.set(src, stream=stream)
                d4k.get(stream=stream, out=dst)
                stream.synchronize()

            t = time_each(WARMUP, a.rw4k, rw4k)
            if not np.array_equal(src, dst):
                sys.exit(f"cupy_peer: rw4k ({kind}): the 4 KiB read back differ from what was written")
            line(f"rw4k_{kind}_ns", median(t))

        # Bulk transfers.
        nbytes = a.bulk_bytes
        dbulk = cp.empty(nbytes, dtype=cp.uint8)
        pattern = np.resize(np.arange(251, dtype=np.uint8), nbytes)  # i % 251, as the Rust side
        line("bulk_bytes", nbytes)
        for kind in ("pinned", "pageable"):
            if kind == "pinned":
                host = cupyx.empty_pinned((nbytes,), dtype=np.uint8)
            else:
                host = np.empty(nbytes, dtype=np.uint8)
            host[:] = pattern  # touches every page
            # Warm-up and correctness check: one round trip into a second buffer.
            check = np.full(nbytes, 0xFF, dtype=np.uint8)
            dbulk.set(host, stream=stream)
            stream.synchronize()
            dbulk.get(stream=stream, out=check)
            stream.synchronize()
            if not np.array_equal(check, pattern):
                sys.exit(f"cupy_peer: bulk ({kind}): the data read back differ from what was written")
            del check
            write, read = [], []
            clock = time.perf_counter_ns
            for _ in range(a.bulk_reps):
                start = clock()
                dbulk.set(host, stream=stream)
                stream.synchronize()
                write.append(nbytes / ((clock() - start) / 1e9))
                start = clock()
                dbulk.get(stream=stream, out=host)
                stream.synchronize()
                read.append(nbytes / ((clock() - start) / 1e9))
            line(f"bulk_write_{kind}_bps", median(write))
            line(f"bulk_read_{kind}_bps", median(read))
            del host
        del dbulk

        # Loading the PTX again while it stays loaded (`module` above holds it).
        def load_again():
            m = cp.RawModule(path=ptx)
            m.get_function("empty")  # RawModule loads lazily: this is the cuModuleLoad

        warm = min(WARMUP, a.module_load)
        t = time_each(warm, a.module_load, load_again)
        line("module_load_ns", median(t))
        line("module_load_p99_ns", percentile(t, 99))


if __name__ == "__main__":
    main()
