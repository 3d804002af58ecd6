//! `guirl train`.

use crate::train::trainer::{run_dir, Trainer};
use crate::train::TrainConfig;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Arguments of `guirl train`.
#[derive(Debug, clap::Args)]
pub struct TrainArgs {
    /// The training config (TOML).
    #[arg(required_unless_present = "example_config")]
    config: Option<PathBuf>,
    /// Print the documented example config (every key, with its default) and exit.
    #[arg(long, conflicts_with_all = ["resume", "out"])]
    example_config: bool,
    /// Run folder (default: run.dir/run.name from the config).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue the run in the folder from its latest checkpoint.
    #[arg(long)]
    resume: bool,
    /// With --resume: continue even though the config differs from the run's config.toml
    /// (the differences are listed without it; raising run.iterations needs no --force).
    #[arg(long, requires = "resume")]
    force: bool,
    #[command(flatten)]
    browser: super::BrowserArgs,
}

/// `guirl train`.
pub async fn train(args: TrainArgs) -> anyhow::Result<()> {
    let Some(path) = args.config.as_deref().filter(|_| !args.example_config) else {
        print!("{}", crate::train::config::EXAMPLE_CONFIG);
        return Ok(());
    };
    let cfg = TrainConfig::load(path)?;
    let dir = run_dir(&cfg, args.out.as_deref());
    let mut trainer = Trainer::new(cfg, dir.clone(), args.resume, args.force)?;
    trainer.set_env_config(crate::env::EnvConfig { browser: args.browser.config(), ..Default::default() });
    trainer.progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    // Ctrl-C / SIGTERM: finish the iteration, save a checkpoint, exit.
    let stop = Arc::new(AtomicBool::new(false));
    super::watch_signals(Some(stop.clone()));
    let state = trainer.run(stop).await?;
    let best = state.best_eval.as_ref().filter(|(s, _)| *s >= 0.0);
    println!(
        "run={} iterations={} env_steps={} wall_secs={:.0}{}",
        dir.display(),
        state.iteration,
        state.env_steps,
        state.wall_secs,
        best.map(|(s, p)| format!(" best_eval_success={s:.3} best={p}")).unwrap_or_default()
    );
    Ok(())
}
