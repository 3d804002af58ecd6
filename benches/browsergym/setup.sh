#!/usr/bin/env bash
# Create the Python venv for the BrowserGym baseline (benches/browsergym/bench.py):
# browsergym-miniwob from PyPI, which pulls browsergym-core, playwright (==1.44,
# pinned by browsergym-core) and gymnasium.
#
#   benches/browsergym/setup.sh [VENV_DIR]     # default: <repo>/.cache/browsergym-venv
#
# No `playwright install`: its browser download needs the internet. bench.py points
# Playwright at the system Chromium (apt: chromium chromium-headless-shell) instead.
# The MiniWoB++ pages come from guirl's scripts/setup.sh (~/.cache/guirl/miniwob/html).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV_DIR="${1:-$REPO_ROOT/.cache/browsergym-venv}"
PYTHON="${PYTHON:-python3}"
BROWSERGYM_VERSION="${BROWSERGYM_VERSION:-0.14.3}"

die() { echo "browsergym/setup.sh: error: $*" >&2; exit 1; }

[ -x "$VENV_DIR/bin/python" ] || "$PYTHON" -m venv "$VENV_DIR" || die "could not create venv at $VENV_DIR"
"$VENV_DIR/bin/python" -m pip install --quiet --disable-pip-version-check \
    "browsergym-miniwob==$BROWSERGYM_VERSION" || die "pip install browsergym-miniwob failed"
"$VENV_DIR/bin/python" -c "import browsergym.miniwob, playwright.sync_api" \
    || die "browsergym not importable in $VENV_DIR"

html="${GUIRL_MINIWOB_DIR:-$HOME/.cache/guirl/miniwob/html}"
[ -f "$html/miniwob/click-test.html" ] || echo "note: MiniWoB++ pages missing at $html: run scripts/setup.sh" >&2
[ -x /usr/lib/chromium/chromium-headless-shell ] || [ -x /usr/bin/chromium ] \
    || echo "note: no system Chromium: apt-get install chromium chromium-headless-shell" >&2
echo "browsergym venv ready: $VENV_DIR"
"$VENV_DIR/bin/python" -m pip list --disable-pip-version-check 2>/dev/null | grep -iE '^(browsergym|playwright|gymnasium) '
