//! Training and acting throughput of the Candle VLM policy on CPU (or CUDA with
//! `--features cuda`). A plain `main` (`harness = false`) that prints figures.
//!
//! ```text
//! MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=17179869184 RAYON_NUM_THREADS=2 \
//!     cargo bench --bench policy_speed -- [tiny|small|base] [batch] [cpu|cuda] [export=DIR]
//! ```
//!
//! `--help` lists the arguments, each with what it does.

use candle_core::Device;
use clap::{Parser, ValueEnum};
use guirl::policy::device::DeviceName;
use guirl::policy::vlm::{speed, VlmConfig};
use std::path::PathBuf;

/// Training and acting throughput of the Candle VLM policy: 3 warm-up and 10 timed
/// training steps on a synthetic batch, and acting on 1 and 8 states.
#[derive(Parser)]
#[command(
    name = "policy_speed",
    bin_name = "policy_speed",
    after_help = "From the repository: `cargo bench --bench policy_speed -- [PRESET] [BATCH] [DEVICE] \
                  [export=DIR]`."
)]
struct Cli {
    /// The policy's size (`VlmConfig::preset`).
    #[arg(value_enum, default_value_t = Preset::Small)]
    preset: Preset,
    /// Samples in the training batch.
    #[arg(default_value_t = 32)]
    batch: usize,
    /// Where it runs; left out, CUDA in a `--features cuda` build, else the CPU. `cpu`
    /// runs a CUDA build on the host (candle's `cuda_if_available` only asks whether the
    /// feature is compiled in, so an empty CUDA_VISIBLE_DEVICES fails).
    device: Option<DeviceName>,
    /// Time nothing: write the seeded weights, the prepared batch and the first training
    /// step's loss, gradient norm and post-AdamW loss into DIR (`speed::export`), for
    /// `scripts/small_policy_torch.py` (the same policy in PyTorch) to check itself against
    /// and time on the same batch. Also written `export=DIR` after the positional
    /// arguments, as the scripts write it.
    #[arg(long, value_name = "DIR")]
    export: Option<PathBuf>,
}

/// `VlmConfig::preset`'s sizes.
#[derive(Clone, Copy, ValueEnum)]
enum Preset {
    /// For tests: 4×5 image tokens, d_model 32, one layer each side.
    Tiny,
    /// The CPU default: a 72×96 image as 9×12 tokens of width 64, three encoder and two
    /// decoder layers.
    Small,
    /// For a GPU: the full MiniWoB screenshot as 20×26 tokens of width 256, six encoder
    /// and four decoder layers.
    Base,
}

impl Preset {
    /// The name `VlmConfig::preset` takes.
    fn name(self) -> &'static str {
        match self {
            Preset::Tiny => "tiny",
            Preset::Small => "small",
            Preset::Base => "base",
        }
    }
}

fn main() -> anyhow::Result<()> {
    // `cargo bench` passes `--bench`; `export=DIR` is the scripts' spelling of `--export DIR`
    let args = std::env::args().filter(|a| a != "--bench").map(|a| match a.strip_prefix("export=") {
        Some(dir) => format!("--export={dir}"),
        None => a,
    });
    let cli = Cli::parse_from(args);
    let (preset, batch, export) = (cli.preset.name(), cli.batch, cli.export);
    // Left out: the GPU in a CUDA build, else the CPU.
    let device = match cli.device {
        Some(d) => d.open()?,
        None if cfg!(feature = "cuda") => guirl::policy::device::cuda(0)?,
        None => Device::Cpu,
    };
    let cfg = VlmConfig::preset(preset)?;
    if let Some(dir) = export {
        let r = speed::export(&cfg, batch, &device, &dir)?;
        println!(
            "VLM `{preset}` batch {batch} on {device:?}: exported to {}\n\
             loss {}  grad norm {}  loss after one AdamW step {}",
            dir.display(),
            r["loss"],
            r["grad_norm"],
            r["loss_after_step"],
        );
        return Ok(());
    }
    println!(
        "VLM `{preset}` on {device:?}, RAYON_NUM_THREADS={}, MALLOC_MMAP_THRESHOLD_={}",
        std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "(unset)".into()),
        std::env::var("MALLOC_MMAP_THRESHOLD_").unwrap_or_else(|_| "(unset)".into()),
    );
    let report = speed::measure(&cfg, batch, 3, 10, &device)?;
    println!("{}", report.to_text());
    Ok(())
}
