"""`python-launches`: what a kernel launch costs a Python tasklet through the SDK, in the figures
and units of `testing/gpubench`'s `launch-sync` and `launch-async` (docs/guest-languages.md sets
the two side by side).

Input: `N` (default 1000). Output, times in whole nanoseconds:
`launch_sync_ns` (median over N of one launch of `empty()` on 1x1, then `sync`) and
`launch_async_ns` (median over 10 batches of: N launches then one `sync`, divided by N).
"""

import time

import tasklet_gpu as gpu

FAULTS_PTX = gpu.include_text("faults.ptx")
WARMUP = 10
BATCHES = 10


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def run(data: bytes) -> bytes:
    n = gpu.input.count_or(data, 1000)
    lease = gpu.Lease.builder().secs(600).acquire()
    session = lease.session()
    empty = session.load_ptx(FAULTS_PTX).kernel("empty")
    one = gpu.LaunchConfig.linear(1, 1)

    def launch():
        session.launch(empty).config(one).run()

    for _ in range(WARMUP):
        launch()
        session.sync()
    each = []
    for _ in range(n):
        start = time.perf_counter_ns()
        launch()
        session.sync()
        each.append(time.perf_counter_ns() - start)
    batches = []
    for _ in range(BATCHES):
        start = time.perf_counter_ns()
        for _ in range(n):
            launch()
        session.sync()
        batches.append((time.perf_counter_ns() - start) // max(n, 1))
    return f"launch_sync_ns {median(each)}\nlaunch_async_ns {median(batches)}\n".encode()


WitWorld = gpu.export(run)
