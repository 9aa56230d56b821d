//! The webhook sink (spec 6.4): POST the envelope JSON to one endpoint, signed, with retries.
//!
//! 1. Headers: `Content-Type: application/json`, `X-SVC-Event` (the kind), `X-SVC-Delivery` (the caller's id,
//!    the same on every retry so receivers can de-duplicate) and `X-SVC-Signature` (`sign.rs`).
//! 2. Each attempt is bounded by `timeout_seconds`; redirects are not followed (`crate::http::client`).
//! 3. 2xx is success. Connection errors, timeouts, 408, 429 and 5xx are retried up to `retry` times after the
//!    first attempt, with exponential backoff and jitter, honouring `Retry-After` (seconds or an HTTP date).
//!    410 Gone and every other status (other 4xx, 3xx) fail at once.
//!
//! The body is signed once and sent byte-identical on every attempt. Which webhooks take a kind is `filter.rs`.

mod filter;
mod sign;

pub use filter::{accepts, matches};
pub use sign::{sign, verify};

use crate::retry::{RetryPolicy, Transient};
use bytes::Bytes;
use std::time::Duration;
use svc_config::WebhookConfig;

/// Header carrying the signature.
pub const SIGNATURE_HEADER: &str = "X-SVC-Signature";
/// Header carrying the event kind.
pub const EVENT_HEADER: &str = "X-SVC-Event";
/// Header carrying the delivery id.
pub const DELIVERY_HEADER: &str = "X-SVC-Delivery";

/// Delivers to one configured webhook.
#[derive(Debug, Clone)]
pub struct WebhookSink {
    client: reqwest::Client,
    config: WebhookConfig,
    policy: RetryPolicy,
}

/// Why a delivery failed (after its retries, when the failure was transient).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    /// No connection, or the attempt timed out.
    #[error("webhook {url} unreachable: {reason}")]
    Unreachable {
        /// The endpoint.
        url: String,
        /// `connection refused`, `timed out`, …
        reason: String,
    },
    /// 408, 429 or 5xx.
    #[error("webhook {url} answered HTTP {status}: {reason}")]
    Unavailable {
        /// The endpoint.
        url: String,
        /// The status.
        status: u16,
        /// What the endpoint said.
        reason: String,
        /// Its `Retry-After`, when it sent one.
        retry_after: Option<Duration>,
    },
    /// 410: the receiver asks us to stop.
    #[error("webhook {url} is gone (HTTP 410)")]
    Gone {
        /// The endpoint.
        url: String,
    },
    /// Any other non-2xx (other 4xx, a redirect): permanent.
    #[error("webhook {url} rejected the delivery (HTTP {status}): {reason}")]
    Rejected {
        /// The endpoint.
        url: String,
        /// The status.
        status: u16,
        /// What the endpoint said.
        reason: String,
    },
}

impl Transient for WebhookError {
    fn is_transient(&self) -> bool {
        matches!(self, WebhookError::Unreachable { .. } | WebhookError::Unavailable { .. })
    }
    fn retry_after(&self) -> Option<Duration> {
        match self {
            WebhookError::Unavailable { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

impl WebhookSink {
    /// A sink for one `webhooks` entry with the default [`RetryPolicy::WEBHOOK`].
    pub fn new(client: reqwest::Client, config: WebhookConfig) -> WebhookSink {
        WebhookSink { client, config, policy: RetryPolicy::WEBHOOK }
    }

    /// The same sink with another backoff policy.
    pub fn with_policy(mut self, policy: RetryPolicy) -> WebhookSink {
        self.policy = policy;
        self
    }

    /// The webhook's configuration.
    pub fn config(&self) -> &WebhookConfig {
        &self.config
    }

    /// Whether this webhook's `events` list takes `kind`.
    pub fn accepts(&self, kind: &str) -> bool {
        accepts(&self.config.events, kind)
    }

    /// The headers of a delivery, including the signature.
    pub fn headers(&self, body: &[u8], kind: &str, delivery_id: &str) -> Vec<(&'static str, String)> {
        vec![
            ("Content-Type", "application/json".to_string()),
            (EVENT_HEADER, kind.to_string()),
            (DELIVERY_HEADER, delivery_id.to_string()),
            (SIGNATURE_HEADER, sign(self.config.secret.expose().as_bytes(), body)),
        ]
    }

    /// One attempt.
    pub async fn attempt(&self, body: Bytes, headers: &[(&'static str, String)]) -> Result<(), WebhookError> {
        let url = self.config.url.clone();
        let mut req = self.client.post(&url).timeout(self.config.timeout).body(body);
        for (name, value) in headers {
            req = req.header(*name, value.as_str());
        }
        let resp = req
            .send()
            .await
            .map_err(|e| WebhookError::Unreachable { url: url.clone(), reason: crate::http::describe(&e) })?;
        let status = resp.status().as_u16();
        if resp.status().is_success() {
            return Ok(());
        }
        let retry_after =
            resp.headers().get(reqwest::header::RETRY_AFTER).and_then(|v| v.to_str().ok()).and_then(parse_retry_after);
        let reason = crate::http::reason_from_body(&resp.text().await.unwrap_or_default());
        Err(match status {
            408 | 429 | 500..=599 => WebhookError::Unavailable { url, status, reason, retry_after },
            410 => WebhookError::Gone { url },
            _ => WebhookError::Rejected { url, status, reason },
        })
    }

    /// The first attempt and up to `retry` more (spec 6.4: `retry` counts retries after the first attempt).
    pub async fn deliver(&self, body: Bytes, kind: &str, delivery_id: &str) -> Result<(), WebhookError> {
        let headers = self.headers(&body, kind, delivery_id);
        self.policy
            .run(
                self.config.retry,
                || self.attempt(body.clone(), &headers),
                |e, wait| tracing::warn!(error = %e, delivery = delivery_id, ?wait, "webhook delivery failed, retrying"),
            )
            .await
    }
}

/// `Retry-After`: delay seconds, or an HTTP date (a date in the past means now).
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let when = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = when.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn retry_after_forms() {
        assert_eq!(parse_retry_after("120"), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after(" 0 "), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT"), Some(Duration::ZERO));
        let later = chrono::Utc::now() + chrono::Duration::seconds(90);
        let d = parse_retry_after(&later.format("%a, %d %b %Y %H:%M:%S GMT").to_string()).unwrap();
        assert!(d > Duration::from_secs(85) && d <= Duration::from_secs(90), "{d:?}");
        assert_eq!(parse_retry_after("soon"), None);
        assert_eq!(parse_retry_after("-5"), None);
    }

    #[test]
    fn classification() {
        let u =
            |status| WebhookError::Unavailable { url: "u".into(), status, reason: String::new(), retry_after: None };
        assert!(u(500).is_transient() && u(429).is_transient() && u(408).is_transient());
        assert!(WebhookError::Unreachable { url: "u".into(), reason: "timed out".into() }.is_transient());
        assert!(!WebhookError::Gone { url: "u".into() }.is_transient());
        assert!(!WebhookError::Rejected { url: "u".into(), status: 400, reason: String::new() }.is_transient());
    }
}
