//! The guirl side of the Qwen-VL speed comparison (guirl and PyTorch side by side):
//! a LoRA GRPO-style update (`QwenVlPolicy::score`, a policy-gradient surrogate on the
//! answer tokens' log-probs, backward, guirl's `AdamW`) and greedy rollout decoding with the
//! KV cache (`QwenVl::hidden` / `step_rows`, the calls `act` makes), for single prompts
//! and for a group of answers of one prompt decoded together, on CPU in f32.
//!
//! `scripts/bench_qwen_speed.py` drives it (it writes the checkpoints and the inputs, runs
//! the PyTorch side, and prints the table); by hand:
//!
//! ```text
//! cargo bench --bench qwen_speed -- prepare --model DIR --inputs INPUTS.json --out PREP_DIR
//! RAYON_NUM_THREADS=2 cargo bench --bench qwen_speed -- time --model DIR --inputs INPUTS.json --out RESULT.json
//! cargo bench --bench qwen_speed -- matmul --model DIR --inputs INPUTS.json --out MATMUL.json
//! ```
//!
//! `--device cuda` and `--dtype bf16` (a `--features cuda` build) run the same on a GPU
//! (`benches/gpu/run.sh`); the measured runs here are CPU and f32. `qwen_speed --help`
//! lists the modes, `qwen_speed MODE --help` what a mode does and its flags.
//!
//! The modes, one file each beside this one: `prepare` (prepare.rs), `time` (time.rs),
//! `profile` and `matmul` (parts.rs); what they read is inputs.rs's, the policy they load
//! and the calls they time bench.rs's.

mod bench;
mod inputs;
mod parts;
mod prepare;
mod stats;
mod time;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use guirl::policy::device::{DeviceName, DtypeFlag};
use inputs::{Env, Inputs};
use std::path::{Path, PathBuf};

/// The guirl side of the Qwen-VL speed comparison (`scripts/bench_qwen_speed.py` drives
/// it): a LoRA GRPO-style update and greedy rollout decoding with the KV cache.
#[derive(Parser)]
#[command(
    name = "qwen_speed",
    bin_name = "qwen_speed",
    after_help = "From the repository: `cargo bench --bench qwen_speed -- MODE FLAGS`."
)]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

/// What to run; every mode takes the same flags.
#[derive(Subcommand)]
enum Mode {
    /// Write what the PyTorch side needs to compute exactly the same thing, and the values
    /// it must reproduce, into the folder `--out`.
    ///
    /// `prep.json`: each sample's prompt ids and answer tokens as the policy builds them;
    /// the per-token log-probs before and after one update, the loss, the greedy tokens.
    /// `pixels.safetensors`: the patches guirl's processor made.
    Prepare(Flags),
    /// Measure generation first (its RSS high-water mark), then the update (the
    /// high-water mark reset before it), then one update cut into phases; write the
    /// report to `--out` and print it.
    ///
    /// The vision tower's output is cached per screenshot by the policy; the timed updates
    /// use a fresh screenshot (one changed pixel row) every repetition, so the vision tower
    /// runs in every step, as it does on the PyTorch side.
    Time(Flags),
    /// Time the decoder's linear products alone at one sample's shapes (forward, input
    /// gradient, weight gradient and its accumulation); reads `prep/prep.json` beside
    /// `--inputs` (`prepare --out` there), writes `--out`.
    Matmul(Flags),
    /// Time one decoder layer's parts alone at the update's shapes, forward and backward,
    /// and the whole layer; print the table and write it to `--out`.
    Profile(Flags),
}

impl Mode {
    fn flags(&self) -> &Flags {
        match self {
            Mode::Prepare(f) | Mode::Time(f) | Mode::Matmul(f) | Mode::Profile(f) => f,
        }
    }
}

/// The flags of every mode.
#[derive(Args)]
struct Flags {
    /// A Qwen-VL checkpoint folder (the random-weight sizes `scripts/bench_qwen_speed.py`
    /// writes, or `fixtures/qwen_vl/qwen3_vl`).
    #[arg(long, value_name = "DIR")]
    model: PathBuf,
    /// The bench's inputs as `scripts/bench_qwen_speed.py` writes them: the samples, the
    /// adapter both sides start from, the update's and the generation's repetitions; the
    /// paths in it are relative to its folder.
    #[arg(long, value_name = "INPUTS.json")]
    inputs: PathBuf,
    /// Where the results go: a folder for `prepare`, a JSON file for the other modes.
    #[arg(long, value_name = "PATH")]
    out: PathBuf,
    /// Where the policy runs (`cuda`: a `--features cuda` build and a GPU).
    #[arg(long, default_value_t = DeviceName::Cpu)]
    device: DeviceName,
    /// The weights' dtype.
    #[arg(long, value_enum, default_value_t = DtypeFlag::F32)]
    dtype: DtypeFlag,
}

fn main() -> Result<()> {
    // the allocator as `guirl train` has it (the environment's MALLOC_* settings win)
    guirl::cli::tune_allocator();
    // `cargo bench` adds `--bench`
    let cli = Cli::parse_from(std::env::args().filter(|a| a != "--bench"));
    let f = cli.mode.flags();
    let device = f.device.open()?;
    let (model, inputs_path, out) = (&f.model, &f.inputs, &f.out);
    let inputs: Inputs = serde_json::from_str(
        &std::fs::read_to_string(inputs_path).with_context(|| format!("{}", inputs_path.display()))?,
    )?;
    let base = inputs_path.parent().unwrap_or(Path::new(".")).to_path_buf();
    let env = Env { device, dtype: f.dtype.name().to_string() };
    match &cli.mode {
        Mode::Prepare(_) => prepare::prepare(model, &inputs, &base, out, &env),
        Mode::Time(_) => time::time(model, &inputs, &base, out, &env),
        Mode::Matmul(_) => parts::matmul(model, &base, out, &env),
        Mode::Profile(_) => parts::profile(model, &inputs, &base, out, &env),
    }
}
