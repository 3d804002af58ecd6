//! Scoring answers: per-token log-probs and entropies of given tokens after each state's
//! prompt, the training pass's forward (`TrainablePolicy::score`/`score_train`).

use super::*;
use crate::policy::qwen_vl::model::Prompt;
use crate::policy::qwen_vl::train::train_pass::{sample_key, PassState};

impl QwenVlPolicy {
    /// Score `tokens` after `states`; `pass` makes it a training pass with that key (LoRA
    /// dropout, gradient checkpointing, as the settings ask).
    pub(super) fn score_pass(
        &self,
        states: &[ScreenState],
        tokens: &[Vec<u32>],
        pass: Option<u64>,
    ) -> Result<TokenScores> {
        if states.len() != tokens.len() {
            bail!("{} states for {} token sequences", states.len(), tokens.len());
        }
        let dropout = pass.is_some() && self.settings.lora_dropout > 0.0;
        let enter = |dropout_key| {
            self.model.text.pass().enter(PassState {
                dropout_key,
                checkpoint: self.settings.gradient_checkpointing,
                no_grad: false,
            })
        };
        let scored = self.with_adapters(|| {
            // The states run as one padded batch: one pass, not one per state. With LoRA
            // dropout its masks are drawn for the whole batch from the pass's key (each row
            // its own part of them).
            if states.len() > 1 {
                let _train = pass.map(|k| enter(dropout.then_some(k)));
                return self.score_batch(states, tokens);
            }
            let mut out = Vec::with_capacity(states.len());
            for (i, (s, t)) in states.iter().zip(tokens).enumerate() {
                // each state its own dropout masks (keyed by its place in the minibatch)
                let _train = pass.map(|k| enter(dropout.then(|| sample_key(k, i))));
                out.push(if t.is_empty() { self.no_scores()? } else { self.score_one(s, t)? });
            }
            Ok(out)
        })?;
        let longest = tokens.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let (mut lps, mut ents, mut masks) = (Vec::new(), Vec::new(), Vec::new());
        for (t, (lp, ent)) in tokens.iter().zip(scored) {
            let zeros = Tensor::zeros(longest - t.len(), DType::F32, &self.device)?;
            let m: Vec<f32> = (0..longest).map(|i| if i < t.len() { 1.0 } else { 0.0 }).collect();
            lps.push(Tensor::cat(&[&lp, &zeros], 0)?);
            ents.push(Tensor::cat(&[&ent, &zeros], 0)?);
            masks.push(Tensor::new(m, &self.device)?);
        }
        Ok(TokenScores {
            logp: Tensor::stack(&lps, 0)?,
            mask: Tensor::stack(&masks, 0)?,
            entropy: Tensor::stack(&ents, 0)?,
        })
    }

    /// The scores of an empty answer.
    fn no_scores(&self) -> Result<(Tensor, Tensor)> {
        Ok((Tensor::zeros(0, DType::F32, &self.device)?, Tensor::zeros(0, DType::F32, &self.device)?))
    }

    /// Per-token log-probs and entropies `[n]` of `tokens` after `state`'s prompt.
    fn score_one(&self, state: &ScreenState, tokens: &[u32]) -> Result<(Tensor, Tensor)> {
        let (ids, img) = self.prompt(state)?;
        let vision = self.vision(&img)?;
        let n = ids.len();
        let mut prompt = self.model.prompt(ids, &[img.grid])?;
        prompt.extend(tokens);
        let h = self.model.hidden(&prompt, Some(&vision), None)?;
        // the answer's tokens are predicted from the positions just before them
        self.token_scores(&h.narrow(0, n - 1, tokens.len())?, tokens)
    }

    /// [`Self::score_one`] for every state in one padded pass ([`QwenVl::hidden_batch`]);
    /// the LM head runs once over all the answers' rows.
    fn score_batch(&self, states: &[ScreenState], tokens: &[Vec<u32>]) -> Result<Vec<(Tensor, Tensor)>> {
        let (mut prompts, mut images, mut starts) = (Vec::new(), Vec::new(), Vec::new());
        for (state, t) in states.iter().zip(tokens).filter(|(_, t)| !t.is_empty()) {
            let (ids, img) = self.prompt(state)?;
            starts.push(ids.len() - 1);
            let mut prompt = self.model.prompt(ids, &[img.grid])?;
            prompt.extend(t);
            prompts.push(prompt);
            images.push(img);
        }
        if prompts.is_empty() {
            return tokens.iter().map(|_| self.no_scores()).collect();
        }
        // the screenshots the cache lacks go through the vision tower together
        let visions = self.visions(&images.iter().collect::<Vec<_>>())?;
        let vis: Vec<Option<&VisionOutput>> = visions.iter().map(|v| Some(v.as_ref())).collect();
        let answers: Vec<&Vec<u32>> = tokens.iter().filter(|t| !t.is_empty()).collect();
        let rows = self.answer_rows(&prompts, &vis, &starts, &answers)?;
        let all: Vec<u32> = answers.iter().flat_map(|t| t.iter().copied()).collect();
        let (lp, ent) = self.token_scores(&Tensor::cat(&rows, 0)?, &all)?;
        let mut out = Vec::new();
        let mut at = 0;
        for t in tokens {
            if t.is_empty() {
                out.push(self.no_scores()?);
            } else {
                out.push((lp.narrow(0, at, t.len())?, ent.narrow(0, at, t.len())?));
                at += t.len();
            }
        }
        Ok(out)
    }

    /// The hidden rows `[n_b, H]` each answer's tokens are predicted from (prompt `b`'s rows
    /// from `starts[b]` on). Prompts that share their text before the screenshot (the
    /// system prompt and the user turn's opening: the same at every step of a task) run it
    /// once as a prefix their remainders continue, as decoding does; the others run as
    /// one padded batch. With LoRA dropout in force all run in the padded batch: a prefix
    /// run once would drop the same inputs of it for every state.
    fn answer_rows(
        &self,
        prompts: &[Prompt],
        vis: &[Option<&VisionOutput>],
        starts: &[usize],
        answers: &[&Vec<u32>],
    ) -> Result<Vec<Tensor>> {
        let mut groups = self.model.by_text_prefix(prompts.iter().map(|p| p.ids.as_slice()));
        // no text before the screenshot, or a prefix of one prompt, saves nothing, and with
        // LoRA dropout in force nothing is shared: those prompts join the padded batch
        let dropout = self.model.text.pass().get().dropout_key.is_some();
        let shared = |ids: &[u32], members: &[usize]| !dropout && !ids.is_empty() && members.len() > 1;
        let mut alone: Vec<usize> =
            groups.iter().filter(|(ids, m)| !shared(ids, m)).flat_map(|(_, m)| m.iter().copied()).collect();
        groups.retain(|(ids, m)| shared(ids, m));
        let mut rows: Vec<Option<Tensor>> = vec![None; prompts.len()];
        let mut run = |prefix: Option<&[u32]>, members: &[usize]| -> Result<()> {
            let prefix = prefix.map(|ids| self.model.run_prefix(ids)).transpose()?;
            let from = prefix.as_ref().map_or(0, |p| p.ids().len());
            let ps: Vec<Prompt> = members.iter().map(|&b| prompts[b].clone()).collect();
            let vs: Vec<Option<&VisionOutput>> = members.iter().map(|&b| vis[b]).collect();
            let h = self.model.hidden_batch_after(prefix.as_ref(), &ps, &vs)?;
            for (j, &b) in members.iter().enumerate() {
                rows[b] = Some(h.get(j)?.narrow(0, starts[b] - from, answers[b].len())?);
            }
            Ok(())
        };
        for (ids, members) in &groups {
            run(Some(ids), members)?;
        }
        if !alone.is_empty() {
            alone.sort_unstable();
            run(None, &alone)?;
        }
        Ok(rows.into_iter().map(|r| r.expect("every prompt is in a group or the batch")).collect())
    }

    /// Log-probs of `tokens` and the entropies at hidden rows `[n, H]`, one row per token.
    fn token_scores(&self, rows: &Tensor, tokens: &[u32]) -> Result<(Tensor, Tensor)> {
        let logits = (self.model.logits(rows)?.to_dtype(DType::F32)? / self.sampling.temperature)?
            .broadcast_add(&self.banned)?;
        let lp = candle_nn::ops::log_softmax(&logits, D::Minus1)?;
        let idx = Tensor::new(tokens, &self.device)?.unsqueeze(1)?;
        let chosen = lp.gather(&idx, 1)?.squeeze(1)?;
        // banned tokens have log-prob −∞: 0 · (−∞) would be NaN, so they count as −1e9 (p = 0)
        let finite = lp.clamp(-1e9f32, 0f32)?;
        let entropy = (finite.exp()? * &finite)?.sum(D::Minus1)?.neg()?;
        Ok((chosen, entropy))
    }
}
