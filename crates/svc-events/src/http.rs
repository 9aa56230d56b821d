//! The HTTP client every sink shares, and short human descriptions of transport failures.
//!
//! Redirects are never followed (a 3xx is a failed delivery, reference webhooks-and-hooks.md); per-attempt
//! timeouts are set per request by each sink, not here.

use std::error::Error as _;
use std::time::Duration;

/// A client for event delivery: no redirects, a connect timeout, a recognisable user agent.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(10))
        .user_agent(concat!("svc-events/", env!("CARGO_PKG_VERSION")))
        .build()
        .unwrap_or_else(|_| reqwest::Client::new())
}

/// `connection refused`, `timed out`, … : the innermost cause of a transport error, without the URL.
pub fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return "timed out".to_string();
    }
    let mut source = e.source();
    let mut last = None;
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return io.kind().to_string();
        }
        last = Some(s.to_string());
        source = s.source();
    }
    last.unwrap_or_else(|| if e.is_connect() { "connection failed".into() } else { "request failed".into() })
}

/// The reason a server gave: ntfy's `{"error": …}` field, else the first line of the body, at most 200 bytes.
pub fn reason_from_body(body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(body) {
        if let Some(e) = v
            .get("error")
            .and_then(|e| e.as_str().map(str::to_string).or_else(|| e.get("message")?.as_str().map(str::to_string)))
        {
            return match v.get("code").and_then(|c| c.as_u64()) {
                Some(code) => format!("{e} (code {code})"),
                None => e,
            };
        }
    }
    let line = body.lines().next().unwrap_or("").trim();
    crate::sinks::ntfy::cut_to_bytes(line, 200).to_string()
}
