//! `guirl serve-policy`.

use anyhow::bail;
use std::path::PathBuf;

/// Arguments of `guirl serve-policy`.
#[derive(Debug, clap::Args)]
pub struct ServePolicyArgs {
    /// The checkpoint: a checkpoint folder, a run folder (its best, else latest), or
    /// RUN/checkpoints/latest or best.
    checkpoint: PathBuf,
    /// Address to listen on (port 0 picks a free one, printed at start). Anything but
    /// loopback needs --token.
    #[arg(long, default_value = "127.0.0.1:8000", value_name = "ADDR:PORT")]
    bind: String,
    /// The model id clients name (default: the last name of CHECKPOINT, links resolved: a
    /// run folder's name for a run folder, the checkpoint's, e.g. iter-000010, for
    /// RUN/checkpoints/latest).
    #[arg(long)]
    model_name: Option<String>,
    /// Bearer token every route but /health requires, which OpenAI clients send as their
    /// API key (default: $GUIRL_SERVE_TOKEN).
    #[arg(long, env = "GUIRL_SERVE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Names clients reach the server by (comma-separated), which the `Host` header may
    /// carry; IP addresses and localhost always pass. Any other name is refused, which
    /// stops DNS rebinding.
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    host_names: Vec<String>,
    /// Web origins whose pages may call the API (comma-separated, e.g.
    /// https://app.example.com). Without it a request with an Origin header (one a web
    /// page sent) is refused; programs send none.
    #[arg(long, value_delimiter = ',', value_name = "ORIGINS")]
    allow_origins: Vec<String>,
    /// Open connections at most; past it a new one is answered 503 and closed (default: a
    /// quarter of the open-file limit, 16 to 1024).
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// Where the policy runs: cpu, cuda (GPU 0) or cuda:N (a GPU needs a `--features cuda`
    /// build).
    #[arg(long, default_value_t = crate::policy::device::DeviceName::Cpu, value_name = "DEVICE")]
    device: crate::policy::device::DeviceName,
}

/// `guirl serve-policy`.
pub async fn serve_policy(args: ServePolicyArgs) -> anyhow::Result<()> {
    let token = args.token.filter(|t| !t.trim().is_empty());
    let limits = crate::serve::conn::ConnLimits::with_max_connections(args.max_connections)?;
    let listener = super::serve::listen(&args.bind).await?;
    let addr = listener.local_addr()?;
    if !addr.ip().is_loopback() && token.is_none() {
        bail!(
            "refusing to serve on {addr} without a token: anyone who reaches it could run the policy on \
             this machine. Pass --token T (or set GUIRL_SERVE_TOKEN; clients send it as their API key), \
             or bind 127.0.0.1"
        );
    }
    let found = crate::train::checkpoint::resolve_policy_dir(&args.checkpoint)?;
    if let Some(note) = &found.note {
        errln!("{note}");
    }
    let policy = crate::policy::load_checkpoint(&found.dir, &args.device.open()?)?;
    let observation = crate::policy::observation_of_checkpoint(&found.dir)?;
    let name = args.model_name.unwrap_or_else(|| {
        let dir = std::fs::canonicalize(&args.checkpoint).unwrap_or(args.checkpoint.clone());
        dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "guirl".into())
    });
    let access = crate::serve::policy_server::Access {
        token,
        cross_site: crate::serve::access::CrossSite {
            host_names: args.host_names,
            allowed_origins: args.allow_origins,
        },
    };
    outln!(
        "serving {name} ({}; reads {observation}; runs on {}) at http://{addr}/v1{}",
        found.dir.display(),
        args.device,
        if access.token.is_some() { ", token required" } else { "" }
    );
    // An unspecified address (0.0.0.0, ::) listens everywhere but is no address to connect to.
    let reach =
        if addr.ip().is_unspecified() { format!("127.0.0.1:{}", addr.port()) } else { addr.to_string() };
    let key = if access.token.is_some() { "OPENAI_API_KEY=<token> " } else { "" };
    outln!("try: {key}guirl run --task miniwob/click-test --policy openai:{name}@http://{reach}/v1");
    crate::serve::policy_server::serve(listener, policy, name, observation, access, limits).await
}
