//! `svc-notify`'s command line. Parsed with clap's `try_parse` by the caller so a usage error exits 1, never
//! clap's default 2. The doc comments below are the help a user reads (`svc-notify --help`).

use clap::Parser;
use std::path::PathBuf;

/// Send one fleet event: to the push server, then to the matching webhooks, then to this machine's hooks.
///
/// Push server, webhooks and fleet names come from the configuration file (--config, else $SVC_CONFIG,
/// else ./svc.yaml); hooks are those added with `svc hooks add`.
///
/// Exit status: 0 delivered; 1 configuration or usage error; 2 push server unreachable (or a webhook could
/// not be delivered); 3 push server refused the token.
#[derive(Debug, Clone, Parser)]
#[command(name = "svc-notify", version)]
pub struct NotifyArgs {
    /// Event kind, e.g. task.done, budget.alert [default: test]
    #[arg(long, value_name = "EVENT")]
    pub event: Option<String>,
    /// The event's data, a JSON object; @FILE reads it from a file, - from stdin
    #[arg(long, value_name = "JSON")]
    pub data: Option<String>,
    /// Push priority: min, low, default, high or urgent [default: set by the event kind]
    #[arg(long, value_name = "PRIORITY")]
    pub priority: Option<String>,
    /// Push notification title [default: the event kind]
    #[arg(long, value_name = "TEXT")]
    pub title: Option<String>,
    /// Send nothing and run no hook: print what would be sent, and where
    #[arg(long)]
    pub dry_run: bool,
    /// Name of the sending agent [default: $SVC_AGENT, else svc-notify]
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// Configuration file [default: $SVC_CONFIG, else ./svc.yaml]
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
}
