//! A decoding session's prompts: each state's prompt run into the KV cache its answer
//! continues, and the logits of the answer's first token.
//!
//! The text before the screenshot (the system prompt, the user turn's opening) is the same
//! at every step of every episode of a task: its keys and values are run once and kept
//! ([`Prefix`]), and each prompt runs only its screenshot and the text after it over them.
//! With `batch_invariant` (the default) every prompt runs alone, its products' row count
//! its own length, so its results never depend on what else was decoded. Without it, the
//! prompts admitted between two decoding steps run together
//! ([`QwenVlPolicy::prefill_together`]): their screenshots through the vision tower in one
//! call, their remainders in one right-padded pass: fewer, larger kernels (a GPU's prompts
//! are a few hundred tokens each, far from filling it), for results that now depend on
//! what shared the pass, up to rounding.

use super::*;
use crate::policy::qwen_vl::processor::ProcessedImage;
use std::collections::VecDeque;

/// Prompt prefixes kept (the text before the screenshot: system prompt, the user turn's
/// opening). A task's prompts share one; a few tasks or screen sizes at once get one each.
const PREFIXES_KEPT: usize = 4;

/// Most tokens (rows × the longest remainder) one pass of prompts run together holds: it
/// bounds the pass's activations (its attention scores are rows × heads × length × (prefix
/// + length) values), 64 prompts of 256 tokens.
const TOGETHER_TOKENS: usize = 16_384;

/// The keys and values of a prompt prefix, run once for every prompt that starts with it.
pub(super) struct Prefix {
    pub(super) ids: Vec<u32>,
    pub(super) cache: KvCache,
}

/// One prompt run once, for every state that has it.
pub(super) struct Prefill {
    pub(super) ids: Vec<u32>,
    pub(super) img: ProcessedImage,
    pub(super) cache: KvCache,
    /// Logits `[V]` of the answer's first token.
    pub(super) logits: Tensor,
    /// The prompt's length and M-RoPE delta.
    pub(super) len: usize,
    pub(super) delta: i64,
}

impl QwenVlPolicy {
    /// Run one prompt with its screenshot, keeping its cache and its last position's logits.
    ///
    /// Its text prefix's keys and values come from `prefixes`, run there once. Every
    /// prompt runs this way, its prefix found or not, so a prompt's results never depend on
    /// what ran before it.
    pub(super) fn prefill(
        &self,
        ids: Vec<u32>,
        img: ProcessedImage,
        prefixes: &mut VecDeque<Prefix>,
    ) -> Result<Prefill> {
        let vision = self.vision(&img)?;
        let prompt = self.model.prompt(ids.clone(), &[img.grid])?;
        let split = self.model.text_prefix(&ids).len();
        let mut cache = if split == 0 { KvCache::default() } else { self.prefix(&ids[..split], prefixes)? };
        // room for the rest and the longest answer: every answer then appends in place
        cache.reserve(self.settings.max_new_tokens);
        let len = prompt.ids.len();
        let h = self.model.hidden_from(&prompt, split, Some(&vision), &mut cache)?;
        // Detached: with LoRA adapters (Vars) in the model, the logits would otherwise hold
        // the prompt's whole autograd graph, every layer's activations (about 2.4 GB for a
        // 1 075-token prompt at the 0.5B size), for as long as the prompt is kept.
        let logits = self.model.logits(&h.get(len - split - 1)?.unsqueeze(0)?)?.squeeze(0)?.detach();
        Ok(Prefill { ids, img, cache, logits, len, delta: prompt.delta })
    }

    /// Prompts `todo` (no two the same) run together, in order: those that share their
    /// text before the screenshot in passes of up to [`TOGETHER_TOKENS`], each pass with its
    /// screenshots through the vision tower in one call, its remainders in one
    /// right-padded pass over the prefix's keys and values ([`QwenVl::prefill_batch`]), and
    /// the first token's logits of all of them in one product. A prompt alone with its
    /// prefix, or with no text before its screenshot, runs as [`Self::prefill`] runs it.
    pub(super) fn prefill_together(
        &self,
        todo: Vec<(Vec<u32>, ProcessedImage)>,
        prefixes: &mut VecDeque<Prefix>,
    ) -> Result<Vec<Prefill>> {
        let groups: Vec<(Vec<u32>, Vec<usize>)> =
            (self.model.by_text_prefix(todo.iter().map(|(ids, _)| ids.as_slice())))
                .into_iter()
                .map(|(prefix, members)| (prefix.to_vec(), members))
                .collect();
        let mut todo: Vec<Option<(Vec<u32>, ProcessedImage)>> = todo.into_iter().map(Some).collect();
        let mut out: Vec<Option<Prefill>> = (0..todo.len()).map(|_| None).collect();
        for (prefix, members) in groups {
            let rest = |i: usize| todo[i].as_ref().map_or(0, |(ids, _)| ids.len() - prefix.len());
            for part in passes(&members, rest) {
                let part = part.as_slice();
                let mut taken: Vec<(Vec<u32>, ProcessedImage)> =
                    part.iter().map(|&i| todo[i].take().expect("each prompt runs once")).collect();
                if prefix.is_empty() || part.len() == 1 {
                    for (&i, (ids, img)) in part.iter().zip(taken) {
                        out[i] = Some(self.prefill(ids, img, prefixes)?);
                    }
                    continue;
                }
                let cache = self.prefix(&prefix, prefixes)?;
                let visions = self.visions(&taken.iter().map(|(_, img)| img).collect::<Vec<_>>())?;
                let prompts = taken
                    .iter()
                    .map(|(ids, img)| self.model.prompt(ids.clone(), &[img.grid]))
                    .collect::<Result<Vec<_>>>()?;
                let visions: Vec<&VisionOutput> = visions.iter().map(Arc::as_ref).collect();
                let runs =
                    self.model.prefill_batch(&cache, &prompts, &visions, self.settings.max_new_tokens)?;
                let last = runs.iter().map(|(_, h)| h).collect::<Vec<_>>();
                // detached, as in `prefill`
                let logits = self.model.logits(&Tensor::stack(&last, 0)?)?.detach();
                for (row, (((&i, prompt), (cache, _)), (ids, img))) in
                    part.iter().zip(&prompts).zip(runs).zip(taken.drain(..)).enumerate()
                {
                    let (len, delta) = (prompt.ids.len(), prompt.delta);
                    out[i] = Some(Prefill { ids, img, cache, logits: logits.get(row)?, len, delta });
                }
            }
        }
        Ok(out.into_iter().map(|p| p.expect("every prompt ran")).collect())
    }

    /// A cache holding text `ids`' keys and values (a prompt's prefix), run now unless kept.
    fn prefix(&self, ids: &[u32], prefixes: &mut VecDeque<Prefix>) -> Result<KvCache> {
        if let Some(q) = prefixes.iter().find(|q| q.ids == ids) {
            return Ok(q.cache.clone());
        }
        let mut cache = KvCache::default();
        self.model.hidden(&self.model.prompt(ids.to_vec(), &[])?, None, Some(&mut cache))?;
        if prefixes.len() == PREFIXES_KEPT {
            prefixes.pop_front();
        }
        prefixes.push_back(Prefix { ids: ids.to_vec(), cache: cache.clone() });
        Ok(cache)
    }
}

/// `members` cut, in order, into passes of at most [`TOGETHER_TOKENS`] padded tokens
/// (`rest(i)`: member `i`'s tokens after the prefix); a longer prompt has a pass of its own.
fn passes(members: &[usize], rest: impl Fn(usize) -> usize) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut longest = 0;
    for &i in members {
        let t = rest(i);
        match out.last_mut() {
            Some(pass) if (pass.len() + 1) * longest.max(t) <= TOGETHER_TOKENS => {
                pass.push(i);
                longest = longest.max(t);
            }
            _ => {
                out.push(vec![i]);
                longest = t;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_hold_at_most_their_tokens_padded() {
        let lens = [100, 200, 16_000, 300, 20_000, 50];
        let got = passes(&[0, 1, 2, 3, 4, 5], |i| lens[i]);
        assert_eq!(got, vec![vec![0, 1], vec![2], vec![3], vec![4], vec![5]]);
        let many: Vec<usize> = (0..70).collect();
        let got = passes(&many, |_| 256);
        assert_eq!(got.iter().map(Vec::len).collect::<Vec<_>>(), [64, 6]);
    }
}
