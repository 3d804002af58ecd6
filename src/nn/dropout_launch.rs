//! How [`super::dropout`]'s mask runs on CUDA: `dropout.cu`'s launch.

use super::dropout::MaskOp;
use super::kernel::{Arg, Elem, Kernel, Launch};
use candle_core::{Layout, Result};

impl Kernel for MaskOp {
    /// `dropout.cu`: a grid-stride loop over the mask; the input only says where.
    fn launch(&self, _: &[(Elem, &Layout)]) -> Result<Launch> {
        let n = self.shape.elem_count();
        let args =
            [Arg::Out, Arg::U64(n as u64), Arg::U64(self.seed), Arg::U64(self.cut), Arg::F32(self.keep)];
        Ok(Launch {
            module: "guirl_dropout".into(),
            defines: String::new(),
            file: include_str!("dropout.cu"),
            entry: "dropout_mask_f32".into(),
            grid: (n.div_ceil(256).clamp(1, 65_535) as u32, 1, 1),
            block: 256,
            shared: 0,
            args: args.to_vec(),
            out: (Elem::F32, n, self.shape.clone()),
        })
    }
}

#[cfg(all(test, feature = "cuda"))]
mod tests {
    use super::*;

    /// `dropout.cu` compiles, and its blocks fit a card with nothing spilled (NVRTC and
    /// ptxas need no GPU).
    #[test]
    fn the_kernel_compiles() {
        let op = MaskOp { shape: (4, 2048).into(), seed: 7, cut: 0, keep: 0.9 };
        let l = op.launch(&[]).unwrap();
        crate::nn::kernel::fit::assert_launch_fits(&l);
    }
}
