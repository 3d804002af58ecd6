//! Scoring answers: per-token log-probs and entropies of given tokens after each state's
//! prompt, the training pass's forward (`TrainablePolicy::score`/`score_train`).

use super::*;
use crate::policy::qwen_vl::model::{Prompt, PromptPrefix};
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
        let (mut prompts, mut images, mut starts, mut screens) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (state, t) in states.iter().zip(tokens).filter(|(_, t)| !t.is_empty()) {
            let (ids, img) = self.prompt(state)?;
            screens.push(vision_key(&img));
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
        let visions = self.visions_keyed(&images.iter().collect::<Vec<_>>(), &screens)?;
        let vis: Vec<Option<&VisionOutput>> = visions.iter().map(|v| Some(v.as_ref())).collect();
        let answers: Vec<&Vec<u32>> = tokens.iter().filter(|t| !t.is_empty()).collect();
        let rows = self.answer_rows(&prompts, &vis, &screens, &starts, &answers)?;
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
    /// once as a prefix their remainders continue, as decoding does; prompts that are the
    /// same, screenshot (`screens[b]`, its key) included, continue it once more with all
    /// but their last token, so only their answers run apart. The others run as one padded
    /// batch. With LoRA dropout in force all run in the padded batch: a prefix run once
    /// would drop the same inputs of it for every state.
    fn answer_rows(
        &self,
        prompts: &[Prompt],
        vis: &[Option<&VisionOutput>],
        screens: &[u64],
        starts: &[usize],
        answers: &[&Vec<u32>],
    ) -> Result<Vec<Tensor>> {
        let mut rows: Vec<Option<Tensor>> = vec![None; prompts.len()];
        let mut run = |prefix: Option<&PromptPrefix>, members: &[usize], images: bool| -> Result<()> {
            let from = prefix.map_or(0, |p| p.ids().len());
            let ps: Vec<Prompt> = members.iter().map(|&b| prompts[b].clone()).collect();
            let vs: Vec<Option<&VisionOutput>> =
                members.iter().map(|&b| if images { vis[b] } else { None }).collect();
            let h = self.model.hidden_batch_after(prefix, &ps, &vs)?;
            for (j, &b) in members.iter().enumerate() {
                rows[b] = Some(h.get(j)?.narrow(0, starts[b] - from, answers[b].len())?);
            }
            Ok(())
        };
        let mut alone: Vec<usize> = Vec::new();
        if self.model.text.pass().get().dropout_key.is_some() {
            alone = (0..prompts.len()).collect();
        } else {
            for (ids, members) in self.model.by_text_prefix(prompts.iter().map(|p| p.ids.as_slice())) {
                let once = self.settings.score_same_states_once;
                let (same, rest) = same_prompts(once, &members, prompts, starts, screens);
                // no text before the screenshot, or a prefix of one prompt, saves nothing; nor
                // does a pass of its own when one set is all of them
                let one_set = same.len() == 1 && rest.is_empty();
                let text = (!ids.is_empty() && members.len() > 1 && !one_set)
                    .then(|| self.model.run_prefix(ids))
                    .transpose()?;
                for set in same {
                    let b = set[0];
                    let whole = self.model.extend_prefix(text.as_ref(), &prompts[b], starts[b], vis[b])?;
                    run(Some(&whole), &set, false)?;
                }
                match &text {
                    Some(t) if !rest.is_empty() => run(Some(t), &rest, true)?,
                    _ => alone.extend(rest),
                }
            }
        }
        if !alone.is_empty() {
            alone.sort_unstable();
            run(None, &alone, true)?;
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

/// `members`' prompts that are the same, screenshot included, in sets of two or more (in
/// order of first appearance), and the rest: prompt `b` is its ids up to `starts[b]` (its
/// answer follows) with screenshot `screens[b]`. No sets unless `once`
/// (`score_same_states_once`).
fn same_prompts(
    once: bool,
    members: &[usize],
    prompts: &[Prompt],
    starts: &[usize],
    screens: &[u64],
) -> (Vec<Vec<usize>>, Vec<usize>) {
    if !once {
        return (Vec::new(), members.to_vec());
    }
    let key = |b: usize| (&prompts[b].ids[..=starts[b]], screens[b]);
    let mut sets: Vec<Vec<usize>> = Vec::new();
    for &b in members {
        match sets.iter_mut().find(|s| key(s[0]) == key(b)) {
            Some(s) => s.push(b),
            None => sets.push(vec![b]),
        }
    }
    let (same, single): (Vec<_>, Vec<_>) = sets.into_iter().partition(|s| s.len() > 1);
    (same, single.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(ids: &[u32]) -> Prompt {
        let p: Vec<i64> = (0..ids.len() as i64).collect();
        Prompt { ids: ids.to_vec(), positions: [p.clone(), p.clone(), p], delta: 0 }
    }

    /// Same ids before the answer and the same screenshot make a set; another answer does
    /// not matter, another screenshot or another prompt does.
    #[test]
    fn prompts_that_differ_only_in_their_answers_make_a_set() {
        let prompts = [
            prompt(&[1, 2, 3, 9, 9]), // answer 9 9 after 1 2 3
            prompt(&[1, 2, 3, 7]),    // the same prompt, another answer
            prompt(&[1, 2, 3, 9, 9]), // the same prompt and answer, another screenshot
            prompt(&[1, 2, 4, 9]),    // another prompt
            prompt(&[1, 2, 3, 8]),    // the first set again
            prompt(&[1, 2, 4, 5]),    // the other prompt again
        ];
        let starts = [2, 2, 2, 2, 2, 2];
        let screens = [10, 10, 11, 10, 10, 10];
        let (same, rest) = same_prompts(true, &[0, 1, 2, 3, 4, 5], &prompts, &starts, &screens);
        assert_eq!(same, vec![vec![0, 1, 4], vec![3, 5]]);
        assert_eq!(rest, vec![2]);
        // `score_same_states_once = false`: every prompt whole
        let (same, rest) = same_prompts(false, &[0, 1, 2, 3, 4, 5], &prompts, &starts, &screens);
        assert!(same.is_empty());
        assert_eq!(rest, vec![0, 1, 2, 3, 4, 5]);
        // among members only
        let (same, rest) = same_prompts(true, &[1, 2, 3], &prompts, &starts, &screens);
        assert!(same.is_empty());
        assert_eq!(rest, vec![1, 2, 3]);
    }
}
