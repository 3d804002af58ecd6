//! How [`super::rows`]'s op runs on CUDA: `rows.cu`'s launch.

use super::rows::{RowsOp, MAX_ROWS};
use crate::nn::kernel::{need_contiguous, one_elem, Arg, Elem, Kernel, Launch};
use candle_core::{Layout, Result, Shape};

const ROWS: &str = include_str!("rows.cu");

/// Warps a CUDA block runs, and the most that share one weight row.
pub(super) const WARPS: usize = 8;

/// How many warps share each weight row on CUDA for `n` rows of `k` elements read `vec` at
/// a time: enough for about 8 192 warps in all (an H200 keeps 8 448 resident), at most
/// [`WARPS`], each warp's share a whole number of loads. Set by the shape alone, so a
/// layer's sums keep their order whatever the rows.
pub(super) fn split(n: usize, k: usize, vec: usize) -> usize {
    let mut s = 1;
    while s < WARPS && n * s * 2 <= 8192 {
        s *= 2;
    }
    while s > 1 && !k.is_multiple_of(s * vec) {
        s /= 2;
    }
    s
}

impl Kernel for RowsOp {
    /// `rows.cu` compiled for the dtype, the rows and the warps a weight row ([`split`]):
    /// [`WARPS`] warps a block, the inputs `x`, `w` and the bias if any.
    fn launch(&self, inputs: &[(Elem, &Layout)]) -> Result<Launch> {
        let e = one_elem(inputs, "decode rows")?;
        for ((_, l), what) in inputs.iter().zip(["rows", "weight", "bias"]) {
            need_contiguous(l, &format!("decode rows: the {what}"))?;
        }
        let ((m, k), (n, _)) = (inputs[0].1.shape().dims2()?, inputs[1].1.shape().dims2()?);
        let vec = 16 / e.size();
        if !k.is_multiple_of(vec) || !(1..=MAX_ROWS).contains(&m) {
            candle_core::bail!(
                "decode rows on CUDA: {m} rows of {k}: want 1 to {MAX_ROWS} rows of a multiple of {vec}"
            );
        }
        let s = split(n, k, vec);
        let key = format!("rows_{}_m{m}_s{s}", e.suffix());
        let ty = e.c_type();
        let has_bias = inputs.len() > 2;
        Ok(Launch {
            module: format!("guirl_decode_{key}"),
            source: format!(
                "#define T {ty}\n#define VEC {vec}\n#define M {m}\n#define SPLIT {s}\n#define WARPS {WARPS}\n{ROWS}"
            ),
            entry: "decode_rows".into(),
            grid: ((n as u32).div_ceil((WARPS / s) as u32), 1, 1),
            block: WARPS as u32 * 32,
            shared: 0,
            // without a bias the kernel never reads it: the weight stands in for the pointer
            args: vec![
                Arg::Input(0),
                Arg::Input(1),
                Arg::Input(if has_bias { 2 } else { 1 }),
                Arg::Out,
                Arg::I32(n as i32),
                Arg::I32(k as i32),
                Arg::I32(has_bias as i32),
            ],
            out: (e, m * n, Shape::from((m, n))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The warps sharing a weight row follow the shape alone, never exceed a block, and leave
    /// each warp whole 16-byte loads.
    #[test]
    fn the_split_is_the_shapes_alone() {
        assert_eq!(split(2048, 2048, 8), 4); // o: 2 048 rows, 8 192 warps
        assert_eq!(split(4096, 2048, 8), 2); // q/k/v merged
        assert_eq!(split(151_936, 2048, 8), 1); // the LM head
        assert_eq!(split(256, 2048, 8), WARPS);
        for (n, k, vec) in [(8, 24, 8), (8, 40, 4), (1, 8, 8), (3, 1000, 4)] {
            let s = split(n, k, vec);
            assert!((1..=WARPS).contains(&s) && k % (s * vec) == 0, "{n} × {k}: {s}");
        }
    }

    /// The kernel compiles for both dtypes, one to eight rows and every split. NVRTC needs
    /// no GPU, so this runs wherever the `cuda` build does.
    #[cfg(feature = "cuda")]
    #[test]
    fn the_kernel_compiles() {
        for e in [Elem::F32, Elem::BF16] {
            // splits 1, 2, 4 and 8
            for (m, n) in [(1, 8192), (3, 2048), (1, 1024), (8, 512)] {
                let (x, w) = (Layout::contiguous((m, 512)), Layout::contiguous((n, 512)));
                let l = RowsOp.launch(&[(e, &x), (e, &w)]).unwrap();
                let ptx = crate::nn::kernel::cuda::compiled(&l.module, &l.source).unwrap();
                assert!(ptx.contains("decode_rows"), "{}", l.module);
            }
        }
    }
}
