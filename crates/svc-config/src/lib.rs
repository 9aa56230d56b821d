//! The svc configuration file: where it is found, what it may contain, and the validated [`Config`] the rest
//! of svc reads. Raw YAML never leaves this crate: prices are [`Price`]s, durations [`BudgetDuration`]s,
//! secrets [`Secret`]s, and every problem is a [`Diagnostic`] with file, line and column.
//!
//! What this crate does not do: open sockets, touch the store, or decide what a missing master key means
//! for a running server (the CLI does).

mod cloud;
mod diagnostics;
mod event_kind;
mod event_pattern;
mod ip_block;
mod load;
mod load_limits;
mod load_models;
mod load_notify;
mod load_prices;
mod load_server;
mod node;
mod reader;
mod source;
mod types;

pub use cloud::{AwsAuth, Azure, Bedrock, Cloud, ServiceAccount, Vertex, AZURE_DEFAULT_API_VERSION};
pub use diagnostics::{ConfigError, Diagnostic, Severity};
pub use event_kind::{EventKind, EventSeverity, UnknownKind};
pub use event_pattern::{event_pattern_error, event_pattern_matches};
pub use ip_block::IpBlock;
pub use load::{load_builtin, load_file, load_str};
pub use load_notify::{load_push_builtin, load_push_file, load_push_str, valid_topic};
pub use load_server::demo_store_path;
pub use source::{find_config, ConfigSource, BUILTIN_YAML};
pub use types::*;

pub use svc_budget::{BudgetDuration, Money, Price, Prices};
