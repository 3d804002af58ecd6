#!/usr/bin/env bash
# The benchmark harness's speed, printed as a table (README, "Benchmark harness speed"):
#  1. episodes/s of `guirl bench` with K = 1, 2, 4 envs, for the oracle and a checkpoint;
#  2. what the API round trip adds per step: the same checkpoint behind `guirl serve-policy`
#     driven by the `openai:` policy, against the checkpoint run directly (same bench);
#  3. guirl bench with envs=1 on the tasks and seeds of benches/browsergym/results.json.
# Usage: benches/harness_speed.sh CHECKPOINT [EPISODES_PER_TASK]
# (a checkpoint: e.g. the run folder of `guirl train configs/click-test.toml`).
set -euo pipefail
cd "$(dirname "$0")/.."
ckpt=${1:?usage: benches/harness_speed.sh CHECKPOINT [EPISODES_PER_TASK]}
n=${2:-50}
bin=target/release/guirl
tasks=miniwob/click-test,miniwob/click-button,miniwob/focus-text,miniwob/enter-text
tmp=$(mktemp -d)
trap 'kill $server 2>/dev/null || true; rm -rf "$tmp"' EXIT
field() { python3 -c "import json,sys; r=json.load(open('$1/report.json')); print($2)"; }
echo "| policy | envs | episodes | seconds | episodes/s | p50 ms/step | p95 ms/step | success |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
row() { # name dir envs
  echo "| $1 | $3 | $(field "$2" "r['all']['episodes']") | $(field "$2" "round(r['seconds'],1)") | $(field "$2" "round(r['episodes_per_s'],2)") | $(field "$2" "r['all']['step_ms_p50']") | $(field "$2" "r['all']['step_ms_p95']") | $(field "$2" "round(r['all']['success_rate'],3)") |"
}
for k in 1 2 4; do
  $bin bench --tasks $tasks --policy oracle --episodes-per-task "$n" --envs $k --out "$tmp/oracle-$k" >/dev/null 2>&1
  row oracle "$tmp/oracle-$k" $k
done
for k in 1 2 4; do
  $bin bench --tasks $tasks --policy "$ckpt" --episodes-per-task "$n" --envs $k --out "$tmp/ckpt-$k" >/dev/null 2>&1
  row checkpoint "$tmp/ckpt-$k" $k
done
$bin serve-policy "$ckpt" --bind 127.0.0.1:0 --model-name ckpt > "$tmp/serve.log" 2>&1 &
server=$!
for _ in $(seq 100); do grep -q "^serving" "$tmp/serve.log" 2>/dev/null && break; sleep 0.1; done
url=$(sed -n 's/^serving .* on \(http[^ ]*\)$/\1/p' "$tmp/serve.log")
for k in 1 4; do
  $bin bench --tasks $tasks --policy "openai:ckpt@$url" --episodes-per-task "$n" --envs $k --out "$tmp/api-$k" >/dev/null 2>&1
  row "checkpoint via serve-policy + openai:" "$tmp/api-$k" $k
done
echo
python3 - "$tmp" <<'PY'
import json, sys
t = sys.argv[1]
def rows(d):
    out = {}
    for line in open(f"{t}/{d}/results.jsonl"):
        r = json.loads(line)
        out[(r["task"], r["seed"])] = r
    return out
a, b = rows("ckpt-1"), rows("api-1")
same = sum(1 for k in a if k in b and (a[k]["status"], a[k]["steps"], a[k]["reward"]) == (b[k]["status"], b[k]["steps"], b[k]["reward"]))
da = sorted(x for r in a.values() for x in r["step_ms"]); db = sorted(x for r in b.values() for x in r["step_ms"])
med = lambda v: v[len(v) // 2]
print(f"API round trip: median step {med(db):.1f} ms through serve-policy vs {med(da):.1f} ms direct "
      f"(+{med(db) - med(da):.1f} ms); same outcome in {same}/{len(a)} episodes (greedy, same seeds)")
PY
