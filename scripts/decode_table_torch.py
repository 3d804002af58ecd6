#!/usr/bin/env python3
"""The PyTorch side of the rollout decoding table: transformers' `generate` (sdpa) over the
same prompts guirl's decoder ran, with the same LoRA adapters, and both tables side by side.

    cargo bench --bench decode_table -- --model DIR --rollouts 1,8 --tokens 32 \\
        --export /tmp/prompts --out /tmp/guirl.json
    python scripts/decode_table_torch.py --model DIR --prompts /tmp/prompts \\
        --rollouts 1,8 --guirl /tmp/guirl.json [--device cuda --dtype bf16] [--out torch.json]

(any Python with torch, transformers >= 5 and peft; benches/gpu/run.sh runs both on a GPU.)

For each count n, the first n exported prompts (each its own screenshot, all written by the
policy: system prompt, screenshot, instruction) go into one `generate` call, left-padded,
sampled at temperature 1 with nothing truncated (top-k 0, top-p 1), the vision tokens
suppressed and the end token held back until the last (`min_new_tokens`), so every answer
writes `new_tokens` tokens. The base model is wrapped by peft with adapters of the policy's
rank, alpha and targets (B zero, as a fresh adapter; unmerged, so their products run as in
guirl's decoder; f32 adapters on a bf16 base, peft's default and guirl's). Prefill is a
`generate` of one token; decoding is the rest: a call of `new_tokens` minus the one-token
call, over n x (new_tokens - 1) tokens. guirl's table counts each answer's first token too,
drawn from the prefill's logits without a decoding pass; the side-by-side table leaves it out
on both sides (tokens that cost a decoding pass, per second of decoding). guirl's decoder keeps the system prompt's cache
between prompts and PyTorch's `generate` does not, so prefill times are not like for like;
the decoding rates are. Peak memory on a GPU: on both sides the card's used memory as
`nvidia-smi` reports it, sampled every 20 ms while a row runs (context, allocator caches and
all), the same measure; this side also reports PyTorch's own allocator peak (`alloc_peak_mib`
in the JSON, tensors alone). On a CPU, PyTorch's resident high-water mark
(its weights are mapped from the file, which an allocator's count misses; torch's own
libraries count too), and guirl's bytes allocated (its weights are copied into allocated
memory; its resident set after the warm-up also holds what its allocator keeps for reuse).
Both sides warm up at the largest count first, so neither times its first touch of fresh
memory.
"""
import argparse
import contextlib
import json
import os
import subprocess
import threading
import time

# the Qwen speed bench's helpers (this folder is on the path when a script runs from it)
from qwen_speed_setup import torch_dtype
from qwen_speed_torch import reset_peak, rss_mib


class GpuUsed:
    """The card's peak used memory (MiB) while a row runs: `nvidia-smi`'s `memory.used` of GPU 0
    sampled every 20 ms, as guirl's decode_table samples it."""

    def __enter__(self):
        self.peak, self.stop = 0.0, threading.Event()

        def sample():
            while True:
                try:
                    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                                          "--id=0"], capture_output=True, text=True, timeout=5).stdout
                    self.peak = max(self.peak, float(out.strip()))
                except (OSError, ValueError, subprocess.SubprocessError):
                    pass
                if self.stop.wait(0.02):
                    break

        self.thread = threading.Thread(target=sample, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="the Qwen-VL checkpoint folder decode_table ran")
    ap.add_argument("--prompts", required=True, help="decode_table --export's folder")
    ap.add_argument("--rollouts", default="1,8", help="comma-separated counts, at most the exported prompts")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--threads", type=int, default=None, help="torch threads on a CPU (default: torch's)")
    ap.add_argument("--guirl", default=None, help="decode_table --out's JSON, for the side-by-side table")
    ap.add_argument("--out", default=None, help="write this side's table as JSON")
    args = ap.parse_args()

    import torch
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file

    if args.threads:
        torch.set_num_threads(args.threads)
    dev = args.device
    dt = torch_dtype(args.dtype)
    with open(os.path.join(args.prompts, "prompts.json")) as f:
        doc = json.load(f)
    samples, tokens, lora = doc["samples"], doc["new_tokens"], doc["lora"]
    counts = [int(c) for c in args.rollouts.split(",")]
    if max(counts) > len(samples):
        ap.error(f"--rollouts {max(counts)}: only {len(samples)} prompts were exported (decode_table --rollouts)")
    pixels = load_file(os.path.join(args.prompts, "pixels.safetensors"))

    with open(os.path.join(args.model, "config.json")) as f:
        model_type = json.load(f)["model_type"]
    if model_type == "qwen2_5_vl":
        from transformers import Qwen2_5_VLForConditionalGeneration as Model
    else:
        from transformers import Qwen3VLForConditionalGeneration as Model
    base = Model.from_pretrained(args.model, dtype=dt, attn_implementation="sdpa").to(dev).eval()
    targets = "|".join(lora["targets"])
    cfg = LoraConfig(r=lora["rank"], lora_alpha=lora["alpha"], lora_dropout=0.0,
                     target_modules=rf".*language_model.*\.({targets})")
    model = get_peft_model(base, cfg).eval()
    c = base.config
    banned = [c.image_token_id, c.video_token_id, c.vision_start_token_id, c.vision_end_token_id]
    pad, eos = c.text_config.pad_token_id, c.text_config.eos_token_id

    def sync():
        if dev == "cuda":
            torch.cuda.synchronize()

    def batch(n):
        ids = [s["input_ids"] for s in samples[:n]]
        t = max(map(len, ids))
        x = torch.full((n, t), pad, dtype=torch.long)
        mask = torch.zeros((n, t), dtype=torch.long)
        for i, s in enumerate(ids):  # left padding, as generate wants
            x[i, t - len(s):] = torch.tensor(s)
            mask[i, t - len(s):] = 1
        x = x.to(dev)
        return dict(
            input_ids=x, attention_mask=mask.to(dev),
            pixel_values=torch.cat([pixels[f"pixel_values.{i}"] for i in range(n)]).to(dev, dt),
            image_grid_thw=torch.tensor([s["grid"] for s in samples[:n]], dtype=torch.long, device=dev),
            mm_token_type_ids=(x == c.image_token_id).int(),
        )

    def generate(b, new):
        with torch.no_grad():
            return model.generate(
                **b, max_new_tokens=new, min_new_tokens=new, do_sample=True, temperature=1.0, top_k=0,
                top_p=1.0, repetition_penalty=1.0, suppress_tokens=banned, pad_token_id=pad, eos_token_id=eos,
            )

    torch.manual_seed(1)
    # a first call pays one-off costs (kernels, allocations): at the largest count, as
    # guirl's table warms up
    generate(batch(max(counts)), 2)
    rows = []
    print(f"PyTorch {torch.__version__} generate (sdpa, peft LoRA r {lora['rank']}), {args.dtype} on {dev}, "
          f"{tokens} new tokens")
    print("| rollouts | prefill s | decode s | tokens | tokens/s | per rollout | peak memory |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in counts:
        b = batch(n)
        if dev == "cuda":
            torch.cuda.reset_peak_memory_stats()
        else:
            reset_peak()
        sync()
        with GpuUsed() if dev == "cuda" else contextlib.nullcontext() as used:
            t0 = time.perf_counter()
            generate(b, 1)
            sync()
            prefill = time.perf_counter() - t0
            t1 = time.perf_counter()
            out = generate(b, tokens)
            sync()
            whole = time.perf_counter() - t1
        assert out.shape[1] - b["input_ids"].shape[1] == tokens, "an answer ended early"
        made = n * (tokens - 1)
        decode = max(whole - prefill, 1e-9)
        extra = {}
        if dev == "cuda":
            peak = used.peak or float("nan")
            extra = dict(alloc_peak_mib=torch.cuda.max_memory_allocated() / 2**20)
        else:
            peak = rss_mib()[0]
        rate = made / decode
        print(f"| {n} | {prefill:.3f} | {decode:.3f} | {made} | {rate:.1f} | {rate / n:.1f} | {peak:.0f} MiB |",
              flush=True)
        rows.append(dict(rollouts=n, prefill_s=prefill, decode_s=decode, tokens=made, tokens_per_s=rate,
                         peak_mib=peak, **extra))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(torch=torch.__version__, device=dev, dtype=args.dtype, new_tokens=tokens, table=rows), f,
                      indent=1)
    if args.guirl:
        with open(args.guirl) as f:
            g = {r["rollouts"]: r for r in json.load(f)["table"]}
        print("\nguirl's decoder against PyTorch's generate, the same prompts (tokens that cost a decoding pass,"
              " per second of decoding):")
        print("| rollouts | guirl tokens/s | PyTorch tokens/s | guirl ÷ PyTorch | prefill s, guirl / PyTorch |"
              " peak memory, guirl / PyTorch |")
        print("|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            m = g.get(r["rollouts"])
            if m is None:
                continue
            mine = (m["tokens"] - r["rollouts"]) / m["decode_s"]
            print(f"| {r['rollouts']} | {mine:.1f} | {r['tokens_per_s']:.1f} | "
                  f"{mine / r['tokens_per_s']:.2f}× | {m['prefill_s']:.2f} / {r['prefill_s']:.2f} | "
                  f"{m['peak_mib']:.0f} / {r['peak_mib']:.0f} MiB |")


if __name__ == "__main__":
    main()
