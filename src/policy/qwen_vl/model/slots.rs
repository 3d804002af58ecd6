//! Answers' keys and values in fixed windows (`decode_window`): chunks of `R` slots, each
//! chunk one `[R, Hkv, W, D]` key buffer and one value buffer per layer, so a decoding
//! step writes every row's new token with one scatter per layer and attends with one
//! attention per layer for the whole chunk ([`crate::policy::qwen_vl::model::text`]'s
//! `decode_window`), instead of an append and an attention per answer.
//!
//! An answer takes the first free slot (a new chunk when every slot is taken) and gets a
//! copy of its prompt's cache; a finished answer frees its slot for the next. Which slot an
//! answer gets never changes its bits: every row of a chunk runs the same shapes.
//!
//! A step's inputs (tokens, rotary tables, write positions, lengths or mask) are written
//! into buffers allocated once per chunk (`StepInputs`) before the step runs, and the
//! step reads them there: what a step depends on besides the weights and the buffers lives
//! at the same addresses at every step, which a step captured as a CUDA graph
//! (`decode_graph`, `model/graph.rs`) needs.

use super::graph::StepGraph;
use super::kv_cache::KvCache;
use crate::policy::qwen_vl::settings::DecodeKernels;
use anyhow::{bail, Result};
use candle_core::{DType, Device, Tensor};

/// A slot: a chunk and a row of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// The chunk.
    pub chunk: usize,
    /// The row in the chunk.
    pub row: usize,
}

/// One chunk's buffers and its rows' lengths.
pub struct WindowChunk {
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    /// Tokens cached per row (0 for a free row).
    lens: Vec<usize>,
    used: Vec<bool>,
    window: usize,
    kernels: DecodeKernels,
    /// The step's inputs, allocated at the first step.
    inputs: Option<StepInputs>,
    /// Its steps captured as a CUDA graph, or run as they come.
    pub(crate) graph: StepGraph,
}

/// A chunk's step inputs, in buffers written in place at every step.
pub(crate) struct StepInputs {
    /// `[R]` u32: each row's token.
    pub(crate) tokens: Tensor,
    /// `[R, D]`: each row's rotary tables at its position.
    pub(crate) cos: Tensor,
    pub(crate) sin: Tensor,
    /// `[R, Hkv, 1, D]` u32: each row's write position (its length).
    pub(crate) at: Tensor,
    pub(crate) attend: Attend,
}

impl StepInputs {
    /// Every tensor its own contiguous copy (the buffers; `tokens` may be a view of a draw).
    fn owned(self) -> Result<Self> {
        Ok(StepInputs {
            tokens: self.tokens.copy()?,
            cos: self.cos.copy()?,
            sin: self.sin.copy()?,
            at: self.at.copy()?,
            attend: match self.attend {
                Attend::Mask(m) => Attend::Mask(m.copy()?),
                Attend::Lens(l) => Attend::Lens(l.copy()?),
            },
        })
    }

    /// Copy `fresh`'s values into these buffers, in place.
    fn write(&self, fresh: &StepInputs) -> Result<()> {
        let set = |buf: &Tensor, src: &Tensor| -> Result<()> {
            if buf.dims() != src.dims() || buf.dtype() != src.dtype() {
                bail!(
                    "a decoding step's input {:?} {:?} for a buffer {:?} {:?}",
                    src.dims(),
                    src.dtype(),
                    buf.dims(),
                    buf.dtype()
                );
            }
            Ok(buf.slice_set(&src.contiguous()?, 0, 0)?)
        };
        set(&self.tokens, &fresh.tokens)?;
        set(&self.cos, &fresh.cos)?;
        set(&self.sin, &fresh.sin)?;
        set(&self.at, &fresh.at)?;
        match (&self.attend, &fresh.attend) {
            (Attend::Mask(b), Attend::Mask(m)) => set(b, m),
            (Attend::Lens(b), Attend::Lens(l)) => set(b, l),
            _ => bail!("a chunk's steps attend one way"),
        }
    }
}

/// What a step's attention needs besides the buffers: the additive mask of eager
/// attention, or the fused kernel's lengths.
#[derive(Debug)]
pub(crate) enum Attend {
    /// `[R, 1, 1, W]` f32: 0 up to and including the position written, −∞ after.
    Mask(Tensor),
    /// `[R]` u32: each used row's length with the token written, 0 for a free row.
    Lens(Tensor),
}

impl WindowChunk {
    /// Rows (slots) in the chunk.
    pub fn rows(&self) -> usize {
        self.lens.len()
    }

    /// The kernels its steps run with.
    pub fn kernels(&self) -> DecodeKernels {
        self.kernels
    }

    /// Decoder layers it holds.
    pub fn layers(&self) -> usize {
        self.k.len()
    }

    /// Whether `row` holds an answer.
    pub fn is_used(&self, row: usize) -> bool {
        self.used[row]
    }

    /// Tokens cached in `row`.
    pub fn len(&self, row: usize) -> usize {
        self.lens[row]
    }

    /// The step's write positions as scatter indices `[R, Hkv, 1, D]` (each row's length)
    /// and what its attention reads besides the buffers ([`Attend`]).
    pub(crate) fn step_inputs(&self) -> Result<(Tensor, Attend)> {
        let (r, hkv, w, d) = self.k[0].dims4()?;
        if let Some(row) = (0..r).find(|&i| self.lens[i] >= w) {
            bail!("decoding slot {row} is full ({w} tokens, model.decode_window)");
        }
        let at: Vec<u32> = self.lens.iter().flat_map(|&n| std::iter::repeat_n(n as u32, hkv * d)).collect();
        let device = self.k[0].device();
        let attend = match self.kernels {
            DecodeKernels::Eager => {
                let mask: Vec<f32> = self
                    .lens
                    .iter()
                    .flat_map(|&n| (0..w).map(move |j| if j <= n { 0.0 } else { f32::NEG_INFINITY }))
                    .collect();
                Attend::Mask(Tensor::from_vec(mask, (r, 1, 1, w), device)?)
            }
            DecodeKernels::Fused => {
                let lens = self.lens.iter().zip(&self.used).map(|(&n, &u)| if u { n as u32 + 1 } else { 0 });
                Attend::Lens(Tensor::new(lens.collect::<Vec<u32>>(), device)?)
            }
        };
        Ok((Tensor::from_vec(at, (r, hkv, 1, d), device)?, attend))
    }

    /// Write the step's inputs into the chunk's buffers: the rows' tokens `[R]` and rotary
    /// tables `[R, D]`, and from the rows' lengths the write positions and the attention's
    /// mask or lengths ([`Self::step_inputs`]).
    pub(crate) fn prepare(&mut self, tokens: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<()> {
        let (at, attend) = self.step_inputs()?;
        let fresh = StepInputs { tokens: tokens.clone(), cos: cos.clone(), sin: sin.clone(), at, attend };
        match &self.inputs {
            Some(buffers) => buffers.write(&fresh),
            None => {
                self.inputs = Some(fresh.owned()?);
                Ok(())
            }
        }
    }

    /// The inputs [`Self::prepare`] wrote.
    pub(crate) fn inputs(&self) -> Result<&StepInputs> {
        self.inputs.as_ref().ok_or_else(|| anyhow::anyhow!("a decoding step's inputs were not prepared"))
    }

    /// Write one new key and value per row (`[R, Hkv, 1, D]`) at the positions `at` into
    /// layer `layer`'s buffers, in place, and return the buffers.
    pub(crate) fn write(
        &self,
        layer: usize,
        at: &Tensor,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let (kb, vb) = (&self.k[layer], &self.v[layer]);
        kb.scatter_set(at, &k.to_dtype(kb.dtype())?.contiguous()?, 2)?;
        vb.scatter_set(at, &v.to_dtype(vb.dtype())?.contiguous()?, 2)?;
        Ok((kb.clone(), vb.clone()))
    }

    /// Count the step's token in every used row.
    pub(crate) fn advance(&mut self) {
        for (n, used) in self.lens.iter_mut().zip(&self.used) {
            if *used {
                *n += 1;
            }
        }
        debug_assert!(self.lens.iter().all(|&n| n <= self.window));
    }
}

/// Every chunk of a decoding session.
pub struct WindowKv {
    rows: usize,
    window: usize,
    attention: DecodeKernels,
    /// Whether its chunks' steps are captured as CUDA graphs (`decode_graph`).
    graph: bool,
    chunks: Vec<WindowChunk>,
}

impl WindowKv {
    /// Chunks of `rows` slots of `window` tokens each (allocated when first needed), whose
    /// steps attend with `attention`, captured as CUDA graphs with `graph` (on a CUDA device).
    pub fn new(rows: usize, window: usize, attention: DecodeKernels, graph: bool) -> Self {
        WindowKv { rows: rows.max(1), window, attention, graph, chunks: Vec::new() }
    }

    /// Tokens a slot holds.
    pub fn window(&self) -> usize {
        self.window
    }

    /// Chunks allocated so far.
    pub fn chunks(&self) -> usize {
        self.chunks.len()
    }

    /// Chunk `c`.
    pub fn chunk(&self, c: usize) -> &WindowChunk {
        &self.chunks[c]
    }

    /// Chunk `c`, to decode a step of it.
    pub fn chunk_mut(&mut self, c: usize) -> &mut WindowChunk {
        &mut self.chunks[c]
    }

    /// Take the first free slot and copy `prompt`'s cache (one sequence) into it. The
    /// prompt must leave room in the window (the caller says what to raise).
    pub fn admit(&mut self, prompt: &KvCache) -> Result<Slot> {
        let t = prompt.len();
        if t >= self.window {
            bail!("a prompt of {t} tokens leaves no room in a decoding window of {}", self.window);
        }
        let free = self
            .chunks
            .iter()
            .enumerate()
            .find_map(|(c, ch)| ch.used.iter().position(|u| !u).map(|r| (c, r)));
        let (c, row) = match free {
            Some(slot) => slot,
            None => {
                self.chunks.push(self.new_chunk(prompt)?);
                (self.chunks.len() - 1, 0)
            }
        };
        let ch = &mut self.chunks[c];
        for layer in 0..ch.layers() {
            let Some(kv) = prompt.layer(layer) else { bail!("the prompt's cache has no layer {layer}") };
            let (k, v) = kv?;
            ch.k[layer].narrow(0, row, 1)?.slice_set(&k.contiguous()?, 2, 0)?;
            ch.v[layer].narrow(0, row, 1)?.slice_set(&v.contiguous()?, 2, 0)?;
        }
        ch.lens[row] = t;
        ch.used[row] = true;
        Ok(Slot { chunk: c, row })
    }

    /// Whether any slot holds an answer.
    pub fn in_use(&self) -> bool {
        self.chunks.iter().any(|c| c.used.iter().any(|&u| u))
    }

    /// Free a finished answer's slot.
    pub fn release(&mut self, slot: Slot) {
        let ch = &mut self.chunks[slot.chunk];
        ch.used[slot.row] = false;
        ch.lens[slot.row] = 0;
    }

    /// A chunk with the prompt cache's layer count, heads, head size, dtype and device.
    fn new_chunk(&self, prompt: &KvCache) -> Result<WindowChunk> {
        let layers = prompt.depth();
        let Some(first) = prompt.layer(0) else { bail!("decoding from an empty prompt cache") };
        let (k, _) = first?;
        let (_, hkv, _, d) = k.dims4()?;
        let (dtype, device): (DType, &Device) = (k.dtype(), k.device());
        let zeros = || Tensor::zeros((self.rows, hkv, self.window, d), dtype, device);
        Ok(WindowChunk {
            k: (0..layers).map(|_| zeros()).collect::<candle_core::Result<_>>()?,
            v: (0..layers).map(|_| zeros()).collect::<candle_core::Result<_>>()?,
            lens: vec![0; self.rows],
            used: vec![false; self.rows],
            window: self.window,
            kernels: self.attention,
            inputs: None,
            graph: StepGraph::new(self.graph),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(t: usize, layers: usize, seed: f32) -> KvCache {
        let mut c = KvCache::default();
        c.ensure_layers(layers);
        for l in 0..layers {
            let data: Vec<f32> = (0..2 * t * 4).map(|i| seed + (l * 1000 + i) as f32).collect();
            let k = Tensor::from_vec(data, (1, 2, t, 4), &Device::Cpu).unwrap();
            c.append(l, &k, &(k.clone() * -1.0).unwrap()).unwrap();
        }
        c
    }

    #[test]
    fn slots_fill_chunks_in_order_and_free_slots_are_reused() {
        let mut kv = WindowKv::new(2, 16, DecodeKernels::Eager, false);
        let a = kv.admit(&prompt(3, 2, 0.0)).unwrap();
        let b = kv.admit(&prompt(5, 2, 100.0)).unwrap();
        let c = kv.admit(&prompt(4, 2, 200.0)).unwrap();
        assert_eq!(
            (a, b, c),
            (Slot { chunk: 0, row: 0 }, Slot { chunk: 0, row: 1 }, Slot { chunk: 1, row: 0 })
        );
        assert_eq!(kv.chunks(), 2);
        // the prompt's keys sit at the slot's first positions, the rest zero
        let ch = kv.chunk(0);
        let row1: Vec<f32> =
            ch.k[1].get(1).unwrap().get(0).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(&row1[..4], &[1100.0, 1101.0, 1102.0, 1103.0]);
        assert!(row1[5 * 4..].iter().all(|&x| x == 0.0));
        assert_eq!((ch.len(0), ch.len(1)), (3, 5));
        kv.release(a);
        let d = kv.admit(&prompt(2, 2, 300.0)).unwrap();
        assert_eq!(d, a, "the first free slot is taken again");
        assert_eq!(kv.chunk(0).len(0), 2);
        assert_eq!(kv.chunks(), 2);
        assert!(kv.in_use());
        for s in [b, c, d] {
            kv.release(s);
        }
        assert!(!kv.in_use(), "every slot released");
    }

    #[test]
    fn a_step_writes_each_row_at_its_length_and_masks_the_rest() {
        let mut kv = WindowKv::new(2, 8, DecodeKernels::Eager, false);
        kv.admit(&prompt(3, 1, 0.0)).unwrap();
        let ch = kv.chunk_mut(0);
        let (at, Attend::Mask(mask)) = ch.step_inputs().unwrap() else {
            panic!("eager attention takes a mask")
        };
        let mask: Vec<f32> = mask.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(
            &mask[..8],
            &[0.0, 0.0, 0.0, 0.0, f32::NEG_INFINITY, f32::NEG_INFINITY, f32::NEG_INFINITY, f32::NEG_INFINITY]
        );
        let new = Tensor::full(7f32, (2, 2, 1, 4), &Device::Cpu).unwrap();
        let (k, _) = ch.write(0, &at, &new, &new).unwrap();
        ch.advance();
        let k0: Vec<f32> = k.get(0).unwrap().get(1).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(&k0[3 * 4..4 * 4], &[7.0; 4], "row 0's token at position 3");
        assert_eq!((ch.len(0), ch.len(1)), (4, 0), "a free row does not grow");
        // a row at the window's end is an error, not a write past it
        for _ in 0..4 {
            let (at, _) = ch.step_inputs().unwrap();
            ch.write(0, &at, &new, &new).unwrap();
            ch.advance();
        }
        let e = ch.step_inputs().unwrap_err().to_string();
        assert!(e.contains("decode_window"), "{e}");
        let e = kv.admit(&prompt(8, 1, 0.0)).unwrap_err().to_string();
        assert!(e.contains("8 tokens") && e.contains("window of 8"), "{e}");
    }

    #[test]
    fn fused_attention_steps_take_each_used_rows_length_with_its_new_token() {
        let mut kv = WindowKv::new(3, 8, DecodeKernels::Fused, false);
        kv.admit(&prompt(3, 1, 0.0)).unwrap();
        let b = kv.admit(&prompt(5, 1, 0.0)).unwrap();
        kv.admit(&prompt(1, 1, 0.0)).unwrap();
        kv.release(b);
        let (_, Attend::Lens(lens)) = kv.chunk(0).step_inputs().unwrap() else {
            panic!("fused attention takes lengths")
        };
        assert_eq!(lens.to_vec1::<u32>().unwrap(), [4, 0, 2], "a free row attends to nothing");
    }

    /// A step's inputs go into the chunk's buffers, written in place from the second step
    /// on: the same tensors (the addresses a captured step reads), the step's values.
    #[test]
    fn step_inputs_are_written_into_buffers_kept_for_the_chunk() {
        let mut kv = WindowKv::new(2, 8, DecodeKernels::Fused, false);
        kv.admit(&prompt(3, 1, 0.0)).unwrap();
        let ch = kv.chunk_mut(0);
        assert!(ch.inputs().is_err(), "nothing to read before the first step");
        let table = |x: f32| Tensor::full(x, (2, 4), &Device::Cpu).unwrap();
        let draw = Tensor::new(&[9u32, 5, 6], &Device::Cpu).unwrap();
        // the tokens are a view of a draw's rows, as the decoder passes them
        ch.prepare(&draw.narrow(0, 1, 2).unwrap(), &table(1.0), &table(2.0)).unwrap();
        let ids = |i: &StepInputs| (i.tokens.id(), i.cos.id(), i.sin.id(), i.at.id());
        let first = ids(ch.inputs().unwrap());
        ch.advance();
        ch.prepare(&Tensor::new(&[7u32, 8], &Device::Cpu).unwrap(), &table(3.0), &table(4.0)).unwrap();
        let i = ch.inputs().unwrap();
        assert_eq!(ids(i), first, "the same buffers");
        assert_eq!(i.tokens.to_vec1::<u32>().unwrap(), [7, 8]);
        assert_eq!(i.cos.flatten_all().unwrap().to_vec1::<f32>().unwrap(), [3.0; 8]);
        assert_eq!(i.sin.flatten_all().unwrap().to_vec1::<f32>().unwrap(), [4.0; 8]);
        assert_eq!(i.at.flatten_all().unwrap().to_vec1::<u32>().unwrap()[0], 4, "row 0 writes at its length");
        let Attend::Lens(lens) = &i.attend else { panic!("fused attention takes lengths") };
        assert_eq!(lens.to_vec1::<u32>().unwrap(), [5, 0]);
        let e =
            ch.prepare(&Tensor::new(&[7u32], &Device::Cpu).unwrap(), &table(0.0), &table(0.0)).unwrap_err();
        assert!(e.to_string().contains("decoding step's input"), "{e}");
    }
}
