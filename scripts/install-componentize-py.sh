#!/usr/bin/env bash
# Installs a pinned componentize-py (the wheel from PyPI: CPython built for wasm32-wasip2 and the
# tool that makes a component of a Python app) into target/componentize-py/, where the Python
# tasklets' build (guest-sdk/python/componentize.sh) and their tests find it. Idempotent: does
# nothing when the pinned version is already there. CI runs it before the tests (.ci/run).
#
#   scripts/install-componentize-py.sh
#
# Prints the path of a componentize-py command on stdout.
# $TASKLET_COMPONENTIZE_PY_DIR overrides target/componentize-py.
set -euo pipefail

pkg=componentize-py
version=0.25.1

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${TASKLET_COMPONENTIZE_PY_DIR:-$root/target/componentize-py}"
dest="$cache/$pkg-$version"
bin="$dest/componentize-py"

if ! "$bin" --version >/dev/null 2>&1; then
    echo "installing $pkg==$version into $dest" >&2
    # Into a fresh directory, moved into place at the end, so an interrupted install is retried whole.
    rm -rf "$dest" "$dest.tmp"
    mkdir -p "$cache"
    python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dest.tmp/lib" "$pkg==$version" >&2
    # The wheel's own launcher expects an installed package; this one finds it where it lies.
    cat >"$dest.tmp/componentize-py" <<'LAUNCHER'
#!/usr/bin/env bash
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHONPATH="$here/lib${PYTHONPATH:+:$PYTHONPATH}" exec python3 -c 'import sys, componentize_py; sys.argv[0] = "componentize-py"; sys.exit(componentize_py.script())' "$@"
LAUNCHER
    chmod +x "$dest.tmp/componentize-py"
    mv "$dest.tmp" "$dest"
fi
if ! "$bin" --version >/dev/null 2>&1; then
    echo "error: $bin does not run after installing $pkg==$version" >&2
    exit 2
fi
echo "$bin"
