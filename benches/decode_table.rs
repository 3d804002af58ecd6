//! The rollout decoding table: tokens per second
//! of the Qwen-VL policy's own decoder (`Policy::step_decoder`, the continuous-batching
//! session the collector uses) for 1 to N concurrent rollouts of different screenshots,
//! with the peak memory, against the memory-bandwidth roofline measured in the same run.
//!
//! `--help` lists the flags, each with what it does (their doc comments on `Cli` below).
//!
//! Each rollout gets its own screenshot (no prompt is shared) and samples at temperature
//! 1; all are admitted at once, so prefill and decode are timed apart. The roofline for
//! one rollout is the bandwidth of a large on-device copy, measured here, over the bytes
//! of text weights one token reads (every decoder layer's matrices and the LM head); n
//! rollouts share those reads, so their roofline is n times that until compute bounds it.
//! Peak memory, sampled every 20 ms: the bytes allocated on a CPU (glibc's `mallinfo2`),
//! `nvidia-smi`'s used memory on a GPU. Before the table a warm-up admits the largest
//! count and decodes two steps, with the allocator set as `guirl train` sets it, so that
//! the table times decoding in memory a long run would reuse, not a CPU's first-touch page
//! faults.

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use clap::{Parser, ValueEnum};
use guirl::env::ScreenState;
use guirl::policy::device::{DeviceName, DtypeFlag};
use guirl::policy::qwen_vl::{DecodeKernels, DecodeLora, DecodeWindow, QwenPolicySettings, QwenVlPolicy};
use guirl::policy::{Policy, Sampling, TrainablePolicy};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Tokens per second of the Qwen-VL policy's decoder for 1 to N concurrent rollouts of
/// different screenshots, with the peak memory, against the memory-bandwidth roofline
/// measured in the same run.
#[derive(Parser)]
#[command(
    name = "decode_table",
    bin_name = "decode_table",
    after_help = "From the repository: `cargo bench --bench decode_table -- FLAGS`."
)]
struct Cli {
    /// A Qwen-VL checkpoint folder: a fixture under `fixtures/qwen_vl/`, or one of the
    /// random-weight sizes `scripts/bench_qwen_speed.py` writes.
    #[arg(long, value_name = "DIR")]
    model: PathBuf,
    /// The counts of concurrent rollouts, one row of the table each.
    #[arg(long, value_name = "N,...", value_delimiter = ',', value_parser = count, default_value = "1,2,4,8")]
    rollouts: Vec<usize>,
    /// New tokens each rollout decodes (`max_new_tokens`).
    #[arg(long, value_name = "N", default_value_t = 32)]
    tokens: usize,
    /// Where the policy decodes (`cuda`: a `--features cuda` build and a GPU).
    #[arg(long, default_value_t = DeviceName::Cpu)]
    device: DeviceName,
    /// The weights' dtype (the policy's `dtype`).
    #[arg(long, value_enum, default_value_t = DtypeFlag::F32)]
    dtype: DtypeFlag,
    /// Rows of a decoding chunk (`decode_rows`); left out, each count decodes in one chunk
    /// of that many rows (a collector of that many envs).
    #[arg(long, value_name = "R")]
    rows: Option<usize>,
    /// Decode with `decode_window = W`: a number of tokens or `auto` (a chunk of `--rows`
    /// answers in window slots, one attention per layer for the chunk), or `off` (one
    /// attention per answer); left out, the device's default (`auto` on a GPU, `off` on a
    /// CPU).
    #[arg(long, value_name = "W|auto|off")]
    window: Option<DecodeWindow>,
    /// Have the host read the drawn tokens every N decoding steps (`decode_sync`); left
    /// out, the device's default.
    #[arg(long, value_name = "N")]
    sync: Option<usize>,
    /// Also write the table as JSON, with the settings it ran with, the bytes read per
    /// token, the copy bandwidth and the roofline.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Decode with `decode_lora` so (left out, the device's default).
    #[arg(long, value_enum)]
    lora: Option<Lora>,
    /// Decode with `decode_kernels` so (left out, the default).
    #[arg(long, value_enum)]
    kernels: Option<Kernels>,
    /// Decode with `batch_invariant` so: `false` decodes a chunk's live answers alone,
    /// unpadded; beside `--rows R` padded, what batch invariance costs.
    #[arg(long, value_name = "true|false")]
    invariant: Option<bool>,
    /// (CUDA) Decode with `decode_graph = true`: each chunk's steps captured as a CUDA
    /// graph at its second step and replayed after (the capture is timed with the rest).
    #[arg(long)]
    graph: bool,
    /// (CUDA) Time the table with candle's upload cache on (`enable_cuda_graph_htod_cache`,
    /// made for graph capture).
    ///
    /// A kernel over a strided tensor then reads its dims and strides from a device buffer
    /// uploaded once per shape, where it otherwise uploads them at every launch, and host
    /// data of up to 4 KiB is kept on the device by its bytes. It measures how much of a
    /// decoding step's host time those small uploads are; the cache keeps every distinct
    /// small upload (the draws' uniforms among them) for the process's life, so it is a
    /// measurement, not a setting.
    #[arg(long)]
    cache_uploads: bool,
    /// Time nothing: after the warm-up, admit the first `--rollouts` count, decode two
    /// steps, then STEPS steps inside a profiler's range (for `ncu --profile-from-start
    /// off`; benches/gpu/run.sh's section 7).
    #[arg(long, value_name = "STEPS")]
    profile: Option<usize>,
    /// Time nothing: draw every adapter's B, decode N rollouts and rescore their tokens as
    /// training does, and print how far the decoder's log-probs are from the trainer's.
    ///
    /// B is drawn seeded, with a standard deviation of 0.01, as if trained a little (a
    /// fresh B is zero and a merged adapter would change nothing); the rescoring is
    /// `TrainablePolicy::score`. The mean and largest absolute difference per token are
    /// the rollout engine's mismatch, which the importance ratio of the first update sees.
    #[arg(long, value_name = "N")]
    mismatch: Option<usize>,
    /// Also write the prompts of the largest count's rollouts as the policy builds them
    /// (`prompts.json`: ids and image grids; `pixels.safetensors`: the patches), for
    /// `scripts/decode_table_torch.py`, which decodes the same prompts with transformers'
    /// `generate` and prints both tables side by side.
    #[arg(long, value_name = "DIR")]
    export: Option<PathBuf>,
}

/// A count of rollouts in `--rollouts` (spaces around it allowed, as in `1, 8`).
fn count(s: &str) -> Result<usize, String> {
    s.trim().parse().map_err(|e| format!("{s:?} is not a count: {e}"))
}

/// `--lora`: how decoding reads the LoRA adapters ([`DecodeLora`]).
#[derive(Clone, Copy, ValueEnum)]
enum Lora {
    /// Merged into a copy of each adapted layer's weight for the session.
    Merged,
    /// Applied beside each layer's base product, as in training.
    Separate,
}

impl From<Lora> for DecodeLora {
    fn from(l: Lora) -> Self {
        match l {
            Lora::Merged => DecodeLora::Merged,
            Lora::Separate => DecodeLora::Separate,
        }
    }
}

/// `--kernels`: how a decoding step's attention, small steps and draw run ([`DecodeKernels`]).
#[derive(Clone, Copy, ValueEnum)]
enum Kernels {
    /// candle's ops one by one.
    Eager,
    /// guirl's decoding kernels: attention over each answer's own length, the layer's
    /// small steps fused, products of a few rows, the draw.
    Fused,
}

impl From<Kernels> for DecodeKernels {
    fn from(k: Kernels) -> Self {
        match k {
            Kernels::Eager => DecodeKernels::Eager,
            Kernels::Fused => DecodeKernels::Fused,
        }
    }
}

fn main() -> Result<()> {
    // the allocator as `guirl train` has it: freed memory is kept for reuse, not faulted
    // in again page by page
    guirl::cli::tune_allocator();
    // `cargo bench` adds `--bench`
    let cli = Cli::parse_from(std::env::args().filter(|a| a != "--bench"));
    let device = cli.device.open()?;
    let dtype = cli.dtype.name().to_string();
    let model = cli.model;
    let rollouts = cli.rollouts;
    let tokens = cli.tokens;
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(model.join("config.json")).with_context(|| {
            format!("{}: cannot read config.json; --model takes a Qwen-VL checkpoint folder", model.display())
        })?)?;
    let backbone = match config["model_type"].as_str() {
        Some("qwen2_5_vl") => "qwen2_5_vl",
        _ => "qwen3_vl",
    };
    let mut s = QwenPolicySettings::new(backbone, model.to_str().context("model path")?);
    s.dtype = dtype.clone();
    s.max_new_tokens = tokens;
    s.decode_rows = cli.rows;
    s.decode_window = cli.window;
    s.decode_sync = cli.sync;
    s.decode_lora = cli.lora.map(DecodeLora::from);
    s.decode_kernels = cli.kernels.map(DecodeKernels::from);
    if let Some(v) = cli.invariant {
        s.batch_invariant = v;
    }
    s.decode_graph = cli.graph;
    let graph = s.decode_graph;
    let adapters = s.decode_lora_on(&device);
    let kernels = s.decode_kernels_on(&device);
    let window = s.decode_window_on(&device);
    let invariant = s.batch_invariant;
    // unset, each count decodes in one chunk of that many rows (a collector of that many envs)
    let rows = s.decode_rows.map_or("the rollouts".to_string(), |r| r.to_string());
    let sync = s.decode_sync_on(&device);
    // the adapters the policy decodes with (its defaults), for another engine to match
    let lora = serde_json::json!({"rank": s.lora_rank, "alpha": s.lora_alpha, "targets": s.lora_targets});
    let settings = s.clone();
    let mut policy = QwenVlPolicy::new(s, &device, 0)?;
    policy.set_sampling(Sampling { temperature: 1.0, greedy: false, seed: 1 });

    let weight_bytes = text_bytes_per_token(&policy, &dtype);
    let bandwidth = copy_bandwidth(&device)?;
    let roofline = bandwidth / weight_bytes;
    println!(
        "{backbone} {dtype} on {device:?}: {:.1} MB of text weights read per token, copy bandwidth {:.1} GB/s, \
         roofline {:.0} tokens/s for one rollout; decode_rows {rows}, decode_window {window}, decode_sync {sync}, \
         decode_lora {adapters}, decode_kernels {kernels}, batch_invariant {invariant}, decode_graph {graph}, \
         {tokens} new tokens",
        weight_bytes / 1e6,
        bandwidth / 1e9,
        roofline
    );
    // a first decode pays one-off costs (kernel loading, allocations): as many rollouts as
    // the largest count, so that its answers' caches are not the first memory of that size
    // (on a CPU, fresh pages cost a fault each; a long run reuses its memory)
    warm_up(&policy, rollouts.iter().copied().max().unwrap_or(1))?;
    if let Some(n) = cli.mismatch {
        return mismatch(&policy, n);
    }
    if let Some(steps) = cli.profile {
        return profile(&policy, rollouts[0], steps);
    }
    let _cached = if cli.cache_uploads {
        println!("with candle's upload cache (dims, strides and small host data kept on the device)");
        Some(cache_uploads(&device)?)
    } else {
        None
    };
    println!(
        "| rollouts | prefill s | decode s | tokens | tokens/s | per rollout | of roofline | peak memory |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut table = Vec::new();
    for &n in &rollouts {
        let peak = Peak::start(&device);
        let r = run(&policy, n, tokens, n)?;
        let mem = peak.stop();
        let rate = r.tokens as f64 / r.decode_s;
        let chunk = settings.decode_rows_for(n);
        let of_roofline = rate / (roofline * n as f64);
        println!(
            "| {n} | {:.3} | {:.3} | {} | {rate:.1} | {:.1} | {:.1} % | {mem:.0} MiB |",
            r.prefill_s,
            r.decode_s,
            r.tokens,
            rate / n as f64,
            100.0 * of_roofline
        );
        table.push(serde_json::json!({
            "rollouts": n, "decode_rows": chunk, "prefill_s": r.prefill_s, "decode_s": r.decode_s, "tokens": r.tokens,
            "tokens_per_s": rate, "of_roofline": of_roofline, "peak_mib": mem,
        }));
    }
    if let Some(dir) = cli.export {
        let n = rollouts.iter().copied().max().unwrap_or(1);
        export(&policy, n, tokens, lora, &dir)?;
    }
    if let Some(out) = cli.out {
        let doc = serde_json::json!({
            "backbone": backbone, "dtype": dtype, "device": format!("{device:?}"), "decode_rows": rows,
            "decode_window": window, "decode_sync": sync, "decode_lora": adapters, "decode_kernels": kernels,
            "batch_invariant": invariant, "new_tokens": tokens, "weight_bytes_per_token": weight_bytes,
            "copy_bandwidth": bandwidth,
            "roofline_one_rollout": roofline, "table": table,
        });
        std::fs::write(&out, serde_json::to_string_pretty(&doc)?)
            .with_context(|| out.display().to_string())?;
    }
    Ok(())
}

struct Run {
    prefill_s: f64,
    decode_s: f64,
    tokens: usize,
}

/// `n` rollouts admitted and decoded two steps (each answer's first token copies its
/// prompt's cache), then dropped.
fn warm_up(policy: &QwenVlPolicy, n: usize) -> Result<()> {
    let mut dec = policy.step_decoder(n).context("the Qwen-VL policy decodes token by token")?;
    for i in 0..n {
        dec.admit(i as u64, &screen(999_000 + i), i as u64)?;
    }
    for _ in 0..2 {
        dec.step()?;
    }
    policy.device().synchronize()?;
    Ok(())
}

/// `n` rollouts of different screenshots (seeded by `salt`) through the policy's decoder.
fn run(policy: &QwenVlPolicy, n: usize, tokens: usize, salt: usize) -> Result<Run> {
    let mut dec = policy.step_decoder(n).context("the Qwen-VL policy decodes token by token")?;
    let device = policy.device().clone();
    let t0 = Instant::now();
    for i in 0..n {
        dec.admit(i as u64, &screen(salt * 1000 + i), i as u64)?;
    }
    dec.prefill()?;
    device.synchronize()?;
    let prefill_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut made = 0;
    let mut steps = 0;
    while dec.live() > 0 {
        for (_, d) in dec.step()? {
            made += d.tokens.len();
        }
        steps += 1;
        anyhow::ensure!(steps <= tokens + 1, "the decoder ran past {tokens} tokens");
    }
    device.synchronize()?;
    Ok(Run { prefill_s, decode_s: t1.elapsed().as_secs_f64(), tokens: made })
}

/// `--profile STEPS`: `n` rollouts admitted and two steps decoded, then `steps` decoding
/// steps inside the range a profiler started with `ncu --profile-from-start off` records
/// (guirl::policy::device::profiler_range), so it sees a few steps' kernels, not a run's.
fn profile(policy: &QwenVlPolicy, n: usize, steps: usize) -> Result<()> {
    let mut dec = policy.step_decoder(n).context("the Qwen-VL policy decodes token by token")?;
    for i in 0..n {
        dec.admit(i as u64, &screen(777_000 + i), i as u64)?;
    }
    for _ in 0..2 {
        dec.step()?;
    }
    guirl::policy::device::profiler_range(policy.device(), true)?;
    let t = Instant::now();
    let mut done = 0;
    while done < steps && dec.live() > 0 {
        dec.step()?;
        done += 1;
    }
    guirl::policy::device::profiler_range(policy.device(), false)?;
    println!(
        "profiled {done} decoding steps of {n} rollouts ({:.3} s with the profiler)",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `--cache-uploads` (see its flag): candle's upload cache on this thread until the
/// returned guard is dropped.
#[cfg(feature = "cuda")]
fn cache_uploads(device: &Device) -> Result<Box<dyn std::any::Any>> {
    match device {
        Device::Cuda(d) => Ok(Box::new(d.enable_cuda_graph_htod_cache())),
        _ => bail!("--cache-uploads: a CUDA device's cache (--device cuda)"),
    }
}

#[cfg(not(feature = "cuda"))]
fn cache_uploads(_device: &Device) -> Result<Box<dyn std::any::Any>> {
    bail!("--cache-uploads: a CUDA device's cache (a `--features cuda` build, --device cuda)")
}

/// `--mismatch N` (see its flag): the decoder's log-probs against the trainer's
/// rescoring of the same tokens, after drawing every adapter's B.
fn mismatch(policy: &QwenVlPolicy, n: usize) -> Result<()> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let bound = 0.01 * 3f32.sqrt(); // uniform with a standard deviation of 0.01
    for (name, v) in policy.trainable_vars() {
        if name.ends_with("lora_B") {
            let vals: Vec<f32> = (0..v.elem_count()).map(|_| rng.gen_range(-bound..bound)).collect();
            v.set(&Tensor::from_vec(vals, v.dims(), policy.device())?.to_dtype(v.dtype())?)?;
        }
    }
    let states: Vec<ScreenState> = (0..n).map(|i| screen(555_000 + i)).collect();
    let mut dec = policy.step_decoder(n).context("the Qwen-VL policy decodes token by token")?;
    for (i, st) in states.iter().enumerate() {
        dec.admit(i as u64, st, i as u64)?;
    }
    let mut decided = vec![None; n];
    while dec.live() > 0 {
        for (id, d) in dec.step()? {
            decided[id as usize] = Some(d);
        }
    }
    drop(dec);
    let decided: Vec<_> = decided.into_iter().map(|d| d.expect("every answer ends")).collect();
    let tokens: Vec<Vec<u32>> = decided.iter().map(|d| d.tokens.clone()).collect();
    // two prompts at a time: the trainer's pass keeps its graph, and 8 prompts of the 0.5B
    // model's length took 23.6 GB (a 24 GB machine killed it)
    let mut scored = Vec::new();
    for (s, t) in states.chunks(2).zip(tokens.chunks(2)) {
        scored.extend(policy.score(s, t)?.logp.detach().to_dtype(DType::F32)?.to_vec2::<f32>()?);
    }
    let diffs: Vec<f32> = decided
        .iter()
        .zip(&scored)
        .flat_map(|(d, row)| d.token_logprobs.iter().zip(row).map(|(a, b)| (a - b).abs()))
        .collect();
    let mean = diffs.iter().sum::<f32>() / diffs.len().max(1) as f32;
    let max = diffs.iter().copied().fold(0f32, f32::max);
    println!(
        "mismatch over {} tokens of {n} rollouts: |decoder log-prob - trainer's| mean {mean:.2e}, largest {max:.2e}",
        diffs.len()
    );
    Ok(())
}

/// Write the prompts of `n` rollouts of different screenshots into `dir` (`--export`): what another engine needs to decode exactly what the policy's decoder did.
fn export(
    policy: &QwenVlPolicy,
    n: usize,
    tokens: usize,
    lora: serde_json::Value,
    dir: &std::path::Path,
) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
    let m = policy.model();
    let mut samples = Vec::new();
    let mut pixels = std::collections::HashMap::new();
    for i in 0..n {
        let (ids, img) = policy.prompt(&screen(n * 1000 + i))?;
        let (px, grids) = m.processor.batch(std::slice::from_ref(&img), &Device::Cpu)?;
        pixels.insert(format!("pixel_values.{i}"), px);
        samples.push(serde_json::json!({"input_ids": ids, "grid": grids[0]}));
    }
    candle_core::safetensors::save(&pixels, dir.join("pixels.safetensors"))?;
    let doc = serde_json::json!({"new_tokens": tokens, "lora": lora, "samples": samples});
    std::fs::write(dir.join("prompts.json"), serde_json::to_string(&doc)?)?;
    println!("wrote {n} prompts to {}", dir.display());
    Ok(())
}

/// A MiniWoB++-sized screen (160 × 210) whose pixels differ with `seed`.
fn screen(seed: usize) -> ScreenState {
    let img = image::RgbImage::from_fn(160, 210, |x, y| {
        let v = (x as usize * 7 + y as usize * 13 + seed * 31) % 251;
        image::Rgb([v as u8, (v * 3 % 256) as u8, (seed % 256) as u8])
    });
    ScreenState {
        task_id: "bench".into(),
        instruction: "Click the button labelled OK.".into(),
        url: String::new(),
        step: 0,
        frame: Default::default(),
        elements: vec![],
        screenshot: img.into(),
        history: vec![],
        previous_screenshot: None,
    }
}

/// Bytes of text weights one decoded token reads: every decoder layer's projections and
/// the LM head (the embedding lookup reads one row).
fn text_bytes_per_token(policy: &QwenVlPolicy, dtype: &str) -> f64 {
    let c = &policy.model().config.text;
    let (h, i) = (c.hidden_size, c.intermediate_size);
    let (q, kv) = (c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim);
    let layer = h * q + 2 * h * kv + q * h + 3 * h * i;
    let params = c.num_hidden_layers * layer + c.vocab_size * h;
    params as f64 * if dtype == "bf16" { 2.0 } else { 4.0 }
}

/// Bytes per second of a large on-device copy (read and write counted), best of 5.
fn copy_bandwidth(device: &Device) -> Result<f64> {
    let n = if device.is_cuda() { 1 << 28 } else { 1 << 25 };
    let src = Tensor::zeros(n, DType::F32, device)?;
    // Into a buffer written once before: a fresh allocation would time the page faults
    // of its first touch on a CPU, not the memory's bandwidth.
    let dst = src.copy()?;
    dst.slice_set(&src, 0, 0)?;
    device.synchronize()?;
    // Two copies, the faster kept: into that buffer (candle's strided-copy kernel, 1.99 TB/s
    // on an H200) and a plain device-to-device copy into a new buffer (the driver's copy,
    // about twice that on the same card); on a CPU the first (no page faults).
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        dst.slice_set(&src, 0, 0)?;
        device.synchronize()?;
        best = best.min(t.elapsed().as_secs_f64());
        if device.is_cuda() {
            let t = Instant::now();
            let fresh = src.copy()?;
            device.synchronize()?;
            best = best.min(t.elapsed().as_secs_f64());
            drop(fresh);
        }
    }
    Ok(2.0 * 4.0 * n as f64 / best)
}

/// The peak memory while a run lasts, sampled every 20 ms: the GPU's used memory (by
/// `nvidia-smi`) on a GPU; on a CPU the bytes allocated (glibc's `mallinfo2`: in use in
/// the heap, plus mapped blocks), since after the warm-up the resident set also holds
/// what the allocator keeps for reuse.
struct Peak {
    stop: Arc<AtomicBool>,
    max_mib: Arc<AtomicU64>,
    sampler: Option<std::thread::JoinHandle<()>>,
}

impl Peak {
    fn start(device: &Device) -> Peak {
        let (stop, max_mib) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let used: fn() -> Option<u64> = if device.is_cuda() { gpu_used_mib } else { allocated_mib };
        let sampler = {
            let (stop, max_mib) = (stop.clone(), max_mib.clone());
            std::thread::spawn(move || loop {
                if let Some(mib) = used() {
                    max_mib.fetch_max(mib, Ordering::SeqCst);
                }
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            })
        };
        Peak { stop, max_mib, sampler: Some(sampler) }
    }

    fn stop(mut self) -> f64 {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(s) = self.sampler.take() {
            s.join().ok();
        }
        match self.max_mib.load(Ordering::SeqCst) {
            0 => f64::NAN, // never measured
            mib => mib as f64,
        }
    }
}

/// MiB the process has allocated from glibc's allocator (`None` elsewhere).
fn allocated_mib() -> Option<u64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads the allocator's statistics
        let m = unsafe { libc::mallinfo2() };
        Some(((m.uordblks + m.hblkhd) >> 20) as u64)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    None
}

fn gpu_used_mib() -> Option<u64> {
    let out = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=memory.used", "--format=csv,noheader,nounits", "--id=0"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}
