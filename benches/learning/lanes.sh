#!/usr/bin/env bash
# Run a bench-learn plan whose tasks are arms on one config, two cells at a time.
#
#   benches/learning/lanes.sh PLAN OUT [LANES=2]
#
# The plan's first task makes the clones and the more-cloning baselines; every other task is
# an arm on the same config and seeds, so it gets copies of them instead of training them
# again (same config and seed: the same clone). Then two lanes take the RL cells from one
# queue, a clone's cells and then its more-sft-cK before the next clone's. Finally
# `--report` writes the tables.
#
# `touch OUT/.pause` stops the lanes from taking new cells (to measure something else on an
# idle machine); run the script again to go on: finished cells are skipped.
set -euo pipefail
plan=${1:?usage: lanes.sh PLAN OUT [LANES]}
out=${2:?usage: lanes.sh PLAN OUT [LANES]}
lanes=${3:-2}
bin=${GUIRL_BIN:-target/release/guirl}
export RAYON_NUM_THREADS=${RAYON_NUM_THREADS:-1}
mkdir -p "$out/.lanes"
rm -f "$out/.pause"

# The plan's tasks, seeds and algorithms, read with the only TOML reader every setup has.
read_plan() {
    python3 - "$plan" "$1" <<'EOF'
import sys, tomllib
p = tomllib.load(open(sys.argv[1], "rb"))
key = sys.argv[2]
if key == "tasks":
    print(" ".join(t["name"] for t in p["tasks"]))
else:
    print(" ".join(str(v) for v in p.get(key, [0])))
EOF
}
tasks=($(read_plan tasks))
clones=($(read_plan clone_seeds))
seeds=($(read_plan seeds))
algos=($(read_plan algos))
first=${tasks[0]}

cell() { # run one cell; its log goes to OUT/.lanes/NAME.log, then OUT/.lanes/NAME.done
    local name=$1 log=$out/.lanes/${1//\//_}
    [[ -e "$out/.pause" ]] && return 0
    if [[ $name == */more-sft-c* ]]; then
        # more-sft-cK is sized by its clone's RL cells: wait for every one of them (the other
        # lane may still run the last, with one RL seed it always does)
        local c=${name##*-c} t a s
        for t in "${tasks[@]}"; do for a in "${algos[@]}"; do for s in "${seeds[@]}"; do
            while [[ ! -e "$out/.lanes/${t}_$a-c$c-s$s.done" && ! -e "$out/.pause" ]]; do sleep 5; done
        done; done; done
        [[ -e "$out/.pause" ]] && return 0
    fi
    echo "$(date +%T) start $name"
    "$bin" bench-learn "$plan" --out "$out" --only "$name" >"$log.log" 2>&1 ||
        echo "$(date +%T) FAILED $name (see $log.log)"
    touch "$log.done"
    echo "$(date +%T) done  $name"
}

share() { # copy FIRST/CELL into every other arm
    for t in "${tasks[@]:1}"; do
        if [[ -d "$out/$first/$1" && ! -e "$out/$t/$1/cell.json" ]]; then
            mkdir -p "$out/$t"
            rm -rf "${out:?}/$t/$1"
            cp -r "$out/$first/$1" "$out/$t/$1"
            # The copy is this arm's cell now: the report files cells by their "task".
            python3 -c 'import json, sys
cell = json.load(open(sys.argv[1]))
cell["task"] = sys.argv[2]
json.dump(cell, open(sys.argv[1], "w"))' "$out/$t/$1/cell.json" "$t"
        fi
    done
}

# 1. The clones, `lanes` at a time.
queue=()
for c in "${clones[@]}"; do queue+=("$first/clone-c$c"); done
run_queue() {
    local q=("$@") i=0
    : >"$out/.lanes/next"
    worker() {
        while true; do
            local k
            k=$(flock "$out/.lanes/next" bash -c 'n=$(wc -l <"$0"); echo x >>"$0"; echo $n' "$out/.lanes/next")
            ((k < ${#q[@]})) || return 0
            cell "${q[$k]}"
            [[ ${q[$k]} == */clone-c* || ${q[$k]} == */more-sft-c* ]] && share "${q[$k]#*/}"
        done
    }
    for ((i = 0; i < lanes; i++)); do worker & done
    wait
}
run_queue "${queue[@]}"

# 2. The RL cells, clone by clone, each clone's more-cloning baseline after its cells (it
# waits for the last of them, which sizes it).
queue=()
for c in "${clones[@]}"; do
    for t in "${tasks[@]}"; do
        for a in "${algos[@]}"; do
            for s in "${seeds[@]}"; do queue+=("$t/$a-c$c-s$s"); done
        done
    done
    queue+=("$first/more-sft-c$c")
done
run_queue "${queue[@]}"

if [[ -e "$out/.pause" ]]; then
    echo "paused: run the script again to go on"
    exit 0
fi
"$bin" bench-learn "$plan" --out "$out" --report
