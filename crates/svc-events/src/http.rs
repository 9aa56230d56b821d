//! The HTTP client every sender shares, bounded reads of what a receiver answers, and short human descriptions
//! of transport failures (cut to a length on a character boundary by [`cut_to_bytes`], as the push sender cuts
//! its title and body).
//!
//! Redirects are never followed (a 3xx is a failed delivery: senders of webhooks treat it so); per-attempt
//! timeouts are set per request by each sender, not here. A receiver or push server decides how much it sends
//! back, so nothing here reads an answer body whole: [`read_error_body`] keeps at most [`ERROR_BODY_CAP`]
//! bytes and reads for at most [`ERROR_BODY_TIME`], then drops the connection.

use std::error::Error as _;
use std::time::Duration;

/// The most of an error answer's body that is read (the rest is never received: the connection is dropped).
pub const ERROR_BODY_CAP: usize = 64 * 1024;

/// The longest an error answer's body is read for (the attempt's own timeout may end it sooner).
pub const ERROR_BODY_TIME: Duration = Duration::from_secs(5);

/// A client for event delivery: no redirects, a connect timeout, a recognisable user agent.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(10))
        .user_agent(concat!("svc-events/", env!("CARGO_PKG_VERSION")))
        .build()
        .unwrap_or_else(|_| reqwest::Client::new())
}

/// The first [`ERROR_BODY_CAP`] bytes of an answer's body, read for at most [`ERROR_BODY_TIME`], as text
/// (lossy UTF-8). A body cut short or failing midway gives what arrived; the response (and with it the
/// connection) is dropped either way, so an endless body costs 64 KiB, not memory without bound.
pub async fn read_error_body(resp: reqwest::Response) -> String {
    let bytes = read_capped(resp, ERROR_BODY_CAP, ERROR_BODY_TIME).await;
    String::from_utf8_lossy(&bytes).into_owned()
}

/// At most `cap` bytes of `resp`'s body, read for at most `time`.
pub async fn read_capped(mut resp: reqwest::Response, cap: usize, time: Duration) -> Vec<u8> {
    let mut kept: Vec<u8> = Vec::new();
    let read = async {
        while kept.len() < cap {
            match resp.chunk().await {
                Ok(Some(chunk)) => {
                    let room = cap - kept.len();
                    kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
                Ok(None) | Err(_) => break,
            }
        }
    };
    // Running out of time keeps what arrived so far.
    let _ = tokio::time::timeout(time, read).await;
    kept
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
    cut_to_bytes(line, 200).to_string()
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
pub fn cut_to_bytes(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
