//! `svc-notify` (spec 6.3) and the event-related `svc` subcommands (`svc hooks …`, `svc events tail`).
//! Glue only: the envelope, the senders and their rules live in svc-events.

pub mod args;
mod dry_run;
pub mod error;
pub mod events_cmd;
pub mod hooks_cmd;
mod plan;
mod run;

pub use args::NotifyArgs;
pub use error::NotifyError;
pub use run::{main, run};
