#!/usr/bin/env bash
# A cpu-clock profile of the tasklet's async launch burst on a GPU machine that has no `perf`:
# where the worker's serving thread spends a launch (our code, libcuda, its locks, the kernel).
#
#   scripts/gpu-profile.sh pack     on the build machine, after scripts/gpu-suite.sh: bundles this
#                                   machine's perf and the libraries it needs (not glibc) into
#                                   .gpu-probe/perf.tar.xz (git-ignored) with this script
#   bash .gpu-probe/gpu-profile.sh  on the GPU machine (carry .gpu-suite and .gpu-probe): writes
#                                   $OUT/profile/{worker,host,native}.txt and the runs' outputs
#
# `perf record -e cpu-clock` needs no hardware counters (most VMs have none). The worker is the
# process with the most libcuda samples, the host the one with compiled guest code ([JIT]).
# Environment: LAUNCHES (per batch of gpubench's launch-async; default 20000, past the ring's size,
# so the host waits for room and the worker's share dominates), WORKER_CPU (1), HOST_CPU (3).
set -uo pipefail

if [ "${1:-}" = pack ]; then
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    perf="$(readlink -f "$(command -v perf)")" || { echo "gpu-profile: no perf here" >&2; exit 2; }
    stage="$(mktemp -d)"
    mkdir -p "$stage/perf/bin" "$stage/perf/lib" "$root/.gpu-probe"
    cp "$perf" "$stage/perf/bin/perf"
    ldd "$perf" | awk '$3 ~ /^\// { print $3 }' | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
        while read -r lib; do cp -L "$lib" "$stage/perf/lib/"; done
    tar -C "$stage" -cJf "$root/.gpu-probe/perf.tar.xz" perf
    cp "$0" "$root/.gpu-probe/gpu-profile.sh"
    rm -rf "$stage"
    echo "gpu-profile: .gpu-probe/ ready ($(du -sh "$root/.gpu-probe" | cut -f1)); carry it with .gpu-suite" >&2
    exit 0
fi

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-/tmp}/profile"
w="$(mktemp -d)"
trap 'rm -rf "$w"' EXIT
mkdir -p "$out"
xz -dc "$repo/.gpu-suite/executables.tar.xz" | tar -C "$w" -xf - || exit 2
tar -C "$w" -xJf "$repo/.gpu-probe/perf.tar.xz" || exit 2
export LD_LIBRARY_PATH="$w/perf/lib"
P="$w/perf/bin/perf"
mkdir -p "$repo/tasklets/target/wasm32-wasip2/release"
cp "$repo"/.gpu-suite/wasm/*.wasm "$repo/tasklets/target/wasm32-wasip2/release/"
cd "$repo" || exit 2
report() { "$P" report -i "$out/perf.data" --stdio "$@" 2>/dev/null | grep -v '^#' | grep -v '^$'; }

printf 'launch-async %s' "${LAUNCHES:-20000}" >"$w/in.txt"
export TASKLET_WORKER_CPUS="${WORKER_CPU:-1}"
"$P" record -o "$out/perf.data" -e cpu-clock -F 20000 -- \
    taskset -c "${HOST_CPU:-3}" "$w/bin/tasklet" run --backend cuda -i "$w/in.txt" tasklets/testing/gpubench \
    >"$out/async.out" 2>&1
report --sort pid,dso >"$out/by_thread.txt"
worker=$(grep libcuda "$out/by_thread.txt" | sort -k1,1 -rn | head -1 | awk '{ print $2 }' | cut -d: -f1)
host=$(grep JIT "$out/by_thread.txt" | sort -k1,1 -rn | head -1 | awk '{ print $2 }' | cut -d: -f1)
{
    echo "== worker thread $worker: by library"
    report --pid "$worker" --sort pid,dso | head -20
    echo "== libc"
    report --pid "$worker" --dsos libc.so.6 --sort pid,sym | head -15
    echo "== our code"
    report --pid "$worker" --dsos tasklet --sort pid,sym | head -30
    echo "== kernel"
    report --pid "$worker" --dsos '[kernel.kallsyms]' --sort pid,sym | head -15
} >"$out/worker.txt"
{
    echo "== host $host: by library"
    report --pid "$host" --sort pid,dso | head -20
    echo "== symbols"
    report --pid "$host" --sort dso,sym | head -50
} >"$out/host.txt"
rm -f "$out/perf.data"

# The same driver calls natively, for comparison (every variant of sync_paths, one process).
"$P" record -o "$out/perf.data" -e cpu-clock -F 20000 -- taskset -c "${WORKER_CPU:-1}" "$w/tools/sync_paths" 2000 2 \
    >"$out/native.out" 2>&1
{
    echo "== sync_paths by library"
    report --sort dso | head -12
    echo "== libc"
    report --dsos libc.so.6 --sort sym | head -15
} >"$out/native.txt"
rm -f "$out/perf.data"
grep -h launch_async "$out/async.out"
echo "gpu-profile: $out/{worker,host,native}.txt"
