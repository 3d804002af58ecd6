//! The run folder's rules: one run per folder, and a resume continues the run its folder
//! holds, with that run's config.
//!
//! - A new run (no `--resume`) needs a folder without a checkpoint and without metrics of
//!   an earlier run (their lines would be merged with the new run's).
//! - `--resume` needs a checkpoint (or a behaviour cloning under way), and a config equal to the folder's `config.toml`
//!   (compared as parsed values: formatting and comments do not count). A different one
//!   is refused with the differences listed, unless `--force`. Raising `run.iterations`
//!   is not a difference: it is how a run is trained longer.

use super::checkpoint::{self, ResumePoint};
use super::config::TrainConfig;
use anyhow::{bail, Context};
use std::path::Path;

/// The resolved config of a run, inside its folder.
pub const CONFIG_FILE: &str = "config.toml";
/// The per-iteration metrics of a run, inside its folder.
pub const METRICS_FILE: &str = "metrics.jsonl";

/// Make `run_dir` ready for a run of `cfg`: create it, check the rules above (`resume`
/// and `force` as given on the command line), remove what a killed write left, and write
/// `config.toml` atomically. Returns where to resume from (`Some` exactly when `resume`).
pub fn prepare(
    run_dir: &Path,
    cfg: &TrainConfig,
    resume: bool,
    force: bool,
) -> anyhow::Result<Option<ResumePoint>> {
    if resume && !run_dir.is_dir() {
        bail!("--resume: {} does not exist; start without --resume", run_dir.display());
    }
    std::fs::create_dir_all(run_dir)
        .with_context(|| format!("cannot create run folder {}", run_dir.display()))?;
    checkpoint::remove_leftovers(run_dir);
    let latest = checkpoint::resume_point(run_dir)?;
    if matches!(latest, Some(ResumePoint::Checkpoint(_))) {
        // A run killed between the clone's checkpoint and this removal.
        checkpoint::remove_cloning(run_dir);
    }
    let config_path = run_dir.join(CONFIG_FILE);
    if resume {
        if latest.is_none() {
            bail!("--resume: {} has no checkpoint yet; start without --resume", run_dir.display());
        }
        if config_path.is_file() {
            let old = std::fs::read_to_string(&config_path)
                .with_context(|| format!("cannot read {}", config_path.display()))?;
            let diffs = config_differences(&old, cfg)?;
            if !diffs.is_empty() {
                let list: String = diffs.iter().map(|d| format!("\n  {d}")).collect();
                if !force {
                    bail!(
                        "--resume: this config differs from the one the run in {} was trained with ({}):{list}\n\
                         resume with the run's own config (guirl train {} --out {} --resume), \
                         or pass --force to continue with the new one",
                        run_dir.display(),
                        config_path.display(),
                        config_path.display(),
                        run_dir.display()
                    );
                }
                tracing::warn!(
                    "--resume --force: continuing {} with a changed config:{list}",
                    run_dir.display()
                );
            }
        }
    } else {
        if let Some(ResumePoint::Cloning(dir)) = &latest {
            let done = checkpoint::read_state(dir).map(|s| s.sft_epochs).unwrap_or(0);
            bail!(
                "{} holds a run stopped during behaviour cloning ({done} epoch(s) cloned, kept in {}): \
                 pass --resume to continue it, or choose another --out",
                run_dir.display(),
                dir.display()
            );
        }
        if latest.is_some() {
            bail!(
                "{} already holds a run: pass --resume to continue it, or choose another --out",
                run_dir.display()
            );
        }
        let metrics = run_dir.join(METRICS_FILE);
        if has_content(&metrics)? {
            bail!(
                "{} holds {METRICS_FILE} of an earlier run that stopped before its first checkpoint; \
                 a new run would mix its lines with that run's: remove the folder (or that file), \
                 or choose another --out",
                run_dir.display()
            );
        }
    }
    checkpoint::write_file_atomically(&config_path, cfg.to_toml()?.as_bytes())?;
    Ok(latest)
}

/// The command that continues the run in `run_dir` as it ran: on `world_size` ranks
/// (`--nproc`) when it ran on more than one, since a resume on another number gives other
/// results.
pub fn resume_command(run_dir: &Path, world_size: usize) -> String {
    let nproc = if world_size > 1 { format!(" --nproc {world_size}") } else { String::new() };
    format!("guirl train --resume{nproc} --out {}", run_dir.display())
}

/// The warning for resuming on `now` ranks the run in `run_dir` that trained on `before`
/// (`None` when they agree). Not refused: changing the number of ranks is legitimate, but
/// the ranks' gradients are summed in another order, so the runs drift apart.
pub fn world_size_warning(run_dir: &Path, before: usize, now: usize) -> Option<String> {
    let ranks = |n: usize| if n == 1 { "1 process".to_string() } else { format!("{n} ranks") };
    (before != now).then(|| {
        format!(
            "--resume: the run in {} trained on {}, and now continues on {}: its results will differ \
             from the uninterrupted run's (the gradients are summed in another order, which AdamW \
             amplifies); to resume it as it ran: `{}`",
            run_dir.display(),
            ranks(before),
            ranks(now),
            resume_command(run_dir, before)
        )
    })
}

/// Whether a file exists and holds more than white space.
fn has_content(path: &Path) -> anyhow::Result<bool> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(bytes.iter().any(|b| !b.is_ascii_whitespace())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// The differences between a run's `config.toml` (text) and `new`, one
/// `key.path: old → new` a line, in key order. Both sides are compared resolved (defaults
/// filled in), so a key written out by one guirl version and left to its default by
/// another is no difference; `run.iterations` growing is none either.
pub fn config_differences(old_text: &str, new: &TrainConfig) -> anyhow::Result<Vec<String>> {
    let resolved = |mut c: TrainConfig| -> anyhow::Result<toml::Value> {
        c.resolve();
        // `resolve` writes the cap only at bound 1, where it is used; compared, a cap left
        // out is its default, so dropping `max_staleness` lists that key alone.
        c.algo.behaviour_weight_cap = Some(c.algo.behaviour_weight_cap());
        Ok(toml::Value::try_from(c)?)
    };
    // A config an older guirl wrote with the old [algo] or [model] form is read as its new
    // form, announced; one that no longer parses at all is compared as it stands.
    // A small policy of guirl 0.1 that the new form reads as another one cannot resume.
    let model =
        toml::from_str::<toml::Table>(old_text).ok().and_then(|d| d.get("model")?.as_table().cloned());
    if let Some(refusal) = model.and_then(|m| super::model_migrate::resume_refusal(&m)) {
        bail!("{refusal}");
    }
    let old = match TrainConfig::parse_migrating(old_text) {
        Ok((c, moved)) => {
            if !moved.is_empty() {
                let list: String = moved.iter().map(|m| format!("\n  {m}")).collect();
                tracing::warn!(
                    "the run's config.toml has the old {} form; read as the new form, and rewritten \
                     so:{list}",
                    super::model_migrate::migrated_tables(&moved)
                );
            }
            resolved(c)?
        }
        Err(_) => toml::from_str(old_text).context("the run's config.toml is not TOML")?,
    };
    let new = resolved(new.clone())?;
    let mut out = Vec::new();
    diff_values("", Some(&old), Some(&new), &mut out);
    let grows = |d: &(String, Option<toml::Value>, Option<toml::Value>)| {
        d.0 == "run.iterations"
            && matches!((&d.1, &d.2), (Some(toml::Value::Integer(a)), Some(toml::Value::Integer(b))) if b >= a)
    };
    Ok(out.iter().filter(|d| !grows(d)).map(|(k, a, b)| format!("{k}: {} → {}", show(a), show(b))).collect())
}

/// Collect `(key path, old, new)` for every leaf that differs.
fn diff_values(
    path: &str,
    old: Option<&toml::Value>,
    new: Option<&toml::Value>,
    out: &mut Vec<(String, Option<toml::Value>, Option<toml::Value>)>,
) {
    // A table on one side only: list its keys (one level down) rather than "(a table)".
    let empty = toml::Value::Table(Default::default());
    let (old, new) = match (old, new) {
        (None, Some(t @ toml::Value::Table(_))) => (Some(&empty), Some(t)),
        (Some(t @ toml::Value::Table(_)), None) => (Some(t), Some(&empty)),
        other => other,
    };
    match (old, new) {
        (Some(toml::Value::Table(a)), Some(toml::Value::Table(b))) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                diff_values(&p, a.get(k), b.get(k), out);
            }
        }
        (a, b) if a != b => out.push((path.to_string(), a.cloned(), b.cloned())),
        _ => {}
    }
}

fn show(v: &Option<toml::Value>) -> String {
    match v {
        None => "(not set)".into(),
        Some(toml::Value::Table(_)) => "(a table)".into(),
        Some(v) => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
[run]
name = "r"
iterations = 4
[tasks]
ids = ["builtin/two-buttons"]
[algo]
lr = 1e-3
"#;

    fn config(extra: &str) -> TrainConfig {
        let text = CONFIG.replace("[algo]\n", &format!("[algo]\n{extra}\n"));
        TrainConfig::parse(&text).unwrap()
    }

    fn fake_checkpoint(run: &Path) {
        // `latest` only has to name an existing folder for these rules.
        let ckpts = checkpoint::checkpoints_dir(run);
        std::fs::create_dir_all(ckpts.join("iter-000002")).unwrap();
        std::os::unix::fs::symlink("iter-000002", ckpts.join(checkpoint::LATEST)).unwrap();
    }

    #[test]
    fn a_new_run_needs_an_empty_folder() {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("run");
        // --resume of a folder that does not exist creates none
        let e = prepare(&run, &config(""), true, false).unwrap_err().to_string();
        assert!(e.contains("does not exist; start without --resume") && !run.exists(), "{e}");
        assert_eq!(prepare(&run, &config(""), false, false).unwrap(), None);
        assert_eq!(
            TrainConfig::parse(&std::fs::read_to_string(run.join(CONFIG_FILE)).unwrap()).unwrap(),
            config("")
        );
        // An empty metrics file (a run stopped before any iteration) is no earlier run.
        std::fs::write(run.join(METRICS_FILE), "").unwrap();
        prepare(&run, &config(""), false, false).unwrap();
        std::fs::write(run.join(METRICS_FILE), "{\"iteration\": 0}\n").unwrap();
        let e = prepare(&run, &config(""), false, true).unwrap_err().to_string();
        assert!(e.contains("metrics.jsonl of an earlier run") && e.contains("another --out"), "{e}");
        let e = prepare(&run, &config(""), true, false).unwrap_err().to_string();
        assert!(e.contains("has no checkpoint yet; start without --resume"), "{e}");
        fake_checkpoint(&run);
        let e = prepare(&run, &config(""), false, false).unwrap_err().to_string();
        assert!(e.contains("already holds a run: pass --resume"), "{e}");
    }

    #[test]
    fn resume_lists_config_differences_unless_forced() {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("run");
        prepare(&run, &config(""), false, false).unwrap();
        fake_checkpoint(&run);
        let latest = run.join("checkpoints/iter-000002");
        let at = |dir: &Path| Some(ResumePoint::Checkpoint(dir.to_path_buf()));
        assert_eq!(prepare(&run, &config(""), true, false).unwrap(), at(&latest));
        // Comments and layout are no difference; training longer is none either.
        let mut longer = config("");
        longer.run.iterations = 10;
        std::fs::write(
            run.join(CONFIG_FILE),
            format!("# the run's config\n{}", config("").to_toml().unwrap()),
        )
        .unwrap();
        prepare(&run, &longer, true, false).unwrap();
        let e = prepare(&run, &config("beta = 0.1\nepochs = 3"), true, false).unwrap_err().to_string();
        assert!(e.contains("algo.beta: 0.0 → 0.1") && e.contains("algo.epochs: 1 → 3"), "{e}");
        assert!(e.contains("run.iterations: 10 → 4"), "fewer iterations is a difference: {e}");
        assert!(e.contains("--force") && e.contains("config.toml --out"), "{e}");
        assert_eq!(prepare(&run, &config("beta = 0.1"), true, true).unwrap(), at(&latest));
        let now = TrainConfig::parse(&std::fs::read_to_string(run.join(CONFIG_FILE)).unwrap()).unwrap();
        assert_eq!(now.algo.beta, 0.1, "--force keeps the new config");
    }

    #[test]
    fn a_default_written_out_is_no_difference() {
        let bound_one = |extra: &str| {
            let mut c = config(extra);
            c.rollout.max_staleness = 1;
            c
        };
        // a config.toml that leaves the cap out, resumed with the default written out
        let old = bound_one("").to_toml().unwrap();
        assert!(!old.contains("behaviour_weight_cap"), "{old}");
        assert_eq!(
            config_differences(&old, &bound_one("behaviour_weight_cap = 2.0")).unwrap(),
            Vec::<String>::new()
        );
        let other = config_differences(&old, &bound_one("behaviour_weight_cap = 3.0")).unwrap();
        assert_eq!(other, ["algo.behaviour_weight_cap: 2.0 → 3.0"]);
        // resolved, the run folder's config says the cap its samples were weighted by
        let mut c = bound_one("");
        c.resolve();
        assert!(c.to_toml().unwrap().contains("behaviour_weight_cap = 2.0"));
    }

    #[test]
    fn a_default_left_out_on_the_other_side_is_no_difference() {
        // a bound-1 run's config.toml writes the cap; the resume drops max_staleness
        let mut bound_one = config("");
        bound_one.rollout.max_staleness = 1;
        bound_one.resolve();
        let old = bound_one.to_toml().unwrap();
        assert!(old.contains("behaviour_weight_cap = 2.0"), "{old}");
        assert_eq!(config_differences(&old, &config("")).unwrap(), ["rollout.max_staleness: 1 → (not set)"]);
        // a cap other than the default is still a difference
        let mut capped = bound_one.clone();
        capped.algo.behaviour_weight_cap = Some(3.0);
        let d = config_differences(&capped.to_toml().unwrap(), &config("")).unwrap();
        assert_eq!(d, ["algo.behaviour_weight_cap: 3.0 → 2.0", "rollout.max_staleness: 1 → (not set)"]);
    }

    #[test]
    fn a_resume_on_another_number_of_ranks_is_warned_about_with_the_way_it_ran() {
        let run = Path::new("runs/r");
        assert_eq!(resume_command(run, 1), "guirl train --resume --out runs/r");
        assert_eq!(resume_command(run, 2), "guirl train --resume --nproc 2 --out runs/r");
        assert_eq!(world_size_warning(run, 2, 2), None);
        let w = world_size_warning(run, 2, 1).unwrap();
        assert!(
            w.contains("trained on 2 ranks, and now continues on 1 process")
                && w.contains("results will differ from the uninterrupted run's")
                && w.contains("`guirl train --resume --nproc 2 --out runs/r`"),
            "{w}"
        );
        let w = world_size_warning(run, 1, 4).unwrap();
        assert!(w.contains("on 1 process, and now continues on 4 ranks"), "{w}");
        assert!(w.ends_with("`guirl train --resume --out runs/r`"), "{w}");
        // a trainer state written before the number was kept: one process
        let old: checkpoint::TrainerState =
            serde_json::from_str(r#"{"iteration": 3, "env_steps": 9, "wall_secs": 1.0, "best_eval": null}"#)
                .unwrap();
        assert_eq!(old.world_size, 1);
    }

    #[test]
    fn a_cloning_under_way_is_resumed_not_restarted() {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("run");
        prepare(&run, &config(""), false, false).unwrap();
        let cloning = checkpoint::cloning_dir(&run);
        std::fs::create_dir_all(&cloning).unwrap();
        let state = checkpoint::TrainerState { sft_epochs: 3, ..Default::default() };
        std::fs::write(cloning.join(checkpoint::TRAINER_FILE), serde_json::to_string(&state).unwrap())
            .unwrap();
        let e = prepare(&run, &config(""), false, false).unwrap_err().to_string();
        assert!(
            e.contains("during behaviour cloning (3 epoch(s) cloned") && e.contains("pass --resume"),
            "{e}"
        );
        assert_eq!(
            prepare(&run, &config(""), true, false).unwrap(),
            Some(ResumePoint::Cloning(cloning.clone()))
        );
        // Killed after the clone's checkpoint was in place: that checkpoint is where to go on.
        fake_checkpoint(&run);
        let latest = run.join("checkpoints/iter-000002");
        assert_eq!(prepare(&run, &config(""), true, false).unwrap(), Some(ResumePoint::Checkpoint(latest)));
        assert!(!cloning.exists(), "the cloning folder is gone once a checkpoint replaces it");
    }

    #[test]
    fn a_config_that_no_longer_parses_is_compared_as_toml() {
        let d = config_differences("[run]\nname = \"r\"\nold_key = 1\n", &config("")).unwrap();
        assert!(d.iter().any(|l| l == "run.old_key: 1 → (not set)"), "{d:?}");
        assert!(d.iter().any(|l| l.starts_with("tasks.ids: (not set) → ")), "{d:?}");
        let e = config_differences("not = [toml", &config("")).unwrap_err();
        assert!(format!("{e:#}").contains("config.toml is not TOML"), "{e:#}");
    }
}
