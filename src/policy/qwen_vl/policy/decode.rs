//! Rollouts decoded together, with results that do not depend on what shared the batch.
//!
//! Every state's prompt runs alone (a prompt's products have its own length as their row
//! count, whatever else is decoded). States with the same prompt and screenshot (a GRPO
//! group's first step) run it once and share its KV cache. Then the answers advance one
//! token a step together, in chunks of exactly `decode_rows` rows: the products' kernel
//! depends on the row count, and a row's result never on the other rows' values, so a
//! chunk padded to a fixed count gives each answer the same bits whether it was decoded
//! alone or beside others. Attention runs per answer over its own cache, and each answer
//! samples from its own stream. `tests/qwen_vl_policy.rs` checks this bit for bit.

use super::*;
use crate::policy::qwen_vl::processor::ProcessedImage;

/// One prompt run once, for every state that has it.
struct Prefill {
    ids: Vec<u32>,
    img: ProcessedImage,
    cache: KvCache,
    /// Logits `[V]` of the answer's first token.
    logits: Tensor,
    /// The prompt's length and M-RoPE delta.
    len: usize,
    delta: i64,
}

/// An answer being decoded.
struct Answer {
    cache: KvCache,
    logits: Tensor,
    rng: rand_chacha::ChaCha8Rng,
    len: usize,
    delta: i64,
    tokens: Vec<u32>,
    lps: Vec<f32>,
    done: bool,
}

impl QwenVlPolicy {
    /// Decode an answer for every state, state `i` sampling from the stream `keys[i]`.
    pub(super) fn decide_all(&self, states: &[ScreenState], keys: &[u64]) -> Result<Vec<Decision>> {
        let mut prefills: Vec<Prefill> = Vec::new();
        let mut answers = Vec::with_capacity(states.len());
        for (state, &key) in states.iter().zip(keys) {
            let (ids, img) = self.prompt(state)?;
            let same = |p: &Prefill| p.ids == ids && p.img.grid == img.grid && p.img.patches == img.patches;
            let j = match prefills.iter().position(same) {
                Some(j) => j,
                None => {
                    prefills.push(self.prefill(ids, img)?);
                    prefills.len() - 1
                }
            };
            let p = &prefills[j];
            answers.push(Answer {
                cache: p.cache.clone(),
                logits: p.logits.clone(),
                rng: stream_rng(self.sampling.seed, key),
                len: p.len,
                delta: p.delta,
                tokens: Vec::new(),
                lps: Vec::new(),
                done: false,
            });
        }
        drop(prefills);
        let rows = self.settings.decode_rows_on(&self.device);
        loop {
            let mut live = Vec::new();
            for (i, a) in answers.iter_mut().enumerate().filter(|(_, a)| !a.done) {
                let (tok, lp) = self.pick(&a.logits, &mut a.rng)?;
                a.tokens.push(tok);
                a.lps.push(lp);
                if tok == self.eos || a.tokens.len() >= self.settings.max_new_tokens {
                    a.done = true;
                    a.cache = KvCache::default();
                } else {
                    live.push(i);
                }
            }
            if live.is_empty() {
                break;
            }
            for chunk in live.chunks(rows) {
                let tokens: Vec<u32> =
                    chunk.iter().map(|&i| *answers[i].tokens.last().expect("a token")).collect();
                let positions: Vec<i64> = chunk
                    .iter()
                    .map(|&i| (answers[i].len + answers[i].tokens.len() - 1) as i64 + answers[i].delta)
                    .collect();
                let mut caches: Vec<KvCache> =
                    chunk.iter().map(|&i| std::mem::take(&mut answers[i].cache)).collect();
                let mut refs: Vec<&mut KvCache> = caches.iter_mut().collect();
                let h = self.model.step_rows(&tokens, &positions, &mut refs, rows)?;
                let logits = self.model.logits_rows(&h, rows)?;
                for (r, (&i, cache)) in chunk.iter().zip(caches).enumerate() {
                    answers[i].cache = cache;
                    answers[i].logits = logits.get(r)?;
                }
            }
        }
        states.iter().zip(answers).map(|(s, a)| self.finish(s, a.tokens, a.lps)).collect()
    }

    /// Run one prompt with its screenshot, keeping its cache and its last position's logits.
    fn prefill(&self, ids: Vec<u32>, img: ProcessedImage) -> Result<Prefill> {
        let vision = self.vision(&img)?;
        let prompt = self.model.prompt(ids.clone(), &[img.grid])?;
        let mut cache = KvCache::default();
        // room for the longest answer: every answer then appends in place
        cache.reserve(self.settings.max_new_tokens);
        let len = prompt.ids.len();
        let h = self.model.hidden(&prompt, Some(&vision), Some(&mut cache))?;
        let logits = self.model.logits(&h.get(len - 1)?.unsqueeze(0)?)?.squeeze(0)?;
        Ok(Prefill { ids, img, cache, logits, len, delta: prompt.delta })
    }
}
