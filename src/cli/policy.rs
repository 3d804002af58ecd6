//! `--policy`: the policies a command can run, by name.

use crate::policy::api::{client::Endpoint, coords::CoordMode, ApiConfig, ApiPolicy};
use crate::policy::device::DeviceName;
use crate::policy::{oracle::OraclePolicy, random::RandomPolicy, Policy};
use anyhow::{bail, Context};
use std::path::PathBuf;
use std::time::Duration;

/// The most episodes `guirl run` plays, and `guirl bench` a task, in one command (their
/// jobs are listed up front).
pub const MAX_EPISODES: u64 = 1_000_000;

/// How episodes run (shared by `guirl run` and `guirl bench`).
#[derive(Debug, Clone, clap::Args)]
pub struct EpisodeArgs {
    /// Override every task's step limit.
    #[arg(long)]
    pub max_steps: Option<u32>,
    /// Enforce the task's wall-clock limit (ms), as MiniWoB++'s in-page timer does.
    #[arg(long, value_name = "MS")]
    pub wall_clock_ms: Option<u64>,
    /// End an episode on an action that cannot be executed (status invalid_action).
    #[arg(long)]
    pub strict_actions: bool,
    /// Page time: the page's clock (timers, Date.now(), animations) is virtual and moves on
    /// by MS after each action and at reset, never while the policy thinks (100 is a good
    /// value); 0, the default, keeps the wall clock. Needs begin-frame control (headless
    /// shell; refused with --free-frames, --headful, --no-devtools, --webdriver).
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub virtual_time_ms: u32,
    /// Sampling temperature of a checkpoint or API policy (0, the default, is greedy).
    #[arg(long, default_value_t = 0.0, value_name = "T")]
    pub temperature: f64,
    /// Where a checkpoint policy runs: cpu, cuda (GPU 0) or cuda:N. A GPU needs a
    /// `--features cuda` build; another device may answer otherwise, so a bench records it.
    #[arg(long, default_value_t = DeviceName::Cpu, value_name = "DEVICE")]
    pub device: DeviceName,
}

impl EpisodeArgs {
    /// The environment config for these options and `browser`, after checking them.
    pub fn env_config(&self, browser: &super::browser::BrowserArgs) -> anyhow::Result<crate::env::EnvConfig> {
        if self.max_steps == Some(0) {
            bail!("--max-steps must be at least 1");
        }
        if self.temperature < 0.0 || !self.temperature.is_finite() {
            bail!("--temperature must be 0 (greedy) or positive, got {}", self.temperature);
        }
        if self.wall_clock_ms == Some(0) {
            bail!("--wall-clock-ms must be at least 1 (leave it out for no time limit)");
        }
        if self.virtual_time_ms > 0 {
            let without = [
                (browser.free_frames, "--free-frames"),
                (browser.headful, "--headful"),
                (browser.no_devtools, "--no-devtools"),
                (browser.webdriver.is_some(), "--webdriver"),
            ];
            if let Some((_, flag)) = without.iter().find(|(on, _)| *on) {
                bail!(
                    "--virtual-time-ms needs begin-frame control over a browser guirl starts, which {flag} \
                     turns off: drop one of the two"
                );
            }
        }
        Ok(crate::env::EnvConfig {
            browser: browser.config(),
            max_steps: self.max_steps,
            rules: crate::env::EpisodeRules {
                wall_clock_ms: self.wall_clock_ms,
                strict_actions: self.strict_actions,
                virtual_time_ms: (self.virtual_time_ms > 0).then_some(self.virtual_time_ms),
            },
        })
    }
}

/// Options of `--policy openai:MODEL@BASE_URL` (a model behind an OpenAI-compatible API).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "API policy (--policy openai:MODEL@BASE_URL)")]
pub struct ApiArgs {
    /// The coordinate frame the model answers in: px (screenshot pixels), smart_resize
    /// (Qwen2.5-VL / UI-TARS-1.5 resized-image pixels; smart_resize:MIN_PIXELS,MAX_PIXELS),
    /// rel1000 (Qwen2-VL, Qwen3-VL), rel999, rel1. Left out: the frame the server names for
    /// the model (guirl serve-policy does), else px.
    #[arg(long, value_parser = parse_coords, value_name = "FRAME")]
    pub coords: Option<CoordMode>,
    /// A system prompt file replacing the built-in one (`{frame}` becomes the coordinate frame).
    #[arg(long, value_name = "FILE")]
    pub prompt: Option<PathBuf>,
    /// Screenshots per request, the current one included (vLLM's default per-prompt limit is 1).
    #[arg(long, default_value_t = 1, value_name = "K")]
    pub images: usize,
    /// Answer length limit.
    #[arg(long, default_value_t = 512)]
    pub max_tokens: u32,
    /// Extra top-level request fields, as a JSON object (e.g. '{"chat_template_kwargs": {"enable_thinking": false}}').
    #[arg(long, value_name = "JSON", value_parser = parse_json_object)]
    pub extra_body: Option<serde_json::Value>,
    /// The environment variable holding the API key (sent as a Bearer token if set).
    #[arg(long, default_value = "OPENAI_API_KEY", value_name = "VAR")]
    pub api_key_env: String,
    /// Limit on one request, in seconds.
    #[arg(long, default_value_t = 60.0, value_name = "SECS")]
    pub api_timeout: f64,
    /// Retries of a request after 429, 5xx, a timeout or a refused connection (with backoff).
    #[arg(long, default_value_t = 3)]
    pub api_retries: u32,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 8)]
    pub api_concurrency: usize,
    /// Do not send the page's interactive elements as text (screenshot and instruction only).
    #[arg(long)]
    pub no_elements: bool,
}

fn parse_coords(s: &str) -> Result<CoordMode, String> {
    s.parse::<CoordMode>().map_err(|e| e.to_string())
}

fn parse_json_object(s: &str) -> Result<serde_json::Value, String> {
    match serde_json::from_str::<serde_json::Value>(s) {
        Ok(v @ serde_json::Value::Object(_)) => Ok(v),
        Ok(_) => Err("--extra-body must be a JSON object, e.g. '{\"top_p\": 0.9}'".into()),
        Err(e) => Err(format!("--extra-body is not JSON: {e}")),
    }
}

impl ApiArgs {
    /// The API policy for `spec` (`openai:MODEL@BASE_URL`).
    pub fn policy(&self, spec: &str, seed: u64, temperature: f64) -> anyhow::Result<ApiPolicy> {
        let (model, base_url) = ApiConfig::parse_spec(spec)?;
        if !(self.api_timeout > 0.0 && self.api_timeout.is_finite()) {
            bail!("--api-timeout must be a positive number of seconds");
        }
        let cfg = ApiConfig {
            model,
            endpoint: Endpoint {
                base_url,
                api_key: std::env::var(&self.api_key_env).ok().filter(|k| !k.is_empty()),
                timeout: Duration::from_secs_f64(self.api_timeout),
                retries: self.api_retries,
                backoff: Duration::from_millis(500),
            },
            prompt_file: self.prompt.clone(),
            images: self.images,
            coords: self.coords,
            temperature,
            max_tokens: self.max_tokens,
            seed,
            extra_body: self.extra_body.clone(),
            elements: !self.no_elements,
            concurrency: self.api_concurrency.max(1),
        };
        ApiPolicy::new(cfg).context("setting up the API policy")
    }
}

/// What reaches the policy named `name` (for reports): a checkpoint's observation
/// setting ([`crate::policy::observation`]); for an API policy whether the page's elements
/// are sent beside the screenshot, and whether the served model reads them where its
/// server says (`served_observation` in the policy's `info`, from `guirl serve-policy`);
/// `n/a` for the scripted ones (random, oracle).
pub fn observation(name: &str, api: &ApiArgs, info: &serde_json::Value) -> anyhow::Result<String> {
    use crate::policy::observation::Observation::{self, Pixels, PixelsDom};
    Ok(match name {
        spec if spec.starts_with(crate::policy::api::openai::PREFIX) => {
            let served = info.get("served_observation").and_then(|o| o.as_str()?.parse::<Observation>().ok());
            match (api.no_elements, served) {
                (false, Some(Pixels)) => format!(
                    "{Pixels} (API policy: the page's elements are sent as text, but the served guirl checkpoint \
                     reads the screenshot only)"
                ),
                (true, Some(PixelsDom)) => format!(
                    "{Pixels} (API policy: screenshot and instruction; --no-elements, though the served guirl \
                     checkpoint reads the elements too)"
                ),
                (true, _) => format!("{Pixels} (API policy: screenshot and instruction; --no-elements)"),
                (false, _) => format!("{PixelsDom} (API policy: the page's interactive elements are sent as text)"),
            }
        }
        scripted if why_no_observation(scripted).is_some() => "n/a".to_string(),
        path => {
            let found = crate::train::checkpoint::resolve_policy_dir(std::path::Path::new(path))?;
            crate::policy::observation_of_checkpoint(&found.dir)?.to_string()
        }
    })
}

/// Why a scripted policy's observation is `n/a` (`None` for a policy that reads one).
pub fn why_no_observation(name: &str) -> Option<&'static str> {
    match name {
        "random" => Some("the random policy reads nothing"),
        "oracle" => Some("the oracle reads the page's state, not a model's input"),
        _ => None,
    }
}

/// Whether `--policy name` means a checkpoint: not a policy named by its kind (random,
/// oracle, an API model), and something on disk or written as a path (a missing one is
/// then said not to exist, where a mistyped kind is an unknown policy).
pub fn names_a_checkpoint(name: &str) -> bool {
    let kind = matches!(name, "random" | "oracle") || name.starts_with(crate::policy::api::openai::PREFIX);
    !kind && (std::fs::symlink_metadata(name).is_ok() || name.contains('/'))
}

/// Build the policy named `name` for `task_ids` (an oracle must exist for each), at the
/// episodes' temperature (0 decodes a checkpoint greedily), a checkpoint on their device.
pub fn make_policy(
    name: &str,
    task_ids: &[&str],
    seed: u64,
    episode: &EpisodeArgs,
    api: &ApiArgs,
) -> anyhow::Result<Box<dyn Policy>> {
    let (temperature, device) = (episode.temperature, episode.device);
    let checkpoint = names_a_checkpoint(name);
    if !checkpoint && device != DeviceName::Cpu {
        bail!(
            "--device {device} is where a checkpoint policy runs; {name:?} runs no model here: leave it out"
        );
    }
    match name {
        spec if spec.starts_with(crate::policy::api::openai::PREFIX) => {
            Ok(Box::new(api.policy(spec, seed, temperature)?))
        }
        "random" => Ok(Box::new(RandomPolicy::new(seed))),
        "oracle" => {
            if let Some(t) = task_ids.iter().find(|t| !crate::policy::oracle::has_oracle(t)) {
                bail!(crate::policy::oracle::no_oracle_message(t, "use --policy random"));
            }
            Ok(Box::new(OraclePolicy))
        }
        // Anything that exists on disk, or is written as a path, is a checkpoint in one of
        // its forms (or an error that says it does not exist, or lists the forms).
        path if checkpoint => {
            let found = crate::train::checkpoint::resolve_policy_dir(std::path::Path::new(path))?;
            if let Some(note) = &found.note {
                errln!("{note}");
            }
            let mut p = crate::policy::load_checkpoint(&found.dir, &device.open()?)?;
            let mut s = p.sampling();
            s.greedy = temperature == 0.0;
            if temperature > 0.0 {
                s.temperature = temperature;
                s.seed = seed;
            }
            p.set_sampling(s);
            Ok(Box::new(crate::policy::from_checkpoint::FromCheckpoint::new(p, &found.dir)))
        }
        other => {
            bail!(
                "unknown policy {other:?}: use random, oracle, openai:MODEL@BASE_URL, or {}",
                crate::train::checkpoint::POLICY_FORMS
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        api: ApiArgs,
    }

    #[test]
    fn the_report_says_what_each_kind_of_policy_sees() {
        let api = |args: &[&str]| Cmd::parse_from(std::iter::once("guirl").chain(args.iter().copied())).api;
        let spec = "openai:m@http://127.0.0.1:1/v1";
        let unsaid = serde_json::json!({"served_observation": null});
        assert!(observation(spec, &api(&[]), &unsaid).unwrap().starts_with("pixels+dom (API policy"));
        assert!(observation(spec, &api(&["--no-elements"]), &unsaid)
            .unwrap()
            .starts_with("pixels (API policy"));
        // A server that says its model reads the screenshot only: the elements sent are unused.
        let pixels = serde_json::json!({"served_observation": "pixels"});
        let said = observation(spec, &api(&[]), &pixels).unwrap();
        assert!(said.starts_with("pixels (") && said.contains("reads the screenshot only"), "{said}");
        let dom = serde_json::json!({"served_observation": "pixels+dom"});
        assert!(observation(spec, &api(&[]), &dom).unwrap().starts_with("pixels+dom ("));
        let said = observation(spec, &api(&["--no-elements"]), &dom).unwrap();
        assert!(said.starts_with("pixels (") && said.contains("reads the elements too"), "{said}");
        assert_eq!(observation("oracle", &api(&[]), &unsaid).unwrap(), "n/a");
        assert_eq!(observation("random", &api(&[]), &unsaid).unwrap(), "n/a");
        let e = observation("no/such/checkpoint", &api(&[]), &unsaid).unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
    }
}
