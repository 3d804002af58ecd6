//! Training and acting throughput of the Candle VLM policy on CPU (or CUDA with
//! `--features cuda`). A plain `main` (`harness = false`) that prints figures.
//!
//! ```text
//! MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=17179869184 RAYON_NUM_THREADS=2 \
//!     cargo bench --bench policy_speed -- [tiny|small|base] [batch] [cpu|cuda] [export=DIR]
//! ```
//!
//! With `export=DIR` it times nothing: it writes the seeded weights, the prepared batch and
//! the first training step's loss, gradient norm and post-AdamW loss into DIR
//! (`speed::export`), for `scripts/small_policy_torch.py` (the same policy in PyTorch) to
//! check itself against and time on the same batch.

use candle_core::Device;
use guirl::policy::vlm::{speed, VlmConfig};

fn main() -> anyhow::Result<()> {
    // `cargo bench` passes `--bench`; keep only our positional arguments.
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let export = args.iter().find_map(|a| a.strip_prefix("export=")).map(std::path::PathBuf::from);
    let args: Vec<&String> = args.iter().filter(|a| !a.starts_with("export=")).collect();
    let preset = args.first().map_or("small", |a| a.as_str());
    let batch: usize = args.get(1).map(|b| b.parse()).transpose()?.unwrap_or(32);
    // Third argument `cpu` runs a CUDA build on the host (candle's `cuda_if_available`
    // only asks whether the feature is compiled in, so an empty CUDA_VISIBLE_DEVICES fails).
    let device = match args.get(2).map(|a| a.as_str()) {
        Some("cpu") => Device::Cpu,
        Some("cuda") | None if cfg!(feature = "cuda") => guirl::policy::device::cuda(0)?,
        None => Device::Cpu,
        Some(other) => anyhow::bail!("device `{other}`: expected `cpu` or `cuda` (a --features cuda build)"),
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
