//! Rollouts decoded together, with results that do not depend on what shared the batch.
//!
//! Answers are decoded in a session that states join and leave between steps (continuous
//! batching, [`crate::policy::StepDecoder`]): the collector admits an env's state as soon
//! as the env is ready, and every live answer advances one token per step, whichever env,
//! group or episode step it belongs to; a finished answer leaves at once. A whole call
//! ([`QwenVlPolicy::decide_all`]) is the same session, every state admitted at the start.
//!
//! Every state's prompt runs alone (a prompt's products have its own length as their row
//! count, whatever else is decoded), in two parts: the text before the screenshot (system
//! prompt, the user turn's opening), the same at every step of a task's episodes, whose
//! KV cache is run once and shared; then the rest over it. States with the same prompt and
//! screenshot (a GRPO group's first step) run it once and share its KV cache, also when
//! they arrive a few steps apart. The answers advance in chunks of exactly `decode_rows`
//! rows: the products' kernel depends on the row count, and a row's result never on the
//! other rows' values, so a chunk padded to a fixed count gives each answer the same bits
//! whether it was decoded alone, beside others, or joined them late. Attention runs per answer over its own cache;
//! the next tokens are drawn on the device, each answer with a draw from its own stream
//! (`sample.rs`). With `decode_window` every answer instead takes a slot of a chunk of
//! `decode_rows` slots, and each chunk runs one attention per layer over its slots' fixed
//! windows ([`crate::policy::qwen_vl::model::slots`]): the same shapes whoever shares the
//! chunk, so the same guarantee. `tests/qwen_vl_policy.rs` checks both bit for bit.

use super::*;
use crate::policy::qwen_vl::model::slots::{Slot, WindowKv};
use crate::policy::qwen_vl::processor::ProcessedImage;
use crate::policy::StepDecoder;
use std::collections::VecDeque;

/// Prompts kept after their prefill, for states admitted later with the same prompt and
/// screenshot (a group's members reach their first step at different times).
const PREFILLS_KEPT: usize = 8;

/// Prompt prefixes kept (the text before the screenshot: system prompt, the user turn's
/// opening). A task's prompts share one; a few tasks or screen sizes at once get one each.
const PREFIXES_KEPT: usize = 4;

/// The keys and values of a prompt prefix, run once for every prompt that starts with it.
struct Prefix {
    ids: Vec<u32>,
    cache: KvCache,
}

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
    id: u64,
    /// The screenshot's size, which the answer's coordinates are read against.
    size: (u32, u32),
    /// Its own cache (empty when it decodes in a window slot).
    cache: KvCache,
    /// Its slot, with `decode_window`.
    slot: Option<Slot>,
    logits: Tensor,
    rng: rand_chacha::ChaCha8Rng,
    len: usize,
    delta: i64,
    tokens: Vec<u32>,
    lps: Vec<f32>,
    done: bool,
}

/// The answers in flight and the prompts kept for sharing.
struct InFlight {
    prefills: VecDeque<Prefill>,
    prefixes: VecDeque<Prefix>,
    answers: Vec<Answer>,
    /// The answers' window slots, with `decode_window`.
    window: Option<WindowKv>,
}

/// A decoding session over a policy (a shallow copy: the weights are shared, so an update
/// between steps is seen by the next step).
struct DecodeSession {
    policy: QwenVlPolicy,
    flight: InFlight,
}

impl DecodeSession {
    fn new(policy: QwenVlPolicy) -> Self {
        let flight = InFlight::new(&policy);
        DecodeSession { policy, flight }
    }
}

impl StepDecoder for DecodeSession {
    fn admit(&mut self, id: u64, state: &ScreenState, key: u64) -> Result<()> {
        let p = &self.policy;
        p.with_adapters(|| self.flight.admit(p, id, state, key))
    }

    fn step(&mut self) -> Result<Vec<(u64, Decision)>> {
        let p = &self.policy;
        p.with_adapters(|| self.flight.step(p))
    }

    fn live(&self) -> usize {
        self.flight.answers.len()
    }
}

impl InFlight {
    fn new(p: &QwenVlPolicy) -> Self {
        let rows = p.settings.decode_rows_on(&p.device);
        let window = p.settings.decode_window.map(|w| WindowKv::new(rows, w));
        InFlight { prefills: VecDeque::new(), prefixes: VecDeque::new(), answers: Vec::new(), window }
    }

    /// Run `state`'s prompt (or find it run) and start its answer.
    fn admit(&mut self, p: &QwenVlPolicy, id: u64, state: &ScreenState, key: u64) -> Result<()> {
        let (ids, img) = p.prompt(state)?;
        let same = |q: &Prefill| q.ids == ids && q.img.grid == img.grid && q.img.patches == img.patches;
        let j = match self.prefills.iter().position(same) {
            Some(j) => j,
            None => {
                if self.prefills.len() == PREFILLS_KEPT {
                    self.prefills.pop_front();
                }
                self.prefills.push_back(p.prefill(ids, img, &mut self.prefixes)?);
                self.prefills.len() - 1
            }
        };
        let q = &self.prefills[j];
        let (cache, slot) = match &mut self.window {
            None => (q.cache.clone(), None),
            Some(w) => {
                let need = q.len + p.settings.max_new_tokens;
                if need > w.window() {
                    bail!(
                        "a prompt of {} tokens and max_new_tokens = {} need a decoding window of {need} \
                         tokens: raise model.decode_window (now {}) to at least {need}, or leave it out",
                        q.len,
                        p.settings.max_new_tokens,
                        w.window()
                    );
                }
                (KvCache::default(), Some(w.admit(&q.cache)?))
            }
        };
        self.answers.push(Answer {
            id,
            size: state.screenshot.dimensions(),
            cache,
            slot,
            logits: q.logits.clone(),
            rng: stream_rng(p.sampling.seed, key),
            len: q.len,
            delta: q.delta,
            tokens: Vec::new(),
            lps: Vec::new(),
            done: false,
        });
        Ok(())
    }

    /// Draw every live answer's next token; the finished ones leave with their decisions,
    /// the rest run that token through the model together.
    fn step(&mut self, p: &QwenVlPolicy) -> Result<Vec<(u64, Decision)>> {
        if self.answers.is_empty() {
            return Ok(Vec::new());
        }
        let logits = Tensor::stack(&self.answers.iter().map(|a| &a.logits).collect::<Vec<_>>(), 0)?;
        let mut rngs: Vec<_> = self.answers.iter_mut().map(|a| &mut a.rng).collect();
        let picked = p.pick_rows(&logits, &mut rngs)?;
        for (a, (tok, lp)) in self.answers.iter_mut().zip(picked) {
            a.tokens.push(tok);
            a.lps.push(lp);
            a.done = tok == p.eos || a.tokens.len() >= p.settings.max_new_tokens;
        }
        let (done, live): (Vec<Answer>, Vec<Answer>) =
            std::mem::take(&mut self.answers).into_iter().partition(|a| a.done);
        self.answers = live;
        if let Some(w) = &mut self.window {
            done.iter().filter_map(|a| a.slot).for_each(|s| w.release(s));
        }
        let finished = done
            .into_iter()
            .map(|a| Ok((a.id, p.finish(a.size, a.tokens, a.lps)?)))
            .collect::<Result<_>>()?;
        if self.window.is_some() {
            self.step_windows(p)?;
            return Ok(finished);
        }
        let rows = p.settings.decode_rows_on(&p.device);
        for chunk in self.answers.chunks_mut(rows) {
            let tokens: Vec<u32> = chunk.iter().map(|a| *a.tokens.last().expect("a token")).collect();
            let positions: Vec<i64> =
                chunk.iter().map(|a| (a.len + a.tokens.len() - 1) as i64 + a.delta).collect();
            let logits = {
                let mut caches: Vec<&mut KvCache> = chunk.iter_mut().map(|a| &mut a.cache).collect();
                let h = p.model.step_rows(&tokens, &positions, &mut caches, rows)?;
                // detached: kept until the next step, they must not hold this step's graph
                p.model.logits_rows(&h, rows)?.detach()
            };
            for (r, a) in chunk.iter_mut().enumerate() {
                a.logits = logits.get(r)?;
            }
        }
        Ok(finished)
    }
}

impl InFlight {
    /// Run every live answer's last token through the model, chunk by chunk of window
    /// slots (`decode_window`).
    fn step_windows(&mut self, p: &QwenVlPolicy) -> Result<()> {
        let w = self.window.as_mut().expect("window mode");
        for c in 0..w.chunks() {
            let chunk = w.chunk_mut(c);
            let mut by_row: Vec<Option<usize>> = vec![None; chunk.rows()];
            for (i, a) in self.answers.iter().enumerate() {
                if let Some(s) = a.slot.filter(|s| s.chunk == c) {
                    by_row[s.row] = Some(i);
                }
            }
            if by_row.iter().all(Option::is_none) {
                continue;
            }
            // a free row decodes token 0 at position 0 in its own slot: nobody reads it
            let tokens: Vec<u32> = by_row
                .iter()
                .map(|i| i.map_or(0, |i| *self.answers[i].tokens.last().expect("a token")))
                .collect();
            let positions: Vec<i64> = by_row
                .iter()
                .map(|i| {
                    i.map_or(0, |i| {
                        let a = &self.answers[i];
                        (a.len + a.tokens.len() - 1) as i64 + a.delta
                    })
                })
                .collect();
            let logits = p.model.logits(&p.model.step_window(&tokens, &positions, chunk)?)?.detach();
            for (r, i) in by_row.iter().enumerate() {
                if let Some(i) = i {
                    self.answers[*i].logits = logits.get(r)?;
                }
            }
        }
        Ok(())
    }
}

impl QwenVlPolicy {
    /// A decoding session over a copy of this policy (its weights shared), which states
    /// join and leave between steps.
    pub(super) fn decode_session(&self) -> Box<dyn StepDecoder> {
        Box::new(DecodeSession::new(self.clone()))
    }

    /// Decode an answer for every state, state `i` sampling from the stream `keys[i]`.
    pub(super) fn decide_all(&self, states: &[ScreenState], keys: &[u64]) -> Result<Vec<Decision>> {
        let mut flight = InFlight::new(self);
        for (i, (state, &key)) in states.iter().zip(keys).enumerate() {
            flight.admit(self, i as u64, state, key)?;
        }
        // every state is in: the prompts' own caches are no longer needed
        flight.prefills.clear();
        flight.prefixes.clear();
        let mut out: Vec<Option<Decision>> = vec![None; states.len()];
        while !flight.answers.is_empty() {
            for (id, d) in flight.step(self)? {
                out[id as usize] = Some(d);
            }
        }
        Ok(out.into_iter().map(|d| d.expect("every admitted answer finishes")).collect())
    }

    /// Run one prompt with its screenshot, keeping its cache and its last position's logits.
    ///
    /// The text before the screenshot (the system prompt and the user turn's opening) is
    /// the same at every step of every episode of a task: its keys and values come from
    /// `prefixes`, run there once. Every prompt runs this way, its prefix found or not, so a
    /// prompt's results never depend on what ran before it.
    fn prefill(
        &self,
        ids: Vec<u32>,
        img: ProcessedImage,
        prefixes: &mut VecDeque<Prefix>,
    ) -> Result<Prefill> {
        let vision = self.vision(&img)?;
        let prompt = self.model.prompt(ids.clone(), &[img.grid])?;
        let split = ids.iter().position(|&t| t == self.model.config.image_token_id).unwrap_or(0);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn screen(shade: u8) -> ScreenState {
        ScreenState {
            task_id: "t".into(),
            instruction: "Click the button.".into(),
            url: String::new(),
            step: 0,
            frame: crate::env::Frame { width: 32, height: 32, ..Default::default() },
            elements: Vec::new(),
            screenshot: image::RgbImage::from_pixel(32, 32, image::Rgb([shade, 90, 200])).into(),
            history: Vec::new(),
            previous_screenshot: None,
        }
    }

    /// Prompts of one task share the text before their screenshots (system prompt, the
    /// user turn's opening): a session runs it once and keeps its cache.
    #[test]
    fn a_session_runs_a_tasks_prompt_prefix_once() {
        let mut s = QwenPolicySettings::new("qwen3_vl", "fixtures/qwen_vl/qwen3_vl");
        s.max_new_tokens = 4;
        let p = QwenVlPolicy::new(s, &Device::Cpu, 0).unwrap();
        let (ids, _) = p.prompt(&screen(10)).unwrap();
        let split = ids.iter().position(|&t| t == p.model.config.image_token_id).unwrap();
        let mut session = DecodeSession::new(p);
        for (i, shade) in [10, 200, 90].into_iter().enumerate() {
            session.admit(i as u64, &screen(shade), i as u64).unwrap();
        }
        let kept = &session.flight;
        assert_eq!(kept.prefills.len(), 3, "three screenshots, three prompts");
        assert_eq!(kept.prefixes.len(), 1, "one prefix for the three");
        assert_eq!(kept.prefixes[0].ids, ids[..split]);
        assert_eq!(kept.prefixes[0].cache.len(), split);
    }

    /// What a session keeps between calls must not hold an autograd graph: with LoRA
    /// adapters (Vars) every forward output tracks one, and a kept prompt's logits held
    /// every layer's activations of that prompt.
    #[test]
    fn what_a_session_keeps_holds_no_graph() {
        for window in [None, Some(1024)] {
            let mut s = QwenPolicySettings::new("qwen3_vl", "fixtures/qwen_vl/qwen3_vl");
            s.max_new_tokens = 4;
            s.decode_window = window;
            let p = QwenVlPolicy::new(s, &Device::Cpu, 0).unwrap();
            let mut session = DecodeSession::new(p);
            session.admit(0, &screen(10), 1).unwrap();
            session.admit(1, &screen(200), 2).unwrap();
            let kept = &session.flight;
            assert!(
                kept.prefills.iter().all(|q| !q.logits.track_op()),
                "a kept prompt's logits hold a graph"
            );
            session.step().unwrap();
            let kept = &session.flight;
            assert!(!kept.answers.is_empty(), "answers of 4 tokens are still in flight after one step");
            assert!(
                kept.answers.iter().all(|a| !a.logits.track_op()),
                "an answer's logits hold a graph ({window:?})"
            );
        }
    }
}
