//! The language model: a Qwen2/Qwen3 decoder with M-RoPE, GQA and (Qwen3-VL) per-head
//! q/k RMSNorm, DeepStack features added after its first layers.
//!
//! One forward serves both uses: the training pass (the whole sequence, no cache, every
//! op differentiable) and rollouts (a [`KvCache`] written in place, so decoding one token
//! costs one token's work). In a training pass with gradient
//! checkpointing ([`TrainPass`]) each layer runs outside the graph and is
//! recomputed in the backward pass (`train::checkpoint`).

use super::config::TextConfig;
use super::nn::{apply_rope, attention, causal_mask, Linear, RmsNorm};
use super::weights::Weights;
use crate::nn::{activation, decode};
use crate::policy::qwen_vl::settings::DecodeKernels;
use crate::policy::qwen_vl::train::checkpoint::checkpointed;
use crate::policy::qwen_vl::train::lora::{AdapterSwitch, AdapterUse, LoraAdapter};
use crate::policy::qwen_vl::train::train_pass::TrainPass;
use anyhow::{bail, Result};
use candle_core::{DType, Module, Tensor, Var, D};
use std::sync::Arc;

pub mod profile;
mod step;
mod window;

/// One decoder layer (shared with the checkpointed layers' backward, hence `Arc`ed).
pub(crate) struct Layer {
    input_norm: RmsNorm,
    post_norm: RmsNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    gate: Linear,
    up: Linear,
    down: Linear,
}

impl Layer {
    /// The layer's adapters.
    pub(crate) fn adapters(&self) -> impl Iterator<Item = &LoraAdapter> {
        [&self.q, &self.k, &self.v, &self.o, &self.gate, &self.up, &self.down]
            .into_iter()
            .filter_map(|l| l.lora.as_ref())
    }
}

/// The head counts a layer's forward needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LayerDims {
    head_dim: usize,
    heads: usize,
    kv_heads: usize,
}

pub use super::kv_cache::{KvCache, SharedPrefix};

/// Visual inputs placed into the token sequence: flat `[B·T]` row indices of the image
/// placeholders, their embeddings, and the DeepStack features for the same rows.
pub struct VisualRows<'a> {
    /// Indices of the placeholder tokens in the flattened `[B · T]` sequence.
    pub rows: &'a Tensor,
    /// The merged image features, one row per placeholder.
    pub embeds: &'a Tensor,
    /// Qwen3-VL's DeepStack features for the same rows, added after the first layers.
    pub deepstack: &'a [Tensor],
}

/// The decoder and its head.
pub struct TextModel {
    cfg: TextConfig,
    /// The model's dtype (a fully trained module's Var is f32 whatever it is).
    dtype: DType,
    embed: Tensor,
    layers: Vec<Arc<Layer>>,
    norm: RmsNorm,
    head: Linear,
    /// The training-pass state, shared with the adapters.
    pass: TrainPass,
    /// The adapters' switch, once a module is trained whole: a snapshot it selects holds
    /// copies of those modules too, read in their place.
    switch: Option<AdapterSwitch>,
}

impl TextModel {
    /// Build from the checkpoint's `lm.*` (and `lm_head.weight` unless tied).
    pub fn load(w: &Weights, cfg: &TextConfig) -> Result<Self> {
        let (h, hd) = (cfg.hidden_size, cfg.head_dim);
        let (nq, nkv) = (cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd);
        let embed = w.get("lm.embed_tokens.weight", &[cfg.vocab_size, h])?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let p = format!("lm.layers.{i}");
            let lin =
                |n: &str, o: usize, inp: usize, b: bool| Linear::load(w, &format!("{p}.{n}"), o, inp, b);
            let qk_norm = |n: &str| -> Result<Option<RmsNorm>> {
                if cfg.qk_norm {
                    Ok(Some(RmsNorm::load(w, &format!("{p}.self_attn.{n}"), hd, cfg.rms_norm_eps)?))
                } else {
                    Ok(None)
                }
            };
            layers.push(Arc::new(Layer {
                input_norm: RmsNorm::load(w, &format!("{p}.input_layernorm"), h, cfg.rms_norm_eps)?,
                post_norm: RmsNorm::load(w, &format!("{p}.post_attention_layernorm"), h, cfg.rms_norm_eps)?,
                q: lin("self_attn.q_proj", nq, h, cfg.qkv_bias)?,
                k: lin("self_attn.k_proj", nkv, h, cfg.qkv_bias)?,
                v: lin("self_attn.v_proj", nkv, h, cfg.qkv_bias)?,
                o: lin("self_attn.o_proj", h, nq, cfg.o_bias)?,
                q_norm: qk_norm("q_norm")?,
                k_norm: qk_norm("k_norm")?,
                gate: lin("mlp.gate_proj", cfg.intermediate_size, h, false)?,
                up: lin("mlp.up_proj", cfg.intermediate_size, h, false)?,
                down: lin("mlp.down_proj", h, cfg.intermediate_size, false)?,
            }));
        }
        let head = if w.contains("lm_head.weight") && !cfg.tie_word_embeddings {
            Linear::load(w, "lm_head", cfg.vocab_size, h, false)?
        } else if cfg.tie_word_embeddings {
            Linear::from_tensors(embed.clone(), None)
        } else {
            // untied, yet no head: the error names the tensor
            Linear::load(w, "lm_head", cfg.vocab_size, h, false)?
        };
        Ok(TextModel {
            cfg: cfg.clone(),
            dtype: w.dtype(),
            norm: RmsNorm::load(w, "lm.norm", h, cfg.rms_norm_eps)?,
            embed,
            layers,
            head,
            pass: TrainPass::default(),
            switch: None,
        })
    }

    /// The training-pass state its layers and adapters follow.
    pub fn pass(&self) -> &TrainPass {
        &self.pass
    }

    /// Whether this pass builds no autograd graph (decoding): the modules trained whole
    /// (`Var`s, [`FULL_MODULES`]) are then read detached, as the adapters are, or the
    /// embedding alone would pull every layer's activations into a graph.
    fn graph_free(&self) -> bool {
        self.pass.get().no_grad
    }

    /// Read a module trained whole (`live`, its `Var`'s tensor) through the adapters'
    /// switch: the frozen copy when this thread's forwards use a snapshot that holds one,
    /// else the live weight detached in a pass that builds no graph. `None`: the live
    /// weight as it is (a frozen module, or a training pass).
    fn frozen_whole(&self, live: &Tensor) -> Option<Tensor> {
        if let Some(AdapterUse::Snapshot(s)) = self.switch.as_ref().map(AdapterSwitch::get) {
            if let Some(t) = s.whole(live.id()) {
                return Some(t.clone());
            }
        }
        (self.graph_free() && live.track_op()).then(|| live.detach())
    }

    /// The module weights trained whole follow the adapters' `switch` (a snapshot of the
    /// adapters also holds copies of them).
    pub(crate) fn follow(&mut self, switch: AdapterSwitch) {
        self.switch = Some(switch);
    }

    /// The final norm, its weight read as the pass and the switch ask.
    fn final_norm(&self, x: &Tensor) -> Result<Tensor> {
        Ok(match self.frozen_whole(&self.norm.weight) {
            Some(w) => self.norm.forward_with(x, &w)?,
            None => self.norm.forward(x)?,
        })
    }

    fn dims(&self) -> LayerDims {
        LayerDims {
            head_dim: self.cfg.head_dim,
            heads: self.cfg.num_attention_heads,
            kv_heads: self.cfg.num_key_value_heads,
        }
    }

    /// The settings it was built with.
    pub fn config(&self) -> &TextConfig {
        &self.cfg
    }

    /// Token embeddings `[B, T, H]` of `ids` `[B, T]`.
    pub fn embed(&self, ids: &Tensor) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let table = self.frozen_whole(&self.embed).unwrap_or_else(|| self.embed.clone());
        let rows = table.index_select(&ids.flatten_all()?, 0)?.to_dtype(self.dtype)?;
        Ok(rows.reshape((b, t, self.cfg.hidden_size))?)
    }

    /// Final hidden states `[B, T, H]` (after the last norm) for token ids `[B, T]`, with
    /// rotary tables `cos`/`sin` `[B, T, head_dim]` and, for prompts with images, the
    /// visual rows. With a cache, the new tokens attend to the cached ones and are appended.
    pub fn forward(
        &self,
        ids: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        visual: Option<VisualRows>,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor> {
        let before = match cache {
            Some(c) => Before::Cache(c),
            None => Before::Nothing,
        };
        let x = self.layers_forward(ids, cos, sin, visual.as_ref(), before)?;
        self.final_norm(&x)
    }

    /// A training pass's prefix that several sequences share, run once: `ids` `[1, P]` with
    /// their rotary tables and the visual rows of a screenshot among them, continuing
    /// `parent` (a shorter prefix) when given. Each layer's keys and values stay in the
    /// graph, so the gradients of every sequence that continues it ([`Self::forward_shared`])
    /// reach it.
    pub fn run_prefix(
        &self,
        parent: Option<&SharedPrefix>,
        ids: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        visual: Option<VisualRows>,
    ) -> Result<SharedPrefix> {
        let mut kept = Vec::with_capacity(self.layers.len());
        let before = match parent {
            Some(p) if p.layers.len() != self.layers.len() => {
                bail!("a shared prefix of {} layers for a model of {}", p.layers.len(), self.layers.len())
            }
            Some(p) => Before::SharedKeep(p, &mut kept),
            None => Before::Keep(&mut kept),
        };
        self.layers_forward(ids, cos, sin, visual.as_ref(), before)?;
        match parent {
            Some(p) => p.extended(kept),
            None => Ok(SharedPrefix { len: ids.dim(1)?, layers: kept }),
        }
    }

    /// [`Self::forward`] of `ids` `[B, T]` continuing `prefix`: every row attends to the
    /// prefix's keys and values, then causally to its own tokens (a training pass; with
    /// gradient checkpointing each layer's node takes the prefix's keys and values too).
    pub fn forward_shared(
        &self,
        ids: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        visual: Option<VisualRows>,
        prefix: &SharedPrefix,
    ) -> Result<Tensor> {
        if prefix.layers.len() != self.layers.len() {
            bail!("a shared prefix of {} layers for a model of {}", prefix.layers.len(), self.layers.len());
        }
        let x = self.layers_forward(ids, cos, sin, visual.as_ref(), Before::Shared(prefix))?;
        self.final_norm(&x)
    }

    /// Decoding's prompts run together: [`Self::forward`] of `ids` `[B, T]` (right-padded)
    /// after the text `prefix` they share, held in a decoding cache of one row; each row
    /// attends to the prefix, then causally to its own tokens. Returns the hidden states and
    /// every layer's keys and values of the rows' own tokens, `[B, kv_heads, T, D]`, for the
    /// caller to cut into each row's cache.
    pub fn forward_after_cache(
        &self,
        ids: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        visual: Option<VisualRows>,
        prefix: &KvCache,
    ) -> Result<(Tensor, Vec<(Tensor, Tensor)>)> {
        let layers = (0..self.layers.len())
            .map(|i| match prefix.layer(i) {
                Some(kv) => kv,
                None => {
                    bail!("a prefix cache of {} layers for a model of {}", prefix.depth(), self.layers.len())
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let shared = SharedPrefix { len: prefix.len(), layers };
        let mut kept = Vec::with_capacity(self.layers.len());
        let x =
            self.layers_forward(ids, cos, sin, visual.as_ref(), Before::SharedKeep(&shared, &mut kept))?;
        Ok((self.final_norm(&x)?, kept))
    }

    /// The decoder's layers over `ids`' embeddings (the final norm apart).
    fn layers_forward(
        &self,
        ids: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        visual: Option<&VisualRows>,
        mut before: Before,
    ) -> Result<Tensor> {
        let t = ids.dim(1)?;
        let mut x = self.embed(ids)?;
        if let Some(v) = visual {
            x = place_rows(&x, v.rows, v.embeds, true)?;
        }
        let past = match &mut before {
            Before::Cache(c) => {
                c.ensure_layers(self.layers.len());
                c.limit_to(self.cfg.max_position_embeddings);
                c.len()
            }
            Before::Shared(p) | Before::SharedKeep(p, _) => p.len,
            Before::Nothing | Before::Keep(_) => 0,
        };
        let mask = if t > 1 { Some(causal_mask(t, past + t, x.dtype(), x.device())?) } else { None };
        let (cos, sin) = (cos.unsqueeze(1)?, sin.unsqueeze(1)?);
        // a training pass checkpoints its sequences' layers (never decoding, nor a shared
        // prefix's pass: its activations, one prefix's, are kept)
        let checkpoint = matches!(before, Before::Nothing | Before::Shared(_)) && self.pass.get().checkpoint;
        for (i, layer) in self.layers.iter().enumerate() {
            x = if checkpoint {
                let (l, dims, c, s, m) = (layer.clone(), self.dims(), cos.clone(), sin.clone(), mask.clone());
                let adapters: Vec<&LoraAdapter> = layer.adapters().collect();
                // the prefix's keys and values as one input of the checkpointed node
                let kv = match &before {
                    Before::Shared(p) => Some(Tensor::stack(&[&p.layers[i].0, &p.layers[i].1], 0)?),
                    _ => None,
                };
                checkpointed(
                    &self.pass,
                    &adapters,
                    &x,
                    kv.as_ref(),
                    Arc::new(move |x, kv| match kv {
                        Some(kv) => {
                            let (k, v) = (kv.get(0)?, kv.get(1)?);
                            layer_forward(dims, &l, x, &c, &s, m.as_ref(), Past::Shared(&k, &v, None))
                        }
                        None => layer_forward(dims, &l, x, &c, &s, m.as_ref(), Past::None),
                    }),
                )?
            } else {
                let past = match &mut before {
                    Before::Nothing => Past::None,
                    Before::Cache(c) => Past::Cache(c, i),
                    Before::Shared(p) => Past::Shared(&p.layers[i].0, &p.layers[i].1, None),
                    Before::SharedKeep(p, kept) => Past::Shared(&p.layers[i].0, &p.layers[i].1, Some(kept)),
                    Before::Keep(kept) => Past::Keep(kept),
                };
                layer_forward(self.dims(), layer, &x, &cos, &sin, mask.as_ref(), past)?
            };
            if let Some(v) = visual {
                if let Some(feat) = v.deepstack.get(i) {
                    x = place_rows(&x, v.rows, feat, false)?;
                }
            }
        }
        Ok(x)
    }

    /// Logits `[N, V]` of hidden states `[N, H]` (call it on the rows you need only: the
    /// vocabulary is large).
    pub fn logits(&self, hidden: &Tensor) -> Result<Tensor> {
        // a head trained whole, or tied to an embedding trained whole (it has no adapter)
        if let Some(w) = self.frozen_whole(&self.head.weight) {
            return Ok(Linear::from_tensors(w, self.head.bias.clone()).forward(hidden)?);
        }
        Ok(self.head.forward(hidden)?)
    }

    /// Logits `[N, V]` of a decoding step's hidden rows `[N, H]`: with the fused kernels and
    /// a head outside the graph and without an adapter, one kernel for a few rows
    /// ([`decode::rows::product`]), else [`TextModel::logits`] on rows that keep each
    /// row's rounding ([`decode::rows::fallback`]); [`TextModel::logits`] with eager ones.
    pub fn step_logits(&self, hidden: &Tensor, kernels: DecodeKernels) -> Result<Tensor> {
        if kernels == DecodeKernels::Eager {
            return self.logits(hidden);
        }
        if self.head.lora.is_none() {
            let w = self.frozen_whole(&self.head.weight).unwrap_or_else(|| self.head.weight.clone());
            if decode::rows::takes(hidden, &w, self.head.bias.as_ref()) {
                return Ok(decode::rows::product(hidden, &w, self.head.bias.as_ref())?);
            }
        }
        // rows that keep each row's rounding whatever the step's count
        Ok(decode::rows::fallback(hidden, |h| self.logits(h).map_err(candle_core::Error::wrap))?)
    }
}

/// What a forward's tokens come after.
enum Before<'a> {
    /// Nothing: they are the whole sequence.
    Nothing,
    /// A cache (decoding), which they are appended to.
    Cache(&'a mut KvCache),
    /// A shared prefix (a training pass).
    Shared(&'a SharedPrefix),
    /// A shared prefix (decoding's prompts run together), each layer's keys and values of
    /// the tokens after it kept here.
    SharedKeep(&'a SharedPrefix, &'a mut Vec<(Tensor, Tensor)>),
    /// Nothing; they are a shared prefix, each layer's keys and values kept here.
    Keep(&'a mut Vec<(Tensor, Tensor)>),
}

/// What one layer's attention reads before its own tokens (see [`Before`]).
pub(crate) enum Past<'a> {
    None,
    /// Layer `i`'s slot of a cache, appended to.
    Cache(&'a mut KvCache, usize),
    /// A shared prefix's keys and values `[1, kv_heads, P, D]`, read before each row's own;
    /// the rows' own keys and values are pushed to the vector where one is given.
    Shared(&'a Tensor, &'a Tensor, Option<&'a mut Vec<(Tensor, Tensor)>>),
    /// The layer's keys and values are pushed here.
    Keep(&'a mut Vec<(Tensor, Tensor)>),
}

/// One decoder layer: `x` `[B, T, H]` with rotary tables `cos`/`sin` `[B, 1, T, D]`, the
/// additive mask, and what comes before the tokens (decoding: the layer's cache slot).
pub(crate) fn layer_forward(
    dims: LayerDims,
    l: &Layer,
    x: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    mask: Option<&Tensor>,
    past: Past,
) -> Result<Tensor> {
    let (b, t, _) = x.dims3()?;
    let hd = dims.head_dim;
    let y = l.input_norm.forward(x)?;
    let heads = |lin: &Linear, n: usize| -> Result<Tensor> { Ok(lin.forward(&y)?.reshape((b, t, n, hd))?) };
    let mut q = heads(&l.q, dims.heads)?;
    let mut k = heads(&l.k, dims.kv_heads)?;
    let v = heads(&l.v, dims.kv_heads)?.transpose(1, 2)?;
    if let (Some(qn), Some(kn)) = (&l.q_norm, &l.k_norm) {
        q = qn.forward(&q)?;
        k = kn.forward(&k)?;
    }
    let q = apply_rope(&q.transpose(1, 2)?, cos, sin)?;
    let mut k = apply_rope(&k.transpose(1, 2)?, cos, sin)?;
    let mut v = v;
    match past {
        Past::None => {}
        Past::Cache(c, i) => (k, v) = c.append(i, &k, &v)?,
        Past::Shared(pk, pv, keep) => {
            if let Some(kept) = keep {
                kept.push((k.clone(), v.clone()));
            }
            // every row reads the one prefix: its gradient is the rows' sum
            let (b, heads, _, d) = k.dims4()?;
            let p = pk.dim(2)?;
            k = Tensor::cat(&[&pk.broadcast_as((b, heads, p, d))?, &k], 2)?;
            v = Tensor::cat(&[&pv.broadcast_as((b, heads, p, d))?, &v], 2)?;
        }
        Past::Keep(kept) => kept.push((k.clone(), v.clone())),
    }
    let scale = (hd as f64).powf(-0.5);
    let a = attention(&q, &k, &v, mask, scale)?;
    let a = a.transpose(1, 2)?.reshape((b, t, dims.heads * hd))?;
    let x = (x + l.o.forward(&a)?)?;
    let y = l.post_norm.forward(&x)?;
    let m = l.down.forward(&activation::swiglu(&l.gate.forward(&y)?, &l.up.forward(&y)?)?)?;
    Ok((x + m)?)
}

/// Put `values` `[N, H]` into rows `rows` of `x` `[B, T, H]` (flattened): replacing them
/// (`replace`, the image embeddings) or adding to them (DeepStack). Differentiable in
/// both `x` and `values`.
fn place_rows(x: &Tensor, rows: &Tensor, values: &Tensor, replace: bool) -> Result<Tensor> {
    let (b, t, h) = x.dims3()?;
    if rows.dim(0)? != values.dim(0)? {
        bail!(
            "{} image placeholder tokens in the prompt, {} image features from the vision tower",
            rows.dim(0)?,
            values.dim(0)?
        );
    }
    let flat = x.reshape((b * t, h))?;
    let values = values.to_dtype(x.dtype())?;
    let flat = if replace {
        // zero the placeholder rows, then add: exact, where `old + (new - old)` is not
        let hit = Tensor::zeros((b * t, 1), x.dtype(), x.device())?.index_add(
            rows,
            &Tensor::ones((rows.dim(0)?, 1), x.dtype(), x.device())?,
            0,
        )?;
        flat.broadcast_mul(&(1.0 - hit)?)?.index_add(rows, &values, 0)?
    } else {
        flat.index_add(rows, &values, 0)?
    };
    Ok(flat.reshape((b, t, h))?)
}

/// Per-row log-softmax helper kept here so scoring and decoding agree on the op.
pub fn log_softmax_rows(logits: &Tensor) -> Result<Tensor> {
    Ok(candle_nn::ops::log_softmax(logits, D::Minus1)?)
}

impl TextModel {
    /// The token embedding table (its device and dtype are the model's).
    pub fn embed_tensor(&self) -> &Tensor {
        &self.embed
    }
}

impl TextModel {
    /// The linear layers a decoding step runs as one product each when their merged
    /// weights are concatenated (`decode_kernels = "fused"`, adapters merged): each layer's
    /// q/k/v, and its gate/up, in output order.
    pub(crate) fn product_groups(&self) -> Vec<Vec<&Linear>> {
        self.layers.iter().flat_map(|l| [vec![&l.q, &l.k, &l.v], vec![&l.gate, &l.up]]).collect()
    }

    /// Every linear layer of the decoder with its name under the language model.
    pub fn linears(&self) -> Vec<(String, &Linear)> {
        let mut out = Vec::new();
        for (i, l) in self.layers.iter().enumerate() {
            let p = |n: &str| format!("layers.{i}.{n}");
            for (n, lin) in [
                ("self_attn.q_proj", &l.q),
                ("self_attn.k_proj", &l.k),
                ("self_attn.v_proj", &l.v),
                ("self_attn.o_proj", &l.o),
                ("mlp.gate_proj", &l.gate),
                ("mlp.up_proj", &l.up),
                ("mlp.down_proj", &l.down),
            ] {
                out.push((p(n), lin));
            }
        }
        out
    }

    /// Every linear layer of the decoder with its name under the language model
    /// (`layers.3.self_attn.q_proj`), for attaching adapters.
    pub fn linears_mut(&mut self) -> Vec<(String, &mut Linear)> {
        let mut out = Vec::new();
        for (i, l) in self.layers.iter_mut().enumerate() {
            let p = |n: &str| format!("layers.{i}.{n}");
            // adapters are attached before any forward can hold a layer
            let l = Arc::get_mut(l).expect("a decoder layer is shared while adapters are attached");
            out.push((p("self_attn.q_proj"), &mut l.q));
            out.push((p("self_attn.k_proj"), &mut l.k));
            out.push((p("self_attn.v_proj"), &mut l.v));
            out.push((p("self_attn.o_proj"), &mut l.o));
            out.push((p("mlp.gate_proj"), &mut l.gate));
            out.push((p("mlp.up_proj"), &mut l.up));
            out.push((p("mlp.down_proj"), &mut l.down));
        }
        out
    }
}

/// Modules that can be trained whole (`[model] train_modules`), beside the adapters.
pub const FULL_MODULES: &[&str] = &["embed_tokens", "lm_head", "norm"];

impl TextModel {
    /// The model's dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Make `module` (one of [`FULL_MODULES`]) trainable whole: its weight becomes an f32
    /// `Var` (a tied head follows the embeddings). Returns the Var and the module's name in
    /// transformers' tree.
    pub fn unfreeze(&mut self, module: &str) -> Result<(String, Var)> {
        match module {
            "embed_tokens" => {
                let v = Var::from_tensor(&self.embed.to_dtype(DType::F32)?)?;
                self.embed = v.as_tensor().clone();
                if self.cfg.tie_word_embeddings {
                    self.head.weight = v.as_tensor().clone();
                }
                Ok(("model.language_model.embed_tokens".into(), v))
            }
            "lm_head" => {
                if self.cfg.tie_word_embeddings {
                    bail!("model.train_modules: lm_head is tied to embed_tokens in this checkpoint; train embed_tokens");
                }
                let v = Var::from_tensor(&self.head.weight.to_dtype(DType::F32)?)?;
                self.head.weight = v.as_tensor().clone();
                Ok(("lm_head".into(), v))
            }
            "norm" => {
                let v = Var::from_tensor(&self.norm.weight.to_dtype(DType::F32)?)?;
                self.norm.weight = v.as_tensor().clone();
                Ok(("model.language_model.norm".into(), v))
            }
            other => bail!(
                "model.train_modules: {other:?} cannot be trained whole; use {}",
                FULL_MODULES.join(", ")
            ),
        }
    }
}
