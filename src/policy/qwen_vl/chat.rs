//! The checkpoint's tokenizer and chat template.
//!
//! The template is the checkpoint's own Jinja text (`chat_template.jinja`,
//! `chat_template.json` or `tokenizer_config.json`), rendered by minijinja with the
//! settings transformers uses (`trim_blocks`, `lstrip_blocks`) and Python's string
//! methods, so a released model's template renders as it does in Python. The tokenizer
//! is `tokenizer.json` through the `tokenizers` crate. Each image's single
//! `<|image_pad|>` is expanded to as many placeholders as the image has merged tokens.

use super::model::config::QwenVlConfig;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use std::path::Path;
use tokenizers::Tokenizer;

/// Tokenizer + template of one checkpoint.
pub struct Chat {
    tokenizer: Tokenizer,
    template: String,
    image_token: u32,
    /// Where the template came from (for messages).
    template_file: String,
}

impl Chat {
    /// Load `tokenizer.json` and the chat template from a checkpoint folder.
    pub fn load(dir: &Path, cfg: &QwenVlConfig) -> Result<Self> {
        let tok_path = dir.join("tokenizer.json");
        if !tok_path.exists() {
            bail!(
                "{}: missing tokenizer.json (the checkpoint's Hugging Face tokenizer); copy it from the model's \
                 repository",
                tok_path.display()
            );
        }
        let tokenizer = Tokenizer::from_file(&tok_path)
            .map_err(|e| anyhow!("{}: cannot read the tokenizer: {e}", tok_path.display()))?;
        let (template, template_file) = find_template(dir)?;
        let chat = Chat { tokenizer, template, image_token: cfg.image_token_id, template_file };
        // the template must parse now, not at the first prompt
        chat.env()?
            .template_from_str(&chat.template)
            .map_err(|e| anyhow!("{}: the chat template does not parse: {e}", chat.template_file))?;
        Ok(chat)
    }

    fn env(&self) -> Result<minijinja::Environment<'static>> {
        let mut env = minijinja::Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<String, minijinja::Error> {
            Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
        });
        Ok(env)
    }

    /// Render `messages` (OpenAI-style: `role`, `content` as a string or a list of
    /// `{"type": "image"}` / `{"type": "text", "text": ...}` parts).
    pub fn render(&self, messages: &Value, add_generation_prompt: bool) -> Result<String> {
        let env = self.env()?;
        let tmpl = env.template_from_str(&self.template)?;
        tmpl.render(minijinja::context! {
            messages => minijinja::Value::from_serialize(messages),
            add_generation_prompt => add_generation_prompt,
        })
        .map_err(|e| anyhow!("{}: rendering the chat template failed: {e}", self.template_file))
    }

    /// Token ids of rendered text (special tokens in the text are matched, none added).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.tokenizer.encode(text, false).map_err(|e| anyhow!("tokenizing failed: {e}"))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Token ids of a rendered prompt with the `i`-th image placeholder expanded to
    /// `image_tokens[i]` copies; an image count that disagrees with the prompt is an error.
    pub fn encode_prompt(&self, rendered: &str, image_tokens: &[usize]) -> Result<Vec<u32>> {
        let ids = self.encode(rendered)?;
        let found = ids.iter().filter(|&&t| t == self.image_token).count();
        if found != image_tokens.len() {
            bail!("the prompt has {found} image placeholders for {} images", image_tokens.len());
        }
        let mut out = Vec::with_capacity(ids.len() + image_tokens.iter().sum::<usize>());
        let mut images = image_tokens.iter();
        for t in ids {
            if t == self.image_token {
                let n = *images.next().expect("counted above");
                out.extend(std::iter::repeat_n(t, n));
            } else {
                out.push(t);
            }
        }
        Ok(out)
    }

    /// Text of token ids (special tokens skipped).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.tokenizer.decode(ids, true).map_err(|e| anyhow!("decoding failed: {e}"))
    }

    /// One token as text (special tokens kept).
    pub fn token_text(&self, id: u32) -> String {
        self.tokenizer.id_to_token(id).unwrap_or_else(|| id.to_string())
    }

    /// The id of a token's text, if the vocabulary has it.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.tokenizer.token_to_id(text)
    }
}

/// The template text and the file it came from.
fn find_template(dir: &Path) -> Result<(String, String)> {
    let jinja = dir.join("chat_template.jinja");
    if jinja.exists() {
        let t =
            std::fs::read_to_string(&jinja).with_context(|| format!("{}: cannot read", jinja.display()))?;
        return Ok((t, jinja.display().to_string()));
    }
    for name in ["chat_template.json", "tokenizer_config.json"] {
        let path = dir.join(name);
        if !path.exists() {
            continue;
        }
        let text =
            std::fs::read_to_string(&path).with_context(|| format!("{}: cannot read", path.display()))?;
        let j: Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", path.display()))?;
        match j.get("chat_template") {
            Some(Value::String(s)) => return Ok((s.clone(), path.display().to_string())),
            // a list of named templates: take "default"
            Some(Value::Array(list)) => {
                let found = list.iter().find(|t| t.get("name").and_then(Value::as_str) == Some("default"));
                if let Some(s) = found.and_then(|t| t.get("template")).and_then(Value::as_str) {
                    return Ok((s.to_string(), path.display().to_string()));
                }
            }
            _ => {}
        }
    }
    bail!(
        "{}: no chat template (looked for chat_template.jinja, and `chat_template` in chat_template.json and \
         tokenizer_config.json)",
        dir.display()
    )
}
