//! Qwen3-VL and Qwen2.5-VL against transformers, on the tiny random checkpoints in
//! `fixtures/qwen_vl` (written, with their reference outputs, by
//! `scripts/make_qwen_fixtures.py`), and guirl's own kernels on the test device. No
//! PyTorch is needed here. `benches/gpu/run.sh` runs this binary on CUDA too
//! (`GUIRL_TEST_DEVICE=cuda`).

#[path = "../common/mod.rs"]
mod common;

mod adapters;
mod config;
mod kernels;
mod parity;
