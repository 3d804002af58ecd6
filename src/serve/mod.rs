//! HTTP servers over guirl: a trained checkpoint behind an OpenAI-compatible API
//! (`guirl serve-policy`).

pub mod policy_server;
