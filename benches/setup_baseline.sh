#!/usr/bin/env bash
# Create the Python venv for the MiniWoB++ baseline benchmark
# (benches/miniwob_baseline.py): miniwob==1.1.0 from PyPI, which pulls
# selenium, gymnasium, numpy and Pillow.
#
#   benches/setup_baseline.sh [VENV_DIR]     # default: <repo>/.cache/baseline-venv
#
# Idempotent: an existing venv that already has miniwob 1.1.0 importable is
# left alone. Chromium/chromedriver are NOT downloaded: the baseline uses the
# system ones through MINIWOB_CHROME_BINARY / MINIWOB_CHROMEDRIVER (see
# miniwob_baseline.py), so selenium-manager never needs the network.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV_DIR="${1:-$REPO_ROOT/.cache/baseline-venv}"
PYTHON="${PYTHON:-python3}"
MINIWOB_VERSION="1.1.0"

die() { echo "setup_baseline.sh: error: $*" >&2; exit 1; }

command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found"

check_installed() {
    [ -x "$VENV_DIR/bin/python" ] || return 1
    "$VENV_DIR/bin/python" - "$MINIWOB_VERSION" <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version
assert version("miniwob") == sys.argv[1], version("miniwob")
import miniwob, selenium, gymnasium, numpy, PIL  # noqa: F401
PY
}

if check_installed; then
    echo "baseline venv ready: $VENV_DIR (miniwob $MINIWOB_VERSION already installed)"
    exit 0
fi

if [ ! -x "$VENV_DIR/bin/python" ]; then
    mkdir -p "$(dirname "$VENV_DIR")"
    "$PYTHON" -m venv "$VENV_DIR" || die "could not create venv at $VENV_DIR"
fi

"$VENV_DIR/bin/python" -m pip install --quiet --disable-pip-version-check \
    "miniwob==$MINIWOB_VERSION" \
    || die "pip install miniwob==$MINIWOB_VERSION failed"

check_installed || die "miniwob $MINIWOB_VERSION not importable in $VENV_DIR after install"

"$VENV_DIR/bin/python" - <<'PY'
from importlib.metadata import version
print("baseline venv ready:", __import__("sys").prefix,
      " ".join(f"{p}={version(p)}" for p in ("miniwob", "selenium", "gymnasium", "numpy", "pillow")))
PY
