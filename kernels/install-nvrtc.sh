#!/usr/bin/env bash
# Installs a pinned NVRTC (the `nvidia-cuda-nvrtc` wheel) into target/nvrtc/, where the worker's
# NVRTC loader (host/worker/src/nvrtc.rs) finds it without LD_LIBRARY_PATH. Idempotent: does
# nothing when the pinned version is already there. CI runs it before the tests (.ci/run).
#
#   kernels/install-nvrtc.sh        NVRTC 13 (the default the worker uses)
#   kernels/install-nvrtc.sh 12     NVRTC 12 (only for kernels/regen.sh's nvrtc12 corpus)
#
# Prints the directory holding libnvrtc.so.* on stdout.
# Pinned to CUDA 13.0 (PTX ISA 9.0), the same release as kernels/regen.sh's nvcc: driver 580 (the
# GPU nodes' driver) JITs PTX up to ISA 9.0. NVRTC 12.8 emits ISA 8.7.
# $TASKLET_NVRTC_DIR overrides target/nvrtc.
set -euo pipefail

case "${1:-13}" in
    13) pkg=nvidia-cuda-nvrtc version=13.0.88 sub=cu13 ;;
    12) pkg=nvidia-cuda-nvrtc-cu12 version=12.8.93 sub=cuda_nvrtc ;;
    *) echo "usage: $0 [13|12]" >&2; exit 2 ;;
esac

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${TASKLET_NVRTC_DIR:-$root/target/nvrtc}"
dest="$cache/$pkg-$version"
lib="$dest/nvidia/$sub/lib"

if ! ls "$lib"/libnvrtc.so* >/dev/null 2>&1; then
    echo "installing $pkg==$version into $dest" >&2
    # Into a fresh directory, moved into place at the end, so an interrupted install is retried whole.
    rm -rf "$dest" "$dest.tmp"
    mkdir -p "$cache"
    python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dest.tmp" "$pkg==$version" >&2
    # The wheel also ships alternative builds (*.alt.so*) that nothing here loads: half its size.
    rm -f "$dest.tmp/nvidia/$sub/lib/"*.alt.so*
    mv "$dest.tmp" "$dest"
fi
if ! ls "$lib"/libnvrtc.so* >/dev/null 2>&1; then
    echo "error: no libnvrtc.so* in $lib after installing $pkg==$version" >&2
    exit 2
fi
echo "$lib"
