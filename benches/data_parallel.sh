#!/usr/bin/env bash
# Data-parallel training against one process, in one run on this machine (docs/data-parallel.md,
# "Measured"): the same config trained
#  1. in one process with every core (rayon's default threads),
#  2. in one process with one thread,
#  3. with `--nproc N`, each rank on one thread (N ranks share the machine's cores).
# Prints wall-clock, env steps, the last evaluation and the iterations' mean rollout and
# update seconds. Usage: benches/data_parallel.sh [CONFIG] [N]
# (default: configs/qwen3-vl-tiny-click-test.toml, N = the number of cores).
set -euo pipefail
cd "$(dirname "$0")/.."
cfg=${1:-configs/qwen3-vl-tiny-click-test.toml}
n=${2:-$(nproc)}
bin=target/release/guirl
[ -x $bin ] || cargo build --release --quiet
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "config: $cfg; machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo
echo "| how | wall-clock s | env steps | last eval success | rollout s / iteration | update s / iteration |"
echo "|---|---:|---:|---:|---:|---:|"
row() { # name dir seconds
  python3 - "$2" "$1" "$3" <<'PY'
import json, sys
d, name, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
ms = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
its = [m for m in ms if m.get("iteration", 0) > 0]
ev = [m["eval_success"] for m in ms if m.get("eval_success") is not None]
mean = lambda k: sum(m.get(k, 0) for m in its) / max(len(its), 1)
print(f"| {name} | {secs:.1f} | {its[-1]['env_steps']} | {ev[-1]:.2f} | {mean('rollout_secs'):.2f} | {mean('update_secs'):.2f} |")
PY
}
run() { # name out env... -- args...
  local name=$1 out=$2; shift 2
  local t0; t0=$(date +%s.%N)
  env "$@" >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; exit 1; }
  row "$name" "$out" "$(python3 -c "import time; print(time.time() - $t0)")"
}
run "one process, default threads" "$tmp/one" "$bin" train "$cfg" --out "$tmp/one"
run "one process, 1 thread" "$tmp/one1" RAYON_NUM_THREADS=1 "$bin" train "$cfg" --out "$tmp/one1"
run "--nproc $n, 1 thread each" "$tmp/dp" RAYON_NUM_THREADS=1 "$bin" train "$cfg" --out "$tmp/dp" --nproc "$n"
