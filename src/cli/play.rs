//! `guirl play`: step one env by hand (or from a piped actions file), or record what a
//! person does in a visible browser window (`--headful --capture`).

use super::browser::BrowserArgs;
use crate::rollout::play::{Flow, Play, PlayOptions};
use std::io::IsTerminal;
use std::path::PathBuf;
use tokio::io::AsyncBufReadExt;

/// Arguments of `guirl play`.
#[derive(Debug, clap::Args)]
pub struct PlayArgs {
    /// Task id (`miniwob/click-test`, `builtin/NAME`) or path to a website spec (.toml).
    #[arg(long, required_unless_present = "from")]
    task: Option<String>,
    /// Seed of the first episode; `:reset` without a seed takes the next one.
    #[arg(long, default_value_t = 0, conflicts_with = "from")]
    seed: u64,
    /// Open a recorded episode at a step and continue it by hand: SET is a trajectory set
    /// folder, LINE its line in trajectories.jsonl (from 1), STEP how many of its steps to
    /// replay (the screens are checked against the recording). Task and seed are the
    /// episode's.
    #[arg(long, value_name = "SET:LINE:STEP", conflicts_with = "task")]
    from: Option<String>,
    /// Record every finished episode as a trajectory set in this folder (appends if it
    /// exists; an episode left unfinished by `:reset` or `:quit` is not recorded).
    #[arg(long, value_name = "DIR")]
    record: Option<PathBuf>,
    /// Where the current screenshot is written after every reset and step.
    #[arg(long, value_name = "FILE", default_value = "play.png")]
    screenshot: PathBuf,
    /// Override the task's step limit.
    #[arg(long)]
    max_steps: Option<u32>,
    /// Print one JSON object a line per event instead of text.
    #[arg(long)]
    json: bool,
    /// Record what you do in the browser window (clicks, double clicks, drags, typing,
    /// keys, scrolling) as the episode's actions instead of reading them from stdin;
    /// needs --headful. Stdin still takes :done, :elements, :reset and :quit.
    #[arg(long)]
    capture: bool,
    #[command(flatten)]
    browser: BrowserArgs,
}

/// `guirl play`: reads lines from stdin until `:quit` or end of input.
pub async fn play(args: PlayArgs) -> anyhow::Result<()> {
    if args.max_steps == Some(0) {
        anyhow::bail!("--max-steps must be at least 1");
    }
    if args.capture && !args.browser.headful {
        anyhow::bail!(
            "--capture records what a person does in the browser window, and a headless browser \
             has none: add --headful (without a desktop: `xvfb-run -a guirl play --headful --capture ...`)"
        );
    }
    // Said before anything is opened: a --record folder would be left behind empty.
    if let Some(parent) = args.screenshot.parent().filter(|p| !p.as_os_str().is_empty() && !p.is_dir()) {
        anyhow::bail!(
            "--screenshot {}: the folder {} does not exist; create it or write the screenshot elsewhere",
            args.screenshot.display(),
            parent.display()
        );
    }
    let (task, seed, from, rules) = match &args.from {
        Some(spec) => {
            let (set, line, step) = parse_from(spec)?;
            let set = crate::rollout::TrajectorySet::read(&set)?;
            let (id, prefix) = crate::rollout::Prefix::from_set(&set, line, step)?;
            // The recorded episode's rules, so its steps replay as they went.
            let rules = set.trajectories.iter().find(|st| st.line == line).map(|st| st.trajectory.rules);
            (crate::tasks::load_task(&id)?, prefix.seed, Some(prefix), rules.unwrap_or_default())
        }
        None => (
            crate::tasks::load_task(args.task.as_deref().unwrap_or_default())?,
            args.seed,
            None,
            Default::default(),
        ),
    };
    let cfg = crate::env::EnvConfig { browser: args.browser.config(), max_steps: args.max_steps, rules };
    let writer = args.record.as_deref().map(super::record::open_set).transpose()?;
    let opts =
        PlayOptions { seed, screenshot: args.screenshot, json: args.json, capture: args.capture, from };
    let mut session = Play::new(task, cfg, opts, writer);
    let mut out = std::io::stdout();
    let started = session.start(&mut out).await;
    if let Err(e) = started {
        session.finish(&mut std::io::sink()).await?;
        return Err(e);
    }
    // Prompts only for a person at a terminal, and on stderr: stdout stays the event log.
    let prompt = std::io::stdin().is_terminal();
    if prompt && args.capture {
        errln!("act in the browser window; type :done, :reset, :quit or :help here");
    } else if prompt {
        errln!("type an action or :help");
    }
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    // While capturing, the page is polled for what the person did between stdin lines.
    let mut poll = tokio::time::interval(std::time::Duration::from_millis(100));
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if prompt {
            let _ = std::io::Write::write_all(&mut std::io::stderr(), b"> ");
        }
        let line = loop {
            if !args.capture {
                break lines.next_line().await?;
            }
            // `next_line` is cancel-safe: a tick loses no input.
            tokio::select! {
                line = lines.next_line() => break line?,
                _ = poll.tick() => {}
            }
            if let Err(e) = session.poll_capture(&mut out).await {
                session.finish(&mut std::io::sink()).await?;
                return Err(e);
            }
        };
        let Some(line) = line else { break };
        match session.line(&line, &mut out).await {
            Ok(Flow::Continue) => {}
            Ok(Flow::Quit) => break,
            Err(e) => {
                session.finish(&mut std::io::sink()).await?;
                return Err(e);
            }
        }
    }
    session.finish(&mut out).await
}

/// `SET:LINE:STEP` (the set's path may itself hold colons).
fn parse_from(spec: &str) -> anyhow::Result<(PathBuf, usize, usize)> {
    let usage = "--from takes SET:LINE:STEP, e.g. runs/demo:3:2 (line 3 of runs/demo/trajectories.jsonl, \
                 opened after its first 2 steps)";
    let mut parts = spec.rsplitn(3, ':');
    let (step, line, set) = match (parts.next(), parts.next(), parts.next()) {
        (Some(s), Some(l), Some(d)) if !d.is_empty() => (s, l, d),
        _ => anyhow::bail!("--from {spec:?}: {usage}"),
    };
    let line: usize = line.parse().ok().filter(|&l| l >= 1).ok_or_else(|| {
        anyhow::anyhow!("--from {spec:?}: LINE {line:?} is not a line number (from 1); {usage}")
    })?;
    let step: usize = step.parse().map_err(|_| {
        anyhow::anyhow!("--from {spec:?}: STEP {step:?} is not a whole number of steps; {usage}")
    })?;
    Ok((PathBuf::from(set), line, step))
}

#[cfg(test)]
mod tests {
    use super::parse_from;

    #[test]
    fn from_takes_set_line_and_step() {
        let (set, line, step) = parse_from("C:/runs/demo:3:2").unwrap();
        assert_eq!((set.to_str().unwrap(), line, step), ("C:/runs/demo", 3, 2));
        for bad in ["runs/demo:3", "runs/demo:0:1", "runs/demo:x:1", "runs/demo:1:-1", ":1:1"] {
            let e = parse_from(bad).unwrap_err().to_string();
            assert!(e.contains("SET:LINE:STEP"), "{bad}: {e}");
        }
    }
}
