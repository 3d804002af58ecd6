#!/usr/bin/env python3
"""Qwen-VL speed, guirl (Candle) against PyTorch (transformers + peft, eager mode), side by side.

One command runs everything on CPU (about 15 minutes on a 2-core machine):

    python scripts/bench_qwen_speed.py

(any Python with torch, transformers >= 5 and peft; it builds the guirl side with
`cargo bench --bench qwen_speed --no-run`. `--sizes tiny` for a quick run, `--threads 2`
for one thread count, `--profile` to also time the decoder's matmuls alone, `--work DIR`
for the scratch folder. On a GPU, benches/gpu/run.sh calls it with `--device cuda --dtype
bf16 --sizes tiny,2b --guirl-bench BINARY`; that path has not yet run on a GPU.)

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
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "fixtures", "qwen_vl", "qwen3_vl")
MALLOC = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "17179869184"}
TOL = 1e-3

SYSTEM = (
    "You are a GUI agent. You see a screenshot of a web page and an instruction. Answer with "
    "exactly one action in guirl's text form: click(x, y), double_click(x, y), type(\"text\"), "
    "key(Enter), scroll(x, y, dx, dy) or done(). Coordinates are 0 to 1000 relative to the "
    "screenshot's width and height."
)
INSTRUCTIONS = [
    "Click the button labelled OK.",
    "Select the checkbox named Dark mode.",
    "Type hello world into the field.",
    "Press Enter to submit the form.",
    "Click the link in the top left corner.",
    "Scroll down to the bottom of the list.",
    "Double click the file icon.",
    "Click the second tab.",
]
ANSWERS = [
    "click(40, 96)",
    "click(120, 30)",
    'type("hello world")',
    "key(Enter)",
    "click(12, 10)",
    "scroll(80, 105, 0, 120)",
    "double_click(60, 150)",
    "click(100, 20)",
]
SCREEN = (160, 210)  # MiniWoB++'s screenshot size (width, height)

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

BIG = {
    "0.5b": dict(
        text=dict(
            vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=18,
            num_attention_heads=8, num_key_value_heads=4, head_dim=128, rms_norm_eps=1e-6,
            max_position_embeddings=32768, tie_word_embeddings=True,
            rope_parameters=dict(rope_type="default", rope_theta=5e6, mrope_section=[24, 20, 20], mrope_interleaved=True),
        ),
        vision=dict(
            depth=12, hidden_size=768, intermediate_size=3072, num_heads=12, patch_size=16, temporal_patch_size=2,
            spatial_merge_size=2, out_hidden_size=1024, num_position_embeddings=2304,
            deepstack_visual_indexes=[2, 5, 8], hidden_act="gelu_pytorch_tanh",
        ),
    ),
    # Qwen3-VL-2B-Instruct's shape
    "2b": dict(
        text=dict(
            vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
            num_attention_heads=16, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
            max_position_embeddings=32768, tie_word_embeddings=True,
            rope_parameters=dict(rope_type="default", rope_theta=5e6, mrope_section=[24, 20, 20], mrope_interleaved=True),
        ),
        vision=dict(
            depth=24, hidden_size=1024, intermediate_size=4096, num_heads=16, patch_size=16, temporal_patch_size=2,
            spatial_merge_size=2, out_hidden_size=2048, num_position_embeddings=2304,
            deepstack_visual_indexes=[5, 11, 17], hidden_act="gelu_pytorch_tanh",
        ),
    ),
}
# Qwen3-VL-2B's processor settings (its min_pixels scales 160x210 up to 224x320: 70 tokens).
BIG_PROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessor", "patch_size": 16, "temporal_patch_size": 2,
    "merge_size": 2, "size": {"shortest_edge": 65536, "longest_edge": 16777216},
    "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def torch_dtype(name):
    import torch

    return {"f32": torch.float32, "bf16": torch.bfloat16}[name]


# ----------------------------------------------------------------------------- set-up


def write_big_checkpoint(folder, size, dtype, device):
    """A random-weight Qwen3-VL of the given shape, in Hugging Face layout."""
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    stamp = json.dumps(dict(BIG[size], dtype=dtype), sort_keys=True)
    if os.path.exists(os.path.join(folder, "bench_stamp.json")):
        with open(os.path.join(folder, "bench_stamp.json")) as f:
            if f.read() == stamp:
                log(f"reusing the {size} checkpoint in {folder}")
                return
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    with open(os.path.join(TINY, "config.json")) as f:
        tiny = json.load(f)
    t = tiny["text_config"]
    ids = dict(bos_token_id=t["bos_token_id"], eos_token_id=t["eos_token_id"], pad_token_id=t["pad_token_id"])
    cfg = Qwen3VLConfig(
        text_config=dict(BIG[size]["text"], **ids),
        vision_config=BIG[size]["vision"],
        image_token_id=tiny["image_token_id"], video_token_id=tiny["video_token_id"],
        vision_start_token_id=tiny["vision_start_token_id"], vision_end_token_id=tiny["vision_end_token_id"],
        tie_word_embeddings=True,
    )
    t0 = time.time()
    torch.manual_seed(0)
    with torch.device(device):  # random init on the GPU when there is one (fast)
        model = Qwen3VLForConditionalGeneration(cfg).eval()
    model = model.to(torch_dtype(dtype)).cpu()
    n = sum(p.numel() for p in model.parameters())
    log(f"{size} checkpoint: {n / 1e6:.0f}M parameters, built in {time.time() - t0:.0f}s")
    model.save_pretrained(folder, safe_serialization=True)
    del model
    for name in ["tokenizer.json", "tokenizer_config.json", "chat_template.json", "generation_config.json"]:
        shutil.copy(os.path.join(TINY, name), os.path.join(folder, name))
    with open(os.path.join(folder, "preprocessor_config.json"), "w") as f:
        json.dump(BIG_PROCESSOR, f, indent=1)
    with open(os.path.join(folder, "bench_stamp.json"), "w") as f:
        f.write(stamp)
    log(f"wrote {folder} in {time.time() - t0:.0f}s")


def write_adapter(model_dir, out, rank, alpha):
    """A PEFT adapter made by peft on the language model's linears, B small and non-zero."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3VLForConditionalGeneration

    model = Qwen3VLForConditionalGeneration.from_pretrained(model_dir)
    torch.manual_seed(1)
    cfg = LoraConfig(
        r=rank, lora_alpha=alpha, lora_dropout=0.0,
        target_modules=r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)",
    )
    pm = get_peft_model(model, cfg)  # A: peft's Kaiming-uniform; B: zero, set small and random below
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_B" in n:
                p.normal_(0.0, 0.02)
    pm.save_pretrained(out)


def write_inputs(work, size, plan, model_dir, adapter_dir):
    import numpy as np
    from PIL import Image

    folder = os.path.join(work, size)
    os.makedirs(folder, exist_ok=True)
    samples = []
    for i in range(plan["batch"]):
        rng = np.random.default_rng(100 + i)
        w, h = SCREEN
        yy, xx = np.mgrid[0:h, 0:w]
        arr = np.stack([xx * 255 / (w - 1), yy * 255 / (h - 1), (xx + yy + 9 * i) % 64 * 4], -1)
        arr = np.clip(arr + rng.normal(0, 20, size=(h, w, 3)), 0, 255).astype(np.uint8)
        name = f"screen_{i}.png"
        Image.fromarray(arr, "RGB").save(os.path.join(folder, name))
        samples.append(dict(image=name, instruction=INSTRUCTIONS[i % 8], answer=ANSWERS[i % 8]))
    # group-relative advantages of rewards 1, 0, 0, 1, ...
    rewards = [float(i % 3 == 0) for i in range(plan["batch"])]
    mu = statistics.mean(rewards)
    sd = statistics.pstdev(rewards) or 1.0
    inputs = dict(
        backbone="qwen3_vl", system_prompt=SYSTEM, lora_rank=16, lora_alpha=32.0,
        adapter=os.path.relpath(adapter_dir, folder), lr=1e-3, weight_decay=0.01, samples=samples,
        advantages=[(r - mu) / sd for r in rewards] if plan["batch"] > 1 else [1.0],
        update=dict(warmup=plan["warmup"], reps=plan["reps"]),
        gen=dict(prompts=plan["gen_prompts"], new_tokens=plan["new_tokens"], warmup=plan["gen_warmup"],
                 reps=plan["gen_reps"], group=plan.get("group", 0)),
        model=model_dir,
    )
    path = os.path.join(folder, "inputs.json")
    with open(path, "w") as f:
        json.dump(inputs, f, indent=1)
    return path


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


# ----------------------------------------------------------------------------- PyTorch side


def rss_mib():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmHWM:", "VmRSS:")):
                k, v = line.split(":")
                out[k] = int(v.split()[0]) / 1024
    return out["VmHWM"], out["VmRSS"]


def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


class TorchSide:
    def __init__(self, inputs_path, prep_dir, attn, device, dtype):
        import torch
        from peft import PeftModel
        from safetensors.torch import load_file
        from transformers import Qwen3VLForConditionalGeneration

        self.torch, self.device = torch, device
        with open(inputs_path) as f:
            self.inputs = json.load(f)
        folder = os.path.dirname(inputs_path)
        with open(os.path.join(prep_dir, "prep.json")) as f:
            self.prep = json.load(f)
        pixels = load_file(os.path.join(prep_dir, "pixels.safetensors"))
        t0 = time.time()
        dt = torch_dtype(dtype)
        base = Qwen3VLForConditionalGeneration.from_pretrained(self.inputs["model"], dtype=dt, attn_implementation=attn)
        base = base.to(device)
        # peft keeps the adapters in f32 on a bf16 base (autocast_adapter_dtype), as guirl does
        self.model = PeftModel.from_pretrained(base, os.path.join(folder, self.inputs["adapter"]), is_trainable=True)
        self.model.eval()  # no dropout anywhere; gradients still flow
        self.sync()
        self.load_s = time.time() - t0
        self.lm = self.model.base_model.model  # Qwen3VLForConditionalGeneration with LoRA layers
        cfg = self.lm.config
        self.image_token = cfg.image_token_id
        self.banned = [cfg.image_token_id, cfg.video_token_id, cfg.vision_start_token_id, cfg.vision_end_token_id]
        self.eos = cfg.text_config.eos_token_id
        self.pad = cfg.text_config.pad_token_id
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        s = self.prep["samples"]
        self.prompts = [x["input_ids"] for x in s]
        self.answers = [x["answer"] for x in s]
        self.grids = torch.tensor([x["grid"] for x in s], dtype=torch.long, device=device)
        self.pixels = [pixels[f"pixel_values.{i}"].to(device, dt) for i in range(len(s))]
        self.adv = torch.tensor(self.inputs["advantages"], dtype=torch.float32, device=device)
        ban = torch.zeros(cfg.text_config.vocab_size, device=device)
        ban[self.banned] = float("-inf")
        self.ban = ban
        self.batch = self._batch()

    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def optimizer(self):
        return self.torch.optim.AdamW(
            self.params, lr=self.inputs["lr"], betas=(0.9, 0.999), eps=1e-8, weight_decay=self.inputs["weight_decay"]
        )

    def _batch(self):
        torch, dev = self.torch, self.device
        seqs = [p + a for p, a in zip(self.prompts, self.answers)]
        T = max(map(len, seqs))
        ids = torch.full((len(seqs), T), self.pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), T), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s)
            mask[i, : len(s)] = 1
        L = max(map(len, self.answers))
        bi, pi, tok, ai, aj = [], [], [], [], []
        for i, (p, a) in enumerate(zip(self.prompts, self.answers)):
            for j, t in enumerate(a):
                # the answer's token j is predicted from the position just before it
                bi.append(i), pi.append(len(p) - 1 + j), tok.append(t), ai.append(i), aj.append(j)
        amask = torch.zeros((len(seqs), L))
        amask[ai, aj] = 1.0
        t = lambda x: torch.tensor(x, device=dev)
        return dict(
            input_ids=ids.to(dev), attention_mask=mask.to(dev), pixel_values=torch.cat(self.pixels, 0),
            image_grid_thw=self.grids, mm_token_type_ids=(ids == self.image_token).int().to(dev),
            rows=(t(bi), t(pi)), tokens=t(tok), slots=(t(ai), t(aj)), amask=amask.to(dev),
        )

    def logp(self):
        """Per-token log-probs [B, L] (0 on padding) and entropies, as guirl's `score`."""
        torch = self.torch
        b = self.batch
        h = self.lm.model(
            input_ids=b["input_ids"], attention_mask=b["attention_mask"], pixel_values=b["pixel_values"],
            image_grid_thw=b["image_grid_thw"], mm_token_type_ids=b["mm_token_type_ids"],
        ).last_hidden_state
        rows = h[b["rows"]]
        logits = self.lm.lm_head(rows).float() + self.ban  # temperature 1
        lp = torch.log_softmax(logits, -1)
        chosen = lp.gather(1, b["tokens"][:, None])[:, 0]
        entropy = -(lp.exp() * lp).sum(-1)
        out = torch.zeros_like(b["amask"]).index_put(b["slots"], chosen)
        ent = torch.zeros_like(b["amask"]).index_put(b["slots"], entropy)
        return out, ent

    def loss(self):
        lp, _ = self.logp()
        m = self.batch["amask"]
        ratio = (lp - lp.detach()).exp()
        return -(ratio * self.adv[:, None] * m).sum() / m.sum(), lp

    def update(self, opt):
        opt.zero_grad(set_to_none=True)
        loss, lp = self.loss()
        loss.backward()
        opt.step()
        return loss, lp

    def generate(self, i, n, group=1):
        """Greedy: `group` copies of prompt i in one batch (a GRPO group's first step, as
        `generate(num_return_sequences=group)` expands it); the first answer's tokens."""
        torch = self.torch
        ids = torch.tensor([self.prompts[i]] * group, device=self.device)
        pixels = self.pixels[i] if group == 1 else torch.cat([self.pixels[i]] * group)
        with torch.no_grad():
            out = self.model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=pixels,
                image_grid_thw=self.grids[i : i + 1].repeat(group, 1), mm_token_type_ids=(ids == self.image_token).int(),
                max_new_tokens=n, min_new_tokens=n, do_sample=False, suppress_tokens=self.banned,
                pad_token_id=self.pad, eos_token_id=self.eos,
            )
        return out[0, ids.shape[1]:].tolist()


def torch_check(args):
    """PyTorch recomputes guirl's check values; returns the differences."""
    side = TorchSide(args.inputs, args.prep, args.attn, args.device, args.dtype)
    torch = side.torch
    p = side.prep
    n_params = sum(x.numel() for x in side.params)
    assert n_params == p["trainable_params"], (n_params, p["trainable_params"])
    opt = side.optimizer()
    loss0, lp0 = side.update(opt)
    gn = torch.sqrt(sum((q.grad.float() ** 2).sum() for q in side.params)).item()
    with torch.no_grad():
        loss1, lp1 = side.loss()
    lens = [len(a) for a in side.answers]

    def diff(mine, theirs):
        return max(abs(mine[i, j].item() - theirs[i][j]) for i in range(len(lens)) for j in range(lens[i]))

    def prefix(a, b):
        k = 0
        while k < min(len(a), len(b)) and a[k] == b[k]:
            k += 1
        return k

    gen = [side.generate(i, len(t)) for i, t in enumerate(p["gen_tokens"])]
    res = dict(
        logp0_max_abs_diff=diff(lp0.detach(), p["logp0"]),
        logp1_max_abs_diff=diff(lp1, p["logp1"]),
        loss0=(loss0.item(), p["loss0"]), loss1=(loss1.item(), p["loss1"]),
        grad_norm=(gn, p["grad_norm"]),
        gen_tokens_equal_prefix=[prefix(g, t) for g, t in zip(gen, p["gen_tokens"])],
        gen_tokens_total=[len(t) for t in p["gen_tokens"]],
        seq_tokens=[len(a) + len(b) for a, b in zip(side.prompts, side.answers)],
        trainable_params=n_params,
    )
    ok = res["logp0_max_abs_diff"] < TOL and res["logp1_max_abs_diff"] < TOL
    if args.strict and not ok:
        sys.exit(f"guirl and PyTorch disagree: {res}")
    return res


def group_gen(g, times):
    """The group generation's figures, as the guirl side writes them (None: not measured)."""
    if not times:
        return None
    med = statistics.median(times)
    return dict(group=g["group"], new_tokens=g["new_tokens"], times_s=times, median_s=med,
                tokens_per_s=g["group"] * g["new_tokens"] / med)


def torch_time(args):
    import torch

    torch.set_num_threads(args.threads)
    side = TorchSide(args.inputs, args.prep, args.attn, args.device, args.dtype)
    _, rss_loaded = rss_mib()
    log(f"torch: loaded in {side.load_s:.1f}s, RSS {rss_loaded:.0f} MiB, threads {torch.get_num_threads()}")
    g = side.inputs["gen"]

    def timed(label, run):
        """Seconds of each timed repetition of `run` (after the warm-up ones)."""
        times = []
        for r in range(g["warmup"] + g["reps"]):
            t = time.perf_counter()
            run()
            side.sync()
            dt = time.perf_counter() - t
            if r >= g["warmup"]:
                times.append(dt)
            log(f"torch generate {label}rep {r}: {dt:.3f}s")
        return times

    def generate(i, group=1):
        assert len(side.generate(i, g["new_tokens"], group)) == g["new_tokens"]

    gen_times = timed("", lambda: [generate(i) for i in range(g["prompts"])])
    group_times = timed(f"a group of {g['group']} ", lambda: generate(0, g["group"])) if g.get("group") else []
    gen_peak, _ = rss_mib()

    reset_peak()
    u = side.inputs["update"]
    opt = side.optimizer()
    times = []
    for r in range(u["warmup"] + u["reps"]):
        t = time.perf_counter()
        loss, _ = side.update(opt)
        side.sync()
        dt = time.perf_counter() - t
        if r >= u["warmup"]:
            times.append(dt)
        log(f"torch update rep {r}: {dt:.3f}s loss {loss.item():.5f}")
    upd_peak, _ = rss_mib()

    # one update in phases (the vision tower timed on its own: frozen, no graph)
    b = side.batch
    t = time.perf_counter()
    with torch.no_grad():
        side.lm.model.get_image_features(b["pixel_values"], b["image_grid_thw"])
    side.sync()
    vision_s = time.perf_counter() - t
    opt.zero_grad(set_to_none=True)
    side.sync()
    # each phase timed when its call returns and when the device is done (as guirl's side)
    t = time.perf_counter()
    loss, _ = side.loss()
    fwd_issue = time.perf_counter() - t
    side.sync()
    fwd_s = time.perf_counter() - t
    t = time.perf_counter()
    loss.backward()
    bwd_issue = time.perf_counter() - t
    side.sync()
    bwd_s = time.perf_counter() - t
    t = time.perf_counter()
    opt.step()
    opt_issue = time.perf_counter() - t
    side.sync()
    opt_s = time.perf_counter() - t
    launch_us = torch_launch_cost(side.device)

    n = len(side.prompts)
    seq_tokens = sum(len(a) + len(b) for a, b in zip(side.prompts, side.answers))
    new_tokens = g["prompts"] * g["new_tokens"]
    upd = statistics.median(times)
    gen = statistics.median(gen_times)
    return dict(
        side="pytorch", threads=args.threads, load_s=side.load_s, rss_after_load_mib=rss_loaded,
        update=dict(batch=n, seq_tokens=seq_tokens, times_s=times, median_s=upd, samples_per_s=n / upd,
                    tokens_per_s=seq_tokens / upd, peak_rss_mib=upd_peak),
        gen=dict(prompts=g["prompts"], new_tokens=g["new_tokens"], times_s=gen_times, median_s=gen,
                 tokens_per_s=new_tokens / gen, peak_rss_mib=gen_peak),
        group_gen=group_gen(g, group_times),
        phases_s=dict(prompt_and_preprocess=0.0, vision=vision_s, text_forward=fwd_s - vision_s, backward=bwd_s,
                      optimizer=opt_s),
        phases_issued_s=dict(text_forward=fwd_issue - vision_s, backward=bwd_issue, optimizer=opt_issue),
        launch_us=launch_us,
    )


def torch_launch_cost(device):
    """Host microseconds to issue one small elementwise op (as guirl's `launch_cost`)."""
    import torch

    x = torch.zeros(1024, device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    n = 2000
    t = time.perf_counter()
    for _ in range(n):
        x = x + 1.0
    us = (time.perf_counter() - t) * 1e6 / n
    sync()
    assert float(x.max()) == n
    return us


def torch_matmul(args):
    """The decoder's linears alone at one sample's shapes, as the guirl `matmul` mode."""
    import torch

    torch.set_num_threads(args.threads)
    dev, dt = args.device, torch_dtype(args.dtype)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    with open(args.inputs) as f:
        inputs = json.load(f)
    with open(os.path.join(inputs["model"], "config.json")) as f:
        c = json.load(f)["text_config"]
    with open(os.path.join(args.prep, "prep.json")) as f:
        s0 = json.load(f)["samples"][0]
    t, n_ans = len(s0["input_ids"]) + len(s0["answer"]), len(s0["answer"])
    h, i = c["hidden_size"], c["intermediate_size"]
    q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    res = {}

    def run(name, rows, shapes, times):
        tw = [[], [], []]
        for _ in range(3):
            acc = [0.0, 0.0, 0.0]
            for inp, o in shapes:
                x = torch.randn(rows, inp, device=dev, dtype=dt)
                w = (torch.randn(o, inp, device=dev) * 0.02).to(dt)
                g = torch.randn(rows, o, device=dev, dtype=dt)
                for k, f in enumerate([lambda: x @ w.t(), lambda: g @ w, lambda: x.t() @ g]):
                    sync()
                    t0 = time.perf_counter()
                    f()
                    sync()
                    acc[k] += time.perf_counter() - t0
            for k in range(3):
                tw[k].append(acc[k] * times)
        flops = sum(2 * rows * a * b for a, b in shapes) * times
        res[name] = dict(rows=rows, times=times, gflop_per_pass=flops / 1e9, forward_s=statistics.median(tw[0]),
                         input_grad_s=statistics.median(tw[1]), weight_grad_s=statistics.median(tw[2]))

    with torch.no_grad():
        run("decoder_linears", t, [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)], c["num_hidden_layers"])
        run("lm_head_at_answers", n_ans, [(h, c["vocab_size"])], 1)
    return res


def torch_worker(args):
    res = {"check": torch_check, "time": torch_time, "matmul": torch_matmul}[args.job](args)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


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
        "(guirl: the prompt run once, the answers in chunks of `decode_rows` rows; PyTorch: the "
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
