//! `guirl play`: step one env by hand (or from a piped actions file), or record what a
//! person does in a visible browser window (`--headful --capture`).

use super::BrowserArgs;
use crate::rollout::play::{Flow, Play, PlayOptions};
use std::io::IsTerminal;
use std::path::PathBuf;
use tokio::io::AsyncBufReadExt;

/// Arguments of `guirl play`.
#[derive(Debug, clap::Args)]
pub struct PlayArgs {
    /// Task id (`miniwob/click-test`, `builtin/NAME`) or path to a website spec (.toml).
    #[arg(long)]
    task: String,
    /// Seed of the first episode; `:reset` without a seed takes the next one.
    #[arg(long, default_value_t = 0)]
    seed: u64,
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
    let task = crate::tasks::load_task(&args.task)?;
    let cfg = crate::env::EnvConfig {
        browser: args.browser.config(),
        max_steps: args.max_steps,
        ..Default::default()
    };
    let writer = args.record.as_deref().map(crate::rollout::TrajectoryWriter::open).transpose()?;
    let opts =
        PlayOptions { seed: args.seed, screenshot: args.screenshot, json: args.json, capture: args.capture };
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
        eprintln!("act in the browser window; type :done, :reset, :quit or :help here");
    } else if prompt {
        eprintln!("type an action or :help");
    }
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    // While capturing, the page is polled for what the person did between stdin lines.
    let mut poll = tokio::time::interval(std::time::Duration::from_millis(100));
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if prompt {
            eprint!("> ");
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
