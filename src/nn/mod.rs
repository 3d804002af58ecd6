//! guirl's own kernels: those its policies train with, each with its backward pass;
//! decoding's, forward only, on the CPU and on CUDA; dropout's masks; and the launches of
//! its CUDA kernels.
//!
//! candle's fused `softmax_last_dim`, `rms_norm`, `layer_norm` and `rope` run without a
//! backward, so a graph through them is silently cut (docs/contributing/candle.md); their
//! composed equivalents are differentiable but slow and keep every intermediate. The
//! training kernels here compute a layer outside the graph and attach a hand-written
//! backward. Each has a test against candle's unfused ops.
//!
//! - [`attach`]: an output computed outside the graph, hung on its inputs with a backward.
//! - [`activation`]: SwiGLU, SiLU, tanh-GELU and the scaled, masked softmax.
//! - [`fused`]: RMSNorm, rotary embedding, the LoRA linear layer and attention as one node.
//! - [`gemm`]: in-place and strided f32 products on the CPU; [`few_rows`]: decoding's
//!   products of a few rows by a weight, the weight read once.
//! - [`custom_ops`]: the small policy's masked softmax, LayerNorm, GELU and bias add.
//! - [`decode`]: decoding's kernels (the attention of one new token per row, the draw of
//!   the next token, a layer's small steps fused, the products of a few rows), on the CPU
//!   and on CUDA, forward only: decoding keeps no graph.
//! - [`dropout`]: inverted-dropout masks drawn from a key on the tensor's own device
//!   (`dropout.cu` on CUDA), the same on every device.
//! - `kernel` (crate-private): the launches of guirl's own CUDA kernels (decoding's,
//!   dropout's masks), described without a device, run on a card or, in the tests, on
//!   the host.
//!
//! The Qwen-VL backbones use all but `custom_ops`; the small Candle policy uses
//! `custom_ops`.

pub mod activation;
pub mod attach;
pub mod custom_ops;
pub mod decode;
pub mod dropout;
#[cfg(any(feature = "cuda", test))]
mod dropout_launch;
pub mod few_rows;
pub mod fused;
pub mod gemm;
#[cfg(any(feature = "cuda", test))]
pub(crate) mod kernel;
