//! Most integration tests, as modules of one test binary: one link of the library instead
//! of one per file, which is most of the suite's build time. Each module is one concept
//! (`cargo test --release --test integration viewer` runs one). Tests that look at their
//! own process (its browsers, its environment variables, its peak memory) stay in
//! binaries of their own: tests/bench.rs, tests/collector.rs, tests/qwen_vl*.rs.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/server.rs"]
mod server;

mod api_policy;
mod architecture;
mod bench_learn;
mod browser_launch;
mod checkpoints;
mod cli_errors;
mod cli_reference;
mod config_reference;
mod copy_typing;
mod data_parallel;
mod determinism;
mod docs_counts;
mod docs_links;
mod doctor;
mod driver_isolation;
mod env_actions;
mod env_lifecycle;
mod env_navigation;
mod episode_start;
mod export;
mod grid;
mod input_paths;
mod installed;
mod interrupt;
mod judge;
mod oracles;
mod overlap;
mod page_clock;
mod play;
mod play_capture;
mod popups;
mod python_clients;
mod qwen_vl_files;
mod qwen_vl_learn;
mod qwen_vl_lora_dropout;
mod qwen_vl_overlap;
mod qwen_vl_serve;
mod readme_commands;
mod record_replay;
mod reward_model;
mod sandbox;
mod screen_features;
mod serve;
mod serve_cross_site;
mod serve_frames;
mod serve_security;
mod set_stats;
mod sft_continue;
mod spec_checks;
mod success_rules;
mod tensorboard;
mod torn_tails;
mod train;
mod train_batch;
mod train_ppo;
mod viewer;
mod visible_elements;
mod website_recipe;
mod website_spec_reference;
mod website_state;
