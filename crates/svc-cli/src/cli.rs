//! `svc`'s arguments (clap derive). The doc comments below are the help a user reads (`svc --help`): they
//! say what a command does for its user, in the README's words.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use svc_store::SpendGroup;

/// A model gateway and fleet event service.
///
/// `svc serve` runs an OpenAI-compatible gateway: clients send chat completions with a virtual key, and the
/// gateway routes each model alias to its upstream provider while enforcing team and key budgets and rate
/// limits. The other commands manage keys, show teams and spend, and work with fleet events.
///
/// Without a configuration file, svc runs a demo: four models and `claude-*`/`gpt-*` for the agent
/// CLIs, all mock, teams `executor` and `orchestrator`, and a store of its own in $XDG_DATA_HOME/svc/svc.db
/// (else ~/.local/share/svc/svc.db).
///
/// Exit status: 0 success, 1 error, 2 wrong usage.
#[derive(Debug, Parser)]
#[command(name = "svc", version, propagate_version = true)]
pub struct Cli {
    /// Configuration file [default: $SVC_CONFIG, else ./svc.yaml, else the built-in demo]
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// `svc` commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway until SIGTERM or Ctrl-C (SIGHUP reloads its configuration)
    ///
    /// Listens on server.host:server.port (127.0.0.1:4000 by default). On SIGTERM or Ctrl-C it stops
    /// accepting connections, lets the requests under way finish (at most server.shutdown_timeout_seconds),
    /// and records their spend before it exits. On SIGHUP it reads its configuration file again, as
    /// `svc reload` asks it to.
    Serve(ServeArgs),
    /// Reload the running gateway's configuration
    ///
    /// Asks the gateway of this configuration (server.host:server.port, with the master key) to read its file
    /// again: checked whole, applied at once (models, teams, budgets, rate limits, notifications, hooks, the
    /// TLS certificate), or refused with every problem (exit 1) while the running configuration stays.
    /// `kill -HUP` does the same.
    Reload {
        /// The gateway's address [default: http(s)://server.host:server.port of the configuration]
        #[arg(long, value_name = "URL")]
        url: Option<String>,
    },
    /// Check a configuration file
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Create, list, update, revoke, restore, rotate and delete virtual keys
    ///
    /// A change asks the running gateway of this configuration (server.host:server.port, or --url, with the
    /// master key), which applies it before it answers: a revoked key is refused there from the moment the
    /// command returns, and on the other nodes of its fleet within a second. When no gateway answers, the
    /// change is written to the store directly (stderr says so) and gateways take it from there within a
    /// second.
    Keys(KeysArgs),
    /// List, make, change and delete teams
    ///
    /// `list` shows the teams the gateway runs (and what the config file would change). `new`, `update` and
    /// `delete` change teams at runtime, fleet-wide, as LiteLLM's /team/new, /team/update and /team/delete do
    /// (asked of the running gateway as `svc keys` does); a team defined in the config file is changed in the
    /// file (then `svc reload`).
    Teams(TeamsArgs),
    /// Show the nodes of the fleet: state, heartbeat, address, version, requests, spend today
    #[command(subcommand)]
    Fleet(FleetCommand),
    /// Show requests, tokens and spend per team, per key and per model
    Spend(SpendArgs),
    /// Manage the scripts this machine runs on fleet events
    ///
    /// A hook is an executable that runs when an event of its kind happens; it gets the event as JSON in
    /// $SVC_EVENT and in the file named by $SVC_EVENT_FILE. Registrations belong to this machine, not to
    /// the fleet.
    #[command(subcommand)]
    Hooks(crate::notify::hooks_cmd::HooksCommand),
    /// Follow the fleet's events on the push server
    #[command(subcommand)]
    Events(crate::notify::events_cmd::EventsCommand),
}

/// `svc spend` options.
#[derive(Debug, Args)]
pub struct SpendArgs {
    /// Only this team
    #[arg(long, value_name = "TEAM")]
    pub team: Option<String>,
    /// Only since this: `today` (local midnight), a date (2026-11-24), an RFC 3339 time, or a length back from
    /// now, e.g. 12h, 7d (the last 7 × 24 hours), 1mo [default: all time]
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Tables to print, in order (repeatable or comma-separated): team, key (shown by alias), model, client (the
    /// agent CLI or SDK), session (one agent session), api (the client API) [default: team,key,model]
    #[arg(long = "by", value_name = "GROUP", value_delimiter = ',', value_parser = SpendGroup::parse)]
    pub by: Vec<SpendGroup>,
}

/// `svc serve` options.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on, instead of server.host
    #[arg(long, value_name = "ADDRESS")]
    pub host: Option<String>,
    /// Port to listen on, instead of server.port (0: any free port, shown at start)
    #[arg(long)]
    pub port: Option<u16>,
}

/// `svc config …`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Check the configuration file and print every problem
    ///
    /// Prints each error and warning as file:line:column: message. Exit status: 0 when the file is valid
    /// (warnings allowed), 1 otherwise. Needs a file: --config, $SVC_CONFIG or ./svc.yaml.
    Check,
}

/// `svc keys …`.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create a key and print it alone on stdout (it is shown only this once)
    Create(CreateArgs),
    /// List the keys, never their secrets
    List {
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Change a key: the options given replace what it had (the others stay)
    Update(UpdateArgs),
    /// Revoke (block) a key: every request with it gets 401; it stays on record, and `restore` undoes it
    Revoke {
        /// The key, its alias or its id
        key: String,
    },
    /// Lift a key's revocation
    Restore {
        /// The key, its alias or its id
        key: String,
    },
    /// Give a key a new secret, keeping its id, alias, budget and spend; prints the new key alone (a revoked key
    /// is refused: restore it first)
    Rotate {
        /// The key, its alias or its id
        key: String,
    },
    /// Delete a key for good (its spend records stay)
    Delete {
        /// The key, its alias or its id
        key: String,
    },
}

/// `svc keys` and where to ask.
#[derive(Debug, Args)]
pub struct KeysArgs {
    /// The gateway to ask [default: http(s)://server.host:server.port of the configuration]
    #[arg(long, global = true, value_name = "URL")]
    pub url: Option<String>,
    /// The command.
    #[command(subcommand)]
    pub command: KeysCommand,
}

/// `svc teams` and where to ask.
#[derive(Debug, Args)]
pub struct TeamsArgs {
    /// The gateway to ask [default: http(s)://server.host:server.port of the configuration]
    #[arg(long, global = true, value_name = "URL")]
    pub url: Option<String>,
    /// The command.
    #[command(subcommand)]
    pub command: TeamsCommand,
}

/// `svc keys create` options.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Team the key belongs to (a team_id of the configuration)
    #[arg(long)]
    pub team: String,
    /// What the key may do.
    #[command(flatten)]
    pub fields: KeyFieldsArgs,
}

/// `svc keys update` options.
#[derive(Debug, Args)]
pub struct UpdateArgs {
    /// The key, its alias or its id
    pub key: String,
    /// What changes.
    #[command(flatten)]
    pub fields: KeyFieldsArgs,
}

/// The fields of a key that `create` sets and `update` changes (the admin API's names: `svc_keys::KeyRequest`).
#[derive(Debug, Args)]
pub struct KeyFieldsArgs {
    /// Agent role the key is for, e.g. coder
    #[arg(long)]
    pub role: Option<String>,
    /// A unique name for the key, usable instead of the key in other commands
    #[arg(long)]
    pub alias: Option<String>,
    /// Lifetime from now, e.g. 30d [default: never expires]
    #[arg(long, value_name = "DURATION")]
    pub expires: Option<String>,
    /// Models the key may use, comma-separated, among its team's [default: all of the team's]
    #[arg(long, value_delimiter = ',', value_name = "ALIASES")]
    pub models: Vec<String>,
    /// Event patterns it may post on POST /events, comma-separated (e.g. `task.*,agent.*`) [default: every
    /// kind a virtual key may post]
    #[arg(long, value_delimiter = ',', value_name = "PATTERNS")]
    pub events: Vec<String>,
    /// The key's own budget, in the unit of the prices [default: only the team's budget applies]
    #[arg(long, value_name = "AMOUNT")]
    pub max_budget: Option<String>,
    /// Period of the key's budget, e.g. 1d [default: the team's]
    #[arg(long, value_name = "DURATION")]
    pub budget_duration: Option<String>,
    /// Requests per minute allowed to the key
    #[arg(long, value_name = "N")]
    pub rpm_limit: Option<u32>,
    /// Tokens per minute allowed to the key
    #[arg(long, value_name = "N")]
    pub tpm_limit: Option<u64>,
}

/// `svc teams …`.
#[derive(Debug, Subcommand)]
pub enum TeamsCommand {
    /// List the running teams with their budget, period, spend and models; on stderr, how the file differs
    List,
    /// A change of the teams made at runtime.
    #[command(flatten)]
    Change(TeamChange),
}

/// `svc teams new|update|delete`.
#[derive(Debug, Subcommand)]
pub enum TeamChange {
    /// Make a team (its budget period starts now); prints its name (made up when none is given)
    New(TeamFieldsArgs),
    /// Change a team made at runtime: the options given replace what it had (the others stay)
    Update(TeamFieldsArgs),
    /// Delete teams made at runtime, and every key of theirs (their spend records stay)
    Delete {
        /// The teams' names
        #[arg(required = true)]
        teams: Vec<String>,
    },
}

/// The fields of a team that `new` sets and `update` changes (the admin API's names:
/// `svc_keys::teams::TeamRequest`).
#[derive(Debug, Args)]
pub struct TeamFieldsArgs {
    /// The team's name (`team_id`) [new: a made-up id]
    pub team: Option<String>,
    /// A human name for the team
    #[arg(long)]
    pub alias: Option<String>,
    /// The team's budget per period, in the unit of the prices, or `unlimited` [new: unlimited]
    #[arg(long, value_name = "AMOUNT")]
    pub max_budget: Option<String>,
    /// Period of the budget, e.g. 30d [new: gateway_settings.budget_duration]
    #[arg(long, value_name = "DURATION")]
    pub budget_duration: Option<String>,
    /// Models the team may use, comma-separated [new: every model]
    #[arg(long, value_delimiter = ',', value_name = "ALIASES")]
    pub models: Vec<String>,
    /// Requests per minute for the whole team, or `none`
    #[arg(long, value_name = "N")]
    pub rpm_limit: Option<String>,
    /// Tokens per minute for the whole team, or `none`
    #[arg(long, value_name = "N")]
    pub tpm_limit: Option<String>,
}

/// `svc fleet …`.
#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// Every node of this fleet in the store, and the teams nodes configure differently
    Status {
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Release the budget a dead node holds (its leases and the part held back for its unwritten spend), when
    /// its spend journal is lost for good; refused while the node is online
    Forget {
        /// The node's name (`fleet.node`)
        node: String,
    },
}
