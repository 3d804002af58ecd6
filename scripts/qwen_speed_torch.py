"""The PyTorch side of the Qwen-VL speed comparison (transformers + peft): the checks that
both sides compute the same thing, the timed update and generation, the products alone.
`bench_qwen_speed.py torch-worker JOB` runs one job in a process of its own (so its peak
RSS is its own); `scripts/decode_table_torch.py` shares its memory helpers."""

import json
import os
import statistics
import sys
import time

from qwen_speed_setup import TOL, log, torch_dtype



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
