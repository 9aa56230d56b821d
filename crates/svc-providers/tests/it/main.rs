//! The integration tests of svc-providers, one binary: golden wire-translation tests for the Anthropic
//! provider (`golden`) and end-to-end runs of it against the svc-testkit fake Anthropic server (`e2e`), both
//! over 127.0.0.1. `support` holds what they share.
//!
//! What these tests do not cover: the gateway's use of the provider (retries, status mapping, `[DONE]`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod e2e;
mod golden;
mod support;
