//! Typing from the instruction: a `type` action may copy a span of the instruction
//! instead of spelling its text byte by byte.
//!
//! ```text
//! type("Kasie")  free:  [type] ['K'] ['a'] ['s'] ['i'] ['e'] [END]
//!                copy:  [type] [from p] [to q] [END]    (the instruction's bytes p..=q)
//! type("KASIE")         [type] [from p] [to q] [upper]  (the span in upper case; or lower)
//! ```
//!
//! Why: free bytes are one token each from a fixed table, so a policy cloned from a few
//! hundred demonstrations types the words it saw and nothing else; every text field whose
//! value the instruction names (a user name, an address, a search query) was out of reach.
//! A pointer into the instruction types a word it has never seen as easily as one it has.
//!
//! The span's ends are pointers over the encoder's instruction positions: `from p` scores
//! `q_from(h)·k_from(m_p)`, `to q` scores `q_to(h)·k_to(m_q)` plus a learned bias by how
//! many pieces (runs of letters and digits, or one other printable character) the span
//! covers, so "to the end of the word I started" is one weight rather than something each
//! of the `max_instruction_bytes` start tokens learns apart. A span starts at a piece's
//! first byte, ends at a piece's last byte, and holds printable ASCII only (what `type`
//! can write). The action's text form is the same either way: the copy is how the policy
//! produces it. [`CopySource::find`] picks the encoding of a demonstration: the first
//! matching span, or free bytes when the text is not in the instruction.

use candle_core::{DType, Module, Result, Tensor, D};
use candle_nn::{Init, VarBuilder};

use super::config::VlmConfig;
use super::layers::{linear, Linear, INIT_STD};

/// Piece-distance buckets of the `to` bias: same piece, one more, two more, three or more.
const SPAN_BUCKETS: usize = 4;

/// A case a copied span can be typed in, besides as it is (for tasks that say "in upper
/// case letters").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// Every letter upper case.
    Upper,
    /// Every letter lower case.
    Lower,
}

impl Case {
    /// Token order of the case tokens.
    pub const ALL: [Case; 2] = [Case::Upper, Case::Lower];

    fn apply(self, s: &str) -> String {
        match self {
            Case::Upper => s.to_ascii_uppercase(),
            Case::Lower => s.to_ascii_lowercase(),
        }
    }
}

/// The instruction as a policy with copy reads it: cut to `max_instruction_bytes`, split
/// into pieces. Built the same way at sampling, scoring and encoding time, so a span's
/// tokens mean the same text everywhere.
#[derive(Debug, Clone, PartialEq)]
pub struct CopySource {
    bytes: Vec<u8>,
    /// Per byte: the index of the piece it is in, or of the last piece before it
    /// (-1 before the first).
    piece: Vec<i32>,
    starts: Vec<bool>,
    ends: Vec<bool>,
    /// `bad[i]`: bytes before `i` that `type` cannot write (not printable ASCII).
    bad: Vec<u32>,
}

fn printable(c: u8) -> bool {
    (0x20..=0x7e).contains(&c)
}

impl CopySource {
    /// The first `max_bytes` bytes of `instruction`.
    pub fn new(instruction: &str, max_bytes: usize) -> CopySource {
        let t = instruction.as_bytes();
        let bytes = t[..t.len().min(max_bytes)].to_vec();
        let n = bytes.len();
        let in_piece = |c: u8| printable(c) && c != b' ';
        let mut starts = vec![false; n];
        let mut ends = vec![false; n];
        for i in 0..n {
            if !in_piece(bytes[i]) {
                continue;
            }
            let alnum = bytes[i].is_ascii_alphanumeric();
            // A run of letters and digits is one piece; any other printable byte is its own.
            starts[i] = !alnum || i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
            ends[i] = !alnum || i + 1 == n || !bytes[i + 1].is_ascii_alphanumeric();
        }
        let mut piece = Vec::with_capacity(n);
        let mut k = -1;
        for &s in &starts {
            k += i32::from(s);
            piece.push(k);
        }
        let mut bad = vec![0u32; n + 1];
        for i in 0..n {
            bad[i + 1] = bad[i] + u32::from(!printable(bytes[i]));
        }
        CopySource { bytes, piece, starts, ends, bad }
    }

    /// Bytes that can be copied from (the cut instruction's length).
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether there is nothing to copy.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Whether a span may start at byte `p`.
    pub fn can_start(&self, p: usize) -> bool {
        self.starts.get(p).copied().unwrap_or(false)
    }

    /// Whether the span `p..=q` may be copied.
    pub fn can_span(&self, p: usize, q: usize) -> bool {
        self.can_start(p)
            && p <= q
            && self.ends.get(q).copied().unwrap_or(false)
            && self.bad[q + 1] == self.bad[p]
    }

    /// The text of the span `p..=q` (one [`Self::can_span`] allows), in `case` if given.
    pub fn text(&self, p: usize, q: usize, case: Option<Case>) -> String {
        let s = String::from_utf8_lossy(&self.bytes[p..=q]).into_owned();
        match case {
            Some(c) => c.apply(&s),
            None => s,
        }
    }

    /// The first span whose text is `text` as it is, else the first that is `text` in
    /// upper, then lower case (with that case), if any.
    pub fn find(&self, text: &str) -> Option<(usize, usize, Option<Case>)> {
        let n = text.len();
        if n == 0 || n > self.len() {
            return None;
        }
        let spans =
            || (0..=self.len() - n).map(move |p| (p, p + n - 1)).filter(|&(p, q)| self.can_span(p, q));
        let same = |p: usize, case: Option<Case>| self.text(p, p + n - 1, case) == text;
        spans().find(|&(p, _)| same(p, None)).map(|(p, q)| (p, q, None)).or_else(|| {
            Case::ALL
                .iter()
                .find_map(|&c| spans().find(|&(p, _)| same(p, Some(c))).map(|(p, q)| (p, q, Some(c))))
        })
    }

    /// Per byte, the piece index ([`CopySource`]'s `piece`) as f32, for the `to` bias.
    pub fn pieces(&self) -> impl Iterator<Item = f32> + '_ {
        self.piece.iter().map(|&k| k as f32)
    }
}

/// The copy head: pointer logits for the `from` and `to` tokens (see the module docs),
/// and what a decoder input learns of the position a copy token points at.
#[derive(Debug, Clone)]
pub struct CopyHead {
    /// Projects the encoder state of the pointed position into a copy token's input. Why:
    /// a `from p` token's own embedding knows only the offset p; with the pointed word's
    /// state fed back, the next steps see what is being copied (where the span ends, and
    /// whether its case already is the one the instruction asks for).
    feed: Linear,
    q_from: Linear,
    k_from: Linear,
    q_to: Linear,
    k_to: Linear,
    /// [SPAN_BUCKETS, 1]: the `to` bias by pieces covered.
    span_bias: Tensor,
    /// Copy positions (`max_instruction_bytes`); `from` tokens start at `first`.
    n: usize,
    first: u32,
    vocab: usize,
}

impl CopyHead {
    /// The head for `cfg`; the copy tokens are the last `2 · max_instruction_bytes` of a
    /// `vocab`-token output.
    pub fn new(cfg: &VlmConfig, vocab: usize, vb: VarBuilder) -> Result<Self> {
        let d = cfg.d_model;
        let n = cfg.max_instruction_bytes;
        // As in the pointer head: small queries, unit-scale keys, so the pointers start
        // near uniform while the queries' gradients are not tiny.
        let key_std = 1.0 / (d as f64).sqrt();
        Ok(CopyHead {
            feed: linear(vb.pp("feed"), d, d, false, key_std)?,
            q_from: linear(vb.pp("q_from"), d, d, false, INIT_STD)?,
            k_from: linear(vb.pp("k_from"), d, d, false, key_std)?,
            q_to: linear(vb.pp("q_to"), d, d, false, INIT_STD)?,
            k_to: linear(vb.pp("k_to"), d, d, false, key_std)?,
            span_bias: vb.get_with_hints((SPAN_BUCKETS, 1), "span_bias", Init::Const(0.0))?,
            n,
            first: (vocab - 2 * n) as u32,
            vocab,
        })
    }

    /// Input embeddings [B, T, d] to add for decoder input tokens `inputs` [B, T] (u32):
    /// the projected encoder state `text` [B, L, d] of the position a `from` or `to` token
    /// points at, zero for other tokens.
    pub fn feed(&self, inputs: &Tensor, text: &Tensor) -> Result<Tensor> {
        let l = text.dim(1)?;
        let dev = inputs.device();
        let at = |first: u32| -> Result<Tensor> {
            let ids = Tensor::arange(first, first + l as u32, dev)?.reshape((1, 1, l))?;
            inputs.unsqueeze(2)?.broadcast_eq(&ids)?.to_dtype(DType::F32)
        };
        // [B, T, L] one-hot of the pointed position × [B, L, d]: a plain matmul.
        let pointed = (at(self.first)? + at(self.first + self.n as u32)?)?;
        self.feed.forward(&pointed.matmul(text)?)
    }

    /// Additive logits [B, T, vocab] (zero outside the copy tokens) for decoder states
    /// `hidden` [B, T, d] whose input tokens are `inputs` [B, T] (u32), given the encoder's
    /// instruction positions `text` [B, L, d] and their piece indices `pieces` [B, L].
    pub fn logits(&self, hidden: &Tensor, text: &Tensor, pieces: &Tensor, inputs: &Tensor) -> Result<Tensor> {
        let (b, t, d) = hidden.dims3()?;
        let l = text.dim(1)?;
        let scale = (d as f64).sqrt();
        let score = |q: &Linear, k: &Linear| -> Result<Tensor> {
            let keys = k.forward(text)?.transpose(1, 2)?.contiguous()?;
            (q.forward(hidden)? / scale)?.matmul(&keys)
        };
        let from = score(&self.q_from, &self.k_from)?;
        // The `to` step reads the `from p` token: count the pieces from p to each q.
        let froms = Tensor::arange(self.first, self.first + l as u32, hidden.device())?.reshape((1, 1, l))?;
        let chosen = inputs.unsqueeze(2)?.broadcast_eq(&froms)?.to_dtype(DType::F32)?;
        let pieces = pieces.unsqueeze(1)?;
        let piece_p = chosen.broadcast_mul(&pieces)?.sum_keepdim(D::Minus1)?;
        let covered = pieces.broadcast_sub(&piece_p)?;
        let mut buckets = Vec::with_capacity(SPAN_BUCKETS);
        for k in 0..SPAN_BUCKETS {
            let hit = if k + 1 < SPAN_BUCKETS { covered.eq(k as f64)? } else { covered.ge(k as f64)? };
            buckets.push(hit.to_dtype(DType::F32)?);
        }
        // [B, T, L, K] one-hot × [K, 1]: a plain matmul, so the bias learns.
        let bias = Tensor::stack(&buckets, 3)?.broadcast_matmul(&self.span_bias)?.squeeze(3)?;
        let to = (score(&self.q_to, &self.k_to)? + bias)?;
        let zeros = |n: usize| Tensor::zeros((b, t, n), DType::F32, hidden.device());
        let pad = self.n - l;
        let mut parts = vec![zeros(self.first as usize)?, from];
        if pad > 0 {
            parts.push(zeros(pad)?);
        }
        parts.push(to);
        if pad > 0 {
            parts.push(zeros(pad)?);
        }
        debug_assert_eq!(self.first as usize + 2 * self.n, self.vocab);
        Tensor::cat(&parts, 2)
    }
}

#[cfg(test)]
#[path = "copy_tests.rs"]
mod tests;
