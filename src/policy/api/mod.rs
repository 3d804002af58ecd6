//! Models behind an OpenAI-compatible HTTP API as policies (`openai:MODEL@BASE_URL`):
//! the request (prompt, screenshots, history), the answer's formats and coordinate
//! frames, and the HTTP client.

pub mod client;
pub mod coords;
pub mod openai;
pub mod parse;
pub mod prompt;

pub use openai::{ApiConfig, ApiPolicy};
