#!/usr/bin/env python3
"""Environment-speed baseline: MiniWoB++'s own Python environment (miniwob 1.1.0).

This is the *baseline* side of guirl's environment-speed benchmark. It drives
the stock `miniwob` PyPI package (selenium + chromedriver + headless Chromium)
exactly the way a user would, through `gymnasium.make('miniwob/<task>-v1')`,
and measures, per task:

  * reset latency   median / p90 (ms) of `env.reset(seed=seed+i)`, i = 0..N-1
  * step latency    median / p90 (ms) of `env.step(a)` where `a` is a random
                    CLICK_COORDS action inside the 160x210 task area. The
                    returned observation includes miniwob's screenshot (PNG
                    from chromedriver -> PIL -> numpy) and DOM, as always.
                    When an episode ends, the env is reset *outside* the timed
                    region.
  * throughput      aggregate steps/s with K = 1, 2, 4 envs running
                    concurrently, one OS process per env, each with its own
                    chromedriver + Chromium, each doing random CLICK_COORDS
                    steps for a fixed wall-clock window (resets needed when an
                    episode ends are done inside the window, as a real rollout
                    would, but only steps are counted).
  * type latency    (only for tasks in --type-tasks, default enter-text):
                    median / p90 (ms) of a TYPE_TEXT step typing a short
                    string into the focused text input. Reported as the extra
                    key "type_step_ms"; it does not affect "step_ms".

Setup (creates .cache/baseline-venv):  benches/setup_baseline.sh
Run:
  .cache/baseline-venv/bin/python benches/miniwob_baseline.py \
      --tasks click-test,click-button,enter-text --envs 1,2,4 \
      --steps 40 --resets 40 --seed 0 --json runs/miniwob_baseline.json

Chromium: the system Chromium + chromedriver are used through the env vars
miniwob itself reads (MINIWOB_CHROME_BINARY / MINIWOB_CHROMEDRIVER); selenium
is then given an explicit driver path and never runs selenium-manager (which
would need the network). miniwob's SeleniumInstance hard-codes the headless
Chrome flags `headless`, `disable-gpu`, `no-sandbox` (i.e. --headless
--disable-gpu --no-sandbox; guirl's own browsers run sandboxed where the machine
allows, unless `guirl bench-env --no-sandbox`) and exposes no hook for extra
flags; this script does not patch the package.
"""
from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import platform
import subprocess
import sys
import time
import traceback
from typing import Any

DEFAULT_CHROME = "/usr/bin/chromium"
DEFAULT_CHROMEDRIVER = "/usr/bin/chromedriver"
TASK_W, TASK_H = 160, 210  # miniwob TASK_WIDTH x TASK_HEIGHT
WARMUP_RESETS = 2
WARMUP_STEPS = 5
TYPE_TEXT = "hello"


# --------------------------------------------------------------------------
# Environment setup (must run before selenium/miniwob create a driver)


def configure_browser_env(chrome: str, chromedriver: str) -> None:
    for path, what in ((chrome, "Chromium"), (chromedriver, "chromedriver")):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise SystemExit(f"miniwob_baseline: {what} not found/executable at {path}")
    # Read by miniwob.selenium_instance.SeleniumInstance.create_driver: it sets
    # options.binary_location and Service(executable_path=...), so selenium's
    # DriverFinder skips selenium-manager entirely.
    os.environ["MINIWOB_CHROME_BINARY"] = chrome
    os.environ["MINIWOB_CHROMEDRIVER"] = chromedriver
    # Belt and braces: should selenium-manager ever run, keep it offline and quiet.
    os.environ.setdefault("SE_OFFLINE", "true")
    os.environ.setdefault("SE_AVOID_STATS", "true")


def quiet_logging() -> None:
    # miniwob logs a WARNING (root logger) for e.g. actions on a finished episode.
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger().setLevel(logging.ERROR)


def make_env(task: str):
    import gymnasium
    import miniwob  # noqa: F401  (registers the miniwob/* envs)

    gymnasium.register_envs(miniwob)
    return gymnasium.make(f"miniwob/{task}-v1", render_mode=None)


def _child_pids(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
    except OSError:
        pass
    return out


def _browser_pids(env) -> list[int]:
    """PIDs of this env's chromedriver and the Chromium process tree under it."""
    try:
        root = env.unwrapped.instance.driver.service.process.pid
    except Exception:
        return []
    pids, todo = [], [root]
    while todo:
        p = todo.pop()
        pids.append(p)
        todo.extend(_child_pids(p))
    return pids


def close_env(env, wait_s: float = 15.0) -> None:
    """env.close(), then wait until this env's own browser processes have exited,
    so that lingering Chromium shutdown does not overlap the next measurement."""
    pids = _browser_pids(env)
    env.close()
    deadline = time.monotonic() + wait_s
    while pids and time.monotonic() < deadline:
        alive = []
        for p in pids:
            try:
                with open(f"/proc/{p}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    alive.append(p)
            except OSError:
                pass
        pids = alive
        if pids:
            time.sleep(0.05)


# --------------------------------------------------------------------------
# Actions (built with miniwob's own API, outside any timed region)


class ActionMaker:
    def __init__(self, env, rng):
        from miniwob.action import ActionTypes

        self.env = env.unwrapped
        self.rng = rng
        self.AT = ActionTypes

    def random_click(self) -> dict[str, Any]:
        import numpy as np

        x = self.rng.uniform(0.0, TASK_W)
        y = self.rng.uniform(0.0, TASK_H)
        return self.env.create_action(
            self.AT.CLICK_COORDS, coords=np.array([x, y], dtype=np.float32)
        )

    def click_at(self, x: float, y: float) -> dict[str, Any]:
        import numpy as np

        return self.env.create_action(
            self.AT.CLICK_COORDS, coords=np.array([x, y], dtype=np.float32)
        )

    def type_text(self, text: str) -> dict[str, Any]:
        return self.env.create_action(self.AT.TYPE_TEXT, text=text)


def text_input_center(obs) -> tuple[float, float] | None:
    for el in obs.get("dom_elements", ()):
        if str(el.get("tag", "")).upper().startswith("INPUT_TEXT"):
            left = float(el["left"][0])
            top = float(el["top"][0])
            w = float(el["width"][0])
            h = float(el["height"][0])
            return left + w / 2.0, top + h / 2.0
    return None


def warm_up(env, actions: ActionMaker, seed: int) -> None:
    for i in range(WARMUP_RESETS):
        env.reset(seed=seed + 10_000 + i)
    for _ in range(WARMUP_STEPS):
        _, _, term, trunc, _ = env.step(actions.random_click())
        if term or trunc:
            env.reset(seed=seed + 20_000)


# --------------------------------------------------------------------------
# Statistics


def pct(samples: list[float], q: float) -> float:
    """Percentile with linear interpolation (numpy's default method)."""
    import numpy as np

    return float(np.percentile(np.asarray(samples, dtype=np.float64), q))


def summary(samples_s: list[float]) -> dict[str, float]:
    ms = [s * 1000.0 for s in samples_s]
    return {
        "median": round(pct(ms, 50), 3),
        "p90": round(pct(ms, 90), 3),
        "mean": round(sum(ms) / len(ms), 3),
        "n": len(ms),
    }


# --------------------------------------------------------------------------
# Latency (one env, in this process)


def measure_latency(task: str, n_resets: int, n_steps: int, seed: int, measure_type: bool):
    import numpy as np

    env = make_env(task)
    try:
        actions = ActionMaker(env, np.random.default_rng(seed))
        warm_up(env, actions, seed)

        # Reset latency: seeds seed+i.
        reset_t = []
        for i in range(n_resets):
            t0 = time.perf_counter()
            env.reset(seed=seed + i)
            reset_t.append(time.perf_counter() - t0)

        # Step latency: random clicks; untimed reset when an episode ends.
        step_t = []
        episodes_ended = 0
        env.reset(seed=seed + n_resets)
        ep = 1
        for _ in range(n_steps):
            a = actions.random_click()
            t0 = time.perf_counter()
            _, _, term, trunc, _ = env.step(a)
            step_t.append(time.perf_counter() - t0)
            if term or trunc:
                episodes_ended += 1
                env.reset(seed=seed + n_resets + ep)
                ep += 1

        type_t = []
        if measure_type:
            obs, _ = env.reset(seed=seed + 30_000)
            center = text_input_center(obs)
            if center is None:
                raise RuntimeError(f"{task}: no text <input> found for the TYPE_TEXT measurement")
            # Focus the input (untimed), then time TYPE_TEXT steps.
            env.step(actions.click_at(*center))
            n_type = max(5, n_steps // 2)
            for k in range(n_type):
                a = actions.type_text(TYPE_TEXT)
                t0 = time.perf_counter()
                _, _, term, trunc, _ = env.step(a)
                type_t.append(time.perf_counter() - t0)
                if term or trunc:
                    obs, _ = env.reset(seed=seed + 30_001 + k)
                    center = text_input_center(obs)
                    if center is not None:
                        env.step(actions.click_at(*center))
    finally:
        close_env(env)
    return reset_t, step_t, episodes_ended, type_t


# --------------------------------------------------------------------------
# Throughput (K envs, one process each)


def _throughput_worker(task, idx, seed, window_s, max_steps, chrome, chromedriver,
                       barrier, result_q):
    env = None
    try:
        quiet_logging()
        configure_browser_env(chrome, chromedriver)
        import numpy as np

        env = make_env(task)
        wseed = seed + 1_000_000 * (idx + 1)
        actions = ActionMaker(env, np.random.default_rng(wseed))
        warm_up(env, actions, wseed)
        env.reset(seed=wseed)
        # Pre-build actions so the timed loop is step/reset only.
        pool = [actions.random_click() for _ in range(256)]
        barrier.wait(timeout=300)
        t_start = time.monotonic()
        deadline = t_start + window_s
        steps = resets = 0
        ep = 1
        while True:
            if max_steps > 0:
                if steps >= max_steps:
                    break
            elif time.monotonic() >= deadline:
                break
            _, _, term, trunc, _ = env.step(pool[steps % len(pool)])
            steps += 1
            if term or trunc:
                env.reset(seed=wseed + ep)
                ep += 1
                resets += 1
        t_end = time.monotonic()
        result_q.put({"idx": idx, "ok": True, "steps": steps, "resets": resets,
                      "t_start": t_start, "t_end": t_end})
    except BaseException:  # report everything, incl. BrokenBarrierError
        result_q.put({"idx": idx, "ok": False, "error": traceback.format_exc()})
        try:
            barrier.abort()
        except Exception:
            pass
    finally:
        if env is not None:
            try:
                close_env(env)
            except Exception:
                pass


def measure_throughput(task, k, seed, window_s, max_steps, chrome, chromedriver):
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(k)
    result_q = ctx.Queue()
    procs = [
        ctx.Process(
            target=_throughput_worker,
            args=(task, i, seed, window_s, max_steps, chrome, chromedriver, barrier, result_q),
            daemon=True,
        )
        for i in range(k)
    ]
    for p in procs:
        p.start()
    results = []
    deadline = time.monotonic() + 300 + (window_s if max_steps <= 0 else 0) + 120
    try:
        while len(results) < k:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeError(f"{task} K={k}: throughput workers timed out")
            try:
                results.append(result_q.get(timeout=min(remaining, 5.0)))
            except Exception:  # queue.Empty
                dead = [p for p in procs if not p.is_alive() and p.exitcode not in (0, None)]
                if dead and len(results) < k:
                    # Give the queue a moment in case the result is in flight.
                    time.sleep(1.0)
                    while not result_q.empty():
                        results.append(result_q.get())
                    if len(results) < k:
                        raise RuntimeError(
                            f"{task} K={k}: worker(s) died with exit codes "
                            f"{[p.exitcode for p in dead]}")
        errors = [r for r in results if not r["ok"]]
        if errors:
            raise RuntimeError(f"{task} K={k}: worker {errors[0]['idx']} failed:\n"
                               + errors[0]["error"])
        for p in procs:
            p.join(timeout=60)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=10)
    total_steps = sum(r["steps"] for r in results)
    wall = max(r["t_end"] for r in results) - min(r["t_start"] for r in results)
    return {
        "steps_per_s": total_steps / wall,
        "total_steps": total_steps,
        "resets": sum(r["resets"] for r in results),
        "wall_s": wall,
    }


# --------------------------------------------------------------------------


def chromium_version(chrome: str) -> str:
    try:
        out = subprocess.run([chrome, "--version"], capture_output=True, text=True, timeout=30)
        return out.stdout.strip() or out.stderr.strip()
    except Exception as e:  # pragma: no cover
        return f"unknown ({e})"


def pkg_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def parse_int_list(s: str) -> list[int]:
    out = [int(x) for x in s.split(",") if x.strip()]
    if not out or any(x <= 0 for x in out):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {s!r}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", default="click-test,click-button,enter-text",
                    help="comma-separated MiniWoB task names (default: %(default)s)")
    ap.add_argument("--envs", type=parse_int_list, default=[1, 2, 4],
                    help="comma-separated concurrent env counts K (default: 1,2,4)")
    ap.add_argument("--steps", type=int, default=40,
                    help="timed steps for step latency (default: %(default)s)")
    ap.add_argument("--resets", type=int, default=40,
                    help="timed resets for reset latency (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--window", type=float, default=5.0,
                    help="throughput wall-clock window per K, seconds (default: %(default)s)")
    ap.add_argument("--throughput-steps", type=int, default=0,
                    help="if >0, each throughput env does this many steps instead of "
                         "running for --window seconds")
    ap.add_argument("--type-tasks", default="enter-text",
                    help="tasks for which TYPE_TEXT latency is also measured "
                         "(comma-separated, '' for none; default: %(default)s)")
    ap.add_argument("--json", dest="json_out", default=None, help="write results here")
    ap.add_argument("--chrome", default=os.environ.get("MINIWOB_CHROME_BINARY", DEFAULT_CHROME))
    ap.add_argument("--chromedriver",
                    default=os.environ.get("MINIWOB_CHROMEDRIVER", DEFAULT_CHROMEDRIVER))
    args = ap.parse_args()

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    type_tasks = {t.strip() for t in args.type_tasks.split(",") if t.strip()}
    if args.steps < 1 or args.resets < 1:
        ap.error("--steps and --resets must be >= 1")

    quiet_logging()
    configure_browser_env(args.chrome, args.chromedriver)
    try:
        import gymnasium  # noqa: F401
        import miniwob  # noqa: F401
    except ImportError as e:
        print(f"miniwob_baseline: {e}; run benches/setup_baseline.sh and use its venv's python",
              file=sys.stderr)
        return 2

    mw_version = pkg_version("miniwob")
    meta = {
        "miniwob": mw_version,
        "selenium": pkg_version("selenium"),
        "gymnasium": pkg_version("gymnasium"),
        "numpy": pkg_version("numpy"),
        "pillow": pkg_version("pillow"),
        "python": platform.python_version(),
        "chromium": chromium_version(args.chrome),
        "chromium_binary": args.chrome,
        "chromedriver": args.chromedriver,
        "chromium_flags": ["--headless", "--disable-gpu", "--no-sandbox"],
        "cpus": os.cpu_count(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "action_types": {"step": "CLICK_COORDS", "type_step": "TYPE_TEXT"},
        "config": {
            "tasks": tasks, "envs": args.envs, "steps": args.steps, "resets": args.resets,
            "seed": args.seed, "window_s": args.window,
            "throughput_steps": args.throughput_steps, "type_tasks": sorted(type_tasks),
            "warmup": {"resets": WARMUP_RESETS, "steps": WARMUP_STEPS},
            "percentile_method": "linear interpolation (numpy default)",
            "throughput": "one process per env, each its own chromedriver+Chromium; "
                          "total steps / wall time; episode-end resets inside the window",
        },
    }
    print(f"miniwob {mw_version} | selenium {meta['selenium']} | {meta['chromium']} | "
          f"{meta['cpus']} CPUs | flags {' '.join(meta['chromium_flags'])}", flush=True)

    results: dict[str, Any] = {}
    details: dict[str, Any] = {}
    t_all = time.monotonic()
    for task in tasks:
        t_task = time.monotonic()
        print(f"[{task}] latency: {args.resets} resets, {args.steps} steps ...", flush=True)
        reset_t, step_t, ended, type_t = measure_latency(
            task, args.resets, args.steps, args.seed, task in type_tasks)
        entry: dict[str, Any] = {
            "reset_ms": summary(reset_t),
            "step_ms": summary(step_t),
            "steps_per_s": {},
        }
        if type_t:
            entry["type_step_ms"] = summary(type_t)
        det = {"latency_episodes_ended": ended, "throughput": {}}
        for k in args.envs:
            print(f"[{task}] throughput K={k} ...", flush=True)
            tp = measure_throughput(task, k, args.seed, args.window, args.throughput_steps,
                                    args.chrome, args.chromedriver)
            entry["steps_per_s"][str(k)] = round(tp["steps_per_s"], 3)
            det["throughput"][str(k)] = {
                "total_steps": tp["total_steps"], "resets": tp["resets"],
                "wall_s": round(tp["wall_s"], 3)}
        det["task_wall_s"] = round(time.monotonic() - t_task, 1)
        results[task] = entry
        details[task] = det

    total_wall = time.monotonic() - t_all
    meta["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]

    # ---- table ----
    ks = [str(k) for k in args.envs]
    hdr = (f"{'task':<14} {'reset med':>9} {'reset p90':>9} {'step med':>9} {'step p90':>9} "
           + " ".join(f"{'K=' + k + ' st/s':>10}" for k in ks))
    print()
    print(f"MiniWoB++ baseline (miniwob {mw_version}, CLICK_COORDS steps, ms / steps/s)")
    print(hdr)
    print("-" * len(hdr))
    for task, e in results.items():
        print(f"{task:<14} {e['reset_ms']['median']:>9.1f} {e['reset_ms']['p90']:>9.1f} "
              f"{e['step_ms']['median']:>9.1f} {e['step_ms']['p90']:>9.1f} "
              + " ".join(f"{e['steps_per_s'][k]:>10.2f}" for k in ks))
    for task, e in results.items():
        if "type_step_ms" in e:
            print(f"{task}: TYPE_TEXT({TYPE_TEXT!r}) step median {e['type_step_ms']['median']:.1f} ms, "
                  f"p90 {e['type_step_ms']['p90']:.1f} ms")
    print(f"total wall time {total_wall:.1f} s; load average start {meta['loadavg_start']} "
          f"end {meta['loadavg_end']} on {meta['cpus']} CPUs (other load skews these figures)")

    if args.json_out:
        out = {"tool": "miniwob", "version": mw_version, "tasks": results,
               "meta": meta, "details": details, "total_wall_s": round(total_wall, 1)}
        d = os.path.dirname(os.path.abspath(args.json_out))
        os.makedirs(d, exist_ok=True)
        tmp = args.json_out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(out, f, indent=2)
            f.write("\n")
        os.replace(tmp, args.json_out)
        print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
