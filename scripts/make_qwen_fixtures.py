#!/usr/bin/env python3
"""Write tiny random Qwen3-VL and Qwen2.5-VL checkpoints and their reference outputs.

The Rust tests of `guirl::policy::qwen_vl` load these folders and compare their logits
with the ones transformers computed here, so CI needs no PyTorch. Run it again only when
the fixtures must change (it needs torch, transformers >= 5 and peft):

    python3 -m venv /tmp/ref && /tmp/ref/bin/pip install torch transformers peft pillow torchvision
    /tmp/ref/bin/python scripts/make_qwen_fixtures.py fixtures/qwen_vl

What it writes, per architecture (`qwen3_vl/`, `qwen2_5_vl/`):
- a checkpoint folder in Hugging Face layout: `config.json`, safetensors weights,
  `tokenizer.json`, the chat template, `preprocessor_config.json`.
  Qwen3-VL: nested `text_config`, `model.visual.*` / `model.language_model.*` names, one
  file, tied embeddings, template in `chat_template.json`.
  Qwen2.5-VL: the hub's flat text keys and `rope_scaling`, the older `visual.*` /
  `model.layers.*` names in two shards with an index, an untied `lm_head`, template in
  `tokenizer_config.json`.
- `reference.safetensors` and `reference.json`: for each case, the prompt text the
  template rendered, its token ids, the images' pixel values and grids as the
  transformers processor made them, the full-sequence logits, and greedy decoding steps
  with the KV cache (token and logits at each step).
- Qwen3-VL also gets `lora/`: a PEFT adapter (made by peft, random A and B) and the
  logits with it applied.
- Both get `lora_vision/`: a PEFT adapter on the vision tower's linear layers (and two of
  the language model's) and the logits with it applied (`--vision-lora-only` writes just
  these, from the committed checkpoints).
- `qwen3_vl_learn/`: a somewhat larger random Qwen3-VL for the CPU learning test.
- Both get `vision_theta/`: the `config.json` of the same checkpoint with the vision
  tower's `rope_parameters.rope_theta` at 2000 instead of 10000, and transformers'
  one-image outputs with it and the `lora_vision/` adapter loaded (the merged image
  features, DeepStack's, the logits): `--vision-theta-only` writes just these. The tests
  copy the checkpoint and put this config in place. The adapter is there because the
  random tower's attention is nearly uniform (its q and k are small), so that without it
  the theta moves the outputs by only ~1e-5; with it, by 1e-2 to 3e-2, a hundred times
  the f32 bound: a reader that ignored the theta fails.
- With `--guirl-adapters`: for each adapter folder guirl wrote under
  `ARCH/guirl_adapters/`, peft loads it on its base and the one-image case's logits are
  saved beside it (`peft_reference.safetensors`), so the Rust tests check that peft
  reads guirl's adapters as guirl does.

The tokenizer is a small byte-level BPE trained here (not Qwen's), with Qwen's special
tokens; the chat template is our own, in Qwen's chat format.
"""

import json
import os
import shutil
import sys

import numpy as np
import torch
from PIL import Image
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers, Regex
from transformers import (
    PreTrainedTokenizerFast,
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2VLImageProcessor,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
)

SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
]
VOCAB = 512  # model vocabulary (the tokenizer's BPE fills what the specials leave)

# Qwen's chat format, written for these fixtures: system block only when given, images as
# vision_start + one image_pad + vision_end (the processor expands the pad).
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n"
    "{% if message.content is string %}{{ message.content }}"
    "{% else %}{% for part in message.content %}"
    "{% if part.type == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part.type == 'text' %}{{ part.text }}{% endif %}"
    "{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CORPUS = [
    "Click the button labelled OK. click(12, 40) double_click(3, 9) type(\"hello world\") key(Enter)",
    "Select the checkbox named Dark mode and press Apply. scroll(10, 20, 0, 120) done()",
    "Enter the text into the field and submit. hover(5, 5) drag(1, 2, 3, 4) wait(500)",
    "You are a GUI agent. Answer with one action. The screen is 160 by 210 pixels.",
    "Thought: the target is at the top left. Action: click(start_box='(10,20)')",
    '{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [500, 250]}}',
    "0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ ,.;:!?'\"()[]{}<>_-+=*/\\",
]


def make_tokenizer(out):
    tok = Tokenizer(models.BPE())
    # The split Qwen2's tokenizer uses (contractions, letters, single digits, punctuation runs).
    split = (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
        r"|\s*[\r\n]+|\s+(?!\S)|\s+"
    )
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - len(SPECIALS) - 16,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 20, trainer)
    tok.add_special_tokens(SPECIALS)
    tok.save(os.path.join(out, "tokenizer.json"))
    return tok


def ids_of(tok):
    return {s: tok.token_to_id(s) for s in SPECIALS}


def hf_tokenizer(folder):
    t = PreTrainedTokenizerFast(tokenizer_file=os.path.join(folder, "tokenizer.json"))
    t.chat_template = CHAT_TEMPLATE
    return t


def image(seed, h, w):
    rng = np.random.default_rng(seed)
    # smooth gradients plus noise: resizing changes it, so preprocessing is really checked
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 / max(w - 1, 1), yy * 255 / max(h - 1, 1), (xx + yy) % 64 * 4], -1)
    arr = np.clip(base + rng.normal(0, 20, size=(h, w, 3)), 0, 255).astype(np.uint8)
    return Image.fromarray(arr, "RGB")


def expand_pads(text, grids, merge, tok_ids):
    # the processor's job: one <|image_pad|> per merged vision token
    parts = text.split("<|image_pad|>")
    out = parts[0]
    for g, rest in zip(grids, parts[1:]):
        n = int(g[0] * g[1] * g[2]) // (merge * merge)
        out += "<|image_pad|>" * n + rest
    return out


def run_case(model, tokenizer, processor, merge, image_id, images, user_text, steps=3):
    content = [{"type": "image"} for _ in images] + [{"type": "text", "text": user_text}]
    messages = [
        {"role": "system", "content": "You are a GUI agent."},
        {"role": "user", "content": content},
    ]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    px = processor(images=images, return_tensors="pt")
    pixel_values, grids = px["pixel_values"], px["image_grid_thw"]
    expanded = expand_pads(prompt, grids.tolist(), merge, None)
    ids = torch.tensor([tokenizer(expanded, add_special_tokens=False)["input_ids"]])
    mm = (ids == image_id).int()
    with torch.no_grad():
        out = model(
            input_ids=ids,
            pixel_values=pixel_values,
            image_grid_thw=grids,
            mm_token_type_ids=mm,
            use_cache=True,
        )
        logits = out.logits[0].clone()
        cache = out.past_key_values
        tokens, step_logits = [], []
        nxt = int(logits[-1].argmax())
        cur = ids
        for _ in range(steps):
            tokens.append(nxt)
            cur = torch.cat([cur, torch.tensor([[nxt]])], 1)
            o = model(
                input_ids=cur[:, -1:],
                past_key_values=cache,
                use_cache=True,
                mm_token_type_ids=torch.zeros_like(cur[:, -1:]),
            )
            cache = o.past_key_values
            step_logits.append(o.logits[0, -1].clone())
            nxt = int(o.logits[0, -1].argmax())
        # the same continuation scored in one pass (what training does)
        full = model(
            input_ids=cur,
            pixel_values=pixel_values,
            image_grid_thw=grids,
            mm_token_type_ids=(cur == image_id).int(),
        ).logits[0]
    return {
        "messages": messages,
        "prompt": prompt,
        "input_ids": ids[0],
        "pixel_values": pixel_values,
        "grids": grids,
        "logits": logits,
        "decode_tokens": torch.tensor(tokens),
        "decode_logits": torch.stack(step_logits),
        "full_logits": full,
    }


def save_reference(folder, cases, images):
    tensors, meta = {}, {"cases": []}
    for name, case in cases.items():
        for k in ["input_ids", "pixel_values", "grids", "logits", "decode_tokens", "decode_logits", "full_logits"]:
            tensors[f"{name}.{k}"] = case[k].contiguous()
        meta["cases"].append(
            {
                "name": name,
                "messages": case["messages"],
                "prompt": case["prompt"],
                "images": [f"{name}_{i}.png" for i in range(len(images[name]))],
            }
        )
        for i, img in enumerate(images[name]):
            img.save(os.path.join(folder, f"{name}_{i}.png"))
    save_file(tensors, os.path.join(folder, "reference.safetensors"))
    with open(os.path.join(folder, "reference.json"), "w") as f:
        json.dump(meta, f, indent=1)


def common_files(folder, tok_src, template_in_config, processor_cfg, eos):
    shutil.copy(tok_src, os.path.join(folder, "tokenizer.json"))
    tok_cfg = {
        "tokenizer_class": "Qwen2Tokenizer",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": 4096,
    }
    if template_in_config:
        tok_cfg["chat_template"] = CHAT_TEMPLATE
    else:
        with open(os.path.join(folder, "chat_template.json"), "w") as f:
            json.dump({"chat_template": CHAT_TEMPLATE}, f, indent=1)
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(tok_cfg, f, indent=1)
    with open(os.path.join(folder, "preprocessor_config.json"), "w") as f:
        json.dump(processor_cfg, f, indent=1)
    with open(os.path.join(folder, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": eos}, f, indent=1)


def qwen3(out, tok_src, sp):
    folder = os.path.join(out, "qwen3_vl")
    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(3)
    cfg = Qwen3VLConfig(
        text_config=dict(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
            max_position_embeddings=4096, tie_word_embeddings=True,
            rope_parameters=dict(rope_type="default", rope_theta=5e6, mrope_section=[2, 3, 3], mrope_interleaved=True),
            bos_token_id=sp["<|endoftext|>"], eos_token_id=sp["<|im_end|>"], pad_token_id=sp["<|endoftext|>"],
        ),
        vision_config=dict(
            depth=3, hidden_size=32, intermediate_size=48, num_heads=2, patch_size=16, temporal_patch_size=2,
            spatial_merge_size=2, out_hidden_size=64, num_position_embeddings=36,
            deepstack_visual_indexes=[0, 1], hidden_act="gelu_pytorch_tanh",
        ),
        image_token_id=sp["<|image_pad|>"], video_token_id=sp["<|video_pad|>"],
        vision_start_token_id=sp["<|vision_start|>"], vision_end_token_id=sp["<|vision_end|>"],
        tie_word_embeddings=True,
    )
    model = Qwen3VLForConditionalGeneration(cfg).eval()
    # random norms and biases too, so a wrong placement shows in the logits
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n or n.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(folder, safe_serialization=True)
    proc_cfg = {
        "image_processor_type": "Qwen2VLImageProcessor", "patch_size": 16, "temporal_patch_size": 2,
        "merge_size": 2, "size": {"shortest_edge": 32 * 32 * 2, "longest_edge": 32 * 32 * 12},
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
    }
    common_files(folder, tok_src, False, proc_cfg, sp["<|im_end|>"])
    processor = Qwen2VLImageProcessor(
        patch_size=16, temporal_patch_size=2, merge_size=2, size=proc_cfg["size"],
        image_mean=[0.5] * 3, image_std=[0.5] * 3,
    )
    tokenizer = hf_tokenizer(folder)
    images = {
        "one_image": [image(1, 64, 96)],
        "two_images": [image(2, 64, 64), image(3, 45, 70)],
    }
    cases = {
        "one_image": run_case(model, tokenizer, processor, 2, cfg.image_token_id, images["one_image"], "Click OK."),
        "two_images": run_case(model, tokenizer, processor, 2, cfg.image_token_id, images["two_images"], "Which changed?"),
    }
    save_reference(folder, cases, images)

    # A PEFT adapter on the language model's linears, made by peft itself.
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(4)
    lcfg = LoraConfig(
        r=4, lora_alpha=8, lora_dropout=0.0, init_lora_weights=False,
        target_modules=r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)",
    )
    peft_model = get_peft_model(model, lcfg).eval()
    lora_dir = os.path.join(folder, "lora")
    peft_model.save_pretrained(lora_dir)
    case = cases["one_image"]
    with torch.no_grad():
        lora_logits = peft_model(
            input_ids=case["input_ids"][None], pixel_values=case["pixel_values"],
            image_grid_thw=case["grids"], mm_token_type_ids=(case["input_ids"][None] == cfg.image_token_id).int(),
        ).logits[0]
    save_file({"one_image.logits": lora_logits.contiguous()}, os.path.join(lora_dir, "reference.safetensors"))


def qwen25(out, tok_src, sp):
    folder = os.path.join(out, "qwen2_5_vl")
    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(5)
    text = dict(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, max_position_embeddings=4096,
        rope_parameters=dict(rope_type="default", rope_theta=1e6, mrope_section=[2, 3, 3]),
        tie_word_embeddings=False,
        bos_token_id=sp["<|endoftext|>"], eos_token_id=sp["<|im_end|>"], pad_token_id=sp["<|endoftext|>"],
    )
    vision = dict(
        depth=4, hidden_size=32, intermediate_size=40, num_heads=2, patch_size=14, temporal_patch_size=2,
        spatial_merge_size=2, out_hidden_size=64, window_size=56, fullatt_block_indexes=[1, 3],
        hidden_act="silu", tokens_per_second=2, in_channels=3,
    )
    cfg = Qwen2_5_VLConfig(
        text_config=text, vision_config=vision,
        image_token_id=sp["<|image_pad|>"], video_token_id=sp["<|video_pad|>"],
        vision_start_token_id=sp["<|vision_start|>"], vision_end_token_id=sp["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    model = Qwen2_5_VLForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n or "ln_q" in n or n.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    tmp = os.path.join(folder, "_tmp")
    model.save_pretrained(tmp, safe_serialization=True)
    state = load_file(os.path.join(tmp, "model.safetensors"))
    shutil.rmtree(tmp)
    # The hub's Qwen2.5-VL checkpoints use the older names: visual.*, model.layers.*, lm_head.
    old = {}
    for k, v in state.items():
        k2 = k.replace("model.visual.", "visual.").replace("model.language_model.", "model.")
        old[k2] = v.contiguous()
    names = sorted(old)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    weight_map = {}
    for fname, keys in shards.items():
        save_file({k: old[k] for k in keys}, os.path.join(folder, fname), metadata={"format": "pt"})
        weight_map.update({k: fname for k in keys})
    total = sum(v.numel() * v.element_size() for v in old.values())
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    # The hub's flat config.json (text keys at the top, rope_scaling).
    flat = {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
        "attention_dropout": 0.0, "hidden_act": "silu", "initializer_range": 0.02,
        "max_window_layers": 2, "sliding_window": 4096, "use_sliding_window": False, "use_cache": True,
        "torch_dtype": "float32", "transformers_version": "4.49.0",
        "image_token_id": cfg.image_token_id, "video_token_id": cfg.video_token_id,
        "vision_start_token_id": cfg.vision_start_token_id, "vision_end_token_id": cfg.vision_end_token_id,
        "vision_token_id": cfg.image_token_id,
        "rope_theta": 1e6, "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
        "vision_config": dict(vision, in_chans=3, spatial_patch_size=14),
    }
    for k, v in text.items():
        if k != "rope_parameters":
            flat[k] = v
    del flat["vision_config"]["in_channels"]
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(flat, f, indent=1)
    # transformers must read the flat, old-named folder back to the same model
    back = Qwen2_5_VLForConditionalGeneration.from_pretrained(folder).eval()
    proc_cfg = {
        "image_processor_type": "Qwen2VLImageProcessor", "patch_size": 14, "temporal_patch_size": 2,
        "merge_size": 2, "min_pixels": 28 * 28 * 2, "max_pixels": 28 * 28 * 16,
        "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
    }
    common_files(folder, tok_src, True, proc_cfg, sp["<|im_end|>"])
    processor = Qwen2VLImageProcessor(
        patch_size=14, temporal_patch_size=2, merge_size=2,
        size={"shortest_edge": proc_cfg["min_pixels"], "longest_edge": proc_cfg["max_pixels"]},
        image_mean=proc_cfg["image_mean"], image_std=proc_cfg["image_std"],
    )
    tokenizer = hf_tokenizer(folder)
    images = {
        # 112 x 84: an 8 x 6 patch grid, two 2 x 2-unit windows across and a partial one down
        "one_image": [image(6, 84, 112)],
        "two_images": [image(7, 56, 56), image(8, 61, 100)],
    }
    cases = {
        "one_image": run_case(back, tokenizer, processor, 2, cfg.image_token_id, images["one_image"], "Click OK."),
        "two_images": run_case(back, tokenizer, processor, 2, cfg.image_token_id, images["two_images"], "Which changed?"),
    }
    with torch.no_grad():
        c = cases["one_image"]
        direct = model(input_ids=c["input_ids"][None], pixel_values=c["pixel_values"], image_grid_thw=c["grids"],
                       mm_token_type_ids=(c["input_ids"][None] == cfg.image_token_id).int()).logits[0]
    assert torch.allclose(direct, c["logits"], atol=1e-5), "the flat config did not read back to the same model"
    save_reference(folder, cases, images)


def learner(out, tok_src, sp):
    """A Qwen3-VL-shaped checkpoint sized for the CPU learning test (no reference outputs):
    MiniWoB's 160 x 210 screenshots become 128 x 192 images, 8 x 12 patches, 24 tokens."""
    folder = os.path.join(out, "qwen3_vl_learn")
    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(11)
    cfg = Qwen3VLConfig(
        text_config=dict(
            vocab_size=VOCAB, hidden_size=96, intermediate_size=192, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=24, rms_norm_eps=1e-6,
            max_position_embeddings=4096, tie_word_embeddings=True,
            rope_parameters=dict(rope_type="default", rope_theta=1e4, mrope_section=[4, 4, 4], mrope_interleaved=True),
            bos_token_id=sp["<|endoftext|>"], eos_token_id=sp["<|im_end|>"], pad_token_id=sp["<|endoftext|>"],
        ),
        vision_config=dict(
            depth=2, hidden_size=64, intermediate_size=128, num_heads=4, patch_size=16, temporal_patch_size=2,
            spatial_merge_size=2, out_hidden_size=96, num_position_embeddings=144,
            deepstack_visual_indexes=[0], hidden_act="gelu_pytorch_tanh",
        ),
        image_token_id=sp["<|image_pad|>"], video_token_id=sp["<|video_pad|>"],
        vision_start_token_id=sp["<|vision_start|>"], vision_end_token_id=sp["<|vision_end|>"],
        tie_word_embeddings=True,
    )
    Qwen3VLForConditionalGeneration(cfg).eval().save_pretrained(folder, safe_serialization=True)
    proc_cfg = {
        "image_processor_type": "Qwen2VLImageProcessor", "patch_size": 16, "temporal_patch_size": 2,
        "merge_size": 2, "size": {"shortest_edge": 32 * 32 * 4, "longest_edge": 32 * 32 * 30},
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
    }
    common_files(folder, tok_src, False, proc_cfg, sp["<|im_end|>"])


# The vision tower's linear layers guirl can adapt (`lora_vision_targets`), and two of the
# language model's, as peft's `target_modules` patterns.
VISION_LORA = {
    "qwen3_vl": r".*visual\..*\.(qkv|proj|linear_fc1|linear_fc2)|.*language_model.*\.(q_proj|v_proj)",
    "qwen2_5_vl": r".*visual\..*\.(qkv|proj|gate_proj|up_proj|down_proj|mlp\.0|mlp\.2)|.*language_model.*\.(q_proj|v_proj)",
}


def vision_lora(out, arch):
    """`ARCH/lora_vision/`: a peft adapter with vision-tower targets, made by peft from the
    checkpoint folder as written, and the one-image case's logits with it."""
    from peft import LoraConfig, get_peft_model

    folder = os.path.join(out, arch)
    cls = Qwen3VLForConditionalGeneration if arch == "qwen3_vl" else Qwen2_5_VLForConditionalGeneration
    model = cls.from_pretrained(folder).eval()
    ref = load_file(os.path.join(folder, "reference.safetensors"))
    torch.manual_seed(6)
    lcfg = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, init_lora_weights=False, target_modules=VISION_LORA[arch])
    peft_model = get_peft_model(model, lcfg).eval()
    lora_dir = os.path.join(folder, "lora_vision")
    peft_model.save_pretrained(lora_dir)
    os.remove(os.path.join(lora_dir, "README.md"))  # peft's empty model card
    ids = ref["one_image.input_ids"][None]
    image_id = model.config.image_token_id
    with torch.no_grad():
        logits = peft_model(
            input_ids=ids, pixel_values=ref["one_image.pixel_values"], image_grid_thw=ref["one_image.grids"],
            mm_token_type_ids=(ids == image_id).int(),
        ).logits[0]
    save_file({"one_image.logits": logits.contiguous()}, os.path.join(lora_dir, "reference.safetensors"))


def guirl_adapters(out):
    """`ARCH/guirl_adapters/*/peft_reference.safetensors`: each adapter folder that guirl
    wrote (`write_guirl_adapter_fixtures` in tests/integration/qwen_vl_files.rs) loaded by
    peft on its base, with peft's default options, and the one-image case's logits."""
    from peft import PeftModel

    for arch in ["qwen3_vl", "qwen2_5_vl"]:
        folder = os.path.join(out, arch)
        root = os.path.join(folder, "guirl_adapters")
        if not os.path.isdir(root):
            continue
        cls = Qwen3VLForConditionalGeneration if arch == "qwen3_vl" else Qwen2_5_VLForConditionalGeneration
        ref = load_file(os.path.join(folder, "reference.safetensors"))
        ids = ref["one_image.input_ids"][None]
        for name in sorted(os.listdir(root)):
            model = cls.from_pretrained(folder).eval()
            peft_model = PeftModel.from_pretrained(model, os.path.join(root, name)).eval()
            with torch.no_grad():
                logits = peft_model(
                    input_ids=ids, pixel_values=ref["one_image.pixel_values"], image_grid_thw=ref["one_image.grids"],
                    mm_token_type_ids=(ids == model.config.image_token_id).int(),
                ).logits[0]
            save_file({"one_image.logits": logits.contiguous()}, os.path.join(root, name, "peft_reference.safetensors"))
            print("peft loaded", arch, name)


VISION_THETA = 2000.0


def vision_theta(out, arch):
    """`ARCH/vision_theta/`: the checkpoint's config with the vision rope theta at
    VISION_THETA, and transformers' one-image outputs under it with `lora_vision/`."""
    import tempfile

    from peft import PeftModel

    folder = os.path.join(out, arch)
    cls = Qwen3VLForConditionalGeneration if arch == "qwen3_vl" else Qwen2_5_VLForConditionalGeneration
    ref = load_file(os.path.join(folder, "reference.safetensors"))
    ids = ref["one_image.input_ids"][None]
    px, grids = ref["one_image.pixel_values"], ref["one_image.grids"]
    target = os.path.join(folder, "vision_theta")
    os.makedirs(target, exist_ok=True)
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    cfg["vision_config"]["rope_parameters"] = {"rope_type": "axial", "rope_theta": VISION_THETA}
    with open(os.path.join(target, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)

    def outputs(config_dir):
        with tempfile.TemporaryDirectory() as tmp:
            for name in os.listdir(folder):
                if os.path.isfile(os.path.join(folder, name)):
                    shutil.copy(os.path.join(folder, name), tmp)
            shutil.copy(os.path.join(config_dir, "config.json"), tmp)
            base = cls.from_pretrained(tmp).eval()
        assert base.config.vision_config.rope_parameters["rope_theta"] == (
            VISION_THETA if config_dir == target else 10000.0
        )
        model = PeftModel.from_pretrained(base, os.path.join(folder, "lora_vision")).eval()
        with torch.no_grad():
            vis = base.model.visual(px, grid_thw=grids)
            logits = model(input_ids=ids, pixel_values=px, image_grid_thw=grids,
                           mm_token_type_ids=(ids == model.config.image_token_id).int()).logits[0]
        t = {"one_image.image_embeds": vis.pooler_output, "one_image.logits": logits}
        for i, d in enumerate(getattr(vis, "deepstack_features", None) or []):
            t[f"one_image.deepstack.{i}"] = d
        return {k: v.contiguous() for k, v in t.items()}

    got, base = outputs(target), outputs(folder)
    save_file(got, os.path.join(target, "reference.safetensors"))
    for k in got:
        moved = float((got[k] - base[k]).abs().max() / base[k].abs().max())
        print(f"{arch} vision theta {VISION_THETA}: {k} moves by {moved:.2e} from theta 10000")


def main():
    if "--vision-theta-only" in sys.argv:
        args = [a for a in sys.argv[1:] if a != "--vision-theta-only"]
        for arch in VISION_LORA:
            vision_theta(args[0] if args else "fixtures/qwen_vl", arch)
        return
    if "--guirl-adapters" in sys.argv:
        args = [a for a in sys.argv[1:] if a != "--guirl-adapters"]
        guirl_adapters(args[0] if args else "fixtures/qwen_vl")
        return
    if "--vision-lora-only" in sys.argv:
        args = [a for a in sys.argv[1:] if a != "--vision-lora-only"]
        out = args[0] if args else "fixtures/qwen_vl"
        for arch in VISION_LORA:
            vision_lora(out, arch)
        print("wrote", out, "lora_vision/")
        return
    out = sys.argv[1] if len(sys.argv) > 1 else "fixtures/qwen_vl"
    os.makedirs(out, exist_ok=True)
    tok_src = os.path.join(out, "_tokenizer.json")
    tok = make_tokenizer(out)
    os.replace(os.path.join(out, "tokenizer.json"), tok_src)
    sp = ids_of(tok)
    assert max(sp.values()) < VOCAB, sp
    qwen3(out, tok_src, sp)
    qwen25(out, tok_src, sp)
    learner(out, tok_src, sp)
    for arch in VISION_LORA:
        vision_lora(out, arch)
        vision_theta(out, arch)
    os.remove(tok_src)
    print("wrote", out)


if __name__ == "__main__":
    main()
