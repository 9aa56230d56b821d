//! Integration tests of the real `svc` binary on an ephemeral port against a local upstream test server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod harness;

mod budgets;
mod config;
mod errors;
mod events;
mod health;
mod keys;
mod passthrough;
mod routing;
mod streaming;
