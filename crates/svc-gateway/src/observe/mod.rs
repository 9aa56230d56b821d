//! What the gateway tells its operator about each request: one structured log line (target `svc::request`,
//! text or JSON by `server.log_format`) and the Prometheus series of [`metrics`], both from one
//! [`RequestLine`] made where the request ends: at settlement for a model request that reached a deployment
//! (for a stream, when the stream ends), in the endpoint for one refused before (400, 403, 404, 429, 503), in
//! the request middleware for every other request.
//!
//! What this module does not do: decide anything. It reads what the pipeline decided.

mod gauges;
pub mod line;
pub mod metrics;
mod register;
mod series;
mod timings;

pub use metrics::Metrics;

use std::time::Duration;
use svc_budget::{Money, Usage};
use svc_front::{Api, Caller};
use svc_keys::Principal;

/// Marks a response whose request line is (or will be, when its stream ends) written by the pipeline, so the
/// request middleware does not write a second one; with the time the request waited for the upstream, which
/// `x-svc-overhead-duration-ms` leaves out. One extension rather than two: each is an insertion into the
/// response's map of extensions, the first one allocating it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Logged {
    /// Time spent waiting for the upstream.
    pub upstream_wait: Duration,
}

/// Why a request was refused before any upstream was called, for `svc_refusals_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A budget could not pay for the request (429 `Budget exceeded`).
    Budget,
    /// A key's or team's rpm/tpm limit (429 `rate_limit_exceeded`).
    RateLimit,
    /// `server.max_in_flight` requests were in flight (503).
    Overload,
    /// Fleet mode: a budget this node could not judge (503 `budget_unavailable`: the store cannot be asked, or
    /// the room is held by a silent node or moving between nodes).
    BudgetUnavailable,
}

impl Refusal {
    /// `budget`, `rate_limit`, `overload` or `budget_unavailable`.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Budget => "budget",
            Refusal::RateLimit => "rate_limit",
            Refusal::Overload => "overload",
            Refusal::BudgetUnavailable => "budget_unavailable",
        }
    }

    /// The refusal an error given before any upstream call stands for, by its type, if it is one.
    pub fn of(kind: &str) -> Option<Refusal> {
        match kind {
            "budget_exceeded" => Some(Refusal::Budget),
            "rate_limit_exceeded" => Some(Refusal::RateLimit),
            "overloaded_error" => Some(Refusal::Overload),
            "budget_unavailable" => Some(Refusal::BudgetUnavailable),
            _ => None,
        }
    }
}

/// The attempts a request took: how many, whether a fallback alias served it, and the time spent waiting for
/// upstreams.
#[derive(Debug, Clone, Copy, Default)]
pub struct Attempts {
    /// Upstream attempts made (0 when none was).
    pub count: u32,
    /// A fallback alias's deployment answered.
    pub fallback: bool,
    /// Time spent waiting for upstreams (and between attempts) until the answer's headers.
    pub waited: Duration,
}

/// Everything one request line and its metrics say.
#[derive(Debug)]
pub struct RequestLine<'a> {
    /// `x-request-id`.
    pub request_id: &'a str,
    /// The client API.
    pub api: Api,
    /// Who called.
    pub principal: Option<&'a Principal>,
    /// Client family and session.
    pub caller: Option<&'a Caller>,
    /// The alias asked for (empty when the body was not read).
    pub alias: &'a str,
    /// The configured alias that serves it (a wildcard alias's pattern for a name it matched; empty for an
    /// unknown name): the metrics' label, bounded by the config where `alias` is whatever the client sent.
    pub alias_label: &'a str,
    /// The deployment that served it, and its provider (empty when none was called).
    pub deployment: &'a str,
    /// `openai`, `anthropic`, `mock`.
    pub provider: &'a str,
    /// The status the client got.
    pub status: u16,
    /// Tokens as charged.
    pub usage: Usage,
    /// What was charged.
    pub cost: Money,
    /// From arrival to the end of the answer (of the stream, for a stream).
    pub latency: Duration,
    /// Time to the first byte of a stream's answer.
    pub first_byte: Option<Duration>,
    /// The attempts.
    pub attempts: Attempts,
    /// Why it was refused, when it was.
    pub refusal: Option<Refusal>,
}

impl RequestLine<'_> {
    /// Time in the gateway not spent waiting for an upstream, until the answer's first byte (its headers for a
    /// plain answer).
    pub fn overhead(&self) -> Duration {
        self.first_byte.unwrap_or(self.latency).saturating_sub(self.attempts.waited)
    }

    /// Writes the line and counts the request in `metrics`: what every request that ends does.
    pub fn record(&self, metrics: &Metrics) {
        self.log();
        metrics.request(self);
    }

    /// Writes the line (target `svc::request`, level info; never a secret: a key is named by its alias).
    fn log(&self) {
        use line::Field::{Bool, Str, Uint};
        let key = self.principal.and_then(Principal::key);
        let master = matches!(self.principal, Some(Principal::Master));
        line::emit(&[
            ("request_id", Some(Str(self.request_id))),
            ("api", Some(Str(self.api.as_str()))),
            ("key_alias", key.and_then(|k| k.alias.as_deref()).or(master.then_some("master")).map(Str)),
            ("key_id", key.map(|k| Str(k.id.as_str()))),
            ("team", key.map(|k| Str(k.team_id.as_str()))),
            ("agent_role", key.and_then(|k| k.agent_role.as_deref()).map(Str)),
            ("client", self.caller.and_then(|c| c.client.as_deref()).map(Str)),
            ("session_id", self.caller.and_then(|c| c.session.as_deref()).map(Str)),
            ("model", (!self.alias.is_empty()).then_some(Str(self.alias))),
            ("deployment", (!self.deployment.is_empty()).then_some(Str(self.deployment))),
            ("status", Some(Uint(u64::from(self.status)))),
            ("prompt_tokens", Some(Uint(self.usage.prompt_tokens))),
            ("completion_tokens", Some(Uint(self.usage.completion_tokens))),
            ("cost", Some(line::Field::Fixed { value: self.cost.nanos(), scale: 9 })),
            ("latency_ms", Some(millis(self.latency))),
            ("ttfb_ms", self.first_byte.map(millis)),
            ("overhead_ms", Some(millis(self.overhead()))),
            ("retries", Some(Uint(u64::from(self.attempts.count.saturating_sub(1))))),
            ("fallback", Some(Bool(self.attempts.fallback))),
            ("refused", self.refusal.map(|r| Str(r.as_str()))),
        ]);
    }
}

/// A duration in milliseconds, to the microsecond.
fn millis(d: Duration) -> line::Field<'static> {
    line::Field::Fixed { value: i64::try_from(d.as_micros()).unwrap_or(i64::MAX), scale: 3 }
}

/// The longest path a request line holds, in bytes: a request's URI may be 64 KiB, and a client must not make
/// every line of the log that long (README, "Limits").
pub const MAX_LOGGED_PATH: usize = 256;
/// The longest method a request line holds, in bytes.
const MAX_LOGGED_METHOD: usize = 16;

/// `text` cut to at most `max` bytes, at a character boundary.
fn cut(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The line of a request that is not a model request (admin API, health, metrics, a refused key).
pub fn log_other(request_id: &str, method: &str, path: &str, status: u16, latency: Duration) {
    use line::Field::{Str, Uint};
    line::emit(&[
        ("request_id", Some(Str(request_id))),
        ("method", Some(Str(cut(method, MAX_LOGGED_METHOD)))),
        ("path", Some(Str(cut(path, MAX_LOGGED_PATH)))),
        ("status", Some(Uint(u64::from(status)))),
        ("latency_ms", Some(millis(latency))),
    ]);
}
