//! Integration tests of the real `svc-notify` binary against the testkit's ntfy-compatible server and webhook
//! receiver, with temporary config files and hooks files (the README's Events section). Every wait has a timeout;
//! every server listens on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

#[path = "notify/util.rs"]
mod util;

#[path = "notify/config_errors.rs"]
mod config_errors;
#[path = "notify/dry_run.rs"]
mod dry_run;
#[path = "notify/hooks.rs"]
mod hooks;
#[path = "notify/push.rs"]
mod push;
#[path = "notify/tail.rs"]
mod tail;
#[path = "notify/webhooks.rs"]
mod webhooks;
