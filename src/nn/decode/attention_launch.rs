//! How [`super::attention`]'s op runs on CUDA: `attention.cu`'s launch.

use super::attention::{strides, AttentionOp};
use crate::nn::kernel::{one_elem, Arg, Elem, Kernel, Launch};
use candle_core::{Layout, Result, Tensor};

const ATTENTION: &str = include_str!("attention.cu");

/// Most query heads per key/value head, and head elements, the CUDA kernel takes (its
/// shared memory holds a group's queries and every warp's partial sums).
const MAX_GROUP: usize = 8;
const MAX_HEAD: usize = 256;
const MAX_GROUP_ELEMS: usize = 1024;

impl Kernel for AttentionOp {
    fn held(&self) -> Vec<Tensor> {
        vec![self.lens.clone()]
    }

    /// `attention.cu` compiled for each (query heads per key/value head, head elements per
    /// lane) a model has: one block per row and key/value head, 8 or 16 warps walking
    /// the positions.
    fn launch(&self, inputs: &[(Elem, &Layout)]) -> Result<Launch> {
        let [q, k, v, (lens, ll)] = inputs else {
            candle_core::bail!("decode attention: {} inputs, want q, k, v and the lengths", inputs.len())
        };
        let e = one_elem(&[*q, *k, *v], "decode attention")?;
        let (ql, kl, vl) = (q.1, k.1, v.1);
        if *lens != Elem::U32 || !ll.is_contiguous() {
            candle_core::bail!("decode attention: the lengths must be contiguous u32");
        }
        if [ql, kl, vl].iter().any(|l| l.stride().last() != Some(&1)) {
            candle_core::bail!("decode attention: the last dimension of q, k and v must be contiguous");
        }
        let (r, h, d) = ql.shape().dims3()?;
        let hkv = kl.dims()[1];
        let g = h / hkv;
        if g > MAX_GROUP || d > MAX_HEAD || g * d > MAX_GROUP_ELEMS {
            candle_core::bail!(
                "decode attention on CUDA takes at most {MAX_GROUP} query heads per key/value head, heads of \
                 {MAX_HEAD} and {MAX_GROUP_ELEMS} elements a group; this model has {g} of {d}: set \
                 model.decode_kernels = \"eager\""
            );
        }
        let epl = d.div_ceil(32);
        let warps: usize = if g * d <= 512 { 16 } else { 8 };
        let [qs, ks, vs] = [ql, kl, vl].map(|l| strides(l).into_iter().map(|s| Arg::I64(s as i64)));
        let mut args = vec![Arg::Input(0), Arg::Input(1), Arg::Input(2), Arg::Input(3), Arg::Out];
        args.extend([h, hkv, d, self.w].map(|x| Arg::I32(x as i32)));
        args.extend(qs.chain(ks).chain(vs));
        args.push(Arg::F32(self.scale));
        Ok(Launch {
            module: format!("guirl_decode_attention_g{g}_e{epl}"),
            defines: format!("#define G {g}\n#define EPL {epl}\n"),
            file: ATTENTION,
            entry: format!("decode_attention_{}", e.suffix()),
            grid: (r as u32, hkv as u32, 1),
            block: (warps * 32) as u32,
            shared: ((g * d + 2 * warps * g + warps * g * d) * 4) as u32,
            args,
            out: (e, r * h * d, ql.shape().clone()),
        })
    }
}

#[cfg(all(test, feature = "cuda"))]
mod tests {
    use super::*;

    /// The kernel compiles, and its blocks fit a card with nothing spilled: the attention
    /// for the shapes of Qwen3-VL 2B (2 query heads a key/value head, heads of 128), the
    /// test fixture's and the largest the kernel takes, in both dtypes. NVRTC and ptxas
    /// need no GPU, so this runs wherever the `cuda` build does.
    #[test]
    fn the_kernel_compiles() {
        for (g, d) in [(2, 128), (1, 32), (4, 128), (8, 128), (1, 256)] {
            for e in [Elem::F32, Elem::BF16] {
                let op = AttentionOp {
                    lens: Tensor::zeros(3, candle_core::DType::U32, &candle_core::Device::Cpu).unwrap(),
                    w: 16,
                    scale: 1.0,
                };
                let (q, kv, lens) = (
                    Layout::contiguous((3, 2 * g, d)),
                    Layout::contiguous((3, 2, 16, d)),
                    Layout::contiguous(3),
                );
                let l = op.launch(&[(e, &q), (e, &kv), (e, &kv), (Elem::U32, &lens)]).unwrap();
                crate::nn::kernel::fit::assert_launch_fits(&l);
            }
        }
    }
}
