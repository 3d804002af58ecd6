//! `guirl train`.

use crate::train::trainer::{run_dir, Trainer};
use crate::train::TrainConfig;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Arguments of `guirl train`.
#[derive(Debug, clap::Args)]
pub struct TrainArgs {
    /// The training config (TOML).
    config: PathBuf,
    /// Run folder (default: run.dir/run.name from the config).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue the run in the folder from its latest checkpoint.
    #[arg(long)]
    resume: bool,
}

/// `guirl train`.
pub async fn train(args: TrainArgs) -> anyhow::Result<()> {
    let cfg = TrainConfig::load(&args.config)?;
    let dir = run_dir(&cfg, args.out.as_deref());
    let mut trainer = Trainer::new(cfg, dir.clone(), args.resume)?;
    trainer.progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    // Ctrl-C: finish the iteration, save a checkpoint, exit.
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("guirl: stopping after this iteration (a checkpoint will be saved)");
            flag.store(true, Ordering::SeqCst);
        }
    });
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
