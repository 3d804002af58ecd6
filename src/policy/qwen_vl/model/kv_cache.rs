//! The decoder's key/value cache: per layer, buffers `[B, Hkv, capacity, D]` written in
//! place, in blocks.
//!
//! Appending a token writes its keys and values into the buffer at the cached length
//! (`slice_set`); attention reads a view of the first `len` positions. A buffer grows a
//! block at a time ([`BLOCK`] tokens, or the reserve a decoder asks for), so the cached
//! tokens are copied once per block, not once per token as a `cat` of the whole cache
//! would.
//!
//! Clones share their buffers until one of them appends: that one first copies what is
//! cached into a buffer of its own (copy on write). A GRPO group's answers all start from
//! one prompt's cache this way, and no answer ever sees another's tokens.

use anyhow::{bail, Result};
use candle_core::{Tensor, D};
use std::sync::Arc;

/// The keys and values of a training pass's shared prefix, per layer `[1, kv_heads, P, D]`
/// (in the graph), from [`super::text::TextModel::run_prefix`]: no cache, but what a cache
/// would hold, each sequence that continues it reading it whole.
pub struct SharedPrefix {
    pub(super) len: usize,
    pub(super) layers: Vec<(Tensor, Tensor)>,
}

impl SharedPrefix {
    /// This prefix continued by more tokens, each layer's keys and values `kept` appended.
    pub(super) fn extended(&self, kept: Vec<(Tensor, Tensor)>) -> Result<SharedPrefix> {
        let mut layers = Vec::with_capacity(kept.len());
        for ((pk, pv), (k, v)) in self.layers.iter().zip(kept) {
            layers.push((Tensor::cat(&[pk, &k], 2)?, Tensor::cat(&[pv, &v], 2)?));
        }
        let len = match layers.first() {
            Some((k, _)) => k.dim(2)?,
            None => self.len,
        };
        Ok(SharedPrefix { len, layers })
    }
}

/// Tokens a buffer grows by when it is full.
pub const BLOCK: usize = 64;

/// One layer's buffers, shared by clones until one appends.
struct Buffers {
    k: Tensor,
    v: Tensor,
}

/// One layer's cached keys and values.
#[derive(Clone)]
struct LayerKv {
    buf: Arc<Buffers>,
    len: usize,
}

impl LayerKv {
    fn capacity(&self) -> usize {
        self.buf.k.dim(2).unwrap_or(0)
    }
}

/// The cache of every layer of one or more sequences decoded together (`B` rows share a
/// length). `Default` is empty and unlimited.
#[derive(Clone, Default)]
pub struct KvCache {
    layers: Vec<Option<LayerKv>>,
    /// Most tokens the cache may hold (the model's context), if limited.
    limit: Option<usize>,
    /// Tokens to make room for beyond the current need when a buffer is (re)allocated.
    reserve: usize,
}

impl KvCache {
    /// An empty cache that refuses to hold more than `limit` tokens (the model's
    /// `max_position_embeddings`, say) with an error, not a panic.
    pub fn with_limit(limit: usize) -> Self {
        KvCache { limit: Some(limit), ..KvCache::default() }
    }

    /// Limit the cache to the model's context (`None`: unlimited); a limit set by
    /// [`KvCache::with_limit`] that is tighter stays.
    pub(crate) fn limit_to(&mut self, context: Option<usize>) {
        self.limit = match (self.limit, context) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// Make the next allocation room for `tokens` more than it needs: a decoder that
    /// knows its longest answer asks for that once, and appends in place after.
    pub fn reserve(&mut self, tokens: usize) {
        self.reserve = tokens;
    }

    /// Tokens cached so far.
    pub fn len(&self) -> usize {
        self.layers.first().and_then(|l| l.as_ref()).map_or(0, |l| l.len)
    }

    /// Whether nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tokens the first layer's buffer holds room for (0 when empty).
    pub fn capacity(&self) -> usize {
        self.layers.first().and_then(|l| l.as_ref()).map_or(0, LayerKv::capacity)
    }

    /// Layers it has room for (0 before first use).
    pub fn depth(&self) -> usize {
        self.layers.len()
    }

    /// Make room for `n` layers (a fresh cache learns the model's depth on first use).
    pub(crate) fn ensure_layers(&mut self, n: usize) {
        if self.layers.len() != n {
            self.layers = (0..n).map(|_| None).collect();
        }
    }

    /// Append keys and values `[B, Hkv, t, D]` to layer `layer` and return views of all of
    /// its cached keys and values, `[B, Hkv, len + t, D]`.
    pub(crate) fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let t = k.dim(2)?;
        let slot = &mut self.layers[layer];
        let len = slot.as_ref().map_or(0, |l| l.len);
        let need = len + t;
        if let Some(limit) = self.limit {
            if need > limit {
                bail!(
                    "the sequence needs {need} cached tokens, more than the model's context of {limit} \
                     (max_position_embeddings): shorten the prompt (a smaller screenshot, a shorter \
                     instruction or history) or lower max_new_tokens"
                );
            }
        }
        let (k, v) = (k.detach().contiguous()?, v.detach().contiguous()?);
        let shared_or_full = match slot {
            Some(l) => Arc::strong_count(&l.buf) > 1 || need > l.capacity(),
            None => true,
        };
        if shared_or_full {
            let mut cap = (need + self.reserve).div_ceil(BLOCK) * BLOCK;
            if let Some(limit) = self.limit {
                cap = cap.min(limit).max(need);
            }
            let mut dims = k.dims().to_vec();
            dims[2] = cap;
            let fresh = Buffers {
                k: Tensor::zeros(dims.as_slice(), k.dtype(), k.device())?,
                v: Tensor::zeros(dims.as_slice(), v.dtype(), v.device())?,
            };
            if let Some(old) = slot.as_ref().filter(|l| l.len > 0) {
                if old.capacity() <= cap {
                    // the whole old buffer in one copy: its first `len` positions are the
                    // cache, the rest is written before it is read; a copy of the cached
                    // part alone would go through a temporary (`slice_set` takes a
                    // contiguous source), a second copy of the whole prompt per answer
                    fresh.k.slice_set(&old.buf.k, 2, 0)?;
                    fresh.v.slice_set(&old.buf.v, 2, 0)?;
                } else {
                    fresh.k.slice_set(&old.buf.k.narrow(2, 0, old.len)?.contiguous()?, 2, 0)?;
                    fresh.v.slice_set(&old.buf.v.narrow(2, 0, old.len)?.contiguous()?, 2, 0)?;
                }
            }
            *slot = Some(LayerKv { buf: Arc::new(fresh), len });
        }
        let l = slot.as_mut().expect("allocated above");
        l.buf.k.slice_set(&k, 2, len)?;
        l.buf.v.slice_set(&v, 2, len)?;
        l.len = need;
        Ok((l.buf.k.narrow(2, 0, need)?, l.buf.v.narrow(2, 0, need)?))
    }

    /// Layer `layer`'s cached keys and values so far, `[B, Hkv, len, D]`, if any.
    pub fn layer(&self, layer: usize) -> Option<Result<(Tensor, Tensor)>> {
        let l = self.layers.get(layer)?.as_ref()?;
        Some((|| Ok((l.buf.k.narrow(D::Minus2, 0, l.len)?, l.buf.v.narrow(D::Minus2, 0, l.len)?)))())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    fn kv(b: usize, t: usize, seed: f32) -> (Tensor, Tensor) {
        let n = b * 2 * t * 4;
        let data: Vec<f32> = (0..n).map(|i| seed + i as f32).collect();
        let k = Tensor::from_vec(data.clone(), (b, 2, t, 4), &Device::Cpu).unwrap();
        let v = (k.clone() * -1.0).unwrap();
        (k, v)
    }

    fn cat(a: &Tensor, b: &Tensor) -> Vec<f32> {
        Tensor::cat(&[a, b], 2).unwrap().flatten_all().unwrap().to_vec1().unwrap()
    }

    #[test]
    fn appends_equal_a_cat_across_blocks() {
        let mut c = KvCache::default();
        c.ensure_layers(1);
        let (mut all_k, mut all_v) = kv(1, 3, 0.0);
        c.append(0, &all_k, &all_v).unwrap();
        // one token at a time, past a block boundary: the same values as a cat
        for step in 0..(BLOCK + 5) {
            let (k, v) = kv(1, 1, 1000.0 * (step + 1) as f32);
            let (ck, cv) = c.append(0, &k, &v).unwrap();
            let (ek, ev) = (cat(&all_k, &k), cat(&all_v, &v));
            all_k = Tensor::cat(&[&all_k, &k], 2).unwrap();
            all_v = Tensor::cat(&[&all_v, &v], 2).unwrap();
            assert_eq!(ck.flatten_all().unwrap().to_vec1::<f32>().unwrap(), ek);
            assert_eq!(cv.flatten_all().unwrap().to_vec1::<f32>().unwrap(), ev);
        }
        assert_eq!(c.len(), 3 + BLOCK + 5);
        assert_eq!(c.capacity(), 2 * BLOCK, "grown by blocks, not per token");
    }

    #[test]
    fn clones_never_see_each_others_tokens() {
        let mut prompt = KvCache::default();
        prompt.ensure_layers(2);
        for layer in 0..2 {
            let (k, v) = kv(1, 5, 0.0);
            prompt.append(layer, &k, &v).unwrap();
        }
        let (mut a, mut b) = (prompt.clone(), prompt.clone());
        let (ka, va) = kv(1, 1, 100.0);
        let (kb, vb) = kv(1, 1, 200.0);
        let (a_k, _) = a.append(0, &ka, &va).unwrap();
        let (b_k, _) = b.append(0, &kb, &vb).unwrap();
        let last = |t: &Tensor| t.narrow(2, 5, 1).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(last(&a_k), ka.flatten_all().unwrap().to_vec1::<f32>().unwrap());
        assert_eq!(last(&b_k), kb.flatten_all().unwrap().to_vec1::<f32>().unwrap());
        // the prompt itself is untouched and still 5 long
        assert_eq!(prompt.len(), 5);
        let (pk, _) = prompt.layer(0).unwrap().unwrap();
        assert_eq!(pk.dim(2).unwrap(), 5);
        // a finished answer dropped: the others go on
        drop(a);
        let (k2, v2) = kv(1, 1, 300.0);
        let (b_k, _) = b.append(0, &k2, &v2).unwrap();
        assert_eq!(b_k.dim(2).unwrap(), 7);
    }

    /// An answer's first token copies its prompt's cache: the whole buffer where it fits in
    /// the new one, else the cached part alone. Either way the cache reads as a cat.
    #[test]
    fn a_copy_on_write_equals_a_cat_whether_the_old_buffer_fits_or_not() {
        let mut prompt = KvCache::default();
        prompt.reserve(100);
        prompt.ensure_layers(1);
        let (pk, pv) = kv(2, 30, 0.0);
        prompt.append(0, &pk, &pv).unwrap();
        assert_eq!(prompt.capacity(), 192);
        let (mut roomy, mut tight) = (prompt.clone(), prompt.clone());
        tight.reserve(0); // its new buffer (64) is smaller than the prompt's (192)
        for (c, seed, cap) in [(&mut roomy, 500.0, 192), (&mut tight, 700.0, 64)] {
            let (k, v) = kv(2, 1, seed);
            let (ck, cv) = c.append(0, &k, &v).unwrap();
            assert_eq!(c.capacity(), cap);
            assert_eq!(ck.flatten_all().unwrap().to_vec1::<f32>().unwrap(), cat(&pk, &k));
            assert_eq!(cv.flatten_all().unwrap().to_vec1::<f32>().unwrap(), cat(&pv, &v));
        }
        assert_eq!(prompt.len(), 30);
    }

    #[test]
    fn a_sequence_past_the_limit_is_an_error() {
        let mut c = KvCache::with_limit(6);
        c.ensure_layers(1);
        let (k, v) = kv(2, 5, 0.0);
        c.append(0, &k, &v).unwrap();
        let (k1, v1) = kv(2, 1, 9.0);
        c.append(0, &k1, &v1).unwrap();
        assert_eq!(c.capacity(), 6, "never allocates past the limit");
        let e = c.append(0, &k1, &v1).unwrap_err().to_string();
        assert!(e.contains("needs 7 cached tokens") && e.contains("context of 6"), "{e}");
        let mut long = KvCache::with_limit(4);
        long.ensure_layers(1);
        let e = long.append(0, &k, &v).unwrap_err().to_string();
        assert!(e.contains("shorten the prompt"), "{e}");
    }

    #[test]
    fn reserve_makes_room_once() {
        let mut c = KvCache::default();
        c.reserve(100);
        c.ensure_layers(1);
        let (k, v) = kv(1, 30, 0.0);
        c.append(0, &k, &v).unwrap();
        assert_eq!(c.capacity(), 192, "30 + 100 rounded up to blocks");
        let z = Tensor::zeros((1, 2, 1, 4), DType::F32, &Device::Cpu).unwrap();
        for _ in 0..100 {
            c.append(0, &z, &z).unwrap();
        }
        assert_eq!(c.capacity(), 192);
    }
}
