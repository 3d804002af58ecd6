#!/usr/bin/env python3
"""Summarise an Nsight Compute raw CSV of a few decoding steps (benches/gpu/run.sh, section 7).

    python3 scripts/ncu_summary.py ncu.csv STEPS

`ncu --csv --page raw --metrics gpu__time_duration.sum --log-file ncu.csv` writes one row per
kernel launch. Printed: launches and device time per step, and the kernels by their share of
the device time (name, launches per step, microseconds per step). The step's wall-clock from
the bench beside it says how much of a step the device was idle.
"""
import csv
import collections
import sys


def main(path, steps):
    lines = [l for l in open(path, encoding="utf-8", errors="replace") if l.startswith('"')]
    rows = list(csv.DictReader(lines))
    launches = [r for r in rows if r.get("ID", "").strip().isdigit()]
    if not launches:
        print(f"{path}: no kernel rows (did the profiler range open?)")
        return
    unit = next((r.get("gpu__time_duration.sum") for r in rows if not r.get("ID", "").strip().isdigit()), "ns")
    scale = {"ns": 1e-3, "nsecond": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get((unit or "ns").strip(), 1e-3)
    by = collections.defaultdict(lambda: [0, 0.0])
    total = 0.0
    for r in launches:
        us = float(r["gpu__time_duration.sum"].replace(",", "")) * scale
        name = r["Kernel Name"].split("(")[0][:70]
        by[name][0] += 1
        by[name][1] += us
        total += us
    print(f"{len(launches)} launches over {steps} steps: {len(launches) / steps:.0f} a step, "
          f"device time {total / steps / 1e3:.2f} ms a step")
    print("| kernel | launches / step | µs / step | share |")
    print("|---|---:|---:|---:|")
    for name, (n, us) in sorted(by.items(), key=lambda kv: -kv[1][1])[:20]:
        print(f"| `{name}` | {n / steps:.0f} | {us / steps:.0f} | {100 * us / total:.1f} % |")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1)
