//! `guirl serve-policy`.

use std::path::PathBuf;

/// Arguments of `guirl serve-policy`.
#[derive(Debug, clap::Args)]
pub struct ServePolicyArgs {
    /// The checkpoint: a checkpoint folder, a run folder (its best, else latest), or
    /// RUN/checkpoints/latest or best.
    checkpoint: PathBuf,
    /// Address to listen on (port 0 picks a free one, printed at start).
    #[arg(long, default_value = "127.0.0.1:8000", value_name = "ADDR:PORT")]
    bind: String,
    /// The model id clients name (default: the checkpoint folder's name).
    #[arg(long)]
    model_name: Option<String>,
}

/// `guirl serve-policy`.
pub async fn serve_policy(args: ServePolicyArgs) -> anyhow::Result<()> {
    let found = crate::train::checkpoint::resolve_policy_dir(&args.checkpoint)?;
    if let Some(note) = &found.note {
        eprintln!("{note}");
    }
    let policy = crate::policy::load_checkpoint(&found.dir, &candle_core::Device::Cpu)?;
    let observation = crate::policy::observation_of_checkpoint(&found.dir)?;
    let name = args.model_name.unwrap_or_else(|| {
        let dir = std::fs::canonicalize(&args.checkpoint).unwrap_or(args.checkpoint.clone());
        dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "guirl".into())
    });
    let listener = super::serve::listen(&args.bind).await?;
    let addr = listener.local_addr()?;
    println!("serving {name} ({}, reads {observation}) on http://{addr}/v1", found.dir.display());
    println!("try: guirl run --task miniwob/click-test --policy openai:{name}@http://{addr}/v1");
    crate::serve::policy_server::serve(listener, policy, name, observation).await
}
