//! `guirl play`: step one env by hand (or from a piped actions file).

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
    #[command(flatten)]
    browser: BrowserArgs,
}

/// `guirl play`: reads lines from stdin until `:quit` or end of input.
pub async fn play(args: PlayArgs) -> anyhow::Result<()> {
    if args.max_steps == Some(0) {
        anyhow::bail!("--max-steps must be at least 1");
    }
    let task = crate::tasks::load_task(&args.task)?;
    let cfg = crate::env::EnvConfig {
        browser: args.browser.config(),
        max_steps: args.max_steps,
        ..Default::default()
    };
    let writer = args.record.as_deref().map(crate::rollout::TrajectoryWriter::open).transpose()?;
    let opts = PlayOptions { seed: args.seed, screenshot: args.screenshot, json: args.json };
    let mut session = Play::new(task, cfg, opts, writer);
    let mut out = std::io::stdout();
    let started = session.start(&mut out).await;
    if let Err(e) = started {
        session.finish(&mut std::io::sink()).await?;
        return Err(e);
    }
    // Prompts only for a person at a terminal, and on stderr: stdout stays the event log.
    let prompt = std::io::stdin().is_terminal();
    if prompt {
        eprintln!("type an action or :help");
    }
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    loop {
        if prompt {
            eprint!("> ");
        }
        let Some(line) = lines.next_line().await? else { break };
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
