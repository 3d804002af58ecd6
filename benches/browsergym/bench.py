#!/usr/bin/env python3
"""BrowserGym baseline: MiniWoB++ episodes per minute with a scripted (oracle) policy.

The Python side of guirl's side-by-side harness comparison. It drives the stock
`browsergym-miniwob` package through its gym ids `browsergym/miniwob.<task>`,
`env.reset(seed=s)` for each seed, one action per `env.step`, and reports episodes,
successes, steps and wall seconds per task.

Policy: the same decisions as guirl's oracles (src/policy/oracle/miniwob/{click,form}.rs),
read off BrowserGym's observation (accessibility tree for roles/names/values,
`extra_element_properties` for boxes, `focused_element_bid`) and acted out with
BrowserGym's *coordinate* action set (`mouse_click(x, y)` at the element's box centre,
`keyboard_type('...')`), like guirl's Click{x,y} / Type{text}:
  click-test    click the button (guirl: #subbtn, else the first button)
  click-button  click the button named in quotes in the instruction
  focus-text    click the text input
  enter-text    click the input (unless focused), type the quoted text, click "Submit"

Chromium: Playwright's own browser download needs the internet, so every
`BrowserType.launch` (BrowserGym launches two browsers per reset: the task page and a
chat page; the chat launch takes no kwargs from the env) gets `executable_path=` the
system Chromium by monkeypatching playwright's sync API before BrowserGym is imported.
Default: Debian's headless shell (/usr/lib/chromium/chromium-headless-shell, the binary
guirl uses for headless runs), else /usr/bin/chromium; `--chromium PATH` overrides.

Timing: from the first env creation (gym.make) to the end of the last episode;
imports and venv are excluded. Everything else is BrowserGym's defaults (MiniWoB
task: slow_mo=100 ms, 1.5x zoom; env: pre_observation_delay=0.5 s, a fresh browser per
reset) unless `--fast` (slow_mo=0, pre_observation_delay=0; not stock, for reference).

Usage (after benches/browsergym/setup.sh):
  .cache/browsergym-venv/bin/python benches/browsergym/bench.py --seeds 0-49 \
      --out benches/browsergym/results.json
"""
from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import re
import subprocess
import sys
import time
from importlib.metadata import version

DEFAULT_TASKS = "click-test,click-button,focus-text,enter-text"


def default_chromium() -> str:
    for p in ("/usr/lib/chromium/chromium-headless-shell", "/usr/bin/chromium"):
        if os.path.exists(p):
            return p
    sys.exit("no system Chromium found; pass --chromium PATH")


def setup_browsergym(chromium: str) -> None:
    """Point Playwright at `chromium` and BrowserGym at guirl's MiniWoB++ pages."""
    html = os.environ.get("GUIRL_MINIWOB_DIR", os.path.expanduser("~/.cache/guirl/miniwob/html"))
    # BrowserGym opens MINIWOB_URL + "<task>.html"
    os.environ.setdefault("MINIWOB_URL", f"file://{html}/miniwob/")
    from playwright.sync_api._generated import BrowserType

    orig = BrowserType.launch
    if getattr(orig, "_guirl_patched", False):
        return

    def launch(self, *args, **kwargs):
        kwargs.setdefault("executable_path", chromium)
        return orig(self, *args, **kwargs)

    launch._guirl_patched = True
    BrowserType.launch = launch
    import browsergym.miniwob  # noqa: F401  (registers the gym ids)


# ---------------------------------------------------------------- scripted policy


def ax_elements(obs) -> list[dict]:
    """Elements with a bid, in document order: {bid, role, name, value, box}."""
    props = obs["extra_element_properties"]
    out = []
    for n in obs["axtree_object"]["nodes"]:
        bid = n.get("browsergym_id")
        if bid is None or n.get("ignored"):
            continue
        box = props.get(bid, {}).get("bbox")
        if not box:
            continue
        out.append(
            {
                "bid": bid,
                "role": n.get("role", {}).get("value", ""),
                "name": str(n.get("name", {}).get("value", "")).strip(),
                "value": str(n.get("value", {}).get("value", "")),
                "box": box,  # [x, y, w, h] in screenshot pixels (BrowserGym's zoom included)
            }
        )
    return out


def click(e) -> str:
    x, y, w, h = e["box"]
    return f"mouse_click({x + w / 2:.1f}, {y + h / 2:.1f})"


def quoted(s: str) -> list[str]:
    return re.findall(r'"([^"]*)"', s)


def buttons(els, name=None):
    return [e for e in els if e["role"] == "button" and (name is None or e["name"] == name)]


def textbox(els):
    return next((e for e in els if e["role"] == "textbox"), None)


def fill(e, target: str, focused_bid: str):
    """guirl's `fill`: click the field unless focused, then type what is missing."""
    if e["value"] == target:
        return None
    if e["bid"] != focused_bid:
        return click(e)
    if target.startswith(e["value"]):
        return f"keyboard_type({target[len(e['value']):]!r})"
    return "keyboard_press('Backspace')"


def policy(task: str, obs) -> str | None:
    els, goal = ax_elements(obs), obs["goal"]
    if task == "click-test":
        b = buttons(els, "Click Me!") or buttons(els)
        return click(b[0]) if b else None
    if task == "click-button":
        q = quoted(goal)
        b = buttons(els, q[0]) if q else []
        return click(b[0]) if b else None
    if task == "focus-text":
        t = textbox(els)
        return click(t) if t else None
    if task == "enter-text":
        t, q = textbox(els), quoted(goal)
        if t is None or not q:
            return None
        a = fill(t, q[0], obs.get("focused_element_bid", ""))
        if a:
            return a
        b = buttons(els, "Submit")
        return click(b[0]) if b else None
    raise SystemExit(f"no scripted policy for {task}")


# ---------------------------------------------------------------- runner


def run_task(task: str, seeds: list[int], max_steps: int, fast: bool, chromium: str) -> dict:
    """Episodes of one task, one env; returns counts and wall seconds (env creation included)."""
    setup_browsergym(chromium)
    import gymnasium as gym
    from browsergym.core.action.highlevel import HighLevelActionSet

    actions = HighLevelActionSet(subsets=["coord"], strict=False, multiaction=False, demo_mode="off")
    kw = {"action_mapping": actions.to_python_code, "headless": True}
    if fast:
        kw.update(slow_mo=0, pre_observation_delay=0.0)
        logging.getLogger("browsergym.core.env").setLevel(logging.ERROR)  # the per-reset override warning
    t0 = time.perf_counter()
    env = gym.make(f"browsergym/miniwob.{task}", **kw)
    episodes = successes = steps = errors = 0
    reset_s = step_s = 0.0  # time inside env.reset / env.step (the rest: gym.make, policy, close)
    for seed in seeds:
        t = time.perf_counter()
        obs, _ = env.reset(seed=seed)
        reset_s += time.perf_counter() - t
        reward = 0.0
        for _ in range(max_steps):
            a = policy(task, obs) or "noop()"
            t = time.perf_counter()
            obs, reward, terminated, truncated, _ = env.step(a)
            step_s += time.perf_counter() - t
            steps += 1
            errors += bool(obs.get("last_action_error"))
            if terminated or truncated:
                break
        episodes += 1
        successes += reward > 0
    env.close()
    return {
        "episodes": episodes,
        "successes": successes,
        "seconds": round(time.perf_counter() - t0, 3),
        "steps": steps,
        "action_errors": errors,
        "reset_seconds": round(reset_s, 3),
        "step_seconds": round(step_s, 3),
    }


def _job(args):
    return args[0], run_task(*args)


def parse_seeds(a) -> list[int]:
    if a.seeds:
        out = []
        for part in a.seeds.split(","):
            lo, _, hi = part.partition("-")
            out += list(range(int(lo), int(hi or lo) + 1))
        return out
    return list(range(a.seed, a.seed + a.episodes))


def versions(chromium: str) -> dict:
    v = {p: version(p) for p in ("browsergym-core", "browsergym-miniwob", "playwright", "gymnasium")}
    v["python"] = sys.version.split()[0]
    v["chromium"] = subprocess.run([chromium, "--version"], capture_output=True, text=True).stdout.strip()
    v["chromium_path"] = chromium
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default=DEFAULT_TASKS)
    ap.add_argument("--seeds", help="e.g. 0-49 or 0,3,7-9")
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-steps", type=int, default=10, help="AgentLab's MiniWoB++ setting (default 10)")
    ap.add_argument("--workers", type=int, default=1, help="processes, each one env; seeds are split")
    ap.add_argument("--fast", action="store_true", help="slow_mo=0, pre_observation_delay=0 (not stock)")
    ap.add_argument("--chromium", default=None)
    ap.add_argument("--out")
    a = ap.parse_args()
    chromium = a.chromium or default_chromium()
    tasks, seeds = a.tasks.split(","), parse_seeds(a)

    results: dict[str, dict] = {}
    load_before = os.getloadavg()  # the 2 cores are shared with builds: record how busy they were
    t0 = time.perf_counter()
    if a.workers <= 1:
        for task in tasks:
            results[task] = run_task(task, seeds, a.max_steps, a.fast, chromium)
            print(task, results[task], flush=True)
    else:  # K processes; each task's seeds are dealt round-robin; per-task seconds = wall span
        jobs = [(t, seeds[i :: a.workers], a.max_steps, a.fast, chromium) for t in tasks for i in range(a.workers)]
        with mp.get_context("spawn").Pool(a.workers) as pool:
            for task in tasks:
                ts = time.perf_counter()
                parts = [r for _, r in pool.map(_job, [j for j in jobs if j[0] == task])]
                results[task] = {k: round(sum(p[k] for p in parts), 3) for k in parts[0]}  # times: summed
                results[task]["seconds"] = round(time.perf_counter() - ts, 3)
                print(task, results[task], flush=True)
    secs = time.perf_counter() - t0

    n = sum(r["episodes"] for r in results.values())
    total = {
        "episodes": n,
        "successes": sum(r["successes"] for r in results.values()),
        "seconds": round(secs, 3),
        "episodes_per_minute": round(60 * n / secs, 2),
        "steps_per_second": round(sum(r["steps"] for r in results.values()) / secs, 3),
    }
    for r in results.values():
        r["episodes_per_minute"] = round(60 * r["episodes"] / r["seconds"], 2)
        r["success_rate"] = round(r["successes"] / r["episodes"], 3)
    out = {
        "tasks": results,
        "total": total,
        "config": {"seeds": f"{seeds[0]}..{seeds[-1]}" if seeds else "", "max_steps": a.max_steps,
                   "workers": a.workers, "fast": a.fast, "action_set": "coord",
                   "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
                   "cpus": os.cpu_count()},
        "versions": versions(chromium),
    }
    print(json.dumps(out["total"]))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
