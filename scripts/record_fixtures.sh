#!/usr/bin/env bash
# Re-record fixtures/trajectories/oracle: one oracle episode of every built-in task and of
# a set of MiniWoB++ oracle tasks. tests/integration/record_replay.rs replays it with --verify.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=fixtures/trajectories/oracle
rm -rf "$OUT"
GUIRL=${GUIRL:-target/release/guirl}
for t in $("$GUIRL" tasks --suite builtin); do
  "$GUIRL" run --task "$t" --policy oracle --episodes 1 --seed 1000 --record "$OUT" | tail -1
done
for t in click-test click-test-2 click-button click-link click-dialog click-tab focus-text \
         enter-text enter-password login-user click-checkboxes choose-list; do
  "$GUIRL" run --task "miniwob/$t" --policy oracle --episodes 1 --seed 1000 --record "$OUT" | tail -1
done
du -sh "$OUT"
