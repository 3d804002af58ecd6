#!/usr/bin/env python3
"""transformers' own bf16 error on the Qwen-VL fixtures, for the bf16 table of docs/qwen-vl.md.

guirl's bf16 parity is measured against transformers in f32 (the committed references).
What bf16 itself costs is what transformers loses when it runs the same checkpoint, the
same inputs and the same adapters in bf16. This script measures that, for every row of
the table, and writes transformers' bf16 outputs beside the errors so that the Rust test
`bf16_error_table` (tests/qwen_vl_bf16.rs) prints both columns from one run:

    /tmp/ref/bin/python scripts/qwen_bf16_table.py [OUT_DIR]   # default /tmp/guirl_qwen_bf16
    GUIRL_BF16_REFERENCE=/tmp/guirl_qwen_bf16 cargo test --release --test qwen_vl bf16_error_table -- --nocapture

It writes `OUT_DIR/transformers_bf16.safetensors` (each row's bf16 output, as f32; a few
MB, so not committed) and `OUT_DIR/transformers_bf16.json` (the errors). Without that
folder the Rust test still measures guirl and checks its bounds; it only leaves out the
transformers column.

Rows, per architecture: the prompt logits, the KV-cached decoding steps (the f32 run's
greedy tokens, so both dtypes see the same inputs; the largest step's error) and the one-pass score of prompt plus
continuation, for both fixture cases; then the one-image prompt logits with each adapter
folder the fixtures hold (peft's `lora/`, `lora_vision/`, and the adapters guirl wrote,
`guirl_adapters/*`), loaded by peft with its defaults (in a bf16 model peft keeps LoRA A
and B in f32 and adds the low-rank term in f32).

The error is the parity tests' one: max |a - b| / max |b| against the f32 output. The f32
outputs are recomputed here and checked against the committed references first. The
JSON also gives, per row, how far transformers' two bf16 attention paths (sdpa, eager)
are from each other: the size of bf16 rounding noise between two correct implementations.
"""

import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import Qwen2_5_VLForConditionalGeneration, Qwen3VLForConditionalGeneration

ARCHS = {"qwen3_vl": Qwen3VLForConditionalGeneration, "qwen2_5_vl": Qwen2_5_VLForConditionalGeneration}
CASES = ["one_image", "two_images"]


def rel_err(a, b):
    a, b = a.float(), b.float()
    return float((a - b).abs().max() / b.abs().max())


def row_err(key, a, b):
    """A row's error; for the decoding steps (`[steps, V]`), the largest step's, as the
    parity tests print them."""
    if key == "decode_logits":
        return max(rel_err(x, y) for x, y in zip(a, b))
    return rel_err(a, b)


def load(arch, folder, dtype, attn):
    return ARCHS[arch].from_pretrained(folder, dtype=dtype, attn_implementation=attn).eval()


def case_outputs(model, ref, case):
    """Prompt logits, cached decoding steps and the one-pass score of one reference case."""
    image_id = model.config.image_token_id
    ids = ref[f"{case}.input_ids"][None]
    px, grids = ref[f"{case}.pixel_values"], ref[f"{case}.grids"]
    tokens = ref[f"{case}.decode_tokens"].tolist()
    with torch.no_grad():
        out = model(input_ids=ids, pixel_values=px, image_grid_thw=grids,
                    mm_token_type_ids=(ids == image_id).int(), use_cache=True)
        cache, cur, steps = out.past_key_values, ids, []
        for tok in tokens:
            cur = torch.cat([cur, torch.tensor([[tok]])], 1)
            o = model(input_ids=cur[:, -1:], past_key_values=cache, use_cache=True,
                      mm_token_type_ids=torch.zeros_like(cur[:, -1:]))
            cache = o.past_key_values
            steps.append(o.logits[0, -1])
        full = model(input_ids=cur, pixel_values=px, image_grid_thw=grids,
                     mm_token_type_ids=(cur == image_id).int()).logits[0]
    return {"logits": out.logits[0], "decode_logits": torch.stack(steps), "full_logits": full}


def prompt_logits(model, ref):
    ids = ref["one_image.input_ids"][None]
    with torch.no_grad():
        return model(input_ids=ids, pixel_values=ref["one_image.pixel_values"],
                     image_grid_thw=ref["one_image.grids"],
                     mm_token_type_ids=(ids == model.config.image_token_id).int()).logits[0]


def adapter_folders(folder):
    out = [n for n in ["lora", "lora_vision"] if os.path.isdir(os.path.join(folder, n))]
    root = os.path.join(folder, "guirl_adapters")
    if os.path.isdir(root):
        out += [f"guirl_adapters/{n}" for n in sorted(os.listdir(root))]
    return out


def with_adapter(arch, folder, name, dtype, attn):
    from peft import PeftModel

    return PeftModel.from_pretrained(load(arch, folder, dtype, attn), os.path.join(folder, name)).eval()


def main():
    fixtures = "fixtures/qwen_vl"
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "/tmp/guirl_qwen_bf16"
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    tensors, errors = {}, {}
    for arch in ARCHS:
        folder = os.path.join(fixtures, arch)
        ref = load_file(os.path.join(folder, "reference.safetensors"))
        f32 = load(arch, folder, torch.float32, "sdpa")
        bf16 = {attn: load(arch, folder, torch.bfloat16, attn) for attn in ["sdpa", "eager"]}
        for case in CASES:
            want = case_outputs(f32, ref, case)
            for k, v in want.items():
                # the recomputed f32 outputs are the committed ones
                assert rel_err(v, ref[f"{case}.{k}"]) < 1e-5, (arch, case, k, rel_err(v, ref[f"{case}.{k}"]))
            got = {attn: case_outputs(model, ref, case) for attn, model in bf16.items()}
            for k in want:
                row = f"{arch}.{case}.{k}"
                errors[row] = {attn: row_err(k, got[attn][k], want[k]) for attn in got}
                # how far transformers' two bf16 paths are from each other
                errors[row]["sdpa_vs_eager"] = row_err(k, got["eager"][k], got["sdpa"][k])
                tensors[row] = got["sdpa"][k].float().contiguous()
        for name in adapter_folders(folder):
            want = prompt_logits(with_adapter(arch, folder, name, torch.float32, "sdpa"), ref)
            ref_file = "peft_reference" if name.startswith("guirl_adapters/") else "reference"
            committed = load_file(os.path.join(folder, name, f"{ref_file}.safetensors"))["one_image.logits"]
            assert rel_err(want, committed) < 1e-5, (arch, name, rel_err(want, committed))
            row = f"{arch}.{name}.logits"
            got = {attn: prompt_logits(with_adapter(arch, folder, name, torch.bfloat16, attn), ref)
                   for attn in ["sdpa", "eager"]}
            errors[row] = {attn: rel_err(v, want) for attn, v in got.items()}
            errors[row]["sdpa_vs_eager"] = rel_err(got["eager"], got["sdpa"])
            tensors[row] = got["sdpa"].float().contiguous()
    save_file(tensors, os.path.join(out_dir, "transformers_bf16.safetensors"))
    import transformers
    import peft

    meta = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
            "errors": errors}
    with open(os.path.join(out_dir, "transformers_bf16.json"), "w") as f:
        json.dump(meta, f, indent=1)
    width = max(len(r) for r in errors)
    print(f"{'row':<{width}}  bf16 sdpa  bf16 eager  sdpa vs eager")
    for row, e in errors.items():
        print(f"{row:<{width}}  {e['sdpa']:.2e}   {e['eager']:.2e}    {e['sdpa_vs_eager']:.2e}")
    print("wrote", out_dir)


if __name__ == "__main__":
    main()
