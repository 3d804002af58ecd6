//! `guirl doctor`.

use super::browser::BrowserArgs;
use crate::doctor::{diagnose, DoctorOptions, Status};
use std::path::PathBuf;

/// Arguments of `guirl doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// The folder runs are written to (its free space is checked).
    #[arg(long, value_name = "DIR", default_value = "runs")]
    runs: PathBuf,
    /// Print one JSON object (`ok`, and `checks`: name, status, detail, fix) instead of lines.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    browser: BrowserArgs,
}

/// `guirl doctor`: prints the report; returns false when a blocking check failed.
pub async fn doctor(args: DoctorArgs) -> anyhow::Result<bool> {
    let report = diagnose(&DoctorOptions { browser: args.browser.config(), runs: args.runs }).await;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(report.ok);
    }
    for c in &report.checks {
        outln!("{c}");
    }
    let count = |s: Status| report.checks.iter().filter(|c| c.status == s).count();
    let (warn, fail) = (count(Status::Warn), count(Status::Fail));
    if fail > 0 {
        outln!("{fail} blocking problem(s): no browser can run until the FAIL lines are fixed");
    } else {
        outln!("ready: guirl can run episodes here ({warn} warning(s))");
    }
    Ok(report.ok)
}
