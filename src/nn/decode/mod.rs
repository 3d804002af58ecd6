//! Decoding's kernels (`[model] decode_kernels = "fused"`): a decoding step's attention and
//! its draw of the next tokens, each one kernel where candle's ops launch many, on the CPU
//! and on CUDA (`.cu` sources compiled by NVRTC at first use). Forward only: decoding keeps
//! no graph.
//!
//! Both keep what decoding promises: every row is computed from its own inputs alone, in a
//! fixed order, so an answer is the same bits whatever shares its batch. The CPU and CUDA
//! versions agree within rounding, not bit for bit.
//!
//! - [`mod@attention`]: one new token per row attending over that row's own cached length.
//! - [`mod@draw`]: each row's next token drawn from its logits, with its log-probability.
//! - [`layer`]: a layer's small steps fused: the residual sum with the next RMSNorm, a
//!   head's RMSNorm with its rotary embedding, SwiGLU.
//! - [`rows`]: the linear layers' and the LM head's products of a few rows, each weight
//!   read once with every row.

pub mod attention;
pub mod draw;
pub mod layer;
pub mod rows;

pub use attention::attention;
pub use draw::draw;

#[cfg(any(feature = "cuda", test))]
mod attention_launch;
#[cfg(any(feature = "cuda", test))]
mod draw_launch;
#[cfg(test)]
mod host_tests;
#[cfg(any(feature = "cuda", test))]
mod layer_launch;
#[cfg(any(feature = "cuda", test))]
mod rows_launch;
#[cfg(test)]
mod test_inputs;
