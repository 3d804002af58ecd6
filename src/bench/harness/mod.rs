//! The benchmark harness (`guirl bench`): every task of a suite on seeds S..S+N−1 with
//! one policy, each episode recorded and journaled as it ends, env errors re-run on the
//! same seed, and a report with Wilson intervals, latency percentiles and what is needed
//! to reproduce it.
//!
//! A bench folder holds `bench.json` (what was asked; `--resume` must ask the same),
//! `results.jsonl` (the journal), `trajectories/<task id>/` (trajectory sets with a
//! `view.html` each), `report.{json,md,html}` and `errors.md`.

pub mod compare;
pub mod html;
pub mod journal;
pub mod manifest;
pub mod report;

use crate::env::EnvConfig;
use crate::env::EpisodeStatus;
use crate::policy::Policy;
use crate::rollout::{Collector, Job, TrajectoryWriter, UnreachableTask};
use crate::tasks::Task;
use anyhow::{bail, Context};
use journal::{Journal, ResultRow, RESULTS_FILE};
use manifest::{env_json, env_options_differ, value_differences};
pub use manifest::{policy_settings, read_manifest, spec_hashes, Manifest, MANIFEST_FILE};
use report::{Report, Reproducibility};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What to run.
pub struct BenchOptions {
    /// Tasks, in report order.
    pub tasks: Vec<Arc<dyn Task>>,
    /// Tasks asked for but left out, with why (e.g. no oracle).
    pub skipped: Vec<(String, String)>,
    /// The policy as the user named it (recorded; `--resume` must name the same).
    pub policy_spec: String,
    /// The checkpoint folder a policy path was loaded from (recorded: a run folder's best
    /// or latest checkpoint moves on as training goes on); `None` for other policies.
    pub checkpoint: Option<PathBuf>,
    /// Episodes per task.
    pub episodes_per_task: u64,
    /// First seed.
    pub seed: u64,
    /// Browsers at once.
    pub envs: usize,
    /// Environment options.
    pub env: EnvConfig,
    /// The bench folder.
    pub out: PathBuf,
    /// Continue the bench in `out` instead of refusing a folder that holds one.
    pub resume: bool,
    /// Progress bars on stderr.
    pub progress: bool,
    /// What reaches the policy, for the report: `pixels` or `pixels+dom` (a checkpoint's
    /// inputs, whether an API policy is sent the elements), `n/a` for a scripted one.
    pub observation: String,
    /// Runs the journaling of each finished episode and then sets the line a signal's exit
    /// says (what is kept, how to go on), as one step: the CLI's, so that the count said is
    /// the count kept. `None`: journal, say nothing.
    pub keep_and_say: Option<KeepAndSay>,
}

/// See [`BenchOptions::keep_and_say`]: `(keep, line)` runs `keep`, then records `line()`.
pub type KeepAndSay = fn(&mut dyn FnMut() -> anyhow::Result<()>, &dyn Fn() -> String) -> anyhow::Result<()>;

/// Folder (relative to the bench folder) of a task's trajectory set.
pub fn trajectory_dir(task_id: &str) -> String {
    let clean: String = task_id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "._-/".contains(c) { c } else { '_' })
        .collect();
    let parts: Vec<&str> = clean.split('/').filter(|p| !p.is_empty() && *p != "." && *p != "..").collect();
    format!("trajectories/{}", parts.join("/"))
}

/// Start or resume the bench's manifest, refusing a folder that holds a different bench.
fn open_manifest(
    opts: &BenchOptions,
    policy_info: &serde_json::Value,
    rows: &[ResultRow],
) -> anyhow::Result<Manifest> {
    let path = opts.out.join(MANIFEST_FILE);
    let wanted = Manifest {
        tasks: opts.tasks.iter().map(|t| t.id().to_string()).collect(),
        policy: opts.policy_spec.clone(),
        checkpoint: opts.checkpoint.clone(),
        seed: opts.seed,
        episodes_per_task: opts.episodes_per_task,
        env: env_json(&opts.env),
        started: now_rfc3339(),
        seconds: 0.0,
        browser: None,
        policy_settings: Some(policy_settings(policy_info)),
        observation: Some(opts.observation.clone()),
        specs: spec_hashes(&opts.tasks),
    };
    let existing = std::fs::read_to_string(&path).ok();
    let has_rows = opts.out.join(RESULTS_FILE).exists();
    match (existing, opts.resume) {
        (None, true) if !has_rows => bail!(
            "--resume: {} holds no bench to continue (no {MANIFEST_FILE}); run without --resume to start one",
            opts.out.display()
        ),
        (None, false) if !has_rows => {
            // A folder of other files is not the user's bench: its report would sit among them.
            let others = std::fs::read_dir(&opts.out).map(|d| d.flatten().count()).unwrap_or(0);
            if others > 0 {
                bail!(
                    "{} holds {others} other file(s) and no bench: choose a new or empty --out",
                    opts.out.display()
                );
            }
            Ok(wanted)
        }
        (Some(_), false) | (None, false) => bail!(
            "{} already holds a bench: add --resume to continue it, or choose another --out",
            opts.out.display()
        ),
        (None, true) => bail!(
            "{} has {RESULTS_FILE} but no {MANIFEST_FILE}: it was not written by guirl bench",
            opts.out.display()
        ),
        (Some(text), true) => {
            let old: Manifest =
                serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
            let mut diffs = Vec::new();
            if old.tasks != wanted.tasks {
                diffs.push(format!("tasks: {} → {}", old.tasks.join(","), wanted.tasks.join(",")));
            }
            if old.policy != wanted.policy {
                diffs.push(format!("policy: {} → {}", old.policy, wanted.policy));
            } else if let (Some(a), Some(b)) = (&old.checkpoint, &wanted.checkpoint) {
                if a != b {
                    diffs.push(format!("checkpoint: {} → {}", a.display(), b.display()));
                }
            }
            if old.seed != wanted.seed {
                diffs.push(format!("seed: {} → {}", old.seed, wanted.seed));
            }
            if env_options_differ(&old.env, &wanted.env) {
                diffs.push(format!("env: {} → {}", old.env, wanted.env));
            }
            // The same policy with other settings, or a spec edited since: other episodes.
            if let (Some(a), Some(b)) = (&old.policy_settings, &wanted.policy_settings) {
                diffs.extend(value_differences("policy", a, b));
            }
            if let (Some(a), Some(b)) = (&old.observation, &wanted.observation) {
                if a != b {
                    diffs.push(format!("observation: {a} → {b}"));
                }
            }
            for (task, hash) in &wanted.specs {
                // (a task with no episode yet, e.g. a URL fixed after its page did not load,
                // may change)
                let ran = rows.iter().any(|r| &r.task == task);
                if ran && old.specs.get(task).is_some_and(|h| h != hash) {
                    diffs.push(format!("{task}: the spec changed since the bench started"));
                }
            }
            if !diffs.is_empty() {
                bail!(
                    "--resume must run the same bench as {}; these differ: {}",
                    opts.out.display(),
                    diffs.join("; ")
                );
            }
            // More episodes per task extends the bench; fewer keeps what is done. What an
            // older bench.json lacks is recorded now, for the next resume.
            let mut specs = old.specs.clone();
            specs.extend(wanted.specs);
            Ok(Manifest {
                episodes_per_task: wanted.episodes_per_task.max(old.episodes_per_task),
                policy_settings: old.policy_settings.clone().or(wanted.policy_settings),
                observation: old.observation.clone().or(wanted.observation),
                specs,
                ..old
            })
        }
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

fn now_rfc3339() -> String {
    let secs =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Run (or continue) the bench, then write its reports. The journal is written as
/// episodes end, so an error or a kill loses no finished episode.
pub async fn run(opts: &BenchOptions, policy: &mut dyn Policy) -> anyhow::Result<Report> {
    if opts.tasks.is_empty() {
        bail!("nothing to run: no task is left to bench");
    }
    std::fs::create_dir_all(&opts.out).with_context(|| format!("creating {}", opts.out.display()))?;
    let journal_path = opts.out.join(RESULTS_FILE);
    let mut rows = journal::read_rows(&journal_path)?;
    let mut manifest = open_manifest(opts, &policy.info(), &rows)?;
    let manifest_path = opts.out.join(MANIFEST_FILE);
    write_atomically(&manifest_path, serde_json::to_string_pretty(&manifest)?.as_bytes())?;
    let mut journal = Journal::open(&journal_path)?;
    let seeds: Vec<u64> = (0..manifest.episodes_per_task).map(|i| manifest.seed + i).collect();
    let order: Vec<String> = manifest.tasks.clone();
    let mut collector = Collector::new(opts.envs, opts.env.clone());
    collector.keep_frames = true;
    // A task whose page does not load is reported, and the others run.
    collector.unreachable = UnreachableTask::SkipTask;
    let mut unreachable: Vec<(String, String)> = Vec::new();
    let total = order.len() * seeds.len();
    let bars = Bars::new(opts.progress, order.len(), seeds.len());
    let mut writers: HashMap<String, (TrajectoryWriter, usize)> = HashMap::new();
    let mut ran = 0;
    let outcome: anyhow::Result<()> = async {
        // Round 0 runs what has no settled row; later rounds re-run env errors.
        for round in 0..=journal::MAX_RERUNS {
            let (mut settled, mut next) = journal::settle(&rows);
            if round == 0 {
                // A policy's or judge's failure is not re-run at once (an endpoint that is
                // down fails again) but at the next session, once it may be back.
                settled.retain(|r| {
                    let again = matches!(r.status, EpisodeStatus::PolicyError | EpisodeStatus::JudgeError);
                    if again {
                        next.insert((r.task.clone(), r.seed), r.attempt + 1);
                    }
                    !again
                });
            }
            bars.show(&order, &settled, seeds.len());
            let done: std::collections::HashSet<(String, u64)> =
                settled.iter().map(|r| (r.task.clone(), r.seed)).collect();
            let mut jobs = Vec::new();
            let mut attempts = Vec::new();
            for task in opts.tasks.iter().filter(|t| !unreachable.iter().any(|(u, _)| u == t.id())) {
                for &seed in &seeds {
                    let key = (task.id().to_string(), seed);
                    if done.contains(&key) {
                        continue;
                    }
                    attempts.push(next.get(&key).copied().unwrap_or(0));
                    jobs.push(Job::episode(task.clone(), seed));
                }
            }
            if jobs.is_empty() {
                break;
            }
            ran += jobs.len();
            let t0 = std::time::Instant::now();
            let base = manifest.seconds;
            // Settled episodes, for the line a signal's exit says.
            let mut kept = settled.len();
            let mut failed: Option<anyhow::Error> = None;
            // Each episode goes to disk as it ends and is not kept: a suite's screenshots
            // held in memory grew to 8 GB by the end of MiniWoB++.
            let result = collector
                .collect_each(policy, jobs, |i, rec| {
                    let rec = &rec;
                    let t = &rec.trajectory;
                    let dir = trajectory_dir(&t.task_id);
                    let appended = (|| -> anyhow::Result<()> {
                        if !writers.contains_key(&t.task_id) {
                            let abs = opts.out.join(&dir);
                            let w = TrajectoryWriter::open(&abs)?;
                            writers.insert(t.task_id.clone(), (w, crate::rollout::store::lines_in(&abs)));
                        }
                        let (w, count) = writers.get_mut(&t.task_id).expect("inserted above");
                        let row = ResultRow::of(t, attempts[i], &dir, *count);
                        // The trajectory first, then the journal row that points at it.
                        let mut keep = || -> anyhow::Result<()> {
                            w.append(rec)?;
                            journal.append(&row)?;
                            Ok(())
                        };
                        let kept_now = kept + usize::from(row.is_final());
                        let line = || {
                            format!(
                                "{kept_now} of {total} episodes are in {}: run the same command with --resume to continue",
                                journal_path.display()
                            )
                        };
                        match opts.keep_and_say {
                            Some(f) => f(&mut keep, &line)?,
                            None => keep()?,
                        }
                        *count += 1;
                        kept = kept_now;
                        rows.push(row);
                        Ok(())
                    })();
                    if let Err(e) = appended {
                        failed.get_or_insert(e);
                    }
                    // The time spent so far survives a kill too.
                    manifest.seconds = base + t0.elapsed().as_secs_f64();
                    if let Ok(text) = serde_json::to_string_pretty(&manifest) {
                        let _ = write_atomically(&manifest_path, text.as_bytes());
                    }
                    bars.show_rows(&order, &rows, seeds.len());
                })
                .await;
            manifest.seconds = base + t0.elapsed().as_secs_f64();
            if manifest.browser.is_none() {
                manifest.browser = collector.browser_versions();
            }
            write_atomically(&manifest_path, serde_json::to_string_pretty(&manifest)?.as_bytes())?;
            if let Some(e) = failed {
                return Err(e.context("recording an episode"));
            }
            for u in result?.unreachable {
                tracing::warn!("{}: its first page did not load; its episodes are not run: {}", u.0, u.1);
                unreachable.push(u);
            }
        }
        Ok(())
    }
    .await;
    collector.close().await;
    bars.finish();
    if ran == 0 && outcome.is_ok() {
        tracing::info!(
            "every episode of this bench is already in {}: nothing ran; its reports are written again",
            journal_path.display()
        );
    }
    outcome.with_context(|| {
        format!(
            "the bench stopped; every finished episode is in {}: run the same command with --resume to continue",
            journal_path.display()
        )
    })?;
    write_reports(opts, &manifest, &order, &rows, policy.info(), unreachable)
}

/// Write `report.{json,md,html}`, `errors.md` and each task's `view.html`.
fn write_reports(
    opts: &BenchOptions,
    manifest: &Manifest,
    order: &[String],
    rows: &[ResultRow],
    policy_info: serde_json::Value,
    unreachable: Vec<(String, String)>,
) -> anyhow::Result<Report> {
    let b = manifest.browser.clone().unwrap_or_default();
    let repro = Reproducibility {
        guirl_version: env!("CARGO_PKG_VERSION").to_string(),
        git_hash: env!("GUIRL_GIT_HASH").to_string(),
        browser: format!("{} {}", b.browser, b.browser_version).trim().to_string(),
        chromedriver: b.driver_version,
        sandbox: b.sandbox,
        os: os_description(),
        policy: manifest.policy.clone(),
        checkpoint: manifest.checkpoint.as_ref().map(|d| d.display().to_string()),
        policy_info,
        observation: opts.observation.clone(),
        seed: manifest.seed,
        episodes_per_task: manifest.episodes_per_task,
        env: manifest.env.clone(),
        started: manifest.started.clone(),
        written: now_rfc3339(),
    };
    let mut report = Report::build(order, rows, repro, manifest.seconds);
    report.skipped = opts.skipped.clone();
    report.unreachable = unreachable;
    let out = &opts.out;
    write_atomically(&out.join("report.json"), serde_json::to_string_pretty(&report)?.as_bytes())?;
    write_atomically(&out.join("report.md"), report.markdown().as_bytes())?;
    write_atomically(&out.join("errors.md"), report::errors_markdown(rows, &report.unreachable).as_bytes())?;
    let (settled, _) = journal::settle(rows);
    let mut eps: Vec<(ResultRow, usize)> = Vec::new();
    for t in order {
        let mut of_task: Vec<&ResultRow> = settled.iter().filter(|r| &r.task == t).collect();
        of_task.sort_by_key(|r| r.seed);
        eps.extend(of_task.into_iter().map(|r| (r.clone(), r.index)));
    }
    write_atomically(&out.join("report.html"), html::render(&report, &eps).as_bytes())?;
    let dirs: std::collections::BTreeSet<&String> = rows.iter().map(|r| &r.trajectory).collect();
    for d in dirs {
        let dir = out.join(d);
        let set = crate::rollout::TrajectorySet::read(&dir)?;
        crate::rollout::viewer::write_html(&set, &dir.join("view.html"))?;
    }
    Ok(report)
}

/// The OS as `/etc/os-release` names it, with the kernel's architecture.
fn os_description() -> String {
    let pretty = std::fs::read_to_string("/etc/os-release").ok().and_then(|s| {
        s.lines().find_map(|l| l.strip_prefix("PRETTY_NAME=")).map(|v| v.trim_matches('"').to_string())
    });
    format!(
        "{} ({} {})",
        pretty.unwrap_or_else(|| "unknown".into()),
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

/// Two progress bars: tasks settled, episodes settled.
struct Bars {
    multi: Option<(indicatif::MultiProgress, indicatif::ProgressBar, indicatif::ProgressBar)>,
}

impl Bars {
    fn new(on: bool, tasks: usize, seeds: usize) -> Bars {
        if !on {
            return Bars { multi: None };
        }
        let m = indicatif::MultiProgress::new();
        let style = |t: &str| indicatif::ProgressStyle::with_template(t).expect("static template");
        let t = m.add(indicatif::ProgressBar::new(tasks as u64));
        t.set_style(style("{bar:30} {pos}/{len} tasks     {msg}"));
        let e = m.add(indicatif::ProgressBar::new((tasks * seeds) as u64));
        e.set_style(style("{bar:30} {pos}/{len} episodes  {per_sec}  eta {eta}"));
        Bars { multi: Some((m, t, e)) }
    }

    /// [`Bars::show`] from every journal row; settles them only when bars are shown
    /// (settling is linear in the journal, and this runs after every episode).
    fn show_rows(&self, order: &[String], rows: &[ResultRow], seeds: usize) {
        if self.multi.is_some() {
            self.show(order, &journal::settle(rows).0, seeds);
        }
    }

    fn show(&self, order: &[String], settled: &[ResultRow], seeds: usize) {
        let Some((_, t, e)) = &self.multi else { return };
        let full =
            order.iter().filter(|id| settled.iter().filter(|r| &r.task == *id).count() >= seeds).count();
        t.set_position(full as u64);
        if let Some(now) = order.get(full) {
            t.set_message(now.clone());
        }
        e.set_position(settled.len() as u64);
    }

    fn finish(&self) {
        if let Some((_, t, e)) = &self.multi {
            t.finish_and_clear();
            e.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_resume_with_other_policy_settings_or_an_edited_spec_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let spec = dir.path().join("site.toml");
        let original = concat!(env!("CARGO_MANIFEST_DIR"), "/environments/websites/newsletter.toml");
        std::fs::copy(original, &spec).unwrap();
        let opts = |resume: bool, observation: &str| BenchOptions {
            tasks: vec![crate::tasks::load_task(spec.to_str().unwrap()).unwrap()],
            skipped: vec![],
            policy_spec: "openai:m@http://127.0.0.1:9/v1".into(),
            checkpoint: None,
            episodes_per_task: 2,
            seed: 0,
            envs: 1,
            env: EnvConfig::default(),
            out: dir.path().join("b"),
            resume,
            progress: false,
            observation: observation.into(),
            keep_and_say: None,
        };
        let info = |temperature: f64, served: &[&str]| json!({"name": "openai:m", "temperature": temperature, "elements": true, "served_models": served});
        let first = open_manifest(&opts(false, "pixels+dom"), &info(0.0, &["m"]), &[]).unwrap();
        assert!(first.specs.contains_key(spec.to_str().unwrap()), "{:?}", first.specs);
        std::fs::create_dir_all(dir.path().join("b")).unwrap();
        std::fs::write(dir.path().join("b").join(MANIFEST_FILE), serde_json::to_string(&first).unwrap())
            .unwrap();
        // What the server lists is no setting of the policy.
        open_manifest(&opts(true, "pixels+dom"), &info(0.0, &["m", "n"]), &[]).unwrap();
        let e = open_manifest(&opts(true, "pixels"), &info(0.7, &["m"]), &[]).unwrap_err().to_string();
        assert!(
            e.contains("policy temperature: 0.0 → 0.7") && e.contains("observation: pixels+dom → pixels"),
            "{e}"
        );
        let text = std::fs::read_to_string(&spec).unwrap();
        std::fs::write(&spec, format!("{text}\n# edited\n")).unwrap();
        // A task none of whose episodes ran may change (its URL fixed); one that ran may not.
        open_manifest(&opts(true, "pixels+dom"), &info(0.0, &["m"]), &[]).unwrap();
        let outcome =
            crate::rollout::Outcome { reward: 0.0, status: EpisodeStatus::Fail, steps: 1, error: None };
        let ran = ResultRow::of(
            &crate::rollout::Trajectory::new(spec.to_str().unwrap(), 0, vec![], outcome),
            0,
            "t",
            0,
        );
        let e = open_manifest(&opts(true, "pixels+dom"), &info(0.0, &["m"]), &[ran]).unwrap_err().to_string();
        assert!(e.contains("site.toml: the spec changed since the bench started"), "{e}");
    }

    #[test]
    fn env_options_differ_on_a_shared_key_only() {
        let new = json!({"max_steps": 10, "virtual_time_ms": 100});
        assert!(env_options_differ(&json!({"max_steps": 10, "virtual_time_ms": null}), &new));
        assert!(env_options_differ(&json!({"max_steps": 12}), &new));
        // a bench written before page time was recorded: unknown, not a difference
        assert!(!env_options_differ(&json!({"max_steps": 10}), &new));
        assert!(!env_options_differ(&new, &new));
    }
}
