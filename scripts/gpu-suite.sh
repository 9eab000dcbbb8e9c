#!/usr/bin/env bash
# Packages the whole test suite for a GPU machine that has an NVIDIA driver but no Rust:
#
#   scripts/gpu-suite.sh            build (release) and fill .gpu-suite/
#   bash .gpu-suite/run.sh          on the GPU machine, from a checkout of the same commit
#
# What goes in .gpu-suite/ (git-ignored):
#   executables.tar.xz
#               tests/: every test executable of the workspace (`cargo test --workspace --release
#               --no-run`, paths read from cargo's JSON messages: the unit tests of each crate, and
#               each crate's integration test binaries, e.g. tests/' `suite` and `gpu`,
#               tasklet-worker's `worker`, tasklet-ptx's `ptx`); bin/: tasklet, tasklet-worker,
#               tasklet-test-worker, soak (the binaries tests start); tools/: the benchmarks and probes
#               (below); all with debuginfo stripped
#   wasm/       the tasklet components (tasklets/target/wasm32-wasip2/release/*.wasm)
#   guests.tar.xz
#               the Python and JavaScript examples' components (tasklets/python-*, js-*), built
#               here with their build.sh, as tasklets/target/{python,js}/*.wasm: the GPU machine
#               has no componentize tools. Left out, said so, when a tool is not installed
#               (scripts/install-componentize-py.sh, -js.sh); the suite's tests of those examples
#               then print `skipped: …` there
#   BUILD_ROOT  this checkout's absolute path: test executables have it compiled in
#               (CARGO_MANIFEST_DIR, CARGO_BIN_EXE_*); run.sh maps it onto the GPU machine's checkout
#   run.sh      the runner (see its header)
#
# Size: ~43 MiB (35 MiB of executables, 8 MiB of Python and JavaScript components), under the
# 64 MiB the device tool carries; the script says the total and fails if it is over SUITE_MAX_MIB
# (default 62).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
suite="$root/.gpu-suite"
max_mib="${SUITE_MAX_MIB:-62}"

for tool in cargo objcopy xz tar; do
    command -v "$tool" >/dev/null || { echo "gpu-suite: $tool is needed to package the suite" >&2; exit 2; }
done

echo "== building the test executables (release)" >&2
json="$(mktemp)"
trap 'rm -f "$json"' EXIT
# Also builds the tasklet components (tests/build.rs) and the binaries the tests start.
cargo test --workspace --release --no-run --message-format=json >"$json"
cargo build --release -p tasklet-cli -p tasklet-worker -p tasklet-tests --bins >&2
# The speed benchmark (benches/speed/gpu_speed.rs), the fabric benchmark (benches/fabric/), the
# emulator's corpus outputs and their replay through a worker (benches/corpus/: the GPU diff,
# kernels/diff/), and the launch-latency probes (benches/probes/sync_paths.rs, launch_phases.rs,
# ring_lines.rs, graph_bursts.rs), the persistent kernels' benchmark (benches/actors/) and the
# two-device benchmark (benches/devices/) ride along as tools.
bench_json="$(mktemp)"
cargo build --release -p tasklet-benches --bench gpu_speed --bench fabric --bin corpus_outputs --bin replay_corpus \
    --bench sync_paths --bench launch_phases --bench ring_lines --bench graph_bursts --bench actors --bench devices \
    --message-format=json >"$bench_json"
mapfile -t tools < <(grep '"reason":"compiler-artifact"' "$bench_json" \
    | grep -o '"executable":"[^"]*"' | sed 's/^"executable":"//; s/"$//' \
    | grep -E '/(gpu_speed|fabric|corpus_outputs|replay_corpus|sync_paths|launch_phases|ring_lines|graph_bursts|actors|devices)[^/]*$' | sort -u)
rm -f "$bench_json"

# The Python and JavaScript examples, with the tools installed under target/ (or named by
# $TASKLET_COMPONENTIZE_PY / $TASKLET_COMPONENTIZE_JS, as the tests take them).
guest_tool() { # guest_tool VAR INSTALLED_GLOB: the tool's path, or nothing
    local named="${!1:-}"
    if [ -n "$named" ]; then echo "$named"; return; fi
    { compgen -G "$2" || true; } | sort | tail -1
}
guests=()
for lang in python js; do
    case "$lang" in
        python) tool="$(guest_tool TASKLET_COMPONENTIZE_PY "$root/target/componentize-py/componentize-py-*/componentize-py")"
                var=COMPONENTIZE_PY name=componentize-py ;;
        js) tool="$(guest_tool TASKLET_COMPONENTIZE_JS "$root/target/componentize-js/componentize-js-*/node_modules/.bin/componentize-js")"
            var=COMPONENTIZE_JS name=componentize-js ;;
    esac
    if [ -z "$tool" ]; then
        echo "gpu-suite: $name is not installed (scripts/install-$name.sh): the $lang examples are left out" >&2
        continue
    fi
    for example in "$root"/tasklets/"$lang"-*/; do
        example="$(basename "$example")"
        echo "== building tasklets/$example (or up to date)" >&2
        env "$var=$tool" "$root/tasklets/$example/build.sh"
        # Its component, as its manifest names it (relative to its folder), relative to tasklets/.
        component="$(sed -nE 's/^component *= *"([^"]+)".*/\1/p' "$root/tasklets/$example/tasklet.toml")"
        component="$(realpath --relative-to="$root/tasklets" "$root/tasklets/$example/$component")"
        [ -f "$root/tasklets/$component" ] || { echo "gpu-suite: $example built no $component" >&2; exit 1; }
        guests+=("$component")
    done
done

# Test executables: compiler artifacts built with the test profile (`"profile":{…"test":true}`;
# the target's own "test" flag only says it could be) that have an executable.
mapfile -t tests < <(grep '"reason":"compiler-artifact"' "$json" | grep -E '"profile":\{[^}]*"test":true' \
    | grep -o '"executable":"[^"]*"' | sed 's/^"executable":"//; s/"$//' | sort -u)
if [ "${#tests[@]}" -eq 0 ]; then
    echo "gpu-suite: cargo reported no test executables" >&2
    exit 1
fi

# Stage debuginfo-stripped copies (symbols kept, for names in backtraces), then one tar.xz: the
# wasmtime-linked test executables share most of their code, which xz's large window finds across
# files (~160 MiB of executables pack into ~15 MiB; per-file gzip would be ~57 MiB). Unpacking on the GPU machine takes xz or python3..
stage="$(mktemp -d)"
trap 'rm -f "$json"; rm -rf "$stage"' EXIT
mkdir -p "$stage/tests" "$stage/bin"
for t in "${tests[@]}"; do
    objcopy --strip-debug "$t" "$stage/tests/$(basename "$t")"
done
# soak: the soak (tests/src/bin/soak.rs), which the suite's soak test starts and `run.sh soak` runs
# long.
for b in tasklet tasklet-worker tasklet-test-worker soak; do
    objcopy --strip-debug "$root/target/release/$b" "$stage/bin/$b"
done
mkdir -p "$stage/tools"
for t in "${tools[@]}"; do
    # Bench executables carry a hash suffix (gpu_speed-0123abcd): give them their plain names.
    objcopy --strip-debug "$t" "$stage/tools/$(basename "$t" | sed -E 's/-[0-9a-f]{16}$//')"
done
rm -rf "$suite"
mkdir -p "$suite/wasm"
echo "== compressing (xz -9, a minute or two)" >&2
tar -C "$stage" -cf - tests bin tools | xz -9 -T1 >"$suite/executables.tar.xz"
wasm_dir="$root/tasklets/target/wasm32-wasip2/release"
cp "$wasm_dir"/*.wasm "$suite/wasm/"
if [ "${#guests[@]}" -gt 0 ]; then
    # One archive: the Python components share their interpreter, the JavaScript ones theirs,
    # which xz's window finds across files (~63 MB into ~8 MiB).
    tar -C "$root/tasklets" -cf - "${guests[@]}" | xz -9 -T1 >"$suite/guests.tar.xz"
fi
printf '%s\n' "$root" >"$suite/BUILD_ROOT"
git -C "$root" rev-parse HEAD >"$suite/COMMIT" 2>/dev/null || echo unknown >"$suite/COMMIT"
if ! git -C "$root" diff --quiet HEAD 2>/dev/null; then
    echo "(built from a work tree with uncommitted changes)" >>"$suite/COMMIT"
fi
cp "$root/scripts/gpu-suite-run.sh" "$suite/run.sh"
chmod +x "$suite/run.sh"

size_kib="$(du -sk "$suite" | cut -f1)"
echo "== .gpu-suite: ${#tests[@]} test executables, $(ls "$suite/wasm" | wc -l) components, ${#guests[@]} Python/JavaScript components, $((size_kib / 1024)) MiB" >&2
for t in "${tests[@]}"; do echo "   $(basename "$t")" >&2; done
if [ "$size_kib" -gt $((max_mib * 1024)) ]; then
    echo "gpu-suite: .gpu-suite is $((size_kib / 1024)) MiB, over the ${max_mib} MiB limit" >&2
    exit 1
fi
echo "run it on the GPU machine, from the repository root of the same commit: bash .gpu-suite/run.sh" >&2
