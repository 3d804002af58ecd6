//! `guirl serve`.

use super::browser::BrowserArgs;
use crate::env::url_policy::{HostPattern, HostRule, UrlPolicy};
use crate::serve::env_server::{serve, ServeConfig};
use anyhow::bail;
use std::time::Duration;

/// Arguments of `guirl serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free one, printed at start). Anything but
    /// loopback needs --token.
    #[arg(long, default_value = "127.0.0.1:8765", value_name = "ADDR:PORT")]
    bind: String,
    /// Sessions (REST and WebSocket together) open at once; each has its own browser.
    #[arg(long, default_value_t = 8, value_name = "N")]
    max_sessions: usize,
    /// Close a session, killing its browser, after this many seconds without a request
    /// (0: never).
    #[arg(long, default_value_t = 300, value_name = "SECS")]
    idle_timeout: u64,
    /// Bearer token every route but /health requires (default: $GUIRL_SERVE_TOKEN).
    #[arg(long, env = "GUIRL_SERVE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// WebSocket ping interval in seconds; a connection silent for two is closed.
    #[arg(long, default_value_t = 20.0, value_name = "SECS")]
    ws_ping: f64,
    /// Largest request body and incoming WebSocket message, in bytes.
    #[arg(long, default_value_t = 1 << 20, value_name = "BYTES")]
    max_body: usize,
    /// A folder of reward models (from `guirl train-reward`) that a client's task_spec may
    /// name as `reward = "model:NAME"`; without it such specs are refused.
    #[arg(long, value_name = "DIR")]
    reward_models: Option<std::path::PathBuf>,
    /// Hosts a client's task_spec may point the browser at, comma-separated: names
    /// (example.com), subdomains (*.example.com), addresses (10.1.2.3) or blocks
    /// (10.0.0.0/8). Without it, a loopback-bound server allows loopback and public hosts
    /// (not private, link-local or metadata addresses), and one bound off loopback allows
    /// guirl's own pages only. docs/serve.md#security.
    #[arg(long, value_delimiter = ',', value_name = "PATTERNS")]
    allow_hosts: Vec<String>,
    /// Let task specs reach any host this machine can reach, internal and cloud metadata
    /// addresses included (http(s) only still). Only for a server whose clients you trust.
    #[arg(long, conflicts_with = "allow_hosts")]
    allow_any_host: bool,
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
    /// Connections open at once; past it a new one gets 503 and `/health` says
    /// "shedding" (default: a quarter of the open-file limit, 16 to 1,024).
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    #[command(flatten)]
    browser: BrowserArgs,
}

/// `guirl serve`.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    if args.max_sessions == 0 {
        bail!("--max-sessions must be at least 1");
    }
    if !args.ws_ping.is_finite() || args.ws_ping <= 0.0 {
        bail!("--ws-ping must be a positive number of seconds");
    }
    if args.max_body < 1024 {
        bail!("--max-body {} is too small to carry a request: use at least 1024 bytes", args.max_body);
    }
    if let Some(d) = args.reward_models.as_ref().filter(|d| !d.is_dir()) {
        bail!(
            "--reward-models {}: not a folder (give the folder that holds the reward model folders)",
            d.display()
        );
    }
    let conn = crate::serve::conn::ConnLimits::with_max_connections(args.max_connections)?;
    let browser = args.browser.config();
    if !browser.devtools {
        // Every session's requests are checked over DevTools (the URL policy): without
        // the channel every reset would fail, so say it now rather than serve a broken env.
        bail!(
            "guirl serve needs each browser's DevTools channel to enforce its URL policy: drop \
             --no-devtools (and unset GUIRL_DEVTOOLS=0)"
        );
    }
    let token = args.token.filter(|t| !t.trim().is_empty());
    let patterns = args.allow_hosts.iter().map(|p| HostPattern::parse(p)).collect::<Result<Vec<_>, _>>();
    let patterns = patterns.map_err(anyhow::Error::msg)?;
    let listener = listen(&args.bind).await?;
    let addr = listener.local_addr()?;
    if !addr.ip().is_loopback() && token.is_none() {
        bail!(
            "refusing to serve on {addr} without a token: anyone who reaches it could drive browsers on \
             this machine. Pass --token T (or set GUIRL_SERVE_TOKEN), or bind 127.0.0.1"
        );
    }
    let url_policy = if args.allow_any_host {
        UrlPolicy { hosts: HostRule::Any }
    } else if !args.allow_hosts.is_empty() {
        UrlPolicy::only(patterns)
    } else if addr.ip().is_loopback() {
        UrlPolicy::default()
    } else {
        UrlPolicy::only(vec![])
    };
    let cfg = ServeConfig {
        max_sessions: args.max_sessions,
        idle_timeout: (args.idle_timeout > 0).then(|| Duration::from_secs(args.idle_timeout)),
        token,
        ws_ping: Duration::from_secs_f64(args.ws_ping),
        max_body: args.max_body,
        env: crate::env::EnvConfig { browser, ..Default::default() },
        reward_models: args.reward_models,
        url_policy,
        conn,
        cross_site: crate::serve::access::CrossSite {
            host_names: args.host_names,
            allowed_origins: args.allow_origins,
        },
    };
    outln!(
        "guirl serve: http://{addr} (REST /v1/sessions, OpenEnv ws://{addr}/ws), up to {} session{}{}",
        cfg.max_sessions,
        if cfg.max_sessions == 1 { "" } else { "s" },
        if cfg.token.is_some() { ", token required" } else { "" }
    );
    outln!("guirl serve: {}", cfg.url_policy.describe());
    let sandbox = crate::env::sandbox::plan(&cfg.env.browser);
    outln!("guirl serve: Chromium's sandbox is {}", sandbox.note);
    serve(listener, cfg, shutdown_signal()).await
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
        (Ok(mut int), Ok(mut term)) => {
            tokio::select! {
                _ = int.recv() => {},
                _ = term.recv() => {},
            }
        }
        _ => std::future::pending::<()>().await,
    }
    errln!("guirl serve: stopping; closing every session's browser");
}

/// Listen on `--bind ADDR:PORT`, with an error that says which part is wrong: the form, the
/// port number, a host that does not resolve, an address this machine lacks, a taken port.
pub(super) async fn listen(bind: &str) -> anyhow::Result<tokio::net::TcpListener> {
    let form = "use e.g. 127.0.0.1:8765 (port 0 picks a free one)";
    let Some((host, port)) = bind.rsplit_once(':').filter(|(h, _)| !h.is_empty()) else {
        bail!("--bind {bind:?} is not ADDR:PORT: {form}");
    };
    if port.parse::<u16>().is_err() {
        bail!("--bind {bind:?}: the port {port:?} is not a number from 0 to 65535: {form}");
    }
    let addrs: Vec<std::net::SocketAddr> = match tokio::net::lookup_host(bind).await {
        Ok(a) => a.collect(),
        Err(e) => {
            bail!("--bind {bind:?}: the host {host:?} does not resolve ({e}): give an IP address, {form}")
        }
    };
    tokio::net::TcpListener::bind(&addrs[..]).await.map_err(|e| {
        use std::io::ErrorKind::*;
        let why = match e.kind() {
            AddrInUse => "the port is taken: pick another with --bind (port 0 picks a free one)".to_string(),
            AddrNotAvailable => format!("this machine has no address {host}: bind 127.0.0.1 or 0.0.0.0"),
            PermissionDenied => {
                "not allowed (ports below 1024 need privileges): pick a port above 1023".into()
            }
            _ => format!("{e}"),
        };
        anyhow::anyhow!("cannot listen on {bind}: {why}")
    })
}
