#!/usr/bin/env bash
# Installs a pinned componentize-js (npm `@bytecodealliance/componentize-js`: the StarlingMonkey
# JavaScript engine built for wasm32-wasip2 and the tool that makes a component of a JS module)
# into target/componentize-js/, where the JavaScript tasklets' build (guest-sdk/js/componentize.sh)
# and their tests find it. Idempotent: does nothing when the pinned version is already there.
# CI runs it before the tests (.ci/run). Needs node and npm.
#
#   scripts/install-componentize-js.sh
#
# Prints the path of the componentize-js command on stdout.
# $TASKLET_COMPONENTIZE_JS_DIR overrides target/componentize-js.
set -euo pipefail

pkg=@bytecodealliance/componentize-js
version=0.23.0

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${TASKLET_COMPONENTIZE_JS_DIR:-$root/target/componentize-js}"
dest="$cache/componentize-js-$version"
bin="$dest/node_modules/.bin/componentize-js"

if ! "$bin" --version >/dev/null 2>&1; then
    if ! command -v npm >/dev/null; then
        echo "error: npm not found; install Node.js (20 or later) to build JavaScript tasklets" >&2
        exit 2
    fi
    echo "installing $pkg@$version into $dest" >&2
    # Into a fresh directory, moved into place at the end, so an interrupted install is retried whole.
    rm -rf "$dest" "$dest.tmp"
    mkdir -p "$dest.tmp"
    npm install --silent --no-audit --no-fund --prefix "$dest.tmp" "$pkg@$version" >&2
    mv "$dest.tmp" "$dest"
fi
if ! "$bin" --version >/dev/null 2>&1; then
    echo "error: $bin does not run after installing $pkg@$version" >&2
    exit 2
fi
echo "$bin"
