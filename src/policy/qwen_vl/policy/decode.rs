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
//! (`sample.rs`). With window slots (`decode_window`, the default on a GPU) every answer
//! instead takes a slot of a chunk of `decode_rows` slots, and each chunk runs one
//! attention per layer over its slots' fixed windows
//! ([`crate::policy::qwen_vl::model::slots`]): the same shapes whoever shares the chunk,
//! so the same guarantee. With `"auto"` the slot size comes from the answer's own prompt
//! (rounded up), and answers of each size have chunks of their own.
//! `tests/qwen_vl_decode.rs` checks both bit for bit. With `batch_invariant = false` a chunk
//! runs its live answers alone (per-answer caches only), and the prompts admitted between
//! two steps run together (`prefill.rs`): faster when few answers are live or many prompts
//! arrive at once, no longer the same bits whatever shares the chunk or the pass.
//!
//! With `decode_lora = "merged"` (the default on a GPU) a session merges the adapters into
//! copies of their layers' weights when its first state is admitted, and decodes with
//! those until it ends: one product an adapted layer instead of nine kernels. A session
//! then decodes with the adapters as they were at its start; with separate adapters it
//! reads them as they are at each step (the collector's sessions never span an update).

use super::merged::DecodeWeights;
use super::prefill::{Prefill, Prefix};
use super::*;
use crate::policy::qwen_vl::model::slots::{Slot, WindowKv};
use crate::policy::qwen_vl::processor::ProcessedImage;
use crate::policy::StepDecoder;
use std::collections::VecDeque;

/// Prompts kept after their prefill, for states admitted later with the same prompt and
/// screenshot (a group's members reach their first step at different times).
const PREFILLS_KEPT: usize = 8;

/// An answer being decoded.
struct Answer {
    id: u64,
    /// The screenshot's size, which the answer's coordinates are read against.
    size: (u32, u32),
    /// Its own cache (empty when it decodes in a window slot).
    cache: KvCache,
    /// Its window slot: its window size (the pool's) and the slot in that pool.
    slot: Option<(usize, Slot)>,
    logits: Tensor,
    rng: rand_chacha::ChaCha8Rng,
    len: usize,
    delta: i64,
    /// Tokens drawn so far, read by the host or not.
    drawn: usize,
    /// The tokens and log-probs the host has read, up to the answer's end.
    tokens: Vec<u32>,
    lps: Vec<f32>,
    done: bool,
}

/// One decoding step's draws, not yet read by the host: the answers in row order and the
/// `[n, 2]` rows of token id and log-prob.
struct Unread {
    ids: Vec<u64>,
    both: Tensor,
}

/// A state admitted without `batch_invariant` whose prompt has not run yet: it runs with
/// the others admitted before the next step.
struct Waiting {
    id: u64,
    size: (u32, u32),
    key: u64,
    ids: Vec<u32>,
    img: ProcessedImage,
}

/// The answers in flight and the prompts kept for sharing.
struct InFlight {
    prefills: VecDeque<Prefill>,
    /// States whose prompts run together at the next step (`batch_invariant = false`).
    waiting: Vec<Waiting>,
    prefixes: VecDeque<Prefix>,
    answers: Vec<Answer>,
    /// The answers' window slots: one pool of chunks per window size, dropped (its memory
    /// with it) once no answer holds a slot of it, unless its steps are captured
    /// (`decode_graph`: kept for the session).
    windows: Vec<WindowKv>,
    /// Steps drawn since the host last read the tokens (`decode_sync` at most).
    unread: Vec<Unread>,
    /// Rows each step computes: the answers advance in chunks of exactly this many.
    rows: usize,
}

/// A decoding session over a policy (a shallow copy: the weights are shared).
struct DecodeSession {
    policy: QwenVlPolicy,
    flight: InFlight,
    /// Chosen (merged, if so) at the first admission.
    weights: Option<DecodeWeights>,
}

impl DecodeSession {
    fn new(policy: QwenVlPolicy, rows: usize) -> Self {
        let flight = InFlight::new(rows);
        DecodeSession { policy, flight, weights: None }
    }
}

impl StepDecoder for DecodeSession {
    fn admit(&mut self, id: u64, state: &ScreenState, key: u64) -> Result<()> {
        let w = match &self.weights {
            Some(w) => w.clone(),
            None => self.weights.insert(self.policy.decode_weights()?).clone(),
        };
        let p = &self.policy;
        p.decoding(&w, || self.flight.admit(p, id, state, key))
    }

    fn prefill(&mut self) -> Result<()> {
        let Some(w) = self.weights.clone() else { return Ok(()) };
        let p = &self.policy;
        p.decoding(&w, || self.flight.run_waiting(p))
    }

    fn step(&mut self) -> Result<Vec<(u64, Decision)>> {
        // nothing admitted yet: nothing to decode
        let Some(w) = self.weights.clone() else { return Ok(Vec::new()) };
        let p = &self.policy;
        p.decoding(&w, || self.flight.step(p))
    }

    fn live(&self) -> usize {
        self.flight.answers.len() + self.flight.waiting.len()
    }

    fn rows(&self) -> usize {
        self.flight.rows
    }
}

impl InFlight {
    fn new(rows: usize) -> Self {
        InFlight {
            prefills: VecDeque::new(),
            waiting: Vec::new(),
            prefixes: VecDeque::new(),
            answers: Vec::new(),
            windows: Vec::new(),
            unread: Vec::new(),
            rows,
        }
    }

    /// Run `state`'s prompt (or find it run) and start its answer; without
    /// `batch_invariant` a prompt not yet run waits for the next step's
    /// ([`InFlight::run_waiting`]).
    fn admit(&mut self, p: &QwenVlPolicy, id: u64, state: &ScreenState, key: u64) -> Result<()> {
        let (ids, img) = p.prompt(state)?;
        let size = state.screenshot.dimensions();
        let j = match self.prefills.iter().position(|q| same(q, &ids, &img)) {
            Some(j) => j,
            None if !p.settings.batch_invariant => {
                self.waiting.push(Waiting { id, size, key, ids, img });
                return Ok(());
            }
            None => {
                let q = p.prefill(ids, img, &mut self.prefixes)?;
                self.keep(q);
                self.prefills.len() - 1
            }
        };
        let start = begin(&self.prefills[j]);
        self.start(p, start, id, size, key)
    }

    /// Keep a prompt run for states admitted later with the same prompt.
    fn keep(&mut self, q: Prefill) {
        if self.prefills.len() == PREFILLS_KEPT {
            self.prefills.pop_front();
        }
        self.prefills.push_back(q);
    }

    /// The waiting states' prompts run together (each distinct prompt once), and their
    /// answers start, in the order they were admitted.
    fn run_waiting(&mut self, p: &QwenVlPolicy) -> Result<()> {
        if self.waiting.is_empty() {
            return Ok(());
        }
        let mut distinct: Vec<(Vec<u32>, ProcessedImage)> = Vec::new();
        let mut starts = Vec::with_capacity(self.waiting.len());
        for w in std::mem::take(&mut self.waiting) {
            let j = match distinct.iter().position(|(ids, img)| *ids == w.ids && same_image(img, &w.img)) {
                Some(j) => j,
                None => {
                    distinct.push((w.ids, w.img));
                    distinct.len() - 1
                }
            };
            starts.push((j, w.id, w.size, w.key));
        }
        let ran = p.prefill_together(distinct, &mut self.prefixes)?;
        for (j, id, size, key) in starts {
            self.start(p, begin(&ran[j]), id, size, key)?;
        }
        for q in ran {
            self.keep(q);
        }
        Ok(())
    }

    /// Start answer `id` from its prompt's cache, first logits, length and M-RoPE delta.
    fn start(
        &mut self,
        p: &QwenVlPolicy,
        (cache, logits, len, delta): (KvCache, Tensor, usize, i64),
        id: u64,
        size: (u32, u32),
        key: u64,
    ) -> Result<()> {
        let need = len + p.settings.max_new_tokens;
        let (cache, slot) = match p.settings.decode_window_on(&p.device).slot_for(need) {
            None => (cache, None),
            Some(w) if need > w => bail!(
                "a prompt of {} tokens and max_new_tokens = {} need a decoding window of {need} \
                 tokens: raise model.decode_window (now {w}) to at least {need}, or set it to \"auto\"",
                len,
                p.settings.max_new_tokens,
            ),
            Some(w) => {
                let pool = match self.windows.iter().position(|k| k.window() == w) {
                    Some(i) => i,
                    None => {
                        let attention = p.settings.decode_kernels_on(&p.device);
                        self.windows.push(WindowKv::new(self.rows, w, attention, p.settings.decode_graph));
                        self.windows.len() - 1
                    }
                };
                (KvCache::default(), Some((w, self.windows[pool].admit(&cache)?)))
            }
        };
        self.answers.push(Answer {
            id,
            size,
            cache,
            slot,
            logits,
            rng: stream_rng(p.sampling.seed, key),
            len,
            delta,
            drawn: 0,
            tokens: Vec::new(),
            lps: Vec::new(),
            done: false,
        });
        Ok(())
    }

    /// Draw every live answer's next token and run those tokens through the model together,
    /// the tokens fed back on the device. Every `decode_sync` steps (and when an answer has
    /// drawn `max_new_tokens`) the host reads what was drawn: the answers that ended leave
    /// with their decisions, their tokens after the end dropped.
    fn step(&mut self, p: &QwenVlPolicy) -> Result<Vec<(u64, Decision)>> {
        self.run_waiting(p)?;
        if self.answers.is_empty() {
            return Ok(Vec::new());
        }
        let logits = Tensor::stack(&self.answers.iter().map(|a| &a.logits).collect::<Vec<_>>(), 0)?;
        let mut rngs: Vec<_> = self.answers.iter_mut().map(|a| &mut a.rng).collect();
        let (tok, both) = p.draw_rows(&logits, &mut rngs)?;
        self.answers.iter_mut().for_each(|a| a.drawn += 1);
        self.unread.push(Unread { ids: self.answers.iter().map(|a| a.id).collect(), both });
        let max = p.settings.max_new_tokens;
        let read = self.unread.len() >= p.settings.decode_sync_on(&p.device)
            || self.answers.iter().any(|a| a.drawn >= max);
        // each live answer's row in `tok`
        let mut rows: Vec<usize> = (0..self.answers.len()).collect();
        let finished = if read {
            self.read(p)?;
            let (done, live): (Vec<_>, Vec<_>) =
                std::mem::take(&mut self.answers).into_iter().enumerate().partition(|(_, a)| a.done);
            rows = live.iter().map(|(r, _)| *r).collect();
            self.answers = live.into_iter().map(|(_, a)| a).collect();
            for (w, slot) in done.iter().filter_map(|(_, a)| a.slot) {
                if let Some(pool) = self.windows.iter_mut().find(|k| k.window() == w) {
                    pool.release(slot);
                }
            }
            // an emptied pool goes, its memory with it; with captured steps it stays for the
            // session, so answers arriving later replay its chunks' graphs, not capture anew
            if !p.settings.decode_graph {
                self.windows.retain(WindowKv::in_use);
            }
            done.into_iter()
                .map(|(_, a)| Ok((a.id, p.finish(a.size, a.tokens, a.lps)?)))
                .collect::<Result<_>>()?
        } else {
            Vec::new()
        };
        if !self.windows.is_empty() {
            self.step_windows(p, &tok, &rows)?;
            return Ok(finished);
        }
        let chunk_rows = self.rows;
        for (chunk, rows) in self.answers.chunks_mut(chunk_rows).zip(rows.chunks(chunk_rows)) {
            // the chunk's rows (padded where that changes the rounding), or its live answers
            // alone where invariance was given up for speed
            let run = if p.settings.batch_invariant { chunk_rows } else { chunk.len() };
            let tokens = pick(&tok, rows)?;
            let positions: Vec<i64> = chunk.iter().map(|a| (a.len + a.drawn - 1) as i64 + a.delta).collect();
            let logits = {
                let mut caches: Vec<&mut KvCache> = chunk.iter_mut().map(|a| &mut a.cache).collect();
                let kernels = p.settings.decode_kernels_on(&p.device);
                let h = p.model.step_rows_on(&tokens, &positions, &mut caches, run, kernels)?;
                // detached: kept until the next step, they must not hold this step's graph
                p.model.logits_rows(&h, run, kernels)?.detach()
            };
            for (r, a) in chunk.iter_mut().enumerate() {
                a.logits = logits.get(r)?;
            }
        }
        Ok(finished)
    }

    /// Read every unread step's draws in one transfer and give each answer its tokens up
    /// to its end (the end-of-answer token, or `max_new_tokens`).
    fn read(&mut self, p: &QwenVlPolicy) -> Result<()> {
        let parts: Vec<&Tensor> = self.unread.iter().map(|u| &u.both).collect();
        let all = Tensor::cat(&parts, 0)?.to_vec2::<f32>()?;
        let at: HashMap<u64, usize> = self.answers.iter().enumerate().map(|(i, a)| (a.id, i)).collect();
        let ids = self.unread.drain(..).flat_map(|u| u.ids);
        for (id, row) in ids.zip(all) {
            let a = &mut self.answers[at[&id]];
            if a.done {
                continue; // drawn after its end, before the host knew
            }
            let tok = row[0] as u32;
            a.tokens.push(tok);
            a.lps.push(row[1]);
            a.done = tok == p.eos || a.tokens.len() >= p.settings.max_new_tokens;
        }
        Ok(())
    }
}

/// What an answer starts from in prompt `q`: shallow copies of its cache and first logits,
/// its length and M-RoPE delta.
fn begin(q: &Prefill) -> (KvCache, Tensor, usize, i64) {
    (q.cache.clone(), q.logits.clone(), q.len, q.delta)
}

/// Whether prompt `q` is `ids` with screenshot `img`.
fn same(q: &Prefill, ids: &[u32], img: &ProcessedImage) -> bool {
    q.ids == ids && same_image(&q.img, img)
}

fn same_image(a: &ProcessedImage, b: &ProcessedImage) -> bool {
    a.grid == b.grid && a.patches == b.patches
}

/// Rows `rows` of the tokens `tok` `[n]`: a view where they are consecutive (no answer left
/// in between), else a gather.
fn pick(tok: &Tensor, rows: &[usize]) -> Result<Tensor> {
    let start = rows[0];
    if rows.iter().enumerate().all(|(i, &r)| r == start + i) {
        return Ok(tok.narrow(0, start, rows.len())?);
    }
    let idx: Vec<u32> = rows.iter().map(|&r| r as u32).collect();
    Ok(tok.index_select(&Tensor::new(idx.as_slice(), tok.device())?, 0)?)
}

impl InFlight {
    /// Run every live answer's last token (row `rows[i]` of `tok` for answer `i`) through the
    /// model, chunk by chunk of window slots (`decode_window`), pool by pool.
    fn step_windows(&mut self, p: &QwenVlPolicy, tok: &Tensor, rows: &[usize]) -> Result<()> {
        for w in self.windows.iter_mut() {
            let size = w.window();
            for c in 0..w.chunks() {
                let chunk = w.chunk_mut(c);
                let mut by_row: Vec<Option<usize>> = vec![None; chunk.rows()];
                for (i, a) in self.answers.iter().enumerate() {
                    if let Some((_, s)) = a.slot.filter(|(q, s)| *q == size && s.chunk == c) {
                        by_row[s.row] = Some(i);
                    }
                }
                let Some(any) = by_row.iter().flatten().next().copied() else { continue };
                // a free row decodes some live answer's token at position 0 in its own slot:
                // nobody reads it
                let from: Vec<usize> = by_row.iter().map(|i| rows[i.unwrap_or(any)]).collect();
                let tokens = pick(tok, &from)?;
                let positions: Vec<i64> = by_row
                    .iter()
                    .map(|i| {
                        i.map_or(0, |i| {
                            let a = &self.answers[i];
                            (a.len + a.drawn - 1) as i64 + a.delta
                        })
                    })
                    .collect();
                let h = p.model.step_window(&tokens, &positions, chunk)?;
                let logits = p.model.logits_rows(&h, h.dim(0)?, chunk.kernels())?.detach();
                for (r, i) in by_row.iter().enumerate() {
                    if let Some(i) = i {
                        self.answers[*i].logits = logits.get(r)?;
                    }
                }
            }
        }
        Ok(())
    }
}

impl QwenVlPolicy {
    /// A decoding session over a copy of this policy (its weights shared), which states
    /// join and leave between steps, advancing in chunks of `rows` rows.
    pub(super) fn decode_session(&self, rows: usize) -> Box<dyn StepDecoder> {
        Box::new(DecodeSession::new(self.clone(), rows))
    }

    /// Decode an answer for every state, state `i` sampling from the stream `keys[i]`.
    pub(super) fn decide_all(&self, states: &[ScreenState], keys: &[u64]) -> Result<Vec<Decision>> {
        let w = self.decode_weights()?;
        self.decoding(&w, || {
            // rows fixed by the settings, not by the call: a state's answer must not
            // depend on how many states share the call
            let kernels = self.settings.decode_kernels_on(&self.device);
            let mut flight =
                InFlight::new(self.settings.decode_rows_on(&self.device, self.model.invariant_rows(kernels)));
            for (i, (state, &key)) in states.iter().zip(keys).enumerate() {
                flight.admit(self, i as u64, state, key)?;
            }
            flight.run_waiting(self)?;
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
        })
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
        let mut session = DecodeSession::new(p, 2);
        for (i, shade) in [10, 200, 90].into_iter().enumerate() {
            session.admit(i as u64, &screen(shade), i as u64).unwrap();
        }
        let kept = &session.flight;
        assert_eq!(kept.prefills.len(), 3, "three screenshots, three prompts");
        assert_eq!(kept.prefixes.len(), 1, "one prefix for the three");
        assert_eq!(kept.prefixes[0].ids, ids[..split]);
        assert_eq!(kept.prefixes[0].cache.len(), split);
    }

    /// Without batch invariance an admitted state's prompt waits: the prompts admitted
    /// before the next step run together then (each distinct one once), and every state's
    /// answer starts from its own.
    #[test]
    fn without_batch_invariance_prompts_wait_and_run_together() {
        let mut s = QwenPolicySettings::new("qwen3_vl", "fixtures/qwen_vl/qwen3_vl");
        (s.max_new_tokens, s.batch_invariant) = (4, false);
        let p = QwenVlPolicy::new(s, &Device::Cpu, 0).unwrap();
        let mut session = DecodeSession::new(p, 4);
        for (i, shade) in [10, 200, 10].into_iter().enumerate() {
            session.admit(i as u64, &screen(shade), i as u64).unwrap();
        }
        assert_eq!(session.flight.waiting.len(), 3, "no prompt runs at admission");
        assert!(session.flight.prefills.is_empty() && session.flight.answers.is_empty());
        assert_eq!(session.live(), 3, "waiting states are live");
        session.prefill().unwrap();
        let kept = &session.flight;
        assert!(kept.waiting.is_empty());
        assert_eq!(kept.prefills.len(), 2, "two distinct prompts, each run once");
        assert_eq!(kept.prefixes.len(), 1, "one prefix for both");
        assert_eq!(kept.answers.len(), 3);
        let ids: Vec<u64> = kept.answers.iter().map(|a| a.id).collect();
        assert_eq!(ids, [0, 1, 2], "answers start in the order admitted");
        let lens: Vec<usize> = kept.answers.iter().map(|a| a.cache.len()).collect();
        assert!(
            lens.iter().zip(&kept.answers).all(|(&l, a)| l == a.len),
            "each cache holds its prompt: {lens:?}"
        );
        let done = session.step().unwrap();
        assert!(done.iter().all(|(id, _)| *id < 3));
    }

    /// What a session keeps between calls must not hold an autograd graph: with LoRA
    /// adapters (Vars) every forward output tracks one, and a kept prompt's logits held
    /// every layer's activations of that prompt.
    #[test]
    fn what_a_session_keeps_holds_no_graph() {
        for window in [DecodeWindow::Off, DecodeWindow::Tokens(1024), DecodeWindow::Auto] {
            let mut s = QwenPolicySettings::new("qwen3_vl", "fixtures/qwen_vl/qwen3_vl");
            s.max_new_tokens = 4;
            s.decode_window = Some(window);
            let p = QwenVlPolicy::new(s, &Device::Cpu, 0).unwrap();
            let mut session = DecodeSession::new(p, 2);
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
            while session.live() > 0 {
                session.step().unwrap();
            }
            assert!(
                session.flight.windows.is_empty(),
                "window slots kept after every answer ended ({window:?})"
            );
        }
    }

    /// A decoding call builds no autograd graph at all, not only none it keeps: a prompt's
    /// pass with the adapters (Vars) in the graph held every layer's activations until its
    /// end. Modules trained whole (`train_modules`, Vars too) are read detached alike: the
    /// embedding alone pulled the whole pass into a graph, the norm and head its logits.
    /// Outside a decoding call the same pass does build one (what training needs).
    #[test]
    fn decoding_builds_no_graph() {
        let cases: [(&str, &[&str]); 3] =
            [("qwen3_vl", &[]), ("qwen3_vl", &["embed_tokens", "norm"]), ("qwen2_5_vl", &["lm_head"])];
        for (backbone, whole) in cases {
            let mut s = QwenPolicySettings::new(backbone, &format!("fixtures/qwen_vl/{backbone}"));
            s.train_modules = whole.iter().map(|m| m.to_string()).collect();
            let p = QwenVlPolicy::new(s, &Device::Cpu, 0).unwrap();
            let (ids, img) = p.prompt(&screen(10)).unwrap();
            let pass = || -> Result<[bool; 2]> {
                let prompt = p.model.prompt(ids.clone(), &[img.grid])?;
                let vision = p.vision(&img)?;
                let h = p.model.hidden_from(&prompt, 0, Some(&vision), &mut KvCache::default())?;
                let logits = p.model.logits(&h.narrow(0, h.dim(0)? - 1, 1)?)?;
                Ok([h.track_op(), logits.track_op()])
            };
            let what = format!("{backbone}, trained whole {whole:?}");
            assert_eq!(
                p.with_adapters(pass).unwrap(),
                [true; 2],
                "{what}: no graph outside decoding: the test shows nothing"
            );
            let merged = p.model.merge_adapters(&p.mode).unwrap().expect("the policy has adapters");
            for w in [DecodeWeights::Separate, DecodeWeights::Merged(merged)] {
                assert_eq!(
                    p.decoding(&w, pass).unwrap(),
                    [false; 2],
                    "{what}: a decoding pass built a graph"
                );
            }
        }
    }
}
