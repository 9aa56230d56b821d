//! Dev-only test servers for svc's tests and benchmarks: a programmable OpenAI-compatible upstream
//! ([`upstream`]), an ntfy-compatible push server ([`ntfy`]), a recording webhook receiver ([`webhook`]) and a
//! TCP forwarder a test can cut ([`forward`]), and fakes of Azure OpenAI, Vertex AI and Bedrock that check
//! credentials as those clouds do ([`clouds`]).
//! Every server binds 127.0.0.1 on an ephemeral port and stops when its handle is dropped.

// Test servers spawn their accept loops and connections bare: each stops with its handle, not at a gateway's
// shutdown.
#![allow(clippy::disallowed_methods)]

pub mod anthropic;
pub mod clouds;
pub mod forward;
pub mod ntfy;
pub mod postgres;
pub mod proxy;
pub mod responses;
pub mod upstream;
pub mod webhook;
