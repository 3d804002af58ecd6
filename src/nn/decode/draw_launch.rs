//! How [`super::draw`]'s op runs on CUDA: `draw.cu`'s launch.

use super::draw::DrawOp;
use crate::nn::kernel::{need_contiguous, Arg, Elem, Kernel, Launch};
use candle_core::{Layout, Result, Shape};

const DRAW: &str = include_str!("draw.cu");

impl Kernel for DrawOp {
    /// `draw.cu`: one block of 1 024 threads per row; the inputs the logits, the banned
    /// tokens and the draws.
    fn launch(&self, inputs: &[(Elem, &Layout)]) -> Result<Launch> {
        let [(x, xl), (b, bl), (u, ul)] = inputs else {
            candle_core::bail!(
                "decode draw: {} inputs, want the logits, the banned tokens and the draws",
                inputs.len()
            )
        };
        for (l, what) in [(xl, "logits"), (bl, "banned tokens"), (ul, "draws")] {
            need_contiguous(l, &format!("decode draw: the {what}"))?;
        }
        if *x == Elem::U32 || *b != Elem::F32 || *u != Elem::F32 {
            candle_core::bail!(
                "decode draw on CUDA: logits in f32 or bf16, banned tokens and draws in f32: set \
                 model.decode_kernels = \"eager\""
            );
        }
        let (n, v) = xl.shape().dims2()?;
        Ok(Launch {
            module: "guirl_decode_draw".into(),
            defines: String::new(),
            file: DRAW,
            entry: format!("decode_draw_{}", x.suffix()),
            grid: (n as u32, 1, 1),
            block: 1024,
            shared: 0,
            args: vec![
                Arg::Input(0),
                Arg::Input(1),
                Arg::Input(2),
                Arg::Out,
                Arg::I32(v as i32),
                Arg::F32(self.temperature),
                Arg::I32(self.greedy as i32),
            ],
            out: (Elem::F32, n * 2, Shape::from((n, 2))),
        })
    }
}

#[cfg(all(test, feature = "cuda"))]
mod tests {
    use super::*;

    /// `draw.cu` compiles, and both entry points' blocks fit a card with nothing spilled
    /// (NVRTC and ptxas need no GPU).
    #[test]
    fn the_kernel_compiles() {
        let (x, v) = (Layout::contiguous((2, 151_936)), Layout::contiguous(151_936));
        let u = Layout::contiguous(2);
        for e in [Elem::BF16, Elem::F32] {
            let l = DrawOp { temperature: 1.0, greedy: false }
                .launch(&[(e, &x), (Elem::F32, &v), (Elem::F32, &u)])
                .unwrap();
            assert_eq!(l.entry, format!("decode_draw_{}", e.suffix()));
            crate::nn::kernel::fit::assert_launch_fits(&l);
        }
    }
}
