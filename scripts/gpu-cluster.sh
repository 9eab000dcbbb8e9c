#!/usr/bin/env bash
# The cluster on a GPU machine: a nats-server and two `tasklet node`s on the cuda backend sharing
# the machine's GPU, driven through placement: `tasklet nodes`, deploy once and run anywhere,
# `deploy run --node` beside `--nats` (medians), a remote session placed by requirement, then one
# node killed with SIGKILL while runs go on (none may fail) and started again.
#
#   bash .gpu-suite/run.sh inventory-only-or-any-phase   # first: puts target/release/tasklet here
#   TASKLET_NATS_SERVER=/path/to/nats-server bash scripts/gpu-cluster.sh
#
# Writes $OUT/tasklet-gpu-suite/cluster.txt (OUT defaults to /tmp) and prints it; exits non-zero
# when a step fails. BACKEND=emu tries it on a machine without a GPU; TASKLET_BIN picks the binary. Everything listens on 127.0.0.1 only; every wait is bounded.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
logs="${OUT:-/tmp}/tasklet-gpu-suite"
mkdir -p "$logs"
report="$logs/cluster.txt"
: >"$report"
say() { echo "$*" | tee -a "$report"; }
fail() { say "FAIL: $*"; exit 1; }

tasklet="${TASKLET_BIN:-$repo/target/release/tasklet}"
backend="${BACKEND:-cuda}"
[ -x "$tasklet" ] || fail "no $tasklet: run .gpu-suite/run.sh (any phase) first"
nats="${TASKLET_NATS_SERVER:-$(command -v nats-server || true)}"
if [ -z "$nats" ] || [ ! -x "$nats" ]; then
    say "skipped: nats-server not found (set TASKLET_NATS_SERVER)"
    exit 0
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/tasklet-gpu-cluster.XXXXXX")"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

url="nats://127.0.0.1:4399"
"$nats" -js -a 127.0.0.1 -p 4399 -sd "$work/js" >"$work/nats.log" 2>&1 &
pids+=($!)
"$tasklet" certs init "$work/certs" >/dev/null || fail "certs init"
common=(--certs "$work/certs")

start_node() { # name port
    "$tasklet" node --listen "127.0.0.1:$2" --name "$1" --nats "$url" --store "$work/store-$1" \
        --backend "$backend" "${common[@]}" >"$work/$1.log" 2>&1 &
    echo $!
}
live_count() {
    "$tasklet" nodes --nats "$url" --json 2>/dev/null | python3 -c \
        'import json,sys
try: d=json.load(sys.stdin)
except Exception: print(0); sys.exit()
nodes=d if isinstance(d,list) else d.get("nodes",[])
print(len(nodes))'
}
wait_count() { # n seconds
    local t0=$SECONDS
    while [ $((SECONDS - t0)) -lt "$2" ]; do
        [ "$(live_count)" = "$1" ] && { echo $((SECONDS - t0)); return 0; }
        sleep 0.2
    done
    return 1
}

pid_a="$(start_node gpu-a 5811)"; pids+=("$pid_a")
pid_b="$(start_node gpu-b 5812)"; pids+=("$pid_b")
took="$(wait_count 2 30)" || fail "two nodes did not register within 30 s (logs: $(tail -3 "$work/gpu-a.log"))"
say "== two $backend nodes registered (within ${took} s)"
"$tasklet" nodes --nats "$url" 2>&1 | tee -a "$report"

say "== deploy once to the cluster"
digest="$("$tasklet" deploy push "$repo/tasklets/iota" --nats "$url" "${common[@]}" 2>>"$report")" \
    || fail "deploy push --nats"
digest="$(echo "$digest" | tail -1 | awk '{print $NF}')"
say "digest: $digest"

# One deploy run: prints "node elapsed_ms ok|fail".
run_once() { # extra args...
    local t0 t1 out
    t0=$(date +%s%N)
    out="$(echo 1000 | "$tasklet" deploy run "$digest" "${common[@]}" --json "$@" 2>&1)"
    local rc=$?
    t1=$(date +%s%N)
    local node
    node="$(echo "$out" | python3 -c 'import json,sys
try: print(json.load(sys.stdin).get("node","?"))
except Exception: print("?")' 2>/dev/null)"
    if [ $rc -eq 0 ]; then echo "$node $(( (t1 - t0) / 1000 )) ok"; else echo "$node $(( (t1 - t0) / 1000 )) fail: $(echo "$out" | tail -1)"; fi
}
median() { sort -n | awk '{a[NR]=$1} END {if (NR==0) print "-"; else print a[int((NR+1)/2)]}'; }

say "== deploy run, 15 each, alternating: --node 127.0.0.1:5811 and --nats --requires gpu:backend=$backend (whole process, µs)"
: >"$work/direct"; : >"$work/placed"; : >"$work/placed_nodes"
for i in $(seq 1 15); do
    r="$(run_once --node 127.0.0.1:5811)"
    case "$r" in *" ok") echo "$r" | awk '{print $2}' >>"$work/direct" ;; *) fail "direct run: $r" ;; esac
    r="$(run_once --nats "$url" --requires gpu:backend=$backend)"
    case "$r" in *" ok") echo "$r" | awk '{print $2}' >>"$work/placed"; echo "$r" | awk '{print $1}' >>"$work/placed_nodes" ;; *) fail "placed run: $r" ;; esac
done
d_med="$(median <"$work/direct")"; p_med="$(median <"$work/placed")"
say "median --node: ${d_med} µs; --nats placed: ${p_med} µs; difference $((p_med - d_med)) µs"
say "placed runs by node: $(sort "$work/placed_nodes" | uniq -c | tr '\n' ' ')"

say "== a remote session placed by requirement (tasklet run --nats --requires gpu:backend=$backend)"
out="$(echo 5 | "$tasklet" run "$repo/tasklets/iota" --nats "$url" --requires gpu:backend=$backend "${common[@]}" 2>&1)" \
    || fail "run --nats: $out"
say "$out"

say "== failover: gpu-a killed with SIGKILL while deploy runs go on"
: >"$work/after"
( for i in $(seq 1 30); do run_once --nats "$url" --requires gpu:backend=$backend >>"$work/after"; done ) &
load=$!
sleep 1
kill -9 "$pid_a"
t_kill=$SECONDS
gone="$(wait_count 1 15)" || fail "gpu-a still in the registry 15 s after SIGKILL"
say "gpu-a gone from the registry $((SECONDS - t_kill)) s after the kill"
wait "$load"
failed="$(grep -c fail "$work/after")"
say "runs during and after the kill: $(wc -l <"$work/after"), failed: $failed; by node: $(awk '{print $1}' "$work/after" | sort | uniq -c | tr '\n' ' ')"
[ "$failed" = 0 ] || { grep fail "$work/after" | head -3 | tee -a "$report"; fail "a stateless run failed"; }

say "== gpu-a started again"
pid_a="$(start_node gpu-a 5811)"; pids+=("$pid_a")
back="$(wait_count 2 30)" || fail "gpu-a did not come back within 30 s"
say "gpu-a back in the registry within ${back} s"
say "PASS"
