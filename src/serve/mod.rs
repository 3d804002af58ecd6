//! HTTP servers over guirl: environments for other processes (`guirl serve`, REST and
//! OpenEnv's WebSocket protocol) and a trained checkpoint behind an OpenAI-compatible API
//! (`guirl serve-policy`).

pub mod access;
pub mod conn;
pub mod env_server;
pub mod policy_server;
