#!/usr/bin/env bash
# Regenerates every kernels/*.ptx from its .cu with a pinned nvcc.
#
#   kernels/regen.sh           rewrite the committed .ptx files
#   kernels/regen.sh --check   regenerate into a temp dir; exit 1 naming any stale .ptx
#
# Pinned: nvidia-cuda-nvcc==13.0.88 with nvidia-nvvm, nvidia-cuda-runtime (headers) and
# nvidia-cuda-crt of the same version, and nvidia-cuda-cccl==13.0.85 (CUDA 13.0, PTX ISA 9.0). Chosen because driver 580 (the
# GPU nodes' driver) JITs PTX up to ISA 9.0; a newer nvcc would emit a
# .version the `cuda` backend cannot load there.
# Target: -arch=sm_80 (the lowest architecture CUDA 13 still compiles for; runs on sm_80+ by JIT).
# Output is deterministic: no -lineinfo/-G (no .file paths or timestamps), fixed flags, sorted
# inputs, and the nvcc header comment (which names the compiler build) is kept as nvcc writes it.
# nvcc is installed with `pip install --target` into target/nvcc (or $TASKLET_NVCC_DIR) if missing;
# it needs gcc for preprocessing. kernels/nvrtc12/*.cu are compiled by NVRTC 12.8.93 instead (below).
set -euo pipefail

NVCC_VERSION=13.0.88
CCCL_VERSION=13.0.85 # <nv/target>, needed by cuda_fp16.h; CUDA 13.0's CCCL release
ARCH=sm_80
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cache="${TASKLET_NVCC_DIR:-$root/target/nvcc}"
nvcc="$cache/$NVCC_VERSION/nvidia/cu13/bin/nvcc"

if [[ ! -x "$nvcc" || ! -d "$cache/$NVCC_VERSION/nvidia/cu13/include/nv" ]]; then
    echo "installing nvidia-cuda-nvcc==$NVCC_VERSION into $cache/$NVCC_VERSION" >&2
    # Into a fresh directory, moved into place at the end, so an interrupted install is retried
    # whole. Every package pinned and --no-deps, so the toolchain is the same wherever this runs.
    rm -rf "$cache/$NVCC_VERSION" "$cache/$NVCC_VERSION.tmp"
    mkdir -p "$cache"
    python3 -m pip install --quiet --disable-pip-version-check --no-deps \
        --target "$cache/$NVCC_VERSION.tmp" \
        "nvidia-cuda-nvcc==$NVCC_VERSION" "nvidia-nvvm==$NVCC_VERSION" \
        "nvidia-cuda-runtime==$NVCC_VERSION" "nvidia-cuda-crt==$NVCC_VERSION" \
        "nvidia-cuda-cccl==$CCCL_VERSION" >&2
    mv "$cache/$NVCC_VERSION.tmp" "$cache/$NVCC_VERSION"
fi
if [[ ! -x "$nvcc" ]]; then
    echo "error: nvcc not found at $nvcc after install" >&2
    exit 2
fi

check=0
if [[ "${1:-}" == "--check" ]]; then
    check=1
elif [[ $# -gt 0 ]]; then
    echo "usage: $0 [--check]" >&2
    exit 2
fi

outdir="$here"
if [[ $check == 1 ]]; then
    outdir="$(mktemp -d)"
    trap 'rm -rf "$outdir"' EXIT
fi

compile() {
    local cu="$1" out="$2"
    # -Xptxas is irrelevant for --ptx; -O3 is nvcc's default for device code and is stated for clarity.
    (cd "$here" && LC_ALL=C "$nvcc" --ptx -arch="$ARCH" -O3 "$(basename "$cu")" -o "$out")
}

stale=()
shopt -s nullglob
for cu in $(ls "$here"/*.cu | LC_ALL=C sort); do
    name="$(basename "$cu" .cu)"
    compile "$cu" "$outdir/$name.ptx"
    if [[ $check == 1 ]]; then
        if ! cmp -s "$outdir/$name.ptx" "$here/$name.ptx"; then
            stale+=("kernels/$name.ptx")
        fi
    else
        echo "wrote kernels/$name.ptx"
    fi
done

# A few kernels compiled by NVRTC 12 instead (kernels/nvrtc12/): the PTX NVRTC makes (its own
# front-end defaults, an older ISA) through the worker's own NVRTC loader (host/worker/src/nvrtc.rs,
# via its `nvrtc` example), the pinned nvidia-cuda-nvrtc-cu12 from kernels/install-nvrtc.sh 12.
NVRTC12_OPTIONS=(--gpu-architecture=compute_80 -default-device)
nvrtc12_lib="$("$here/install-nvrtc.sh" 12)"
nvrtc12_lib="$(ls "$nvrtc12_lib"/libnvrtc.so.12* | LC_ALL=C sort | head -n 1)"
(cd "$root" && cargo build --quiet -p tasklet-worker --example nvrtc)
nvrtc_bin="${CARGO_TARGET_DIR:-$root/target}/debug/examples/nvrtc"
mkdir -p "$outdir/nvrtc12"
for cu in $(ls "$here"/nvrtc12/*.cu | LC_ALL=C sort); do
    name="$(basename "$cu" .cu)"
    (cd "$here/nvrtc12" && TASKLET_NVRTC="$nvrtc12_lib" LC_ALL=C "$nvrtc_bin" "$name.cu" "${NVRTC12_OPTIONS[@]}" \
        >"$outdir/nvrtc12/$name.ptx" 2>/dev/null) || { echo "NVRTC 12 failed on kernels/nvrtc12/$name.cu" >&2; exit 1; }
    if [[ $check == 1 ]]; then
        cmp -s "$outdir/nvrtc12/$name.ptx" "$here/nvrtc12/$name.ptx" || stale+=("kernels/nvrtc12/$name.ptx")
    else
        echo "wrote kernels/nvrtc12/$name.ptx"
    fi
done

if [[ $check == 1 ]]; then
    # A committed .ptx without a .cu is stale too: nothing can regenerate it.
    for ptx in "$here"/*.ptx "$here"/nvrtc12/*.ptx; do
        name="${ptx%.ptx}"
        [[ -f "$name.cu" ]] || stale+=("kernels/${ptx#"$here/"} (no $(basename "$name").cu)")
    done
    if [[ ${#stale[@]} -gt 0 ]]; then
        echo "stale PTX (run kernels/regen.sh):" >&2
        printf '  %s\n' "${stale[@]}" >&2
        exit 1
    fi
    echo "all kernels/*.ptx are current"
fi
