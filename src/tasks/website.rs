//! Website tasks: a TOML spec that points at any URL, with an instruction template and
//! success checks evaluated in the page.
//!
//! ```toml
//! start_url = "/fixtures/pages/newsletter.html"   # absolute URL, or a path on guirl's task server
//! instruction = "Subscribe {email} to the newsletter"
//! max_steps = 12
//! setup_js = "window.tour = false;"             # optional, run after each load
//! fresh_state = true                             # default: clear the origin's storage first
//! [viewport]
//! width = 320
//! height = 240
//! [variables]                                    # drawn from the seed
//! email = ["ann@example.com", "bo@example.org"]
//! n = { min = 1, max = 9 }
//! [success]                                      # all given checks must pass
//! js = "document.querySelector('#msg')?.innerText.includes(vars.email)"
//! url_pattern = "^[^?#]*/thanks\\.html"             # searched in the URL: anchor it
//! element_text = { selector = "#msg", contains = "Thanks" }
//! ```
//!
//! A task whose success cannot be checked in the page can be scored by a learned reward
//! model instead (`guirl train-reward`): `reward = "model:PATH"` (a model folder, relative
//! to the spec's folder) with `reward_threshold` (default 0.5), and no `[success]` table.
//! When an episode ends, the model's P(success) from the final screenshot and the
//! instruction is the episode's reward, and it counts as a success at P ≥ the threshold.
//! A spec with both `[success]` and `reward` keeps the check's verdict and logs how often
//! the model agrees with it.
//!
//! Or by a judge, a vision-language model behind an OpenAI-compatible API:
//! `reward = "judge:MODEL@BASE_URL"`, tuned by an optional `[judge]` table (`votes`,
//! `frames`, `actions`, `rubric`, `cache`, …; see [`JudgeTable`]); `reward_threshold` is
//! then the fraction of SUCCESS votes that makes a success.

use super::judge::{JudgeSpec, JudgeTable};
use super::server::base_url;
use super::spec_path::{local_site, spec_id, LocalSite};
use super::template::fill;
use super::website_success::{self, url_regex, yes};
pub use super::website_success::{ElementText, SuccessSpec};
use super::{EnvError, Page};
use super::{EpisodeOptions, EpisodeStart, Task, Viewport};
use anyhow::{bail, Context};
use async_trait::async_trait;
use rand::{Rng, SeedableRng};
use serde::Deserialize;
use serde_json::json;
use sha2::Digest;
use std::collections::BTreeMap;
use std::path::Path;

/// A website task spec, as written in TOML.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebsiteSpec {
    /// Absolute URL (`http(s)://`, `file://`) or a path on guirl's task server (`/fixtures/...`).
    pub start_url: String,
    /// The instruction; `{name}` is replaced by the seed's draw of variable `name`.
    pub instruction: String,
    /// Step limit.
    #[serde(default = "default_max_steps")]
    pub max_steps: u32,
    /// Viewport size.
    #[serde(default)]
    pub viewport: ViewportSpec,
    /// JavaScript run after each page load (template variables substituted).
    #[serde(default)]
    pub setup_js: Option<String>,
    /// Start every episode from a clean browser state: before the start page loads, delete
    /// what pages of its origin stored (cookies, localStorage, sessionStorage, IndexedDB,
    /// Cache Storage, service workers), so nothing of the previous episode leaks into the
    /// next. `false` keeps it (a task that relies on a logged-in session, say).
    #[serde(default = "yes")]
    pub fresh_state: bool,
    /// Template variables.
    #[serde(default)]
    pub variables: BTreeMap<String, Variable>,
    /// Success checks (may be left out when `reward` names a model).
    #[serde(default)]
    pub success: Option<SuccessSpec>,
    /// `"model:PATH"`: a learned reward model folder (relative paths from the spec's
    /// folder); `"judge:MODEL@BASE_URL"`: a judge model behind an OpenAI-compatible API.
    #[serde(default)]
    pub reward: Option<String>,
    /// The score at which the reward model (P(success)) or the judge (the fraction of
    /// SUCCESS votes) counts an episode as a success (default 0.5).
    #[serde(default)]
    pub reward_threshold: Option<f64>,
    /// How a `judge:` reward asks its model.
    #[serde(default)]
    pub judge: Option<JudgeTable>,
}

fn default_max_steps() -> u32 {
    20
}

/// Viewport size of a website task.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ViewportSpec {
    /// Width in CSS pixels.
    pub width: u32,
    /// Height in CSS pixels.
    pub height: u32,
}

impl Default for ViewportSpec {
    fn default() -> Self {
        ViewportSpec { width: 320, height: 240 }
    }
}

/// A template variable: one of a list, or an integer in a range (inclusive).
#[derive(Debug, Clone, Deserialize)]
#[serde(
    untagged,
    expecting = "an array of strings ([\"a\", \"b\"]) or an integer range ({ min = 1, max = 9 })"
)]
pub enum Variable {
    /// Pick one of these.
    Choice(Vec<String>),
    /// Pick an integer in `min..=max`.
    Range {
        /// Smallest value.
        min: i64,
        /// Largest value.
        max: i64,
    },
}

impl WebsiteSpec {
    /// Parse and validate a spec; errors name the offending key.
    pub fn parse(text: &str) -> anyhow::Result<WebsiteSpec> {
        let spec: WebsiteSpec =
            toml::from_str(text).map_err(|e| anyhow::anyhow!("{}", e.to_string().trim()))?;
        spec.validate()?;
        Ok(spec)
    }

    fn validate(&self) -> anyhow::Result<()> {
        if self.max_steps == 0 || self.max_steps > 10_000 {
            bail!("max_steps = {} is out of range: use 1 to 10000", self.max_steps);
        }
        for (k, v) in [("viewport.width", self.viewport.width), ("viewport.height", self.viewport.height)] {
            if !(50..=4000).contains(&v) {
                bail!("{k} = {v} is out of range: use 50 to 4000 pixels");
            }
        }
        if self.start_url.trim().is_empty() {
            bail!(
                "start_url is empty: give an http(s):// URL or a path on guirl's task server like \
                 /fixtures/page.html (the CLI's own runs also take file:// URLs; a server refuses them)"
            );
        }
        let u = self.start_url.trim();
        let scheme = u.split_once(':').is_some_and(|(s, _)| {
            !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        });
        if !u.starts_with('/') && !u.starts_with('{') && !scheme {
            bail!(
                "start_url = {u:?} is a relative path: give an http(s):// URL, a file:///absolute/path, \
                 or a path on guirl's task server like /fixtures/page.html"
            );
        }
        if let Some(r) = &self.reward {
            if let Some(target) = r.strip_prefix(JudgeSpec::PREFIX) {
                JudgeSpec::parse(target).with_context(|| format!("reward = {r:?}"))?;
            } else if r.strip_prefix("model:").is_none_or(|p| p.trim().is_empty()) {
                bail!(
                    "reward = {r:?}: give \"model:PATH\", a folder written by `guirl train-reward`, \
                     or \"judge:MODEL@BASE_URL\", a model behind an OpenAI-compatible API"
                );
            }
        }
        if let Some(j) = &self.judge {
            if !self.reward.as_deref().is_some_and(|r| r.starts_with(JudgeSpec::PREFIX)) {
                bail!("[judge] is set but reward is not a judge: add reward = \"judge:MODEL@BASE_URL\"");
            }
            j.validate()?;
        }
        if let Some(t) = self.reward_threshold {
            if self.reward.is_none() {
                bail!(
                    "reward_threshold is set but reward is not: add reward = \"model:PATH\" or \
                     reward = \"judge:MODEL@BASE_URL\""
                );
            }
            if !(t > 0.0 && t < 1.0) {
                bail!("reward_threshold = {t} is out of range: use a probability in (0, 1)");
            }
        }
        let empty = SuccessSpec::default();
        let s = match &self.success {
            Some(s) => {
                if s.js.is_none() && s.url_pattern.is_none() && s.element_text.is_none() {
                    bail!("success has no check: give at least one of success.js, success.url_pattern, success.element_text");
                }
                s
            }
            None if self.reward.is_some() => &empty,
            None => bail!(
                "the spec has no [success] table: give one with success.js, success.url_pattern or \
                 success.element_text, or score episodes with a learned model: reward = \"model:PATH\", \
                 or with a judge model: reward = \"judge:MODEL@BASE_URL\""
            ),
        };
        if let Some(p) = &s.url_pattern {
            url_regex(p)?;
        }
        for (name, v) in &self.variables {
            match v {
                Variable::Choice(c) if c.is_empty() => bail!("variables.{name} is an empty list"),
                Variable::Range { min, max } if min > max => {
                    bail!("variables.{name}: min {min} is above max {max}")
                }
                _ => {}
            }
        }
        let mut templates =
            vec![("instruction", self.instruction.clone()), ("start_url", self.start_url.clone())];
        templates.extend(self.setup_js.clone().map(|s| ("setup_js", s)));
        templates.extend(s.js.clone().map(|s| ("success.js", s)));
        templates.extend(s.element_text.clone().map(|e| ("success.element_text.contains", e.contains)));
        let var_re = regex::Regex::new(r"\{([A-Za-z_][A-Za-z0-9_]*)\}").expect("static regex");
        for (key, t) in templates {
            for cap in var_re.captures_iter(&t) {
                if !self.variables.contains_key(&cap[1]) {
                    bail!("{key} uses {{{}}} but [variables] does not define {}", &cap[1], &cap[1]);
                }
            }
        }
        Ok(())
    }

    /// The seed's draw of every variable.
    pub fn draw(&self, seed: u64) -> BTreeMap<String, String> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        self.variables
            .iter()
            .map(|(k, v)| {
                let val = match v {
                    Variable::Choice(c) => c[rng.gen_range(0..c.len())].clone(),
                    Variable::Range { min, max } => rng.gen_range(*min..=*max).to_string(),
                };
                (k.clone(), val)
            })
            .collect()
    }
}

/// The spec's reward model or judge, its paths resolved against `base` (the spec's folder)
/// and checked: a model folder must hold a model, a rubric file must be readable.
fn learned_reward(spec: &WebsiteSpec, base: &Path) -> anyhow::Result<Option<super::LearnedReward>> {
    let Some(reward) = spec.reward.as_deref() else { return Ok(None) };
    let resolve = |p: &str| {
        let p = Path::new(p.trim());
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            base.join(p)
        }
    };
    let scorer = if let Some(target) = reward.strip_prefix(JudgeSpec::PREFIX) {
        let table = spec.judge.clone().unwrap_or_default();
        super::Scorer::Judge(table.resolve(target, &resolve)?)
    } else {
        let Some(path) = reward.strip_prefix("model:") else { return Ok(None) };
        let model = resolve(path);
        // (The file name is the reward model's REWARD_CONFIG; tasks know nothing of policies.)
        if !model.join("reward_model.json").is_file() {
            bail!(
                "reward = \"model:{path}\": {} is not a reward model folder (it has no reward_model.json); \
                 train one with `guirl train-reward DIRS... --out {}`",
                model.display(),
                model.display()
            );
        }
        super::Scorer::Model(model)
    };
    Ok(Some(super::LearnedReward {
        scorer,
        threshold: spec.reward_threshold.unwrap_or(0.5),
        decides: spec.success.is_none(),
    }))
}

impl Variable {
    /// The most characters a drawn value can have.
    fn longest(&self) -> usize {
        match self {
            Variable::Choice(c) => c.iter().map(|v| v.chars().count()).max().unwrap_or(0),
            Variable::Range { min, max } => min.to_string().len().max(max.to_string().len()),
        }
    }
}

impl WebsiteSpec {
    /// The most characters `template` (a field of this spec) can expand to with any seed's
    /// variables: what a length limit must hold, not the template's own length.
    pub fn expanded_chars(&self, template: &str) -> usize {
        let mut n = template.chars().count();
        for (name, v) in &self.variables {
            let uses = template.matches(&format!("{{{name}}}")).count();
            // Each use is in the template, so its placeholder's characters are in `n`.
            n = n + uses * v.longest() - uses * (name.chars().count() + 2);
        }
        n
    }
}

/// A website task loaded from a spec file.
#[derive(Debug)]
pub struct WebsiteTask {
    id: String,
    spec: WebsiteSpec,
    learned: Option<super::LearnedReward>,
    /// SHA-256 of the spec file (16 hex digits); `None` for a spec sent as text.
    digest: Option<String>,
}

impl WebsiteTask {
    /// Load and validate a spec file.
    pub fn load(path: &Path) -> anyhow::Result<WebsiteTask> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read task spec {}", path.display()))?;
        let spec =
            WebsiteSpec::parse(&text).with_context(|| format!("invalid task spec {}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        // (a path with a variable in it names a file only once drawn: its folder must be there)
        match local_site(&spec.start_url) {
            Some(LocalSite { page: Some(file), .. }) if !file.is_file() => {
                bail!("invalid task spec {}: start_url: no such file {}", path.display(), file.display())
            }
            Some(LocalSite { folder, page: None }) if !folder.is_dir() => {
                bail!("invalid task spec {}: start_url: no such folder {}", path.display(), folder.display())
            }
            _ => {}
        }
        let learned =
            learned_reward(&spec, base).with_context(|| format!("invalid task spec {}", path.display()))?;
        // The id is the spec's path, so recordings can find the task again.
        let digest = Some(format!("{:x}", sha2::Sha256::digest(text.as_bytes()))[..16].to_string());
        Ok(WebsiteTask { id: spec_id(path), spec, learned, digest })
    }

    /// A task from a spec's text (sent over the network rather than read from a file),
    /// named `id`, optionally at another viewport size.
    ///
    /// The text comes from elsewhere (a client of `guirl serve`), so a `reward =
    /// "model:NAME"` names a folder inside `reward_models` only (a plain name, no path);
    /// without `reward_models` a spec with a reward model is refused.
    pub fn from_text(
        id: String,
        text: &str,
        viewport: Option<(u32, u32)>,
        reward_models: Option<&Path>,
    ) -> anyhow::Result<WebsiteTask> {
        let mut spec = WebsiteSpec::parse(text).context("invalid task spec")?;
        if let Some((width, height)) = viewport {
            spec.viewport = ViewportSpec { width, height };
            spec.validate()?;
        }
        if spec.reward.as_deref().is_some_and(|r| r.starts_with(JudgeSpec::PREFIX)) {
            // The spec would choose where the server sends requests (with its API key) and
            // which files it reads as a rubric.
            bail!(
                "reward = {:?}: a judge is not accepted in a spec sent over the network; \
                 score the episodes on the client's side, or use a spec file with `guirl run` / `guirl train`",
                spec.reward.as_deref().unwrap_or_default()
            );
        }
        if let Some(name) = spec.reward.as_deref().and_then(|r| r.strip_prefix("model:")) {
            let Some(dir) = reward_models else {
                bail!(
                    "reward = \"model:{name}\": this server reads no reward models; its operator can \
                     start it with `guirl serve --reward-models DIR` to offer the model folders in DIR by name"
                );
            };
            let plain = Path::new(name.trim()).components().count() == 1
                && matches!(
                    Path::new(name.trim()).components().next(),
                    Some(std::path::Component::Normal(_))
                );
            if !plain {
                bail!(
                    "reward = \"model:{name}\": name a model folder of the server's --reward-models ({}) \
                     by its plain name, not a path",
                    dir.display()
                );
            }
            let learned = learned_reward(&spec, dir)?;
            return Ok(WebsiteTask { id, spec, learned, digest: None });
        }
        Ok(WebsiteTask { id, spec, learned: None, digest: None })
    }

    /// The spec's parsed content.
    pub fn spec(&self) -> &WebsiteSpec {
        &self.spec
    }

    fn url(&self, vars: &BTreeMap<String, String>) -> Result<String, EnvError> {
        let u = fill(&self.spec.start_url, vars);
        if u.starts_with('/') {
            Ok(format!("{}{}", base_url()?, u))
        } else {
            Ok(u)
        }
    }
}

#[async_trait]
impl Task for WebsiteTask {
    fn id(&self) -> &str {
        &self.id
    }
    fn source_digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }
    fn viewport(&self) -> Viewport {
        Viewport::full(self.spec.viewport.width, self.spec.viewport.height)
    }
    fn max_steps(&self) -> u32 {
        self.spec.max_steps
    }
    fn rewards_on_done(&self) -> bool {
        true
    }
    fn failure_reward(&self) -> f64 {
        0.0
    }
    fn learned_reward(&self) -> Option<&super::LearnedReward> {
        self.learned.as_ref()
    }
    fn local_site(&self) -> Option<LocalSite> {
        local_site(&self.spec.start_url)
    }
    fn home_url(&self) -> Option<String> {
        let u = self.spec.start_url.trim();
        (u.starts_with("http://") || u.starts_with("https://")).then(|| u.to_string())
    }

    async fn reset(
        &self,
        browser: &dyn Page,
        seed: u64,
        _opts: &EpisodeOptions,
    ) -> Result<EpisodeStart, EnvError> {
        let vars = self.spec.draw(seed);
        let url = self.url(&vars)?;
        if self.spec.fresh_state {
            browser.clear_site_data(&url).await?;
        }
        browser.goto(&url).await?;
        // A failed navigation lands on Chrome's error page; a 4xx/5xx still "loads".
        let check = browser
            .execute(
                "var n = performance.getEntriesByType('navigation')[0]; \
                 return [location.href, n ? (n.responseStatus || 0) : 0];",
                vec![],
            )
            .await?;
        let href = check[0].as_str().unwrap_or_default();
        let code = check[1].as_u64().unwrap_or(0);
        if href.starts_with("chrome-error://") {
            return Err(EnvError::PageLoad {
                url,
                reason: "the browser shows its error page (host unreachable, or an HTTP error with an empty body); check the URL".into(),
            });
        }
        if code >= 400 {
            return Err(EnvError::PageLoad { url, reason: format!("the server answered HTTP {code}") });
        }
        if let Some(js) = &self.spec.setup_js {
            browser
                .execute(&format!("var vars = {};\n{}", json!(vars), fill(js, &vars)), vec![])
                .await
                .map_err(|e| EnvError::Task(format!("{}: setup_js failed: {e}", self.id)))?;
        }
        let instruction = fill(&self.spec.instruction, &vars);
        let url_pattern = match self.spec.success.as_ref().and_then(|s| s.url_pattern.as_deref()) {
            Some(p) => Some(url_regex(p).map_err(|e| EnvError::Task(format!("{}: {e:#}", self.id)))?),
            None => None,
        };
        Ok(EpisodeStart {
            instruction,
            status_js: website_success::status_js(self.spec.success.as_ref(), &vars),
            url_pattern,
        })
    }
}

#[cfg(test)]
#[path = "website_tests.rs"]
mod tests;
