//! The push sender (spec 6.2): publish one [`PushMessage`] to an ntfy-compatible server and classify the answer
//! the way a real ntfy (v2.13) means it: 2xx delivered; 401/403 authentication failed; 429 rate
//! limited (no `Retry-After`, so we back off on our own); 5xx and connection errors unreachable; 400/404/413
//! and other 4xx are configuration or size errors and are not retried. Of an error answer at most 64 KiB is
//! read (`crate::http::read_error_body`).
//!
//! Building the request is `message.rs`, the body text `summary.rs`. Retrying is the caller's choice
//! ([`NtfySender::publish_with_retries`] for a bounded retry, the outbox worker for a durable one).

mod message;
mod subscribe;
mod summary;

pub use crate::http::cut_to_bytes;
pub use message::{header_value, PushMessage, PushOverrides, MAX_BODY_BYTES, MAX_TITLE_BYTES};
pub use subscribe::{subscribe, subscribe_with, IDLE_TIMEOUT, MAX_LINE_BYTES};
pub use summary::{body_text, summary};

use crate::envelope::Envelope;
use crate::kinds::UnknownKind;
use crate::retry::{RetryPolicy, Transient};
use std::time::Duration;
use svc_config::NtfyConfig;

/// One publish attempt is bounded by this.
pub const PUSH_TIMEOUT: Duration = Duration::from_secs(15);

/// Publishes to one push server.
#[derive(Debug, Clone)]
pub struct NtfySender {
    client: reqwest::Client,
    config: NtfyConfig,
    timeout: Duration,
}

/// Why a publish failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    /// No connection, or the attempt timed out.
    #[error("push server {server} unreachable: {reason}")]
    Unreachable {
        /// The configured server URL.
        server: String,
        /// `connection refused`, `timed out`, …
        reason: String,
    },
    /// A 5xx answer.
    #[error("push server {server} unavailable: HTTP {status}: {reason}")]
    ServerError {
        /// The configured server URL.
        server: String,
        /// The status.
        status: u16,
        /// What the server said.
        reason: String,
    },
    /// 429: too many requests.
    #[error("push server {server} is rate limiting us (HTTP 429): {reason}")]
    RateLimited {
        /// The configured server URL.
        server: String,
        /// What the server said.
        reason: String,
    },
    /// 401 or 403: the token is missing, wrong or not allowed on the topic.
    #[error("push server {server} refused authentication (HTTP {status}): {reason}")]
    AuthFailed {
        /// The configured server URL.
        server: String,
        /// 401 or 403.
        status: u16,
        /// What the server said.
        reason: String,
    },
    /// A subscription stream the client cannot read: a line longer than [`MAX_LINE_BYTES`].
    #[error("push server {server} sent an unreadable stream: {reason}")]
    Protocol {
        /// The configured server URL.
        server: String,
        /// What was wrong.
        reason: String,
    },
    /// 400/404/413 or another 4xx (or a 3xx): the request itself is wrong; retrying will not help.
    #[error("push server {server} rejected the message (HTTP {status}): {reason}")]
    Rejected {
        /// The configured server URL.
        server: String,
        /// The status.
        status: u16,
        /// What the server said.
        reason: String,
    },
}

impl PushError {
    /// Whether this is an authentication failure (`svc-notify` exit 3).
    pub fn is_auth(&self) -> bool {
        matches!(self, PushError::AuthFailed { .. })
    }
}

impl Transient for PushError {
    fn is_transient(&self) -> bool {
        matches!(self, PushError::Unreachable { .. } | PushError::ServerError { .. } | PushError::RateLimited { .. })
    }
}

impl NtfySender {
    /// A sender for the push block `config`.
    pub fn new(client: reqwest::Client, config: NtfyConfig) -> NtfySender {
        NtfySender { client, config, timeout: PUSH_TIMEOUT }
    }

    /// The same sender with another per-attempt timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> NtfySender {
        self.timeout = timeout;
        self
    }

    /// The push block.
    pub fn config(&self) -> &NtfyConfig {
        &self.config
    }

    /// The request for an envelope.
    pub fn message(&self, env: &Envelope, overrides: &PushOverrides) -> Result<PushMessage, UnknownKind> {
        PushMessage::build(env, &self.config, overrides)
    }

    /// One attempt.
    pub async fn publish(&self, msg: &PushMessage) -> Result<(), PushError> {
        let server = self.config.server.clone();
        let mut req = self.client.post(&msg.url).timeout(self.timeout).body(msg.body.clone());
        for (name, value) in msg.headers(true) {
            req = req.header(name, value);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| PushError::Unreachable { server: server.clone(), reason: crate::http::describe(&e) })?;
        let status = resp.status().as_u16();
        if resp.status().is_success() {
            return Ok(());
        }
        let reason = crate::http::reason_from_body(&crate::http::read_error_body(resp).await);
        Err(match status {
            401 | 403 => PushError::AuthFailed { server, status, reason },
            429 => PushError::RateLimited { server, reason },
            500..=599 => PushError::ServerError { server, status, reason },
            _ => PushError::Rejected { server, status, reason },
        })
    }

    /// One attempt, then up to `retries` more on transient failures, waiting per `policy`.
    pub async fn publish_with_retries(
        &self,
        msg: &PushMessage,
        policy: &RetryPolicy,
        retries: u32,
    ) -> Result<(), PushError> {
        policy
            .run(retries, || self.publish(msg), |e, wait| tracing::warn!(error = %e, ?wait, "push failed, retrying"))
            .await
    }
}
