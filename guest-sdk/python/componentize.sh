#!/usr/bin/env bash
# Builds a Python tasklet's component: APP_DIR's app.py (and the modules beside it) with this SDK
# (tasklet_gpu), against the repository's wit/ (world `tasklet`), into OUT.wasm. The repository's
# kernels/ is on the module path too, for `tasklet_gpu.include_text("vector_add.ptx")`. Does nothing when
# OUT.wasm is newer than every source (the app's, the SDK's, the WIT's; through links, so an app's
# link to a Rust example's PTX counts).
#
#   guest-sdk/python/componentize.sh APP_DIR OUT.wasm
#
# componentize-py: $COMPONENTIZE_PY, else the pinned one scripts/install-componentize-py.sh
# installs (under target/; it installs it from PyPI if need be).
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 APP_DIR OUT.wasm" >&2
    exit 2
fi
app="$(cd "$1" && pwd)"
out="$2"
sdk="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$sdk/../.." && pwd)"

if [ -f "$out" ] && [ -z "$(find -L "$app" "$sdk/tasklet_gpu" "$root/wit" "$root/kernels" -newer "$out" \( -name '*.py' -o -name '*.wit' -o -name '*.ptx' -o -name '*.cu' \) | head -1)" ]; then
    exit 0
fi
tool="${COMPONENTIZE_PY:-$("$root/scripts/install-componentize-py.sh")}"
mkdir -p "$(dirname "$out")"
# Into a temp file renamed at the end: an interrupted build leaves no component that looks built.
# The app from a staging copy (OUT.wasm.src/) with its links followed: componentize-py's module
# path does not follow them, and an app's PTX may be a link to a Rust example's.
stage="$out.src"
rm -rf "$stage"
mkdir -p "$stage"
cp -RL "$app"/. "$stage"/
"$tool" -d "$root/wit" -w tasklet componentize app -p "$stage" -p "$sdk" -p "$root/kernels" -o "$out.tmp" >&2
mv "$out.tmp" "$out"
