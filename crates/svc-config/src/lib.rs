//! The svc configuration file: where it is found, what it may contain, and the validated [`Config`] the rest
//! of svc reads. Raw YAML never leaves this crate: prices are [`Price`]s, durations [`BudgetDuration`]s,
//! secrets [`Secret`]s, and every problem is a [`Diagnostic`] with file, line and column.
//!
//! What this crate does not do: open sockets, touch the store, or decide what a missing master key means
//! for a running server (the CLI does).

mod diagnostics;
mod load;
mod load_notify;
mod node;
mod reader;
mod types;

pub use diagnostics::{Diagnostic, Severity};
pub use load::{find_config, load_builtin, load_file, load_str, ConfigError, ConfigSource, BUILTIN_YAML};
pub use load_notify::valid_topic;
pub use types::*;

pub use svc_budget::{BudgetDuration, Money, Price};
