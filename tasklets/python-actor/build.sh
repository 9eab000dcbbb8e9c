#!/usr/bin/env bash
# Builds this tasklet's component (see guest-sdk/python/README.md): tasklet.toml names where.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$here/../../guest-sdk/python/componentize.sh" "$here" "$here/../target/python/actor.wasm"
