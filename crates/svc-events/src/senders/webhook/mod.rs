//! The webhook sender (spec 6.4): POST the envelope JSON to one endpoint, signed, in one attempt. Retrying is the
//! caller's: the gateway's outbox worker (at most `1 + retry` attempts, waits from `RetryPolicy::WEBHOOK`) or
//! `svc-notify` (`RetryPolicy::run` around single attempts).
//!
//! 1. Headers: `Content-Type: application/json`, `X-SVC-Event` (the kind), `X-SVC-Delivery` (the caller's id,
//!    the same on every retry so receivers can de-duplicate), `X-SVC-Origin` (who posted the event, when
//!    known), `X-SVC-Signature` (spec 6.4, over the body alone) and the Standard Webhooks trio `webhook-id`
//!    (the delivery id), `webhook-timestamp` (Unix seconds of this attempt) and `webhook-signature` (over id,
//!    timestamp and body, so a receiver can refuse replays), see `sign.rs`.
//! 2. Each attempt is bounded by `timeout_seconds`; redirects are not followed (`crate::http::client`); of an
//!    error answer at most 64 KiB is read (`crate::http::read_error_body`).
//! 3. 2xx is success. Connection errors, timeouts, 408, 429 and 5xx are transient (with the `Retry-After` the
//!    receiver sent, seconds or an HTTP date); 410 Gone and every other status (other 4xx, 3xx) are permanent.
//! 4. The URL is shown redacted everywhere, errors included (`redact.rs`); only the request uses it whole.
//!
//! The body is sent byte-identical on every attempt. Which webhooks take a kind is `filter.rs`.

mod filter;
mod redact;
mod sign;

pub use filter::accepts;
pub use redact::redact_url;
pub use sign::{sign, sign_standard, verify};

use crate::retry::Transient;
use bytes::Bytes;
use std::time::Duration;
use svc_config::WebhookConfig;

/// Header carrying the signature.
pub const SIGNATURE_HEADER: &str = "X-SVC-Signature";
/// Header carrying the event kind.
pub const EVENT_HEADER: &str = "X-SVC-Event";
/// Header carrying the delivery id.
pub const DELIVERY_HEADER: &str = "X-SVC-Delivery";
/// Header naming who posted the event (`gateway`, `master`, `key:<id>`, `svc-notify`).
pub const ORIGIN_HEADER: &str = "X-SVC-Origin";
/// Standard Webhooks: the delivery id.
pub const STANDARD_ID_HEADER: &str = "webhook-id";
/// Standard Webhooks: Unix seconds of the attempt.
pub const STANDARD_TIMESTAMP_HEADER: &str = "webhook-timestamp";
/// Standard Webhooks: `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`.
pub const STANDARD_SIGNATURE_HEADER: &str = "webhook-signature";

/// Delivers to one configured webhook.
#[derive(Debug, Clone)]
pub struct WebhookSender {
    client: reqwest::Client,
    config: WebhookConfig,
    shown_url: String,
}

/// What one delivery of an event to a webhook carries besides the body (the same on every attempt).
#[derive(Debug, Clone, Copy)]
pub struct WebhookDelivery<'a> {
    /// The kind (`X-SVC-Event`).
    pub kind: &'a str,
    /// The stable delivery id (`X-SVC-Delivery`, `webhook-id`).
    pub delivery_id: &'a str,
    /// Who posted the event (`X-SVC-Origin`), when known.
    pub origin: Option<&'a str>,
}

/// Why an attempt failed. `url` is always the redacted URL ([`redact_url`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    /// No connection, or the attempt timed out.
    #[error("webhook {url} unreachable: {reason}")]
    Unreachable {
        /// The endpoint, redacted.
        url: String,
        /// `connection refused`, `timed out`, …
        reason: String,
    },
    /// 408, 429 or 5xx.
    #[error("webhook {url} answered HTTP {status}: {reason}")]
    Unavailable {
        /// The endpoint, redacted.
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
        /// The endpoint, redacted.
        url: String,
    },
    /// Any other non-2xx (other 4xx, a redirect): permanent.
    #[error("webhook {url} rejected the delivery (HTTP {status}): {reason}")]
    Rejected {
        /// The endpoint, redacted.
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

impl WebhookSender {
    /// A sender for one `webhooks` entry.
    pub fn new(client: reqwest::Client, config: WebhookConfig) -> WebhookSender {
        let shown_url = redact_url(&config.url);
        WebhookSender { client, config, shown_url }
    }

    /// The webhook's configuration.
    pub fn config(&self) -> &WebhookConfig {
        &self.config
    }

    /// The URL as it may be shown ([`redact_url`]).
    pub fn shown_url(&self) -> &str {
        &self.shown_url
    }

    /// Whether this webhook's `events` list takes `kind`.
    pub fn accepts(&self, kind: &str) -> bool {
        accepts(&self.config.events, kind)
    }

    /// The headers of one attempt made at `timestamp` (Unix seconds), signatures included.
    pub fn headers(&self, body: &[u8], d: &WebhookDelivery<'_>, timestamp: i64) -> Vec<(&'static str, String)> {
        let secret = self.config.secret.expose();
        let timestamp = timestamp.to_string();
        let standard = sign_standard(&self.config.standard_key(), d.delivery_id, &timestamp, body);
        let mut out = vec![
            ("Content-Type", "application/json".to_string()),
            (EVENT_HEADER, d.kind.to_string()),
            (DELIVERY_HEADER, d.delivery_id.to_string()),
        ];
        if let Some(origin) = d.origin {
            out.push((ORIGIN_HEADER, origin.to_string()));
        }
        out.extend([
            (SIGNATURE_HEADER, sign(secret.as_bytes(), body)),
            (STANDARD_ID_HEADER, d.delivery_id.to_string()),
            (STANDARD_TIMESTAMP_HEADER, timestamp),
            (STANDARD_SIGNATURE_HEADER, standard),
        ]);
        out
    }

    /// The headers a dry run shows: the real ones where they do not depend on the delivery, a description where
    /// they do (each delivery gets its id, each attempt its time and its `webhook-signature`).
    pub fn preview_headers(&self, body: &[u8], kind: &str, origin: &str) -> Vec<(&'static str, String)> {
        vec![
            ("Content-Type", "application/json".to_string()),
            (EVENT_HEADER, kind.to_string()),
            (DELIVERY_HEADER, "<new id per delivery>".to_string()),
            (ORIGIN_HEADER, origin.to_string()),
            (SIGNATURE_HEADER, sign(self.config.secret.expose().as_bytes(), body)),
            (STANDARD_ID_HEADER, "<the delivery id>".to_string()),
            (STANDARD_TIMESTAMP_HEADER, "<Unix seconds of each attempt>".to_string()),
            (STANDARD_SIGNATURE_HEADER, "v1,<per attempt: HMAC-SHA256 of id.timestamp.body, base64>".to_string()),
        ]
    }

    /// One attempt, stamped now.
    pub async fn attempt(&self, body: Bytes, d: &WebhookDelivery<'_>) -> Result<(), WebhookError> {
        let headers = self.headers(&body, d, chrono::Utc::now().timestamp());
        let url = || self.shown_url.clone();
        let mut req = self.client.post(&self.config.url).timeout(self.config.timeout).body(body);
        for (name, value) in &headers {
            req = req.header(*name, value.as_str());
        }
        let resp = req
            .send()
            .await
            .map_err(|e| WebhookError::Unreachable { url: url(), reason: crate::http::describe(&e) })?;
        let status = resp.status().as_u16();
        if resp.status().is_success() {
            return Ok(());
        }
        let retry_after =
            resp.headers().get(reqwest::header::RETRY_AFTER).and_then(|v| v.to_str().ok()).and_then(parse_retry_after);
        let reason = crate::http::reason_from_body(&crate::http::read_error_body(resp).await);
        Err(match status {
            408 | 429 | 500..=599 => WebhookError::Unavailable { url: url(), status, reason, retry_after },
            410 => WebhookError::Gone { url: url() },
            _ => WebhookError::Rejected { url: url(), status, reason },
        })
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
