#!/usr/bin/env bash
# Runs the packaged test suite (.gpu-suite/, made by scripts/gpu-suite.sh) on a machine with an
# NVIDIA driver and no Rust. Run it from anywhere; it expects to sit in .gpu-suite/ inside a
# checkout of the commit it was built from (tests read kernels/ and tasklets/*/tasklet.toml):
#
#   bash .gpu-suite/run.sh            every test executable on cuda, then on emu, then the inventory
#   bash .gpu-suite/run.sh cuda       only the cuda pass (or: emu)
#   bash .gpu-suite/run.sh guests     only the Python and JavaScript examples on cuda: the suite's
#                                     guest_languages tests (outputs and errors equal to the Rust
#                                     examples'): guests.log
#   bash .gpu-suite/run.sh guest-stats
#                                     `tasklet run --stats` of each example and its Rust counterpart
#                                     on cuda, cold then warm from the compiled cache: guests.txt
#   bash .gpu-suite/run.sh bench      the speed benchmark (benches/speed/gpu_speed.rs) and the
#                                     emulator-vs-GPU corpus diff (kernels/diff/), through CuPy and
#                                     through the cuda backend: bench.txt, diff.txt. BENCH_PIN
#                                     picks the CPUs (see run_bench; default: measured)
#   bash .gpu-suite/run.sh writes-ab  gpu_speed's 4 KiB write + read + sync and cached module load,
#                                     with small writes posted (the default) and answered
#                                     (TASKLET_INLINE_WRITES=0) in turn, three times: writes-ab.txt
#   bash .gpu-suite/run.sh fabric     the fabric benchmark (benches/fabric/): a node and its clients
#                                     on this machine's loopback, on the cuda backend: fabric.txt.
#                                     FABRIC_ARGS adds options (e.g. "--only latency,timeline")
#   bash .gpu-suite/run.sh actors     the persistent kernels' benchmark (benches/actors/): message
#                                     round trips and batches, guest, host runtime and native
#                                     cudarc side by side: actors.txt
#   bash .gpu-suite/run.sh devices    the two-device benchmark (benches/devices/): one device's
#                                     latency while the other misbehaves, copies on both at once,
#                                     copies between them beside native peer copies: devices.txt.
#                                     DEVICES picks the two GPUs (default 0,1 where there are two)
#   bash .gpu-suite/run.sh starts     hosts starting at once: `tasklet run` of the iota example,
#                                     one alone three times, then 16 at once, with every GPU
#                                     and with CUDA_VISIBLE_DEVICES=0; each one's wall time (how a
#                                     machine's driver takes many workers' contexts at once): starts.txt
#   bash .gpu-suite/run.sh soak       the soak (tests/src/bin/soak.rs) on cuda: SOAK_CYCLES cycles
#                                     (default 10000, ~7 min on an H100) of random tenant lives, every
#                                     batch checked for leaks (accounting, workers, descriptors,
#                                     memory, NVML device memory): soak.txt; SOAK_SEED replays a
#                                     seed; its PASS or FAIL counts as one test
#
# Environment: OUT (default /tmp): logs go to $OUT/tasklet-gpu-suite/ — env.txt (machine, driver,
# nvidia-smi), cuda.log and emu.log (every test executable's output, in order; guests.log for
# the guests pass), inventory.txt
# (`tasklet inventory`, its --json, and a `tasklet run` smoke test), summary.txt (counts, failed
# and skipped tests, per-executable results). TASKLET_REPO overrides the checkout (default: the
# directory above this one). SUITE_TIMEOUT: seconds per test executable (default 300).
# SUITE_ONLY: a shell `case` pattern (evaluated as written) of the test executables to run (e.g.
# 'node-*|suite-*'; default every one), to split a pass over several commands. SUITE_THREADS: test
# threads each executable runs (the `gpu` executable always one); default on cuda 16 divided by
# the count of GPUs (at least 4), on emu as many as the machine has cores. Every test host starts
# workers on each GPU, and a machine's driver creates CUDA contexts one after another: on the
# H200 machines 16 `tasklet run`s at once took 14 s on one GPU and 30 s on two (`starts`), where
# a worker has 30 s to start.
#
# The last line printed is `N passed, M failed` over both passes; an executable that crashed or
# timed out without reporting counts as one failure. Exit status 0 only when M is 0.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="${TASKLET_REPO:-$(cd "$here/.." && pwd)}"
logs="${OUT:-/tmp}/tasklet-gpu-suite"
per_exe_timeout="${SUITE_TIMEOUT:-300}"
phases=("${@:-cuda emu}")
read -r -a phases <<<"${phases[*]}"
mkdir -p "$logs"
rm -f "$logs"/{env.txt,cuda.log,emu.log,inventory.txt,summary.txt,bench.txt,diff.txt,fabric.txt,writes-ab.txt,soak.txt,guests.log,guests.txt,actors.txt,devices.txt,starts.txt}

say() { echo "gpu-suite: $*" >&2; }

work="$(mktemp -d "${TMPDIR:-/tmp}/tasklet-gpu-suite.XXXXXX")"
made_link=""
cleanup() {
    rm -rf "$work"
    if [ -n "$made_link" ]; then rm -f "$made_link"; fi
}
trap cleanup EXIT

# --- unpack -------------------------------------------------------------------------------------
if command -v xz >/dev/null; then
    xz -dc "$here/executables.tar.xz" | tar -C "$work" -xf - || { say "cannot unpack $here/executables.tar.xz"; exit 2; }
elif command -v python3 >/dev/null; then
    python3 -c 'import lzma, sys, tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])' \
        "$here/executables.tar.xz" "$work" || { say "cannot unpack $here/executables.tar.xz"; exit 2; }
else
    say "unpacking needs xz or python3, and this machine has neither"
    exit 2
fi
chmod +x "$work"/tests/* "$work"/bin/* "$work"/tools/*

# The executables have the build machine's checkout path compiled in (CARGO_MANIFEST_DIR for
# kernels/*.ptx, CARGO_BIN_EXE_* for the binaries they start): make that path lead here.
build_root="$(cat "$here/BUILD_ROOT")"
if [ "$build_root" != "$repo" ]; then
    if [ -e "$build_root" ]; then
        if [ "$(cd "$build_root" && pwd -P)" != "$(cd "$repo" && pwd -P)" ]; then
            say "warning: the build-time checkout path $build_root exists here and is another directory; tests that read files by it may fail"
        fi
    elif mkdir -p "$(dirname "$build_root")" 2>/dev/null && ln -s "$repo" "$build_root" 2>/dev/null; then
        made_link="$build_root"
    else
        say "warning: cannot link $build_root to $repo; tests that read files by their build-time path may fail"
    fi
fi
mkdir -p "$repo/target/release" "$repo/tasklets/target/wasm32-wasip2/release"
cp "$work"/bin/* "$repo/target/release/"
# Fresh copies: newer than the tasklets' sources, so `tasklet run` does not try to rebuild them.
cp "$here"/wasm/*.wasm "$repo/tasklets/target/wasm32-wasip2/release/"
# The Python and JavaScript examples' components (built where the componentize tools are), where
# their manifests name them; the suite's guest_languages tests load them as they are.
if [ -f "$here/guests.tar.xz" ]; then
    if command -v xz >/dev/null; then
        xz -dc "$here/guests.tar.xz" | tar -C "$repo/tasklets" -xf -
    else
        python3 -c 'import lzma, sys, tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])' \
            "$here/guests.tar.xz" "$repo/tasklets"
    fi || { say "cannot unpack $here/guests.tar.xz"; exit 2; }
    export TASKLET_GUEST_PREBUILT=1
else
    say "no Python/JavaScript components in this package: their tests print 'skipped: …'"
fi
export TASKLET_REPO="$repo"
export TASKLET_TEST_WORKER="$repo/target/release/tasklet-test-worker"
unset CI

# --- the machine --------------------------------------------------------------------------------
{
    echo "date: $(date -u)"
    echo "suite commit: $(cat "$here/COMMIT" 2>/dev/null)"
    echo "checkout: $repo (built at $build_root)"
    echo "uname: $(uname -a)"
    echo "cpus: $(nproc 2>/dev/null)"
    echo "driver: $(head -1 /proc/driver/nvidia/version 2>/dev/null || echo 'no /proc/driver/nvidia/version')"
    echo "libcuda: $(ldconfig -p 2>/dev/null | grep -m1 'libcuda.so.1' || echo 'not in the ldconfig cache')"
    echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>}"
    echo
    nvidia-smi 2>&1 || echo "(no nvidia-smi)"
} >"$logs/env.txt"

# --- test passes --------------------------------------------------------------------------------
total_pass=0
total_fail=0
summary="$work/summary"
: >"$summary"

run_pass() { # run_pass BACKEND [LABEL FILTER]: every test executable, or only the suite's tests matching FILTER
    local backend="$1" label="${2:-$1}" filter="${3:-}" log="$logs/${2:-$1}.log" pass=0 fail=0 skipped started
    started=$(date +%s)
    : >"$log"
    local threads="${SUITE_THREADS:-}" gpus
    if [ -z "$threads" ] && [ "$backend" = cuda ]; then
        if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
            gpus=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .)
        else
            gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
        fi
        [ "${gpus:-0}" -ge 1 ] || gpus=1
        threads=$((16 / gpus))
        [ "$threads" -ge 4 ] || threads=4
    fi
    say "$label: $backend, ${threads:-one per core} test threads per executable"
    for exe in "$work"/tests/*; do
        local name args=() out rc p f
        name="$(basename "$exe")"
        if [ -n "$filter" ]; then
            case "$name" in suite-*) args=("$filter") ;; *) continue ;; esac
        fi
        # shellcheck disable=SC2254 # SUITE_ONLY is a pattern
        if [ -n "${SUITE_ONLY:-}" ]; then
            eval "case \"\$name\" in ${SUITE_ONLY}) ;; *) continue ;; esac"
        fi
        # The `gpu` test binary (tests/tests/gpu.rs): the containment tests time latencies and
        # share one GPU, one at a time. The rest of the integration tests are the `suite` binary.
        case "$name" in
            gpu-*) args+=(--test-threads=1) ;;
            *) [ -n "$threads" ] && args+=("--test-threads=$threads") ;;
        esac
        out="$work/out"
        local t0 t1
        t0=$(date +%s)
        (cd "$repo" && TASKLET_TEST_BACKEND="$backend" timeout "$per_exe_timeout" "$exe" "${args[@]}") >"$out" 2>&1
        rc=$?
        t1=$(date +%s)
        {
            echo "===== $name [$backend] exit $rc, $((t1 - t0)) s"
            cat "$out"
            echo
        } >>"$log"
        p=$(sed -nE 's/^test result: [a-zA-Z]+\. ([0-9]+) passed; ([0-9]+) failed.*/\1/p' "$out" | awk '{s+=$1} END {print s+0}')
        f=$(sed -nE 's/^test result: [a-zA-Z]+\. ([0-9]+) passed; ([0-9]+) failed.*/\2/p' "$out" | awk '{s+=$1} END {print s+0}')
        local note=""
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
            f=1
            if [ "$rc" -eq 124 ]; then note=" (timed out after ${per_exe_timeout} s)"; else note=" (exited $rc without a failing test: crashed?)"; fi
        fi
        pass=$((pass + p))
        fail=$((fail + f))
        printf '  %-44s %4d passed, %d failed%s\n' "$name" "$p" "$f" "$note" >>"$summary.$label"
        grep -E '^test .* FAILED$' "$out" | sed "s/^/    [$backend] /" >>"$summary.failed" || true
    done
    # Tests print `skipped: …` past the harness's capture, often after "test name ... ".
    skipped=$(grep -o 'skipped: .*' "$log" | wc -l)
    {
        echo "$label: $pass passed, $fail failed, $skipped 'skipped:' lines, $(($(date +%s) - started)) s"
        cat "$summary.$label"
        if [ "$skipped" -gt 0 ]; then
            echo "  skipped:"
            grep -o 'skipped: .*' "$log" | sort | uniq -c | sed 's/^/   /'
        fi
    } >>"$summary"
    total_pass=$((total_pass + pass))
    total_fail=$((total_fail + fail))
    say "$label: $pass passed, $fail failed"
}

run_tool() { # run_tool NAME [ARGS…]: a benchmark of tools/ on cuda, its output in NAME.txt; counts towards nothing
    local name="$1"
    shift
    say "$name: benches/$name on cuda (${TOOL_TIMEOUT:-300} s at most)"
    (cd "$repo" && timeout "${TOOL_TIMEOUT:-300}" "$work/tools/$name" "$@") >"$logs/$name.txt" 2>&1
    echo "$name exit $?" >>"$logs/$name.txt"
    echo "$name: exit $(tail -1 "$logs/$name.txt" | awk '{print $NF}'), see $name.txt" >>"$summary"
}

run_guest_stats() { # `tasklet run --stats` of each example with its Rust counterpart, cold then warm; counts towards nothing
    local cache="$work/compile-cache" t input i out
    {
        echo "tasklet run --stats --backend cuda, compiled cache in a fresh folder: run 1 compiles (miss), runs 2-4 load it (hit)"
        for t in iota python-iota js-iota vector-add python-vector-add js-vector-add; do
            case "$t" in *iota) input=5000 ;; *) input=100000 ;; esac
            [ -d "$repo/tasklets/$t" ] || continue
            echo
            echo "== $t <<< $input"
            for i in 1 2 3 4; do
                out="$(cd "$repo" && echo "$input" | timeout 300 target/release/tasklet run --stats --backend cuda \
                    --compile-cache "$cache" "tasklets/$t" 2>"$work/stats.err")"
                echo "run $i: exit $?, output sha256 $(printf '%s' "$out" | sha256sum | cut -c1-16), $(grep -h '^stats:' "$work/stats.err" || cat "$work/stats.err")"
            done
        done
    } >"$logs/guests.txt" 2>&1
    echo "guests: tasklet run --stats, see guests.txt" >>"$summary"
}

# The vCPUs of a VM can sit at different distances from the GPU (launch + sync of an empty kernel
# differs by ~1 µs between them). Measures it on every CPU and prints "G H": the fastest CPU, for
# everything that calls the driver, and the next, for the tasklet's host thread.
pick_cpus() {
    local c best
    for c in $(seq 0 $(($(nproc) - 1))); do
        best="$(taskset -c "$c" "$work/tools/sync_paths" 400 2 2>/dev/null | awk -F'|' 'NR == 3 { gsub(/ /, "", $3); print $3 }')"
        [ -n "$best" ] && echo "$best $c"
    done | tee "$work/cpus.txt" | sort -n | awk 'NR <= 2 { printf "%s ", $2 }'
}

run_bench() { # the speed table, then the corpus diff; neither counts towards passed/failed
    # BENCH_PIN: "G,H" for gpu_speed --pin; "auto" (default) measures and picks; "none" leaves
    # every thread where the scheduler puts it.
    local pin="${BENCH_PIN:-auto}" args=()
    if [ "$pin" = auto ] && command -v taskset >/dev/null; then
        say "bench: launch + sync latency per CPU, to pick where to pin"
        read -r g h <<<"$(pick_cpus)"
        [ -n "${h:-}" ] && pin="$g,$h" || pin=none
    fi
    [ "$pin" != none ] && [ "$pin" != auto ] && args=(--pin "$pin")
    say "bench: gpu_speed ${args[*]:-unpinned} (about two minutes)"
    {
        if [ -s "$work/cpus.txt" ]; then
            echo "launch + sync of an empty kernel (µs, native, non-blocking stream) by CPU:"
            sort -k2 -n "$work/cpus.txt" | awk '{ printf "  cpu %s: %s\n", $2, $1 }'
        fi
        (cd "$repo" && timeout 420 "$work/tools/gpu_speed" "${args[@]}")
        echo "gpu_speed exit $?"
        if [ "$pin" != none ] && [ "$pin" != auto ]; then
            echo
            echo "== launch + sync phase by phase (benches/probes/launch_phases.rs), worker CPU ${pin%,*}, host CPU ${pin#*,}"
            "$work/tools/launch_phases" 3000 5 "${pin%,*}" "${pin#*,}"
            echo
            echo "== ways to wait for one empty kernel, natively (benches/probes/sync_paths.rs), CPU ${pin%,*}"
            taskset -c "${pin%,*}" "$work/tools/sync_paths" 3000 5
        fi
    } >"$logs/bench.txt" 2>&1
    say "diff: emulator vs GPU on the kernel corpus (CuPy, then the cuda backend)"
    {
        echo "== emulator vs GPU through CuPy (kernels/diff/gpu_outputs.py)"
        (cd "$repo" && "$work/tools/corpus_outputs" >"$work/emu.json") &&
            (cd "$repo" && python3 kernels/diff/gpu_outputs.py "$work/emu.json" >"$work/gpu.json") &&
            (cd "$repo" && python3 kernels/diff/compare.py "$work/emu.json" "$work/gpu.json")
        echo "diff exit $?"
    } >"$logs/diff.txt" 2>&1
    tail -n 3 "$logs/diff.txt" >&2
    {
        echo
        echo "== emulator vs GPU through the cuda backend (tasklet-worker, replay_corpus)"
        [ -s "$work/emu.json" ] &&
            (cd "$repo" && "$work/tools/replay_corpus" --backend cuda --worker "$repo/target/release/tasklet-worker" \
                "$work/emu.json" >"$work/cuda.json") &&
            (cd "$repo" && python3 kernels/diff/compare.py "$work/emu.json" "$work/cuda.json")
        echo "cuda diff exit $?"
    } >>"$logs/diff.txt" 2>&1
    tail -n 2 "$logs/diff.txt" >&2
    echo "bench: see bench.txt and diff.txt" >>"$summary"
}

run_writes_ab() { # small writes posted (default) and answered (TASKLET_INLINE_WRITES=0), in turn
    local pin="${BENCH_PIN:-auto}" args=() i mode
    if [ "$pin" = auto ] && command -v taskset >/dev/null; then
        read -r g h <<<"$(pick_cpus)"
        [ -n "${h:-}" ] && pin="$g,$h" || pin=none
    fi
    [ "$pin" != none ] && [ "$pin" != auto ] && args=(--pin "$pin")
    say "writes-ab: gpu_speed --only rw4k,module-load ${args[*]:-unpinned}, posted and answered writes in turn, 3 times"
    {
        for i in 1 2 3; do
            for mode in posted answered; do
                echo "== $mode small writes, run $i"
                if [ "$mode" = answered ]; then export TASKLET_INLINE_WRITES=0; else unset TASKLET_INLINE_WRITES; fi
                (cd "$repo" && timeout 150 "$work/tools/gpu_speed" "${args[@]}" --only rw4k,module-load --rounds 3)
                echo "gpu_speed exit $?"
            done
        done
        unset TASKLET_INLINE_WRITES
    } >"$logs/writes-ab.txt" 2>&1
    grep -E '^== |4 KiB write|module load of PTX already loaded \|' "$logs/writes-ab.txt" >&2
    echo "writes-ab: see writes-ab.txt" >>"$summary"
}

run_fabric() { # the fabric table (node and clients here, over loopback); counts towards nothing
    local commit
    commit="$(head -1 "$here/COMMIT" 2>/dev/null | cut -c1-7)"
    if grep -q 'uncommitted' "$here/COMMIT" 2>/dev/null; then commit="$commit-dirty"; fi
    say "fabric: the fabric benchmark on cuda (a few minutes)"
    {
        (cd "$repo" && timeout 540 "$work/tools/fabric" --backend cuda --commit "${commit:-unknown}" ${FABRIC_ARGS:-})
        echo "fabric exit $?"
    } >"$logs/fabric.txt" 2>&1
    grep -E '^[0-9]+ of [0-9]+ targets met|^fabric exit' "$logs/fabric.txt" >&2
    echo "fabric: see fabric.txt" >>"$summary"
}

run_starts() { # hosts starting at once, with every GPU and with one; counts towards nothing
    local t0 n i vis label
    say "starts: tasklet run of the iota example, 1 and 16 at once"
    one() { # one VISIBLE: prints the run's wall time in ms and its exit status; its workers'
        # start steps (TASKLET_WORKER_START_TIMES) go to $work/steps
        local a b rc err visible=()
        [ "$1" = all ] || visible=("CUDA_VISIBLE_DEVICES=$1")
        err="$(mktemp "$work/err.XXXXXX")"
        a=$(date +%s%N)
        (cd "$repo" && echo 5 | env "${visible[@]}" TASKLET_WORKER_START_TIMES=1 timeout 120 \
            target/release/tasklet run tasklets/iota --backend cuda >/dev/null 2>"$err")
        rc=$?
        grep 'started on' "$err" >>"$work/steps"
        rm -f "$err"
        b=$(date +%s%N)
        echo "$(((b - a) / 1000000)) $rc"
    }
    {
        echo "tasklet run tasklets/iota --backend cuda (input 5): wall ms per run, min / median / max, failures"
        for vis in all 0; do
            label="every GPU"
            [ "$vis" = all ] || label="CUDA_VISIBLE_DEVICES=$vis"
            for n in 1 1 1 16; do
                : >"$work/starts"
                : >"$work/steps"
                t0=$(date +%s%N)
                for i in $(seq "$n"); do one "$vis" >>"$work/starts" & done
                wait
                sort -n "$work/starts" | awk -v n="$n" -v label="$label" -v all="$((($(date +%s%N) - t0) / 1000000))" \
                    '{ t[NR] = $1; if ($2 != 0) f++ } END { printf "%-26s %2d at once: %6d / %6d / %6d ms, %d failed, all done in %d ms\n", label, n, t[1], t[int((NR + 1) / 2)], t[NR], f, all }'
                # The workers' own start steps: every one of a lone run; of many, the fastest,
                # the median and the slowest.
                sort -t' ' -k8,8n "$work/steps" | awk '{ l[NR] = $0 } END { if (NR > 0) { print "    " l[1]; if (NR > 2) print "    " l[int((NR + 1) / 2)]; if (NR > 1) print "    " l[NR] } }'
            done
        done
    } >"$logs/starts.txt" 2>&1
    cat "$logs/starts.txt" >&2
    echo "starts: see starts.txt" >>"$summary"
}

run_soak() { # the long soak on cuda; its verdict counts as one test
    # 8 tenants, checked every 4 cycles each: about 25 cycles/s on an H100 (a killed or faulted
    # worker's replacement makes a CUDA context, which bounds the rate), so 10,000 in ~7 minutes.
    local cycles="${SOAK_CYCLES:-10000}" seed="${SOAK_SEED:-$(date +%s)}" rc
    say "soak: $cycles cycles on cuda, seed $seed (SOAK_TIMEOUT ${SOAK_TIMEOUT:-570} s at most)"
    (cd "$repo" && timeout "${SOAK_TIMEOUT:-570}" target/release/soak --backend cuda --cycles "$cycles" \
        --tenants 8 --cycles-per-check 4 --seed "$seed" \
        --worker "$repo/target/release/tasklet-test-worker") >"$logs/soak.txt" 2>&1
    rc=$?
    echo "soak exit $rc" >>"$logs/soak.txt"
    grep -E '^soak: ([0-9]+ cycles in [0-9.]+ s|PASS|FAIL|NVML|failure)' "$logs/soak.txt" >&2
    if [ "$rc" -eq 0 ]; then total_pass=$((total_pass + 1)); else total_fail=$((total_fail + 1)); fi
    echo "soak: exit $rc, see soak.txt" >>"$summary"
}

: >"$summary.failed"
for phase in "${phases[@]}"; do
    case "$phase" in
        bench) run_bench ;;
        fabric) run_fabric ;;
        writes-ab) run_writes_ab ;;
        soak) run_soak ;;
        starts) run_starts ;;
        actors) run_tool actors --backend cuda ;;
        devices) run_tool devices --backend cuda ${DEVICES:+--devices "$DEVICES"} ;;
        cuda | emu) : >"$summary.$phase"; run_pass "$phase" ;;
        guests) : >"$summary.guests"; run_pass cuda guests guest_languages:: ;;
        guest-stats) run_guest_stats ;;
        *) say "unknown pass '$phase' (cuda, emu, guests, guest-stats, bench, writes-ab, fabric, actors, devices, starts or soak)"; exit 2 ;;
    esac
done

# --- inventory and a smoke run ------------------------------------------------------------------
{
    echo "\$ tasklet inventory"
    (cd "$repo" && timeout 120 target/release/tasklet inventory) 2>&1
    echo "exit $?"
    echo
    echo "\$ tasklet inventory --json"
    (cd "$repo" && timeout 120 target/release/tasklet inventory --json) 2>&1
    echo "exit $?"
    echo
    echo "\$ echo 5 | tasklet run tasklets/iota --backend cuda"
    (cd "$repo" && echo 5 | timeout 120 target/release/tasklet run tasklets/iota --backend cuda) 2>&1
    echo "exit $?"
} >"$logs/inventory.txt"

{
    echo "tasklet GPU suite, $(date -u), commit $(head -1 "$here/COMMIT" 2>/dev/null)"
    cat "$summary"
    if [ -s "$summary.failed" ]; then
        echo "failed tests:"
        cat "$summary.failed"
    fi
    echo "logs: $logs/{env.txt,cuda.log,emu.log,inventory.txt,summary.txt}"
    echo "$total_pass passed, $total_fail failed"
} >"$logs/summary.txt"
cat "$logs/summary.txt"
[ "$total_fail" -eq 0 ]
