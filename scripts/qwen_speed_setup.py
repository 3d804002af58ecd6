"""The Qwen-VL speed comparison's fixed inputs and the files it writes before timing: the
random-weight checkpoints (`0.5b`, `2b`), the peft adapter both sides load, and each size's
screenshots, prompts and answers (`inputs.json`). Used by `bench_qwen_speed.py` and
`benches/gpu/run.sh`."""

import json
import os
import shutil
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "fixtures", "qwen_vl", "qwen3_vl")
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
