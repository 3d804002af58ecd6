//! A judge's settings, as plain data: `reward = "judge:MODEL@BASE_URL"` and a website
//! spec's `[judge]` table, resolved into a [`JudgeSpec`]. Tasks know no models: the judge
//! itself (the requests, votes, cache) is `policy/judge`.

use anyhow::bail;
use serde::Deserialize;
use std::path::PathBuf;

/// A judge: which model, where, and how it is asked (`reward = "judge:MODEL@BASE_URL"`
/// and the spec's `[judge]` table). Plain data; `policy/judge` asks it.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgeSpec {
    /// Model name sent in each request.
    pub model: String,
    /// Base URL of the OpenAI-compatible endpoint, usually ending in `/v1`.
    pub base_url: String,
    /// Samples asked per episode; the fraction saying SUCCESS is compared with the
    /// threshold.
    pub votes: u32,
    /// Screenshots shown: the final one and up to `frames − 1` before it.
    pub frames: usize,
    /// Show the episode's actions as text too.
    pub actions: bool,
    /// A rubric file replacing the built-in one (absolute, or from the spec's folder).
    pub rubric: Option<PathBuf>,
    /// The environment variable holding the API key (sent as a Bearer token if set).
    pub api_key_env: String,
    /// Limit on one request, in seconds.
    pub timeout_s: f64,
    /// Retries of a request (429, 5xx, timeouts, refused connections), and re-asks of an
    /// answer with no verdict line.
    pub retries: u32,
    /// Sampling temperature.
    pub temperature: f64,
    /// Answer length limit.
    pub max_tokens: u32,
    /// A folder of cached verdicts (absolute, or from the spec's folder), if any.
    pub cache: Option<PathBuf>,
}

impl JudgeSpec {
    /// The prefix of a judge in `reward = "…"` and `--judge`.
    pub const PREFIX: &'static str = "judge:";

    /// A judge of `target` (`MODEL@BASE_URL`, with or without the `judge:` prefix) with
    /// every other setting at its default. Without `@http(s)://…` the base URL is
    /// `$OPENAI_BASE_URL`, else OpenAI's, as for `openai:` policies.
    pub fn parse(target: &str) -> anyhow::Result<JudgeSpec> {
        let rest = target.strip_prefix(Self::PREFIX).unwrap_or(target).trim();
        let (model, base_url) = match rest.rsplit_once('@') {
            Some((m, b)) if b.starts_with("http://") || b.starts_with("https://") => {
                (m.to_string(), b.to_string())
            }
            Some((_, b)) => anyhow::bail!(
                "judge {target:?}: {b:?} is not a base URL; write judge:MODEL@http://HOST:PORT/v1"
            ),
            None => (
                rest.to_string(),
                std::env::var("OPENAI_BASE_URL").unwrap_or_else(|_| "https://api.openai.com/v1".to_string()),
            ),
        };
        if model.trim().is_empty() {
            anyhow::bail!("judge {target:?} names no model: write judge:MODEL@http://HOST:PORT/v1");
        }
        Ok(JudgeSpec {
            model,
            base_url,
            votes: 1,
            frames: 1,
            actions: false,
            rubric: None,
            api_key_env: "OPENAI_API_KEY".into(),
            timeout_s: 60.0,
            retries: 3,
            temperature: 0.0,
            max_tokens: 512,
            cache: None,
        })
    }

    /// `MODEL@BASE_URL`, as reports name the judge.
    pub fn name(&self) -> String {
        format!("{}@{}", self.model, self.base_url)
    }
}

/// The `[judge]` table of a spec whose `reward` is `"judge:MODEL@BASE_URL"`; every key may
/// be left out.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeTable {
    /// Samples per episode (default 1); the episode succeeds when the fraction saying
    /// SUCCESS reaches `reward_threshold`.
    #[serde(default)]
    pub votes: Option<u32>,
    /// Screenshots shown, the final one included (default 1).
    #[serde(default)]
    pub frames: Option<usize>,
    /// Show the episode's actions as text too (default false).
    #[serde(default)]
    pub actions: Option<bool>,
    /// A rubric file replacing the built-in one, from the spec's folder.
    #[serde(default)]
    pub rubric: Option<String>,
    /// The environment variable holding the API key (default `OPENAI_API_KEY`).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Limit on one request in seconds (default 60).
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// Retries of a failed request and re-asks of an answer with no verdict (default 3).
    #[serde(default)]
    pub retries: Option<u32>,
    /// Sampling temperature (default 0 for one vote, 1 for several).
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Answer length limit (default 512).
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// A folder caching verdicts, from the spec's folder (default: none).
    #[serde(default)]
    pub cache: Option<String>,
}

impl JudgeTable {
    /// Check the values; errors name the key.
    pub fn validate(&self) -> anyhow::Result<()> {
        let j = self;
        if j.votes.is_some_and(|v| !(1..=64).contains(&v)) {
            bail!("judge.votes = {} is out of range: use 1 to 64", j.votes.unwrap_or(0));
        }
        if j.frames.is_some_and(|v| !(1..=16).contains(&v)) {
            bail!("judge.frames = {} is out of range: use 1 to 16", j.frames.unwrap_or(0));
        }
        if j.timeout_s.is_some_and(|t| !(t > 0.0 && t.is_finite())) {
            bail!("judge.timeout_s must be a positive number of seconds");
        }
        if j.temperature.is_some_and(|t| !(t >= 0.0 && t.is_finite())) {
            bail!("judge.temperature must be 0 (greedy) or positive");
        }
        if j.max_tokens == Some(0) {
            bail!("judge.max_tokens must be at least 1");
        }
        Ok(())
    }

    /// The judge of `target` (`MODEL@BASE_URL`) with this table's settings, its paths
    /// made absolute by `resolve` (from the spec's folder); a rubric file must be readable.
    pub fn resolve(&self, target: &str, resolve: &dyn Fn(&str) -> PathBuf) -> anyhow::Result<JudgeSpec> {
        let t = self;
        let mut j = JudgeSpec::parse(target)?;
        j.votes = t.votes.unwrap_or(1);
        j.frames = t.frames.unwrap_or(1);
        j.actions = t.actions.unwrap_or(false);
        j.rubric = t.rubric.as_deref().map(resolve);
        j.api_key_env = t.api_key_env.clone().unwrap_or(j.api_key_env);
        j.timeout_s = t.timeout_s.unwrap_or(j.timeout_s);
        j.retries = t.retries.unwrap_or(j.retries);
        // Several votes of a greedy model would all say the same.
        j.temperature = t.temperature.unwrap_or(if j.votes > 1 { 1.0 } else { 0.0 });
        j.max_tokens = t.max_tokens.unwrap_or(j.max_tokens);
        j.cache = t.cache.as_deref().map(resolve);
        if let (Some(p), Some(given)) = (&j.rubric, &t.rubric) {
            if let Err(e) = std::fs::read_to_string(p) {
                bail!(
                    "judge.rubric = {given:?}: cannot read {} ({e}); give a rubric file (a path from the \
                     spec's folder), or leave judge.rubric out for the built-in rubric",
                    p.display()
                );
            }
        }
        Ok(j)
    }
}

#[cfg(test)]
mod tests {
    use super::super::website::{WebsiteSpec, WebsiteTask};
    use super::super::Task;

    const OK: &str = r#"
start_url = "/fixtures/pages/signup.html"
instruction = "Sign up as {name}"
[variables]
name = ["ann", "bo"]
[success]
url_pattern = "done"
"#;

    #[test]
    fn a_judge_may_replace_the_success_checks() {
        let no_check = OK.replace("[success]\nurl_pattern = \"done\"\n", "");
        let s = WebsiteSpec::parse(&format!(
            "reward = \"judge:qwen@http://127.0.0.1:8000/v1\"\n{no_check}[judge]\nvotes = 3\n"
        ))
        .unwrap();
        assert_eq!(s.judge.unwrap().votes, Some(3));
        for (bad, needle) in [
            ("reward = \"judge:\"", "names no model"),
            ("reward = \"judge:qwen@localhost:8000\"", "is not a base URL"),
            ("reward = \"jduge:qwen\"", "\"judge:MODEL@BASE_URL\""),
        ] {
            let e = WebsiteSpec::parse(&format!("{bad}\n{no_check}")).unwrap_err();
            assert!(format!("{e:#}").contains(needle), "{bad}: {e:#}");
        }
        let judged = format!("reward = \"judge:q@http://h/v1\"\n{no_check}");
        for (table, needle) in [
            ("[judge]\nvotes = 0", "judge.votes = 0 is out of range"),
            ("[judge]\nframes = 40", "judge.frames = 40 is out of range"),
            ("[judge]\nvotse = 3", "votse"),
            ("[judge]\ntimeout_s = 0.0", "judge.timeout_s"),
        ] {
            let e = WebsiteSpec::parse(&format!("{judged}{table}\n")).unwrap_err();
            assert!(format!("{e:#}").contains(needle), "{table}: {e:#}");
        }
        let e = WebsiteSpec::parse(&format!("{OK}[judge]\nvotes = 3\n")).unwrap_err();
        assert!(e.to_string().contains("reward is not a judge"), "{e}");
        // Defaults, paths from the spec's folder, and a missing rubric file.
        let dir = tempfile::tempdir().unwrap();
        let spec = dir.path().join("t.toml");
        std::fs::write(&spec, format!("{judged}[judge]\nvotes = 5\nrubric = \"r.md\"\ncache = \"c\"\n"))
            .unwrap();
        let e = WebsiteTask::load(&spec).unwrap_err();
        assert!(format!("{e:#}").contains("judge.rubric = \"r.md\": cannot read"), "{e:#}");
        std::fs::write(dir.path().join("r.md"), "Be strict.").unwrap();
        let t = WebsiteTask::load(&spec).unwrap();
        let l = t.learned_reward().unwrap();
        let j = l.judge().unwrap();
        assert_eq!(
            (j.model.as_str(), j.base_url.as_str(), j.votes, j.temperature),
            ("q", "http://h/v1", 5, 1.0)
        );
        assert_eq!(
            (j.rubric.clone().unwrap(), j.cache.clone().unwrap()),
            (dir.path().join("r.md"), dir.path().join("c"))
        );
        assert!(l.decides && l.threshold == 0.5 && l.frames() == 1);
        // A judge named over the network is refused.
        let e = WebsiteTask::from_text("x".into(), &judged, None, None).unwrap_err();
        assert!(format!("{e:#}").contains("not accepted in a spec sent over the network"), "{e:#}");
    }
}
