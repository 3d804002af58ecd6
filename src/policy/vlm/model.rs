//! The network: a conv-stem ViT over the screenshot and a byte encoder over the
//! instruction, fused in one transformer encoder, and a small decoder that writes the
//! action tokens with cross-attention to the encoder's output.
//!
//! Why encoder–decoder rather than one prefix-LM sequence: the prefix (image +
//! instruction, ~110–170 tokens) is the expensive part and does not change while an
//! action is written, so `act` encodes it once and then runs only the short decoder
//! (≤ `max_action_tokens` positions) per token. In training, the decoder's self-attention
//! is T×T and its cross-attention T×N, far cheaper than causal attention over N+T.
//!
//! Only ops with a backward pass are used (see docs/contributing/candle.md): softmax, LayerNorm and
//! GELU from [`crate::nn::custom_ops`] (CPU kernels with a fused backward; `ops::softmax(x,
//! D::Minus1)`, `ops::layer_norm_slow` and `Tensor::gelu` elsewhere), plain matmul
//! attention with separate q/k/v projections, patchify by reshape/permute.

use candle_core::{Module, Result, Tensor};
use candle_nn::{Init, VarBuilder};

use super::config::VlmConfig;
use super::copy::CopyHead;
use super::elements::ElementEncoder;
use super::history::HistoryEncoder;
use super::inputs::EncoderInputs;
pub use super::layers::NEG;
use super::layers::{linear, table, Linear, INIT_STD};
use super::pointer::PointerHead;
use crate::nn::custom_ops as fused;

/// `x` [B, N, d] plus a position table `pos` [N, d] for every batch item (as one
/// [`fused::bias_add`] over rows of N·d, whose gradient is a fast column sum).
fn add_positions(x: &Tensor, pos: &Tensor) -> Result<Tensor> {
    let (b, n, d) = x.dims3()?;
    fused::bias_add(&x.reshape((b, n * d))?, &pos.reshape(n * d)?)?.reshape((b, n, d))
}

/// LayerNorm over the last dimension ([`fused::layer_norm`]; candle's fused
/// `LayerNorm::forward` has no backward).
#[derive(Debug, Clone)]
pub struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
}

impl LayerNorm {
    /// Gain 1, bias 0.
    pub fn new(d: usize, vb: VarBuilder) -> Result<Self> {
        Ok(LayerNorm {
            weight: vb.get_with_hints(d, "weight", Init::Const(1.0))?,
            bias: vb.get_with_hints(d, "bias", Init::Const(0.0))?,
        })
    }
}

impl Module for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        fused::layer_norm(x, &self.weight, &self.bias, 1e-5)
    }
}

/// Multi-head attention with separate q/k/v projections. The key projection has no bias:
/// a key bias shifts every score of a row equally, so its gradient is zero.
#[derive(Debug, Clone)]
pub struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    heads: usize,
}

impl Attention {
    /// `d`-wide attention with `heads` heads; `out_std` initialises the output projection.
    pub fn new(d: usize, heads: usize, out_std: f64, vb: VarBuilder) -> Result<Self> {
        Ok(Attention {
            q: linear(vb.pp("q"), d, d, true, INIT_STD)?,
            k: linear(vb.pp("k"), d, d, false, INIT_STD)?,
            v: linear(vb.pp("v"), d, d, true, INIT_STD)?,
            o: linear(vb.pp("o"), d, d, true, out_std)?,
            heads,
        })
    }

    /// [B, N, d] → [B, H, N, d/H], contiguous.
    fn split(&self, x: &Tensor) -> Result<Tensor> {
        let (b, n, d) = x.dims3()?;
        x.reshape((b, n, self.heads, d / self.heads))?.transpose(1, 2)?.contiguous()
    }

    /// Keys (transposed, [B, H, d/H, N]) and values ([B, H, N, d/H]) of a context.
    pub fn kv(&self, ctx: &Tensor) -> Result<(Tensor, Tensor)> {
        let kt = self.split(&self.k.forward(ctx)?)?.transpose(2, 3)?.contiguous()?;
        Ok((kt, self.split(&self.v.forward(ctx)?)?))
    }

    /// Queries from `x` [B, Nq, d] attend to precomputed keys/values; `mask` ([B, 1, 1, Nk]
    /// key padding or [Nq, Nk] causal, 0 or [`NEG`]) is added to the scaled scores.
    pub fn attend(&self, x: &Tensor, kt: &Tensor, v: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (b, n, d) = x.dims3()?;
        let scale = 1.0 / ((d / self.heads) as f64).sqrt();
        let q = self.split(&self.q.forward(x)?)?;
        let p = fused::masked_softmax(&q.matmul(kt)?, scale, mask)?;
        let out = p.matmul(v)?.transpose(1, 2)?.reshape((b, n, d))?;
        self.o.forward(&out)
    }

    /// Attention of `x` over `ctx`.
    pub fn forward(&self, x: &Tensor, ctx: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (kt, v) = self.kv(ctx)?;
        self.attend(x, &kt, &v, mask)
    }
}

/// Two linears with a GELU between.
#[derive(Debug, Clone)]
pub struct Mlp {
    fc1: Linear,
    fc2: Linear,
}

impl Mlp {
    /// `d` → `hidden` → `d`.
    pub fn new(d: usize, hidden: usize, out_std: f64, vb: VarBuilder) -> Result<Self> {
        Ok(Mlp {
            fc1: linear(vb.pp("fc1"), d, hidden, true, INIT_STD)?,
            fc2: linear(vb.pp("fc2"), hidden, d, true, out_std)?,
        })
    }
}

impl Module for Mlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.fc2.forward(&fused::gelu(&self.fc1.forward(x)?)?)
    }
}

/// Pre-LN transformer layer with bidirectional self-attention (padding mask only).
#[derive(Debug, Clone)]
pub struct EncoderLayer {
    ln1: LayerNorm,
    attn: Attention,
    ln2: LayerNorm,
    mlp: Mlp,
}

impl EncoderLayer {
    /// One layer of the encoder.
    pub fn new(cfg: &VlmConfig, out_std: f64, vb: VarBuilder) -> Result<Self> {
        let d = cfg.d_model;
        Ok(EncoderLayer {
            ln1: LayerNorm::new(d, vb.pp("ln1"))?,
            attn: Attention::new(d, cfg.heads, out_std, vb.pp("attn"))?,
            ln2: LayerNorm::new(d, vb.pp("ln2"))?,
            mlp: Mlp::new(d, cfg.mlp_dim, out_std, vb.pp("mlp"))?,
        })
    }

    /// `x` [B, N, d]; `key_mask` [B, 1, 1, N] (0 or [`NEG`]).
    pub fn forward(&self, x: &Tensor, key_mask: &Tensor) -> Result<Tensor> {
        let h = self.ln1.forward(x)?;
        let x = (x + self.attn.forward(&h, &h, key_mask)?)?;
        &x + self.mlp.forward(&self.ln2.forward(&x)?)?
    }
}

/// Pre-LN decoder layer: causal self-attention, cross-attention to the encoder, MLP.
#[derive(Debug, Clone)]
pub struct DecoderLayer {
    ln1: LayerNorm,
    self_attn: Attention,
    ln2: LayerNorm,
    cross: Attention,
    ln3: LayerNorm,
    mlp: Mlp,
}

impl DecoderLayer {
    /// One layer of the decoder.
    pub fn new(cfg: &VlmConfig, out_std: f64, vb: VarBuilder) -> Result<Self> {
        let d = cfg.d_model;
        Ok(DecoderLayer {
            ln1: LayerNorm::new(d, vb.pp("ln1"))?,
            self_attn: Attention::new(d, cfg.heads, out_std, vb.pp("self_attn"))?,
            ln2: LayerNorm::new(d, vb.pp("ln2"))?,
            cross: Attention::new(d, cfg.heads, out_std, vb.pp("cross"))?,
            ln3: LayerNorm::new(d, vb.pp("ln3"))?,
            mlp: Mlp::new(d, cfg.mlp_dim, out_std, vb.pp("mlp"))?,
        })
    }

    /// `x` [B, T, d]; `causal` [T, T]; `mem` this layer's cross keys/values.
    pub fn forward(
        &self,
        x: &Tensor,
        causal: &Tensor,
        mem: &(Tensor, Tensor),
        mem_mask: &Tensor,
    ) -> Result<Tensor> {
        let h = self.ln1.forward(x)?;
        let x = (x + self.self_attn.forward(&h, &h, causal)?)?;
        let x = (&x + self.cross.attend(&self.ln2.forward(&x)?, &mem.0, &mem.1, mem_mask)?)?;
        &x + self.mlp.forward(&self.ln3.forward(&x)?)?
    }
}

/// The vision stem: two non-overlapping convolutions written as patchify + matmul
/// (`stem_patch`² pixels → `stem_channels`, GELU, then `stem_merge`² cells → `d_model`),
/// plus a learned position per image token.
///
/// Every pixel also carries its own x and y (in [-1, 1]) as two extra input channels
/// ("CoordConv"): actions are coordinates, and with exact positions in the features the
/// decoder can read off where something is, finer than one token, instead of learning
/// it from the position table alone (measured on click-test behaviour cloning: the
/// greedy success on 100 held-out seeds after 20 epochs went from 0.65 to 1.00).
#[derive(Debug, Clone)]
pub struct VisionStem {
    /// [1, H, W, 2]: each pixel's x and y.
    coords: Tensor,
    patch: Linear,
    merge: Linear,
    pos: Tensor,
    p: usize,
    m: usize,
}

/// [B, H, W, C] → [B, H/s, W/s, s·s·C]: each s×s cell becomes one row (row-major, then C).
/// Shared by the policy's stem, the critic and the reward model (a non-overlapping
/// convolution is this, then a matmul).
pub(crate) fn patchify(x: &Tensor, s: usize) -> Result<Tensor> {
    let (b, h, w, c) = x.dims4()?;
    x.reshape((b, h / s, s, w / s, s, c))?.permute([0, 1, 3, 2, 4, 5])?.reshape((b, h / s, w / s, s * s * c))
}

impl VisionStem {
    /// The stem for `cfg`'s image size.
    pub fn new(cfg: &VlmConfig, vb: VarBuilder) -> Result<Self> {
        let (p, m, c) = (cfg.stem_patch, cfg.stem_merge, cfg.stem_channels);
        // RGB (and the change since the last frame) plus the pixel's x and y.
        let fan_in = p * p * (cfg.image_channels() + 2);
        let (w, h) = (cfg.image_width, cfg.image_height);
        let ramp = |i: usize, n: usize| (2 * i + 1) as f32 / n as f32 - 1.0;
        let xy: Vec<f32> = (0..h).flat_map(|y| (0..w).flat_map(move |x| [ramp(x, w), ramp(y, h)])).collect();
        Ok(VisionStem {
            coords: Tensor::from_vec(xy, (1, h, w, 2), vb.device())?,
            // Fan-in scaled (1/sqrt(fan_in)), not 0.02: at 0.02 the image content starts ~50×
            // smaller than the position table and localisation learns slowly and unreliably.
            patch: linear(vb.pp("patch"), fan_in, c, true, 1.0 / (fan_in as f64).sqrt())?,
            merge: linear(vb.pp("merge"), m * m * c, cfg.d_model, true, 1.0 / ((m * m * c) as f64).sqrt())?,
            pos: table(&vb, "pos", cfg.image_tokens(), cfg.d_model)?,
            p,
            m,
        })
    }
}

impl VisionStem {
    /// `images` [B, H, W, C] (normalised RGB, then the change since the previous frame
    /// with `previous_frame`) → image tokens [B, grid_h·grid_w, d_model]
    /// and the first layer's cells [B, (H/p)·(W/p), stem_channels] (for the pointer head).
    pub fn forward(&self, images: &Tensor) -> Result<(Tensor, Tensor)> {
        let (b, h, w, _) = images.dims4()?;
        let coords = self.coords.broadcast_as((b, h, w, 2))?;
        let images = Tensor::cat(&[images, &coords], 3)?;
        let cells = fused::gelu(&self.patch.forward(&patchify(&images, self.p)?)?)?;
        let x = self.merge.forward(&patchify(&cells, self.m)?)?;
        let (b, gh, gw, d) = x.dims4()?;
        let (_, ch, cw, c) = cells.dims4()?;
        Ok((add_positions(&x.reshape((b, gh * gw, d))?, &self.pos)?, cells.reshape((b, ch * cw, c))?))
    }
}

/// Encoder output, ready for decoding: per decoder layer, the cross-attention keys and
/// values, plus the memory's key mask.
#[derive(Debug, Clone)]
pub struct Memory {
    /// (keys transposed, values) for each decoder layer.
    pub kv: Vec<(Tensor, Tensor)>,
    /// [B, 1, 1, N]: 0 for real tokens, [`NEG`] for instruction padding.
    pub mask: Tensor,
    /// The pointer head's key grid [B, d, y_bins·x_bins], when the model has one.
    pub pointer_keys: Option<Tensor>,
    /// The encoder's instruction positions [B, L, d] and their piece indices [B, L], for
    /// the copy head, when the model has one.
    pub copy: Option<(Tensor, Tensor)>,
}

/// The whole network. See the module docs.
#[derive(Debug, Clone)]
pub struct VlmModel {
    stem: VisionStem,
    text_emb: Tensor,
    text_pos: Tensor,
    word_emb: Option<Tensor>,
    /// The `history` input's tables.
    history: Option<HistoryEncoder>,
    /// The `elements` input's parts.
    elements: Option<ElementEncoder>,
    encoder: Vec<EncoderLayer>,
    enc_ln: LayerNorm,
    tok_emb: Tensor,
    dec_pos: Tensor,
    decoder: Vec<DecoderLayer>,
    dec_ln: LayerNorm,
    head: Linear,
    pointer: Option<PointerHead>,
    copy: Option<CopyHead>,
}

impl VlmModel {
    /// Build (or fetch from `vb`'s store) every weight for `cfg` and a `vocab`-token output.
    pub fn new(cfg: &VlmConfig, vocab: usize, vb: VarBuilder) -> Result<Self> {
        let d = cfg.d_model;
        // Residual-branch outputs start smaller so the residual stream's scale does not
        // grow with depth (GPT-2).
        let out_std = INIT_STD / ((2 * (cfg.encoder_layers + cfg.decoder_layers)) as f64).sqrt();
        let (venc, vdec) = (vb.pp("encoder"), vb.pp("decoder"));
        Ok(VlmModel {
            stem: VisionStem::new(cfg, vb.pp("stem"))?,
            text_emb: table(&venc, "text_emb", 256, d)?,
            text_pos: table(&venc, "text_pos", cfg.max_instruction_bytes, d)?,
            word_emb: match cfg.word_buckets {
                0 => None,
                n => Some(table(&venc, "word_emb", n, d)?),
            },
            history: match cfg.inputs.history {
                Some(k) => Some(HistoryEncoder::new(k, d, &venc)?),
                None => None,
            },
            elements: match cfg.inputs.elements {
                Some(_) => Some(ElementEncoder::new(d, venc.pp("elements"))?),
                None => None,
            },
            encoder: (0..cfg.encoder_layers)
                .map(|i| EncoderLayer::new(cfg, out_std, venc.pp(format!("layers.{i}"))))
                .collect::<Result<_>>()?,
            enc_ln: LayerNorm::new(d, venc.pp("ln_f"))?,
            tok_emb: table(&vdec, "tok_emb", vocab, d)?,
            dec_pos: table(&vdec, "pos", cfg.actions.max_action_tokens, d)?,
            decoder: (0..cfg.decoder_layers)
                .map(|i| DecoderLayer::new(cfg, out_std, vdec.pp(format!("layers.{i}"))))
                .collect::<Result<_>>()?,
            dec_ln: LayerNorm::new(d, vdec.pp("ln_f"))?,
            head: linear(vdec.pp("head"), d, vocab, true, INIT_STD)?,
            pointer: if cfg.pointer { Some(PointerHead::new(cfg, vocab, vdec.pp("pointer"))?) } else { None },
            copy: if cfg.copy { Some(CopyHead::new(cfg, vocab, vdec.pp("copy"))?) } else { None },
        })
    }

    /// Encode a batch's screenshots, instructions and declared inputs (see
    /// [`EncoderInputs`]).
    pub fn encode(&self, enc: &EncoderInputs) -> Result<Memory> {
        let key_mask = &enc.key_mask;
        let (mut img, cells) = self.stem.forward(&enc.images)?;
        let n_img = img.dim(1)?;
        let (b, l) = enc.text.dims2()?;
        let d = self.text_emb.dim(1)?;
        if let (Some(h), Some(hist)) = (&self.history, &enc.history) {
            img = h.mark(&img, hist)?;
        }
        let mut txt = self.text_emb.index_select(&enc.text.flatten_all()?, 0)?.reshape((b, l, d))?;
        if let (Some(table), Some(words)) = (&self.word_emb, &enc.words) {
            txt = (txt + table.index_select(&words.flatten_all()?, 0)?.reshape((b, l, d))?)?;
        }
        let txt = add_positions(&txt, &self.text_pos.narrow(0, 0, l)?)?;
        let mut parts = vec![img, txt];
        if let (Some(h), Some(hist)) = (&self.history, &enc.history) {
            parts.push(h.tokens(hist, self.word_emb.as_ref())?);
        }
        if let (Some(e), Some(els), Some(words)) = (&self.elements, &enc.elements, &self.word_emb) {
            parts.push(e.forward(els, words, &self.stem.pos)?);
        }
        let mut x = Tensor::cat(&parts, 1)?;
        for layer in &self.encoder {
            x = layer.forward(&x, key_mask)?;
        }
        let mem = self.enc_ln.forward(&x)?;
        let kv = self.decoder.iter().map(|l| l.cross.kv(&mem)).collect::<Result<_>>()?;
        let pointer_keys = match &self.pointer {
            Some(p) => {
                let mut grid = mem.narrow(1, 0, n_img)?;
                // each element's output also keys the pointer where the element lies
                if let (Some(_), Some(els)) = (&self.elements, &enc.elements) {
                    let e = els.on_cells.dim(2)?;
                    let at = mem.dim(1)? - e;
                    grid = (grid + els.on_cells.matmul(&mem.narrow(1, at, e)?.contiguous()?)?)?;
                }
                Some(p.keys(&grid, &cells)?)
            }
            None => None,
        };
        let copy = match (&self.copy, &enc.pieces) {
            (Some(_), Some(pieces)) => Some((mem.narrow(1, n_img, l)?, pieces.clone())),
            _ => None,
        };
        Ok(Memory { kv, mask: key_mask.clone(), pointer_keys, copy })
    }

    /// Decoder hidden states [B, T, d] for input tokens `tokens` [B, T] (u32; BOS first).
    pub fn decode(&self, mem: &Memory, tokens: &Tensor) -> Result<Tensor> {
        let (b, t) = tokens.dims2()?;
        let d = self.tok_emb.dim(1)?;
        let mut x = self.tok_emb.index_select(&tokens.flatten_all()?, 0)?.reshape((b, t, d))?;
        x = add_positions(&x, &self.dec_pos.narrow(0, 0, t)?)?;
        if let (Some(c), Some((text, _))) = (&self.copy, &mem.copy) {
            x = (x + c.feed(tokens, text)?)?;
        }
        let causal: Vec<f32> = (0..t * t).map(|i| if i % t > i / t { NEG } else { 0.0 }).collect();
        let causal = Tensor::from_vec(causal, (t, t), tokens.device())?;
        for (layer, kv) in self.decoder.iter().zip(&mem.kv) {
            x = layer.forward(&x, &causal, kv, &mem.mask)?;
        }
        self.dec_ln.forward(&x)
    }

    /// Output logits [B, T, vocab] from decoder hidden states `hidden` [B, T, d] whose input
    /// tokens were `inputs` [B, T] (the pointer head needs the x token a y token follows).
    pub fn logits(&self, hidden: &Tensor, mem: &Memory, inputs: &Tensor) -> Result<Tensor> {
        let mut out = self.head.forward(hidden)?;
        if let (Some(p), Some(keys)) = (&self.pointer, &mem.pointer_keys) {
            out = (out + p.logits(hidden, keys, inputs)?)?;
        }
        if let (Some(c), Some((text, pieces))) = (&self.copy, &mem.copy) {
            out = (out + c.logits(hidden, text, pieces, inputs)?)?;
        }
        Ok(out)
    }
}
