#!/usr/bin/env bash
# Build dist/mlstream: one executable (PyInstaller --onefile) that carries its own Python,
# mlstream and its dependencies. Run from anywhere:
#
#     bash packaging/build_binary.sh
#
# Needs: Python >= 3.11 with a shared libpython (python.org, Debian's and pyenv's builds
# have one), mlstream's dependencies and its otel extra (installed here with pip if missing),
# PyInstaller (installed here from PyPI if missing) and binutils (objdump, strip; on
# Debian/Ubuntu `apt-get install binutils`). PYTHON=/path/to/python picks the interpreter.
#
# The binary is built for this machine's OS and CPU and needs a glibc at least as new as
# this machine's. Each build works in its own build/pyinstaller.XXXXXX/ (PyInstaller's
# cache too), holds build/.build_binary.lock so that two builds (two test runs) never
# overlap, and moves the binary into dist/ only after it has run `--version`: dist/mlstream
# is never a half-written or broken file.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
cd "$ROOT"
mkdir -p "$ROOT/build" "$ROOT/dist"
if command -v flock >/dev/null 2>&1; then
    exec 9>"$ROOT/build/.build_binary.lock"
    flock 9
fi

"$PYTHON" - <<'PY'
import sys, sysconfig
if sys.version_info < (3, 11):
    sys.exit(f"mlstream needs Python >= 3.11, this is {sys.version.split()[0]}")
if sys.platform.startswith("linux") and not sysconfig.get_config_var("Py_ENABLE_SHARED"):
    sys.exit("PyInstaller needs a Python built with --enable-shared (a libpython*.so); this one is static")
PY

if ! command -v objdump >/dev/null 2>&1 || ! command -v strip >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "build_binary.sh: installing binutils (objdump, strip) with apt-get" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq binutils >/dev/null
    else
        echo "build_binary.sh: objdump/strip not found; install binutils (Debian/Ubuntu: apt-get install binutils)" >&2
        exit 1
    fi
fi

if ! "$PYTHON" -c "import urllib3, botocore, cryptography" 2>/dev/null; then
    echo "build_binary.sh: installing mlstream's dependencies (pip install .)" >&2
    "$PYTHON" -m pip install --quiet "$ROOT"
fi
# The binary carries OpenTelemetry's SDK and OTLP exporter (--otel-endpoint), the otel extra.
if ! "$PYTHON" -c "import opentelemetry.sdk, opentelemetry.exporter.otlp.proto.http" 2>/dev/null; then
    echo "build_binary.sh: installing the otel extra (pip install '.[otel]')" >&2
    "$PYTHON" -m pip install --quiet "$ROOT[otel]"
fi
if ! "$PYTHON" -c "import PyInstaller" 2>/dev/null; then
    echo "build_binary.sh: installing PyInstaller (pip install 'pyinstaller>=6.0,<7')" >&2
    "$PYTHON" -m pip install --quiet 'pyinstaller>=6.0,<7'
fi

start=$(date +%s)
WORK="$(mktemp -d "$ROOT/build/pyinstaller.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
# PYTHONPATH: the analysis (and its isolated helper processes) import this checkout's
# mlstream, not an installed copy. PYINSTALLER_CONFIG_DIR: a cache of our own.
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYINSTALLER_CONFIG_DIR="$WORK/cache" \
    "$PYTHON" -m PyInstaller --noconfirm --log-level WARN \
    --distpath "$WORK/dist" --workpath "$WORK/work" \
    "$ROOT/packaging/mlstream.spec"

built="$WORK/dist/mlstream"
version="$(env -i PATH=/usr/bin:/bin HOME="$WORK" TMPDIR="$WORK" "$built" --version)" || {
    echo "build_binary.sh: the new binary does not run; dist/mlstream left as it was" >&2
    exit 1
}
mv -f "$built" "$ROOT/dist/mlstream"  # a rename within one file system: atomic
echo "built $ROOT/dist/mlstream: $version, $(du -h "$ROOT/dist/mlstream" | cut -f1), in $(( $(date +%s) - start )) s"
