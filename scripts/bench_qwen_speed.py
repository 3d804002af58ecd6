#!/usr/bin/env python3
"""Qwen-VL speed, guirl (Candle) against PyTorch (transformers + peft, eager mode), side by side.

One command runs everything on CPU (about 15 minutes on a 2-core machine):

    python scripts/bench_qwen_speed.py

(any Python with torch, transformers >= 5 and peft; it builds the guirl side with
`cargo bench --bench qwen_speed --no-run`. `--sizes tiny` for a quick run, `--threads 2`
for one thread count, `--profile` to also time the decoder's matmuls alone, `--work DIR`
for the scratch folder. On a GPU, benches/gpu/run.sh calls it with `--device cuda --dtype
bf16 --sizes SIZE --guirl-bench BINARY`, one size at a time: docs/gpu.md has its runs.)

For each model size and thread count, both sides run the same computation on the same
inputs, each in a fresh process (so the peak RSS is its own):

1. A LoRA GRPO-style update: per-token log-probs of the answer tokens after a screenshot
   prompt (guirl: `QwenVlPolicy::score`; PyTorch: the peft model's hidden states, the LM
   head at the answer positions only, log-softmax), the surrogate
   `L = -sum(mask * exp(logp - sg(logp)) * A) / sum(mask)`, backward, one AdamW step over
   the adapters (r 16, alpha 32 on q,k,v,o,gate,up,down of the language model). The frozen
   vision tower runs in every step on both sides (guirl's per-screenshot cache is defeated
   with a fresh screenshot each repetition). Reported: samples/s, tokens/s (prompt + answer
   tokens), and the RSS high-water mark.
2. Rollout generation: greedy decoding of N new tokens with a KV cache from the same prompts,
   one prompt at a time (guirl: `QwenVl::hidden` then `step`, the calls `act` makes;
   PyTorch: `generate`), end-of-turn and vision tokens banned so both always write N.
   Reported: new tokens/s (vision and prefill included) and the RSS high-water mark.

Sizes: `tiny` is the test fixture `fixtures/qwen_vl/qwen3_vl`; `0.5b` a random-weight
Qwen3-VL of 520M parameters (text hidden 1024 x 18 layers, Qwen's 151 936-token vocabulary,
vision 12 blocks of 768); `2b` Qwen3-VL-2B's shape (for GPUs). The script writes them with
transformers into the scratch folder (with the fixture's tokenizer and template and
Qwen3-VL-2B's processor settings; never committed; reused when the config matches).

Before timing, it checks that the sides compute the same thing: guirl's `prepare` mode
writes each sample's prompt ids, answer tokens and patches as the policy builds them, the
per-token log-probs before and after one update, and greedy tokens; PyTorch recomputes
them from the same adapter (made here by peft, B non-zero): within 1e-3 in f32.

Threads: `RAYON_NUM_THREADS` for guirl, `torch.set_num_threads` (and OMP/MKL) for PyTorch.
guirl's bench binary runs with the malloc settings the `guirl` command sets for itself
(`MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=17179869184`, see src/cli/mod.rs). The machine is
shared: before each timed run the script waits (up to `--quiet-wait` seconds) for other
processes to go quiet, runs a disturbed measurement once more (`--retries`), and the table
reports the CPU share other processes took during the run it kept.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time

from qwen_speed_setup import TINY, ROOT, log, write_adapter, write_big_checkpoint, write_inputs
from qwen_speed_torch import torch_worker

MALLOC = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "17179869184"}


# Per size: update batch, warm-up and timed repetitions; generation prompts, new tokens,
# warm-up and timed repetitions. On CPU, guirl's update holds ~2 GB of activations per
# 0.5B sample and ~4 GB more during backward (batch 4 passed 22 GB and was killed): batch 2.
# PyTorch's generate needs two warm-up rounds at 0.5B (its first calls are ~40% slower).
# group: answers of the first prompt decoded together (a GRPO group's first step), timed
# with the generation's warm-up and repetitions.
PLAN = {
    "cpu": {
        "tiny": dict(batch=8, warmup=2, reps=7, gen_prompts=4, new_tokens=32, gen_warmup=1, gen_reps=5, group=8),
        "0.5b": dict(batch=2, warmup=1, reps=3, gen_prompts=2, new_tokens=16, gen_warmup=2, gen_reps=3,
                     group=8),
        "2b": dict(batch=1, warmup=1, reps=2, gen_prompts=1, new_tokens=8, gen_warmup=1, gen_reps=2),
    },
    "cuda": {
        "tiny": dict(batch=8, warmup=2, reps=5, gen_prompts=4, new_tokens=32, gen_warmup=1, gen_reps=3, group=8),
        "0.5b": dict(batch=8, warmup=2, reps=5, gen_prompts=4, new_tokens=32, gen_warmup=1, gen_reps=3, group=8),
        "2b": dict(batch=4, warmup=2, reps=5, gen_prompts=4, new_tokens=32, gen_warmup=1, gen_reps=3, group=8),
    },
}


# ----------------------------------------------------------------------------- the machine


def cpu_busy_s():
    """Seconds of CPU time all processes have used (from /proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def children_cpu_s():
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def wait_quiet(limit_s):
    """Wait (up to limit_s) until other processes use under 20% of the machine for 4 s."""
    t0 = time.time()
    while True:
        b0, w0 = cpu_busy_s(), time.time()
        time.sleep(4)
        load = (cpu_busy_s() - b0) / ((time.time() - w0) * os.cpu_count())
        if load < 0.2 or time.time() - t0 > limit_s:
            if time.time() - t0 > 3:
                log(f"waited {time.time() - t0:.0f}s for the machine to be quiet (other load now {load:.0%})")
            return load


def gpu_memory_mib(pid):
    """The GPU memory nvidia-smi reports for a process (MiB), or None."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=5,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 2 and parts[0] == str(pid):
            return float(parts[1])
    return None


class Run:
    def __init__(self, returncode, other_load, gpu_peak_mib):
        self.returncode, self.other_load, self.gpu_peak_mib = returncode, other_load, gpu_peak_mib


def monitored(cmd, env, stderr=None, gpu=False, stdout=None):
    """Run cmd; measure the CPU time other processes took meanwhile (a share of the machine,
    so a result taken beside other work can be flagged) and, on a GPU, the process's peak
    GPU memory as nvidia-smi sees it."""
    b0, c0, w0 = cpu_busy_s(), children_cpu_s(), time.time()
    p = subprocess.Popen(cmd, env=env, stderr=stderr, stdout=stdout)
    peak = [None]

    def poll():
        while p.poll() is None:
            m = gpu_memory_mib(p.pid)
            if m is not None:
                peak[0] = max(peak[0] or 0.0, m)
            time.sleep(0.2)

    th = threading.Thread(target=poll, daemon=True) if gpu else None
    if th:
        th.start()
    p.wait()
    if th:
        th.join()
    wall = time.time() - w0
    foreign = (cpu_busy_s() - b0) - (children_cpu_s() - c0)
    return Run(p.returncode, max(0.0, foreign) / (wall * os.cpu_count()), peak[0])


# ----------------------------------------------------------------------------- guirl side


def build(work):
    """Build the bench (release) and copy the binary, so a rebuild meanwhile cannot touch it."""
    log("building the guirl bench (cargo bench --no-run, release)...")
    r = subprocess.run(
        ["cargo", "bench", "--bench", "qwen_speed", "--no-run", "--message-format=json-render-diagnostics"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )
    if r.returncode != 0:
        sys.exit("cargo bench --bench qwen_speed --no-run failed")
    exe = None
    for line in r.stdout.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg["target"]["name"] == "qwen_speed" and msg.get("executable"):
            exe = msg["executable"]
    if exe is None:
        sys.exit("cargo did not report the qwen_speed executable")
    dst = os.path.join(work, "qwen_speed")
    shutil.copy(exe, dst)
    return dst


def guirl(ctx, args, threads):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), **MALLOC)
    args = args + ["--device", ctx.device, "--dtype", ctx.dtype]
    log("$", f"RAYON_NUM_THREADS={threads}", os.path.basename(ctx.exe), " ".join(args))
    with open(ctx.log_path, "a") as f:
        r = monitored([ctx.exe] + args, env, stderr=f, stdout=f, gpu=ctx.device == "cuda")
    if r.returncode != 0:
        sys.exit(f"guirl side failed (see {ctx.log_path})")
    return r

def run_torch(ctx, job, inputs, prep, out, threads, strict=False):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    cmd = [sys.executable, os.path.abspath(__file__), "torch-worker", job, "--inputs", inputs, "--prep", prep,
           "--out", out, "--threads", str(threads), "--attn", ctx.attn, "--device", ctx.device,
           "--dtype", ctx.dtype] + (["--strict"] if strict else [])
    log("$", " ".join(cmd[1:]))
    r = monitored(cmd, env, gpu=ctx.device == "cuda")
    if r.returncode != 0:
        sys.exit(f"PyTorch side failed ({job})")
    with open(out) as f:
        res = json.load(f)
    res["other_load"], res["gpu_peak_mib"] = r.other_load, r.gpu_peak_mib
    return res


# ----------------------------------------------------------------------------- the report


def table(ctx, results, checks):
    gpu = ctx.device == "cuda"
    mem = "peak GPU memory, whole process (MiB)" if gpu else "update peak RSS (MiB)"
    lines = [
        f"| size | threads | side | update samples/s | update tokens/s | {mem} | generation tokens/s | "
        f"generation peak RSS (MiB) | other load |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (size, threads), r in results.items():
        g, t = r["guirl"], r["pytorch"]
        m = (lambda x: x["gpu_peak_mib"] or float("nan")) if gpu else (lambda x: x["update"]["peak_rss_mib"])
        for name, x in [("guirl", g), ("PyTorch", t)]:
            lines.append(
                f"| {size} | {threads} | {name} | {x['update']['samples_per_s']:.3g} | "
                f"{x['update']['tokens_per_s']:.3g} | {m(x):.0f} | {x['gen']['tokens_per_s']:.3g} | "
                f"{x['gen']['peak_rss_mib']:.0f} | {x['other_load']:.0%} |"
            )
        ratio = lambda k, q: g[k][q] / t[k][q]
        lines.append(
            f"| {size} | {threads} | **guirl / PyTorch** | **{ratio('update', 'samples_per_s'):.2f}x** | "
            f"**{ratio('update', 'tokens_per_s'):.2f}x** | {m(g) / m(t):.2f}x | "
            f"**{ratio('gen', 'tokens_per_s'):.2f}x** | {ratio('gen', 'peak_rss_mib'):.2f}x | |"
        )
    out = "\n".join(lines) + (
        "\n\nother load: CPU time other processes used while that side ran, as a share of the machine "
        "(a figure taken beside other work is slower than it should be; guirl's spinning thread pool suffers "
        "more from it than PyTorch's)."
    )
    phases = [
        "",
        "One update in phases (seconds; guirl's text forward includes building the prompt and the LM head):",
        "",
        "| size | threads | side | prompt + preprocess | vision | text forward | backward | optimizer |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (size, threads), r in results.items():
        for name in ["guirl", "pytorch"]:
            p = r[name]["phases_s"]
            phases.append(
                f"| {size} | {threads} | {name} | {p['prompt_and_preprocess']:.3f} | {p['vision']:.3f} | "
                f"{p['text_forward']:.3f} | {p['backward']:.3f} | {p['optimizer']:.3f} |"
            )
    phases += [
        "",
        "The same phases timed when the call returned (the host had queued the work), before waiting for the "
        "device; where this is close to the figure above, the host issuing kernels is the bound, not the device. "
        "Launch: host microseconds to issue one small elementwise op.",
        "",
        "| size | threads | side | text forward | backward | optimizer | graph nodes | launch µs |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (size, threads), r in results.items():
        for name in ["guirl", "pytorch"]:
            p = r[name].get("phases_issued_s")
            if p is None:
                continue
            phases.append(
                f"| {size} | {threads} | {name} | {p['text_forward']:.3f} | {p['backward']:.3f} | "
                f"{p['optimizer']:.3f} | {r[name].get('graph_nodes', '')} | {r[name].get('launch_us', 0):.1f} |"
            )
    groups = [
        "",
        "A group: G answers of one prompt decoded together, greedy, every answer the same length "
        "(guirl: the prompt run once, the G answers in one chunk of G rows; PyTorch: the "
        "prompt repeated G times in one `generate` batch, as `num_return_sequences` does):",
        "",
        "| size | threads | G | guirl tokens/s | PyTorch tokens/s | guirl / PyTorch |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for (size, threads), r in results.items():
        g, t = r["guirl"].get("group_gen"), r["pytorch"].get("group_gen")
        if g and t:
            groups.append(
                f"| {size} | {threads} | {g['group']} | {g['tokens_per_s']:.3g} | {t['tokens_per_s']:.3g} | "
                f"**{g['tokens_per_s'] / t['tokens_per_s']:.2f}x** |"
            )
    group_updates = [
        "",
        "guirl alone: an update on a group's first step, G answers after one screen and one prompt in one "
        "minibatch (shared: the prompt runs once, the answers apart), beside the same minibatch whose "
        "instructions end in G different digits (apart: as many tokens, every prompt run whole), in turns:",
        "",
        "| size | threads | G | shared s | apart s | apart / shared |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for (size, threads), r in results.items():
        u = r["guirl"].get("group_update")
        if u:
            group_updates.append(
                f"| {size} | {threads} | {u['group']} | {u['shared_median_s']:.3f} | {u['apart_median_s']:.3f} | "
                f"**{u['speedup']:.2f}x** |"
            )
    groups += group_updates
    shapes = ["", "Shapes and checks:", ""]
    for size, c in checks.items():
        plan = PLAN[ctx.device][size]
        shapes.append(
            f"- {size}: batch {plan['batch']}, sequence tokens per sample {c['seq_tokens']}, "
            f"{c['trainable_params']} LoRA parameters (r 16); generation {plan['gen_prompts']} prompts x "
            f"{plan['new_tokens']} new tokens. guirl vs PyTorch: log-probs max |diff| "
            f"{c['logp0_max_abs_diff']:.1e} before and {c['logp1_max_abs_diff']:.1e} after one AdamW step, "
            f"loss {c['loss0'][0]:.6f} / {c['loss0'][1]:.6f}, gradient norm {c['grad_norm'][0]:.6f} / "
            f"{c['grad_norm'][1]:.6f}, greedy tokens equal {c['gen_tokens_equal_prefix']} of "
            f"{c['gen_tokens_total']}"
        )
    return out + "\n" + "\n".join(phases) + "\n" + "\n".join(groups) + "\n" + "\n".join(shapes)


def matmul_table(matmuls):
    lines = [
        "",
        "The decoder's linear layers alone, one sample (seconds, GFLOP/s in brackets). candle's backward also "
        "computes the weight gradient of every frozen weight, and accumulates it into a zero tensor; PyTorch "
        "computes only the input gradient:",
        "",
        "| size | threads | side | forward x W^T | input gradient g W | weight gradient x^T g | "
        "zero-init accumulation | LM head at the answers: forward / weight gradient |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (size, threads), mm in matmuls.items():
        for name in ["guirl", "pytorch"]:
            d, hd = mm[name]["decoder_linears"], mm[name]["lm_head_at_answers"]
            gf = d["gflop_per_pass"]
            cell = lambda k: f"{d[k]:.3f} ({gf / d[k]:.0f})"
            g = name == "guirl"
            wg = cell("weight_grad_s") + " (not needed)" if g else "not computed"
            acc = f"{d['weight_grad_accumulate_s']:.3f}" if g else "-"
            head_wg = f"{hd['weight_grad_s']:.4f}" if g else "not computed"
            lines.append(
                f"| {size} | {threads} | {name} | {cell('forward_s')} | {cell('input_grad_s')} | {wg} | {acc} | "
                f"{hd['forward_s']:.4f} / {head_wg} |"
            )
    return "\n".join(lines)


class Ctx:
    pass


def measured(run, quiet, retries):
    """A timed run, repeated (up to `retries` times, after waiting for quiet) while other
    processes took more than 15% of the machine during it; the least disturbed one is kept."""
    best = None
    for attempt in range(retries + 1):
        if quiet:
            wait_quiet(quiet)
        res = run()
        if best is None or res["other_load"] < best["other_load"]:
            best = res
        if best["other_load"] <= 0.15:
            break
        if attempt < retries:
            log(f"other processes took {res['other_load']:.0%} of the machine during that run: running it again")
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    w = sub.add_parser("torch-worker")
    w.add_argument("job", choices=["check", "time", "matmul"])
    w.add_argument("--inputs", required=True)
    w.add_argument("--prep", required=True)
    w.add_argument("--out", required=True)
    w.add_argument("--threads", type=int, default=2)
    w.add_argument("--attn", default="sdpa")
    w.add_argument("--device", default="cpu")
    w.add_argument("--dtype", default="f32")
    w.add_argument("--strict", action="store_true")
    ap.add_argument("--sizes", default="tiny,0.5b", help="comma-separated: tiny, 0.5b, 2b")
    ap.add_argument("--threads", default=None, help="comma-separated thread counts (CPU default 1,2)")
    ap.add_argument("--work", default="/tmp/guirl-qwen-speed")
    ap.add_argument("--attn", default="sdpa", help="transformers attention: sdpa (its default) or eager")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--guirl-bench", default=None, help="a built qwen_speed binary (default: build it with cargo)")
    ap.add_argument("--profile", action="store_true",
                    help="also time the decoder's matmuls alone on both sides (forward, input and weight gradients)")
    ap.add_argument("--retries", type=int, default=None,
                    help="re-runs of a timed run that other processes disturbed (CPU: 1)")
    ap.add_argument("--quiet-wait", type=float, default=None,
                    help="seconds to wait, before each timed run, for other processes to go quiet (CPU: 180)")
    args = ap.parse_args()
    if args.cmd == "torch-worker":
        return torch_worker(args)

    t_start = time.time()
    ctx = Ctx()
    ctx.device, ctx.dtype, ctx.attn = args.device, args.dtype, args.attn
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    ctx.log_path = os.path.join(work, "guirl.log")
    ctx.exe = os.path.abspath(args.guirl_bench) if args.guirl_bench else build(work)
    cpu = args.device == "cpu"
    quiet = args.quiet_wait if args.quiet_wait is not None else (180 if cpu else 0)
    args.retries = args.retries if args.retries is not None else (1 if cpu else 0)
    threads = [int(t) for t in (args.threads or ("1,2" if cpu else str(os.cpu_count()))).split(",")]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True).stdout.strip() or "(not a git checkout)"
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout.strip()
    results, checks, matmuls = {}, {}, {}
    for size in args.sizes.split(","):
        plan = PLAN[args.device][size]
        if size == "tiny":
            model_dir = TINY
        else:
            model_dir = os.path.join(work, f"qwen3_vl_{size}_{args.dtype}")
            write_big_checkpoint(model_dir, size, args.dtype, args.device)
        adapter = os.path.join(work, size, "adapter")
        os.makedirs(os.path.join(work, size), exist_ok=True)
        write_adapter(model_dir, adapter, 16, 32)
        inputs = write_inputs(work, size, plan, model_dir, adapter)
        prep = os.path.join(work, size, "prep")
        guirl(ctx, ["prepare", "--model", model_dir, "--inputs", inputs, "--out", prep], max(threads))
        checks[size] = run_torch(ctx, "check", inputs, prep, os.path.join(work, size, "check.json"), max(threads),
                                 strict=args.dtype == "f32")
        log(f"{size}: check {json.dumps(checks[size])}")
        for n in threads:

            def guirl_time():
                out = os.path.join(work, size, f"guirl_{n}.json")
                r = guirl(ctx, ["time", "--model", model_dir, "--inputs", inputs, "--out", out], n)
                with open(out) as f:
                    g = json.load(f)
                g["other_load"], g["gpu_peak_mib"] = r.other_load, r.gpu_peak_mib
                return g

            g = measured(guirl_time, quiet, args.retries)
            t = measured(lambda: run_torch(ctx, "time", inputs, prep, os.path.join(work, size, f"torch_{n}.json"), n),
                         quiet, args.retries)
            results[(size, n)] = {"guirl": g, "pytorch": t}
            log(f"{size} x{n}: guirl update {g['update']['median_s']:.3f}s gen {g['gen']['median_s']:.3f}s | "
                f"torch update {t['update']['median_s']:.3f}s gen {t['gen']['median_s']:.3f}s")
            if args.profile:
                mg = os.path.join(work, size, f"guirl_matmul_{n}.json")
                guirl(ctx, ["matmul", "--model", model_dir, "--inputs", inputs, "--out", mg], n)
                with open(mg) as f:
                    mm = {"guirl": json.load(f)}
                mm["pytorch"] = run_torch(ctx, "matmul", inputs, prep,
                                          os.path.join(work, size, f"torch_matmul_{n}.json"), n)
                matmuls[(size, n)] = mm
    with open(os.path.join(work, "results.json"), "w") as f:
        json.dump({f"{k[0]}@{k[1]}": v for k, v in results.items()} | {"checks": checks}, f, indent=1)
    import platform

    import torch

    where = (f"{torch.cuda.get_device_name(0)}" if not cpu else
             f"CPU, {os.cpu_count()} cores ({platform.machine()})")
    print(f"\nQwen3-VL LoRA update and greedy generation, {args.dtype}, {where}, torch {torch.__version__}, "
          f"attention `{args.attn}`; medians after warm-up; guirl at {commit}{' (src modified)' if dirty else ''}; "
          f"whole run {time.time() - t_start:.0f}s\n")
    print(table(ctx, results, checks))
    if matmuls:
        print(matmul_table(matmuls))


if __name__ == "__main__":
    main()
