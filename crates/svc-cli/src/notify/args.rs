//! `svc-notify`'s command line (spec 6.3, issue 4). Parsed with clap's `try_parse` by the caller so a usage
//! error exits 1, never clap's default 2.

use clap::Parser;
use std::path::PathBuf;

/// Emit one fleet event: to the push server, then the matching webhooks, then this node's shell hooks.
///
/// Exit status: 0 delivered; 1 configuration or usage error; 2 push server unreachable (or a webhook could
/// not be delivered); 3 push server refused authentication.
#[derive(Debug, Clone, Parser)]
#[command(name = "svc-notify", version, about, long_about = None)]
pub struct NotifyArgs {
    /// Event kind, e.g. `task.done`, `budget.alert`, `test` (default).
    #[arg(long, value_name = "EVENT")]
    pub event: Option<String>,
    /// JSON object placed in the envelope's `data`; `@PATH` reads it from a file, `-` from stdin.
    #[arg(long, value_name = "JSON")]
    pub data: Option<String>,
    /// Push priority: min, low, default, high, urgent (overrides the kind's severity).
    #[arg(long, value_name = "PRIORITY")]
    pub priority: Option<String>,
    /// Push title (default: the event kind).
    #[arg(long, value_name = "TEXT")]
    pub title: Option<String>,
    /// Send nothing and run no hook: print what would be sent.
    #[arg(long)]
    pub dry_run: bool,
    /// Agent name (else $SVC_AGENT, else `svc-notify`).
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// Configuration file (else $SVC_CONFIG, else ./svc.yaml).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
}
