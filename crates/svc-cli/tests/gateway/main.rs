//! Integration tests of the real `svc` binary on an ephemeral port against a local upstream test server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

mod harness;
mod raw;

mod agent_apis;
mod auth_limits;
mod bounds;
mod budgets;
mod cli;
mod clouds;
mod config;
mod connections;
mod errors;
mod event_delivery;
mod event_origin;
mod events;
mod fleet;
mod fleet_events;
mod fleet_faults;
mod hardening;
mod health;
mod isolation;
mod keys;
mod last_part;
mod ledger;
mod metrics;
mod passthrough;
mod process;
mod proxy;
mod reload;
mod reverse_proxy;
mod routing;
mod store;
mod stream_caps;
mod streaming;
mod teams;
mod tls;
