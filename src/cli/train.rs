//! `guirl train`.

use crate::train::config::{AlgoKind, ModelKind};
use crate::train::trainer::{run_dir, Trainer};
use crate::train::TrainConfig;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Arguments of `guirl train`.
#[derive(Debug, clap::Args)]
pub struct TrainArgs {
    /// The training config (TOML). With --resume it may be left out: the run folder's
    /// config.toml (--out) is used.
    #[arg(required_unless_present_any = ["example_config", "resume"])]
    config: Option<PathBuf>,
    /// Print the documented example config (every key, with its default; each kind's own
    /// table commented out) and exit.
    #[arg(long, conflicts_with_all = ["config", "resume", "out", "nproc"])]
    example_config: bool,
    /// With --example-config: the example for this algorithm, its own table written out.
    #[arg(long, value_name = "KIND", ignore_case = true)]
    kind: Option<AlgoKind>,
    /// With --example-config: the example for this policy, its [model] keys written out.
    #[arg(long, value_name = "KIND", ignore_case = true)]
    model_kind: Option<ModelKind>,
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
    /// Train data parallel over N processes on this machine (one per GPU when the config's
    /// device is cuda:D: the process of local rank r uses cuda:(D + r)); they split the
    /// rollouts and sum their gradients. Across machines, start each process yourself with
    /// torchrun's variables (docs/data-parallel.md).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    nproc: Option<u16>,
    #[command(flatten)]
    browser: super::browser::BrowserArgs,
}

/// `guirl train`. `Some(status)` when a signal stopped the run before it finished (its
/// checkpoint saved): the command then exits with that status (130 Ctrl-C, 143 SIGTERM), so
/// a script does not take a stopped run for a trained one.
pub async fn train(args: TrainArgs) -> anyhow::Result<Option<u8>> {
    // (checked here, not by clap's `requires`, whose message also asked for a config)
    if !args.example_config && (args.kind.is_some() || args.model_kind.is_some()) {
        anyhow::bail!(
            "--kind and --model-kind choose the example --example-config prints; a run's algorithm and \
             policy are its config's [algo] kind and [model] kind"
        );
    }
    // --resume without a config: the run folder's own
    let saved = match (&args.config, args.resume, &args.out) {
        (None, true, Some(out)) => Some(out.join(crate::train::run_folder::CONFIG_FILE)),
        (None, true, None) => anyhow::bail!(
            "--resume without a config needs --out RUN_FOLDER (its config.toml is used), or give the config"
        ),
        _ => None,
    };
    if let (Some(p), Some(out)) = (&saved, &args.out) {
        check_run_folder(out, p)?;
    }
    let Some(path) = args.config.as_deref().or(saved.as_deref()).filter(|_| !args.example_config) else {
        let mut example = match args.kind {
            None => crate::train::config::EXAMPLE_CONFIG.to_string(),
            Some(kind) => crate::train::config::example_config(kind),
        };
        if let Some(kind) = args.model_kind {
            example = crate::train::config::with_model_kind(&example, kind);
        }
        out!("{example}");
        return Ok(None);
    };
    // A resumed run's config may be its folder's config.toml, saved by a guirl that wrote
    // the old [algo] or [model] form: read as the new form, announced (the folder's copy is
    // rewritten).
    let cfg = if args.resume {
        let (cfg, moved) = TrainConfig::load_migrating(path)?;
        if !moved.is_empty() {
            let list: String = moved.iter().map(|m| format!("\n  {m}")).collect();
            let tables = crate::train::model_migrate::migrated_tables(&moved);
            tracing::warn!("{}: the old {tables} form, read as the new form:{list}", path.display());
        }
        cfg
    } else {
        TrainConfig::load(path)?
    };
    let rendezvous = crate::dist::Rendezvous::from_env()?;
    if let Some(n) = args.nproc.filter(|&n| n > 1) {
        anyhow::ensure!(
            rendezvous.is_none(),
            "--nproc {n} in a process that already is one rank of a run (WORLD_SIZE is set): \
             either let --nproc start the ranks, or start them yourself without it"
        );
        return super::launch::ranks(n.into()).await;
    }
    let dir = run_dir(&cfg, args.out.as_deref());
    let group = match rendezvous {
        Some(rv) => {
            let fingerprint = fingerprint(&cfg, &dir, args.resume)?;
            let pg =
                tokio::task::spawn_blocking(move || crate::dist::ProcessGroup::connect(&rv, &fingerprint))
                    .await??;
            Some(Arc::new(pg))
        }
        None => None,
    };
    let root = group.as_ref().is_none_or(|g| g.is_root());
    // what continues the run as it ran: a resume on another number of ranks differs
    let resume = crate::train::run_folder::resume_command(&dir, group.as_ref().map_or(1, |g| g.world()));
    let total = cfg.run.iterations;
    let cloning_epochs = cfg.sft.as_ref().map(|s| (s.start_epoch, s.start_epoch + s.epochs));
    let mut trainer = Trainer::new_in_group(cfg, dir.clone(), args.resume, args.force, group)?;
    trainer.set_env_config(crate::env::EnvConfig { browser: args.browser.config(), ..Default::default() });
    trainer.progress = root && std::io::IsTerminal::is_terminal(&std::io::stderr());
    // Ctrl-C / SIGTERM: finish the iteration, save a checkpoint, exit.
    let stop = Arc::new(AtomicBool::new(false));
    super::signals::watch_signals(Some(stop.clone()));
    if root {
        // what a second signal, which stops at once, says
        super::signals::done_so_far(
            || (),
            || {
                format!(
                    "what the run saved (checkpoints, recorded demonstrations, cloning epochs) is in {}: \
                     continue it with `{resume}`",
                    dir.display(),
                )
            },
        );
    }
    let state = trainer.run(stop.clone()).await?;
    let stopped = (stop.load(Ordering::SeqCst) && !trainer.finished())
        .then(|| super::signals::received().unwrap_or(130));
    if !root {
        return Ok(stopped);
    }
    print_phases(&dir);
    let best = state.best_eval.as_ref().filter(|(s, _)| *s >= 0.0);
    // The folder's own `best` link, from here: the path recorded when the run started may
    // name another folder (a copied run) or be relative to another working folder.
    let best = best.map(|(s, p)| {
        let here = crate::train::checkpoint::best(&dir).ok().flatten();
        (s, here.map_or(p.clone(), |d| d.display().to_string()))
    });
    outln!(
        "run={} iterations={} env_steps={} wall_secs={:.0}{}",
        dir.display(),
        state.iteration,
        state.env_steps,
        state.wall_secs,
        best.map(|(s, p)| format!(" best_eval_success={s:.3} best={p}")).unwrap_or_default()
    );
    if stopped.is_some() {
        let at = match cloning_epochs.filter(|_| !state.sft_done && state.iteration == 0) {
            Some((start, end)) => match start + state.sft_epochs {
                0 => "before behaviour cloning's first epoch ended (demonstrations recorded so far are kept)"
                    .to_string(),
                done => format!("during behaviour cloning, after epoch {done} of {end}"),
            },
            None => format!("at iteration {} of {total}", state.iteration),
        };
        errln!("guirl: stopped {at}, saved; continue it with `{resume}`");
    }
    Ok(stopped)
}

/// `--resume` without a config reads `out`'s `config` (config.toml): say which is missing,
/// the folder (a typo?) or its config (no run folder).
fn check_run_folder(out: &std::path::Path, config: &std::path::Path) -> anyhow::Result<()> {
    let made = "--resume continues a run folder that `guirl train CONFIG --out DIR` made";
    if !out.is_dir() {
        let what = if out.exists() { "is not a folder" } else { "does not exist (a typo?)" };
        anyhow::bail!("--resume: {} {what}; {made}", out.display());
    }
    anyhow::ensure!(
        config.is_file(),
        "--resume: {} is not a run folder: it has no {}; {made} (or give the run's config: \
         `guirl train CONFIG --resume --out {}`)",
        out.display(),
        crate::train::run_folder::CONFIG_FILE,
        out.display()
    );
    Ok(())
}

/// Print where the run's iterations spent their time, and keep it as `phases.md`.
fn print_phases(dir: &std::path::Path) {
    let metrics = crate::train::metrics::read_metrics(&dir.join("metrics.jsonl")).unwrap_or_default();
    let Some(table) = crate::train::phase_table::PhaseTable::of(&metrics) else { return };
    let md = table.markdown();
    errln!("\n{md}");
    if let Err(e) = std::fs::write(dir.join("phases.md"), &md) {
        tracing::warn!("{}: cannot write the phase table: {e}", dir.join("phases.md").display());
    }
}

/// What every rank of a run must agree on: the config, the run folder, `--resume` and
/// the build.
fn fingerprint(cfg: &TrainConfig, dir: &std::path::Path, resume: bool) -> anyhow::Result<String> {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(serde_json::to_vec(cfg)?);
    h.update(dir.as_os_str().as_encoded_bytes());
    h.update([u8::from(resume)]);
    h.update(env!("CARGO_PKG_VERSION"));
    Ok(format!("{:x}", h.finalize())[..12].to_string())
}
