#!/usr/bin/env python3
"""guirl's side of the BrowserGym comparison, and the side-by-side table.

Runs `guirl run --task miniwob/<task> --policy oracle --episodes N --seed S --envs 1 --json`
once per task (sequentially; never alongside bench.py: the machine has 2 cores), writes
the per-task numbers to --out, then prints a markdown table joined with bench.py's
results JSON. guirl's "seconds" is its own report; "wall_seconds" is the whole process
(browser start and shutdown included), which is the closer match to bench.py's timing
(env creation included).

  python3 benches/browsergym/compare.py --bg benches/browsergym/results.json \
      --out benches/browsergym/guirl_results.json
  python3 benches/browsergym/compare.py --bg ... --out ... --table-only   # just the table
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import time


def run_guirl(binary: str, task: str, episodes: int, seed: int) -> dict:
    cmd = [binary, "run", "--task", f"miniwob/{task}", "--policy", "oracle", "--episodes",
           str(episodes), "--seed", str(seed), "--envs", "1", "--json"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    r = json.loads(p.stdout)
    return {"episodes": r["episodes"], "success_rate": r["success_rate"], "seconds": round(r["seconds"], 3),
            "wall_seconds": round(wall, 3), "steps": r["env_steps"], "command": " ".join(cmd)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bg", default="benches/browsergym/results.json")
    ap.add_argument("--out", default="benches/browsergym/guirl_results.json")
    ap.add_argument("--guirl", default="target/release/guirl")
    ap.add_argument("--table-only", action="store_true")
    a = ap.parse_args()
    bg = json.load(open(a.bg))
    if a.table_only:
        g = json.load(open(a.out))
    else:
        seeds = bg["config"]["seeds"].split("..")
        lo, hi = int(seeds[0]), int(seeds[1])
        load = os.getloadavg()[0]
        g = {"tasks": {t: run_guirl(a.guirl, t, hi - lo + 1, lo) for t in bg["tasks"]},
             "loadavg_1m_before_after": [round(load, 2), round(os.getloadavg()[0], 2)],
             "version": subprocess.run([a.guirl, "--version"], capture_output=True, text=True).stdout.strip()}
        json.dump(g, open(a.out, "w"), indent=2)
    print("| task | BrowserGym ep/min | BG success | guirl ep/min (own s / wall) | guirl success | speed-up (wall) |")
    print("|---|---|---|---|---|---|")
    for t, b in bg["tasks"].items():
        r = g["tasks"][t]
        own, wall = 60 * r["episodes"] / r["seconds"], 60 * r["episodes"] / r["wall_seconds"]
        print(f"| {t} | {b['episodes_per_minute']:.1f} | {b['success_rate']:.2f} | {own:.0f} / {wall:.0f} "
              f"| {r['success_rate']:.2f} | {wall / b['episodes_per_minute']:.0f}x |")


if __name__ == "__main__":
    main()
