//! How [`super::rows`]'s op runs on CUDA: `rows.cu`'s launch.

use super::rows::{RowsOp, MAX_ROWS};
use crate::nn::kernel::{need_contiguous, one_elem, Arg, Elem, Kernel, Launch};
use candle_core::{Layout, Result, Shape};

const ROWS: &str = include_str!("rows.cu");

/// Warps a CUDA block runs, and the most that share one group of weight rows.
pub(super) const WARPS: usize = 8;

/// How a product's weight rows are shared out on CUDA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Plan {
    /// Weight rows a warp takes together: each input row it reads serves them all, so the
    /// inputs' reads (from L1) stay below the weights' (from memory) up to 16 rows.
    pub columns: usize,
    /// Warps sharing one group of weight rows, each over its part of `k`.
    pub split: usize,
}

/// The plan for `n` weight rows of `k` elements read `vec` at a time, set by the shape
/// alone, so a layer's sums keep their order whatever the rows: 4 weight rows a warp from
/// 4 096 of them, 2 from 1 024, else 1; then warps enough for about 8 192 in all (an H200
/// keeps 8 448 resident), at most [`WARPS`] a group, each warp's part of `k` a whole
/// number of loads.
pub(super) fn plan(n: usize, k: usize, vec: usize) -> Plan {
    let columns = match n {
        4096.. => 4,
        1024.. => 2,
        _ => 1,
    };
    let groups = n.div_ceil(columns);
    let mut split = 1;
    while split < WARPS && groups * split * 2 <= 8192 {
        split *= 2;
    }
    while split > 1 && !k.is_multiple_of(split * vec) {
        split /= 2;
    }
    Plan { columns, split }
}

impl Kernel for RowsOp {
    /// `rows.cu` compiled for the dtype, the rows and the [`plan`]: [`WARPS`] warps a
    /// block, the inputs `x`, `w` and the bias if any.
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
        let Plan { columns: c, split: s } = plan(n, k, vec);
        // the loop's iterations in flight: fewer where each holds 4 weight rows' loads
        let unroll = if c == 4 { 2 } else { 4 };
        let key = format!("rows_{}_m{m}_c{c}_s{s}", e.suffix());
        let ty = e.c_type();
        let has_bias = inputs.len() > 2;
        let defines = format!(
            "#define T {ty}\n#define VEC {vec}\n#define M {m}\n#define C {c}\n#define SPLIT {s}\n\
             #define WARPS {WARPS}\n#define UNROLL {unroll}\n"
        );
        Ok(Launch {
            module: format!("guirl_decode_{key}"),
            defines,
            file: ROWS,
            entry: "decode_rows".into(),
            grid: (n.div_ceil(c).div_ceil(WARPS / s) as u32, 1, 1),
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

    /// The plan follows the shape alone, never exceeds a block, and leaves each warp whole
    /// 16-byte loads.
    #[test]
    fn the_plan_is_the_shapes_alone() {
        let p = |columns, split| Plan { columns, split };
        assert_eq!(plan(2048, 2048, 8), p(2, 8)); // q and o of the 2B model: 8 192 warps
        assert_eq!(plan(4096, 2048, 8), p(4, 8)); // q/k/v merged
        assert_eq!(plan(12_288, 2048, 8), p(4, 2)); // gate/up merged
        assert_eq!(plan(151_936, 2048, 8), p(4, 1)); // the LM head
        assert_eq!(plan(256, 2048, 8), p(1, WARPS));
        for (n, k, vec) in [(8, 24, 8), (8, 40, 4), (1, 8, 8), (3, 1000, 4), (5000, 12, 4)] {
            let Plan { columns, split } = plan(n, k, vec);
            assert!((1..=WARPS).contains(&split) && k % (split * vec) == 0, "{n} × {k}: {split}");
            assert!([1, 2, 4].contains(&columns), "{n} × {k}: {columns}");
        }
    }

    /// The kernel compiles for both dtypes, one to sixteen rows and every plan, and its
    /// blocks fit a card with nothing spilled (sixteen rows by four weight rows hold the
    /// most registers). NVRTC and ptxas need no GPU, so this runs wherever the `cuda`
    /// build does.
    #[cfg(feature = "cuda")]
    #[test]
    fn the_kernel_compiles() {
        for e in [Elem::F32, Elem::BF16] {
            // 1, 2 and 4 weight rows a warp, shared by 1 to 8 warps
            for (m, n, k) in
                [(1, 512, 8), (3, 512, 512), (8, 2048, 512), (16, 12_288, 512), (16, 151_936, 512)]
            {
                let (x, w) = (Layout::contiguous((m, k)), Layout::contiguous((n, k)));
                let l = RowsOp.launch(&[(e, &x), (e, &w)]).unwrap();
                crate::nn::kernel::fit::assert_launch_fits(&l);
            }
        }
    }
}
