#!/usr/bin/env python3
"""guirl's VLM policy (the `small` preset, or `tiny` / `base`) written in plain PyTorch, to
time its training step side by side with guirl's Candle version on the same batch.

The twin is built from what `benches/policy_speed.rs` exports (`speed::export`): the
architecture (config.json), the freshly seeded weights under guirl's names
(weights.safetensors), the batch exactly as `VlmPolicy::prepare` builds it for
`speed::synthetic_batch(batch, 1)` plus the advantages (batch.safetensors), and guirl's
values of the first training step (reference.json). The loss is `speed::measure`'s:
`(-sum(logp * adv) - 0.01 * sum(entropy)) / sum(mask)`, the optimizer AdamW at lr 1e-4 with
candle's defaults (betas 0.9/0.999, eps 1e-8, weight decay 0.01).

Same math as guirl: conv-stem ViT with CoordConv channels (patchify by reshape/permute +
linear), byte-embedded instruction, pre-LN encoder, decoder with causal self-attention and
cross-attention, linear head plus the pointer head (query . key grid bilinearly resampled
to the bins, log-sum-exp over rows for x tokens, the chosen column for y tokens), grammar
mask, log-softmax. Attention is explicit `softmax(q k^T * scale + mask) v`, as guirl's;
`--sdpa` swaps in `F.scaled_dot_product_attention` (labelled in the output; same maths,
other kernels). GELU is the tanh approximation, LayerNorm eps 1e-5. No torch.compile.
Needs only torch (safetensors files are read by hand).

Commands (from the repository root; `policy_speed-*` is the binary `cargo build --release
--bench policy_speed` writes under target/release/deps/):

    target/release/deps/policy_speed-<hash> small 32 cpu export=/tmp/vlm_small
    python scripts/small_policy_torch.py check /tmp/vlm_small
        # loss, global grad norm and loss after one AdamW step against guirl's, in f32 on
        # CPU, and each Var's gradient norm; exits 1 if any differs by more than --rtol
        # (1e-4) relative.
    python scripts/small_policy_torch.py time /tmp/vlm_small --device cpu --threads 2
    python scripts/small_policy_torch.py time /tmp/vlm_small --device cuda [--sdpa]
        # median of 10 steps (forward + backward + AdamW, same batch) after 3 warm-ups, in
        # the layout of policy_speed's report; torch.cuda.synchronize around each phase.

On a machine whose cores are busy with other work, `--threads` > 1 can run many times
slower (OpenMP threads spin at barriers waiting for a descheduled sibling: 3.7 s against
0.2 s a step measured on 2 cores beside a build); `OMP_WAIT_POLICY=PASSIVE` avoids that, and
the header prints its value.

Compare with `RAYON_NUM_THREADS=2 MALLOC_MMAP_THRESHOLD_=33554432
MALLOC_TRIM_THRESHOLD_=17179869184 target/release/deps/policy_speed-<hash> small 32 cpu`
(or `cuda` with a `--features cuda` build). Both print each step's loss: they start from
the same weights and batch, so the loss lines should agree to rounding.
"""

import argparse
import json
import math
import os
import statistics
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

NEG = -1e9  # guirl's additive mask value (layers::NEG)

DTYPES = {
    "F32": torch.float32,
    "F64": torch.float64,
    "U32": torch.int32,  # token ids, bytes, all < 2^31; widened to int64 below
    "I64": torch.int64,
    "U8": torch.uint8,
}


def load_safetensors(path):
    """The tensors of a safetensors file: 8-byte header length, JSON header, raw data."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        dtype = DTYPES[info["dtype"]]
        shape = info["shape"]
        if b == a:
            t = torch.zeros(shape, dtype=dtype)
        else:
            t = torch.frombuffer(bytearray(data[a:b]), dtype=dtype).reshape(shape)
        if info["dtype"] == "U32":
            t = t.to(torch.int64)
        out[name] = t
    return out


# --- the network (guirl: src/policy/vlm/model.rs, pointer.rs) ---------------------------


def linear(d_in, d_out, bias=True):
    return nn.Linear(d_in, d_out, bias=bias)


def layer_norm(d):
    return nn.LayerNorm(d, eps=1e-5)


def gelu(x):
    return F.gelu(x, approximate="tanh")


class Attention(nn.Module):
    """Multi-head attention, separate q/k/v projections, no key bias."""

    def __init__(self, d, heads, sdpa):
        super().__init__()
        self.q = linear(d, d)
        self.k = linear(d, d, bias=False)
        self.v = linear(d, d)
        self.o = linear(d, d)
        self.heads = heads
        self.sdpa = sdpa

    def split(self, x):
        b, n, d = x.shape
        return x.reshape(b, n, self.heads, d // self.heads).transpose(1, 2)

    def kv(self, ctx):
        return self.split(self.k(ctx)), self.split(self.v(ctx))

    def attend(self, x, k, v, mask):
        """`mask`: [B, 1, 1, Nk] key padding or [Nq, Nk] causal, 0 or NEG, added to the
        scaled scores."""
        b, n, d = x.shape
        q = self.split(self.q(x))
        if self.sdpa:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            scale = 1.0 / math.sqrt(d // self.heads)
            p = F.softmax(q @ k.transpose(2, 3) * scale + mask, dim=-1)
            out = p @ v
        return self.o(out.transpose(1, 2).reshape(b, n, d))

    def forward(self, x, ctx, mask):
        k, v = self.kv(ctx)
        return self.attend(x, k, v, mask)


class Mlp(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.fc1 = linear(d, hidden)
        self.fc2 = linear(hidden, d)

    def forward(self, x):
        return self.fc2(gelu(self.fc1(x)))


class EncoderLayer(nn.Module):
    def __init__(self, cfg, sdpa):
        super().__init__()
        d = cfg["d_model"]
        self.ln1 = layer_norm(d)
        self.attn = Attention(d, cfg["heads"], sdpa)
        self.ln2 = layer_norm(d)
        self.mlp = Mlp(d, cfg["mlp_dim"])

    def forward(self, x, key_mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, key_mask)
        return x + self.mlp(self.ln2(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg, sdpa):
        super().__init__()
        d = cfg["d_model"]
        self.ln1 = layer_norm(d)
        self.self_attn = Attention(d, cfg["heads"], sdpa)
        self.ln2 = layer_norm(d)
        self.cross = Attention(d, cfg["heads"], sdpa)
        self.ln3 = layer_norm(d)
        self.mlp = Mlp(d, cfg["mlp_dim"])

    def forward(self, x, causal, kv, mem_mask):
        h = self.ln1(x)
        x = x + self.self_attn(h, h, causal)
        x = x + self.cross.attend(self.ln2(x), kv[0], kv[1], mem_mask)
        return x + self.mlp(self.ln3(x))


def patchify(x, s):
    """[B, H, W, C] -> [B, H/s, W/s, s*s*C], each s x s cell one row (row-major, then C)."""
    b, h, w, c = x.shape
    x = x.reshape(b, h // s, s, w // s, s, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(b, h // s, w // s, s * s * c)


class Stem(nn.Module):
    """Two non-overlapping convolutions as patchify + linear, over RGB plus each pixel's
    x and y in [-1, 1] (CoordConv), and a learned position per image token."""

    def __init__(self, cfg):
        super().__init__()
        p, m, c, d = cfg["stem_patch"], cfg["stem_merge"], cfg["stem_channels"], cfg["d_model"]
        w, h = cfg["image_width"], cfg["image_height"]
        fan_in = p * p * (3 + 2)
        self.patch = linear(fan_in, c)
        self.merge = linear(m * m * c, d)
        self.pos = nn.Parameter(torch.zeros(cfg_image_tokens(cfg), d))
        # (2i + 1) / n - 1 in f32, as guirl computes it.
        rx = (2 * torch.arange(w, dtype=torch.float32) + 1) / w - 1
        ry = (2 * torch.arange(h, dtype=torch.float32) + 1) / h - 1
        coords = torch.stack([rx.expand(h, w), ry[:, None].expand(h, w)], dim=-1)
        self.register_buffer("coords", coords[None].contiguous(), persistent=False)
        self.p, self.m = p, m

    def forward(self, images):
        b, h, w, _ = images.shape
        x = torch.cat([images, self.coords.expand(b, h, w, 2)], dim=3)
        cells = gelu(self.patch(patchify(x, self.p)))
        x = self.merge(patchify(cells, self.m))
        _, gh, gw, d = x.shape
        _, ch, cw, c = cells.shape
        return x.reshape(b, gh * gw, d) + self.pos, cells.reshape(b, ch * cw, c)


def resample_matrix(src, dst):
    """[dst, src]: linear interpolation between cell centres (edge cells outside), in f32
    step by step as guirl's `pointer::resample_matrix`."""
    m = torch.zeros(dst, src, dtype=torch.float32)
    f32 = lambda v: torch.tensor(v, dtype=torch.float32)  # noqa: E731
    for j in range(dst):
        pos = (f32(j) + 0.5) * src / dst - 0.5
        pos = pos.clamp(0.0, float(src - 1))
        i0 = int(pos.floor())
        i1 = min(i0 + 1, src - 1)
        w1 = pos - i0
        m[j, i0] += 1.0 - w1
        m[j, i1] += w1
    return m


class Pointer(nn.Module):
    """Coordinate-token logits from a query against a key grid over the screenshot."""

    def __init__(self, cfg, vocab, x0):
        super().__init__()
        d, c = cfg["d_model"], cfg["stem_channels"]
        xb, yb = cfg["actions"]["x_bins"], cfg["actions"]["y_bins"]
        self.query = linear(d, d, bias=False)
        self.key_tokens = linear(d, d, bias=False)
        self.key_cells = linear(c, d, bias=False)
        self.token_shape = (cfg_grid_h(cfg), cfg_grid_w(cfg))
        self.cell_shape = (cfg["image_height"] // cfg["stem_patch"], cfg["image_width"] // cfg["stem_patch"])
        for name, (gh, gw) in [("tokens", self.token_shape), ("cells", self.cell_shape)]:
            self.register_buffer(f"{name}_rows", resample_matrix(gh, yb), persistent=False)
            self.register_buffer(f"{name}_cols_t", resample_matrix(gw, xb).t().contiguous(), persistent=False)
        self.register_buffer("xs", torch.arange(x0, x0 + xb), persistent=False)
        self.xb, self.yb, self.vocab, self.x0 = xb, yb, vocab, x0

    @staticmethod
    def resample(x, rows, cols_t, gh, gw):
        """[B, gh*gw, k] -> [B, k, y_bins * x_bins]."""
        b, _, k = x.shape
        grid = x.transpose(1, 2).reshape(b * k, gh, gw)
        out = rows @ grid @ cols_t
        return out.reshape(b, k, -1)

    def keys(self, image_tokens, cells):
        t = self.resample(self.key_tokens(image_tokens), self.tokens_rows, self.tokens_cols_t, *self.token_shape)
        c = self.resample(self.key_cells(cells), self.cells_rows, self.cells_cols_t, *self.cell_shape)
        return t + c

    def logits(self, hidden, keys, inputs):
        b, t, d = hidden.shape
        q = self.query(hidden) / math.sqrt(d)
        s = (q @ keys).reshape(b, t, self.yb, self.xb)
        x_logits = torch.logsumexp(s, dim=2)
        chosen = (inputs[:, :, None] == self.xs).to(s.dtype)[:, :, None, :]
        y_logits = (s * chosen).sum(-1)
        tail = self.vocab - self.x0 - self.xb - self.yb
        zeros = lambda n: hidden.new_zeros(b, t, n)  # noqa: E731
        return torch.cat([zeros(self.x0), x_logits, y_logits, zeros(tail)], dim=2)


class Encoder(nn.Module):
    def __init__(self, cfg, sdpa):
        super().__init__()
        d = cfg["d_model"]
        self.text_emb = nn.Parameter(torch.zeros(256, d))
        self.text_pos = nn.Parameter(torch.zeros(cfg["max_instruction_bytes"], d))
        self.layers = nn.ModuleList(EncoderLayer(cfg, sdpa) for _ in range(cfg["encoder_layers"]))
        self.ln_f = layer_norm(d)


class Decoder(nn.Module):
    def __init__(self, cfg, vocab, x0, sdpa):
        super().__init__()
        d = cfg["d_model"]
        self.tok_emb = nn.Parameter(torch.zeros(vocab, d))
        self.pos = nn.Parameter(torch.zeros(cfg["actions"]["max_action_tokens"], d))
        self.layers = nn.ModuleList(DecoderLayer(cfg, sdpa) for _ in range(cfg["decoder_layers"]))
        self.ln_f = layer_norm(d)
        self.head = linear(d, vocab)
        self.pointer = Pointer(cfg, vocab, x0) if cfg["pointer"] else None


def cfg_grid_w(cfg):
    return cfg["image_width"] // (cfg["stem_patch"] * cfg["stem_merge"])


def cfg_grid_h(cfg):
    return cfg["image_height"] // (cfg["stem_patch"] * cfg["stem_merge"])


def cfg_image_tokens(cfg):
    return cfg_grid_w(cfg) * cfg_grid_h(cfg)


UNSUPPORTED = ["word_buckets", "copy"]


class VlmPolicy(nn.Module):
    """guirl's VlmModel + VlmPolicy::score; parameter names are guirl's Var names."""

    def __init__(self, cfg, vocab, x0, temperature=1.0, sdpa=False):
        super().__init__()
        on = [k for k in UNSUPPORTED if cfg.get(k)]
        on += [f"inputs.{k}" for k, v in cfg.get("inputs", {}).items() if v]
        if on:
            sys.exit(f"config has {on}: the twin covers the presets' features only (pointer head)")
        self.stem = Stem(cfg)
        self.encoder = Encoder(cfg, sdpa)
        self.decoder = Decoder(cfg, vocab, x0, sdpa)
        self.temperature = temperature
        self.n_img = cfg_image_tokens(cfg)

    def encode(self, images, text, key_mask):
        img, cells = self.stem(images)
        b, l = text.shape
        enc = self.encoder
        txt = enc.text_emb[text] + enc.text_pos[:l]
        x = torch.cat([img, txt], dim=1)
        for layer in enc.layers:
            x = layer(x, key_mask)
        mem = enc.ln_f(x)
        kv = [layer.cross.kv(mem) for layer in self.decoder.layers]
        keys = self.decoder.pointer.keys(mem[:, : self.n_img], cells) if self.decoder.pointer else None
        return kv, keys

    def decode(self, kv, key_mask, tokens):
        dec = self.decoder
        t = tokens.shape[1]
        x = dec.tok_emb[tokens] + dec.pos[:t]
        causal = torch.triu(torch.full((t, t), NEG, device=x.device), diagonal=1)
        for layer, lkv in zip(dec.layers, kv):
            x = layer(x, causal, lkv, key_mask)
        return dec.ln_f(x)

    def score(self, batch):
        """Per-token log-probs and entropies (masked), as VlmPolicy::score."""
        kv, keys = self.encode(batch["images"], batch["text"], batch["key_mask"])
        hidden = self.decode(kv, batch["key_mask"], batch["inputs"])
        logits = self.decoder.head(hidden)
        if keys is not None:
            logits = logits + self.decoder.pointer.logits(hidden, keys, batch["inputs"])
        z = logits / self.temperature + batch["grammar_mask"]
        lsm = F.log_softmax(z, dim=-1)
        logp = lsm.gather(2, batch["targets"][:, :, None])[:, :, 0]
        entropy = -(lsm.exp() * lsm).sum(-1)
        mask = batch["mask"]
        return logp * mask, entropy * mask, mask


def pg_loss(model, batch, entropy_coef):
    """speed::pg_loss: (-sum(logp * adv) - coef * sum(entropy)) / sum(mask)."""
    logp, entropy, mask = model.score(batch)
    pg = -(logp * batch["advantages"]).sum()
    return (pg - entropy.sum() * entropy_coef) / mask.sum(), (logp, entropy, mask)


def build(export_dir, device, sdpa=False):
    with open(os.path.join(export_dir, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(export_dir, "reference.json")) as f:
        ref = json.load(f)
    model = VlmPolicy(cfg, ref["vocab"], ref["x0"], ref["temperature"], sdpa)
    weights = load_safetensors(os.path.join(export_dir, "weights.safetensors"))
    model.load_state_dict(weights, strict=True)  # every guirl Var, nothing else
    model.to(device)
    batch = {k: v.to(device) for k, v in load_safetensors(os.path.join(export_dir, "batch.safetensors")).items()}
    a = ref["adamw"]
    opt = torch.optim.AdamW(model.parameters(), lr=a["lr"], betas=(a["beta1"], a["beta2"]), eps=a["eps"],
                            weight_decay=a["weight_decay"])
    return cfg, ref, model, batch, opt


def grad_norms(model):
    return {n: p.grad.double().pow(2).sum().sqrt().item() for n, p in model.named_parameters() if p.grad is not None}


def check(args):
    torch.manual_seed(0)
    cfg, ref, model, batch, opt = build(args.export, "cpu")
    coef = ref["entropy_coef"]
    loss, (logp, entropy, mask) = pg_loss(model, batch, coef)
    loss.backward()
    norms = grad_norms(model)
    grad_norm = math.sqrt(sum(v * v for v in norms.values()))
    opt.step()
    opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        after, _ = pg_loss(model, batch, coef)
    rows = [
        ("loss", loss.item(), ref["loss"], True),
        ("grad norm", grad_norm, ref["grad_norm"], True),
        ("loss after AdamW", after.item(), ref["loss_after_step"], True),
        ("sum logp", logp.sum().item(), ref["logp_sum"], False),
        ("sum entropy", entropy.sum().item(), ref["entropy_sum"], False),
        ("tokens", mask.sum().item(), ref["tokens"], False),
    ]
    print(f"torch {torch.__version__}, {args.export}: {sum(p.numel() for p in model.parameters())} params "
          f"(guirl {ref['params']}), batch {ref['batch']}")
    print(f"{'':18} {'PyTorch':>16} {'guirl':>16} {'rel diff':>10}")
    failed = []
    for name, mine, theirs, gated in rows:
        rel = abs(mine - theirs) / max(abs(theirs), 1e-30)
        ok = rel <= args.rtol
        if gated and not ok:
            failed.append(name)
        mark = ("ok" if ok else "FAIL") if gated else "(info)"
        print(f"{name:18} {mine:16.9g} {theirs:16.9g} {rel:10.2e}  {mark}")
    missing = sorted(set(ref["grad_norms"]) ^ set(norms))
    if missing:
        failed.append("gradients")
        print(f"gradients present on one side only: {missing}")
    worst = sorted(
        ((abs(norms[n] - g) / max(g, 1e-30), n, norms[n], g) for n, g in ref["grad_norms"].items() if n in norms),
        reverse=True,
    )
    # Each Var's gradient norm too: the three scalars barely move for a small change of
    # maths (erf GELU instead of tanh: 1e-6 relative), a gradient norm does (1.3e-4).
    print("largest per-Var gradient-norm differences (PyTorch, guirl, rel diff):")
    for rel, n, mine, theirs in worst[:5]:
        print(f"  {n:40} {mine:12.6g} {theirs:12.6g} {rel:9.2e}  {'ok' if rel <= args.rtol else 'FAIL'}")
    over = [n for rel, n, _, _ in worst if rel > args.rtol]
    if over:
        failed.append(f"gradient norms of {len(over)} Var(s)")
    if failed:
        print(f"FAILED (rtol {args.rtol:g}): {', '.join(failed)}")
        return 1
    print(f"all within {args.rtol:g} relative")
    return 0


def peak_rss_mb():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def time_steps(args):
    rss0 = peak_rss_mb()  # torch's libraries alone, before any tensor of ours
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = device.type == "cuda"
    cfg, ref, model, batch, opt = build(args.export, device, args.sdpa)
    coef = ref["entropy_coef"]
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    fwd, bwd, step, cpu, losses = [], [], [], [], []
    for i in range(args.warmup + args.steps):
        sync()
        t1, c1 = time.perf_counter(), time.process_time()
        loss, _ = pg_loss(model, batch, coef)
        losses.append(loss.item())  # guirl reads the loss back here too
        t2 = time.perf_counter()
        loss.backward()
        sync()
        t3 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        t4, c4 = time.perf_counter(), time.process_time()
        if i >= args.warmup:
            fwd.append((t2 - t1) * 1000)
            bwd.append((t3 - t2) * 1000)
            step.append((t4 - t1) * 1000)
            cpu.append((c4 - c1) * 1000)
    med = statistics.median
    b = ref["batch"]
    sps = lambda ms: b * 1000 / ms  # noqa: E731
    attn = "F.scaled_dot_product_attention (--sdpa)" if args.sdpa else "explicit softmax (guirl's math)"
    threads = torch.get_num_threads()
    arch = f"d{cfg['d_model']} enc{cfg['encoder_layers']} dec{cfg['decoder_layers']} " \
        f"{cfg['image_width']}x{cfg['image_height']}"
    omp = os.environ.get("OMP_WAIT_POLICY", "(unset)")
    print(f"PyTorch twin of VLM ({arch}) on {device}, torch {torch.__version__}, threads {threads}, "
          f"OMP_WAIT_POLICY={omp}, attention: {attn}")
    print(f"params {sum(p.numel() for p in model.parameters())} | encoder tokens {batch['key_mask'].shape[3]} | "
          f"action tokens {batch['inputs'].shape[1]} | batch {b}")
    print(f"forward            {med(fwd):8.1f} ms  ({sps(med(fwd)):7.1f} samples/s)")
    print(f"backward           {med(bwd):8.1f} ms  ({sps(med(bwd)):7.1f} samples/s)")
    print(f"fwd+bwd+AdamW      {med(step):8.1f} ms  ({sps(med(step)):7.1f} samples/s; {med(cpu):.0f} CPU ms)")
    rss = peak_rss_mb()
    print(f"peak RSS           {'unknown' if rss is None else f'{rss:.0f} MiB'}"
          + ("" if rss0 is None else f" ({rss0:.0f} MiB of it after importing torch, before the model)"))
    if cuda:
        print(f"peak CUDA memory   {torch.cuda.max_memory_allocated(device) / 2**20:.0f} MiB allocated, "
              f"{torch.cuda.max_memory_reserved(device) / 2**20:.0f} MiB reserved")
    print(f"losses             {' '.join(f'{v:.6f}' for v in losses)}")
    first = abs(losses[0] - ref["loss"]) / abs(ref["loss"])
    print(f"first loss vs guirl's export: {losses[0]:.9g} vs {ref['loss']:.9g} (rel {first:.1e})")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    c = sub.add_parser("check", help="loss, grad norm, post-AdamW loss against guirl's (f32, CPU)")
    c.add_argument("export", help="folder written by `policy_speed PRESET BATCH cpu export=DIR`")
    c.add_argument("--rtol", type=float, default=1e-4)
    t = sub.add_parser("time", help="median fwd+bwd+AdamW step time")
    t.add_argument("export")
    t.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    t.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    t.add_argument("--steps", type=int, default=10)
    t.add_argument("--warmup", type=int, default=3)
    t.add_argument("--sdpa", action="store_true", help="F.scaled_dot_product_attention (an extra variant)")
    args = ap.parse_args()
    return check(args) if args.mode == "check" else time_steps(args)


if __name__ == "__main__":
    sys.exit(main())
