//! `svc`'s arguments (clap derive).

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// svc: a model gateway and fleet event service.
#[derive(Debug, Parser)]
#[command(name = "svc", version, about = "svc: a model gateway and fleet event service", propagate_version = true)]
pub struct Cli {
    /// Configuration file (else $SVC_CONFIG, else ./svc.yaml, else the built-in demo configuration; `config
    /// check` needs a file).
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// `svc` commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway.
    Serve(ServeArgs),
    /// Check the configuration file.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Manage virtual keys (works whether or not the server runs).
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Show teams.
    #[command(subcommand)]
    Teams(TeamsCommand),
    /// Show spend per team, key and model.
    Spend(SpendArgs),
    /// Manage this node's shell hooks (spec 6.5).
    #[command(subcommand)]
    Hooks(crate::notify::hooks_cmd::HooksCommand),
    /// Follow the fleet's events on the push server.
    #[command(subcommand)]
    Events(crate::notify::events_cmd::EventsCommand),
}

/// `svc spend` options.
#[derive(Debug, Args)]
pub struct SpendArgs {
    /// Only this team.
    #[arg(long)]
    pub team: Option<String>,
    /// Only the last period of this length (e.g. 7d, 12h, 1mo); default: everything.
    #[arg(long)]
    pub since: Option<String>,
}

/// `svc serve` options.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Listen address (overrides server.host).
    #[arg(long)]
    pub host: Option<String>,
    /// Listen port (overrides server.port; 0 picks a free port).
    #[arg(long)]
    pub port: Option<u16>,
}

/// `svc config …`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate the configuration; print every problem as file:line:column; exit 0 when valid, 1 otherwise.
    Check,
}

/// `svc keys …`.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create a key; prints the key alone on stdout (it is shown only this once).
    Create(CreateArgs),
    /// List keys (never their secrets).
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key (by key, alias or id): every request with it gets 401 from then on.
    Revoke {
        /// The key, its alias or its id.
        key: String,
    },
    /// Rotate a key: a new secret for the same record; prints the new key alone on stdout.
    Rotate {
        /// The key, its alias or its id.
        key: String,
    },
}

/// `svc keys create` options.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Team the key belongs to.
    #[arg(long)]
    pub team: String,
    /// Agent role.
    #[arg(long)]
    pub role: Option<String>,
    /// Unique alias.
    #[arg(long)]
    pub alias: Option<String>,
    /// Lifetime, e.g. 30d.
    #[arg(long)]
    pub expires: Option<String>,
    /// Models of its own (comma-separated aliases; default: all of the team's).
    #[arg(long, value_delimiter = ',')]
    pub models: Vec<String>,
    /// Key budget, in the unit of the prices.
    #[arg(long)]
    pub max_budget: Option<String>,
    /// Key budget period, e.g. 1d.
    #[arg(long)]
    pub budget_duration: Option<String>,
    /// Requests per minute.
    #[arg(long)]
    pub rpm_limit: Option<u32>,
    /// Tokens per minute.
    #[arg(long)]
    pub tpm_limit: Option<u64>,
}

/// `svc teams …`.
#[derive(Debug, Subcommand)]
pub enum TeamsCommand {
    /// List configured teams.
    List,
}
