//! `svc events tail [--since 10m] [--json] [--reconnect-timeout 60]`: follow the push topic
//! (`{server}/{topic}/json`, ntfy's JSON stream, with the push block's token) and print one readable line per
//! message, or the raw JSON lines.
//!
//! 1. Only the push block of the configuration is read (`svc_config::load_push_file`, done by the caller), so
//!    secrets the rest of the file names (master key, webhook secrets) need not be set.
//! 2. When the stream ends (the server closed it, went away, or fell silent) the command says so on stderr and
//!    subscribes again with backoff, resuming after the last message it printed (ntfy's `since=<id>`; before
//!    any message, from the time the first subscription opened), so nothing is lost or printed twice.
//! 3. When no subscription opens within `--reconnect-timeout` seconds of the stream ending (or of the start),
//!    it exits 2 with the reason. A refused token or request exits 1; stdout closed (`| head`) exits 0.

use std::io::Write as _;
use std::ops::ControlFlow;
use std::time::Duration;
use svc_config::NtfyConfig;
use svc_events::senders::ntfy::{subscribe, PushError};
use svc_events::RetryPolicy;

/// `svc events …`; the doc comments are the commands' help.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum EventsCommand {
    /// Print the fleet's events as they reach the push server, one line each, until interrupted
    Tail {
        /// Also print the events the push server kept from this far back: a duration (10m, 2h), a Unix
        /// time, or all
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// Print the push server's raw JSON lines instead of readable ones
        #[arg(long)]
        json: bool,
        /// Give up (exit 2) when the push server cannot be reached again for this many seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 60)]
        reconnect_timeout: u64,
    },
}

/// Why `svc events tail` stopped.
#[derive(Debug, thiserror::Error)]
pub enum TailError {
    /// No push block.
    #[error("{0}")]
    Config(String),
    /// The push server refused the subscription (token, topic): retrying will not help.
    #[error("{0}")]
    Refused(String),
    /// The push server could not be reached within the reconnect timeout.
    #[error("{0}")]
    Unreachable(String),
}

impl TailError {
    /// The process exit code: 1 configuration or refusal, 2 unreachable.
    pub fn exit_code(&self) -> u8 {
        match self {
            TailError::Config(_) | TailError::Refused(_) => 1,
            TailError::Unreachable(_) => 2,
        }
    }
}

/// Waits between subscription attempts: 250 ms doubling to 5 s, jittered.
const RECONNECT: RetryPolicy = RetryPolicy {
    min_delay: Duration::from_millis(250),
    max_delay: Duration::from_secs(5),
    factor: 2.0,
    max_retry_after: Duration::from_secs(5),
    jitter: true,
};

/// Runs a `svc events` command with the configuration's push block, until stdout is closed or the push
/// server stays away.
pub async fn run(cmd: EventsCommand, push: Option<&NtfyConfig>) -> Result<(), TailError> {
    let EventsCommand::Tail { since, json, reconnect_timeout } = cmd;
    let Some(push) = push else {
        return Err(TailError::Config(
            "no push block `notifications.ntfy` in the configuration: nothing to tail".into(),
        ));
    };
    let client = svc_events::http::client();
    let timeout = Duration::from_secs(reconnect_timeout);
    let mut state = Resume { last_id: None, opened_at: None, since };
    // Set while the stream is down: when that began and the attempts made since.
    let mut outage: Option<(tokio::time::Instant, u32)> = None;
    let mut connected_once = false;
    loop {
        let resume = state.resume();
        let mut opened = false;
        let mut stdout_closed = false;
        let result = subscribe(&client, push, resume.as_deref(), false, |line| {
            if !opened {
                opened = true;
                state.opened_at.get_or_insert_with(|| chrono::Utc::now().timestamp());
                if outage.take().is_some() {
                    eprintln!("svc: reconnected to push server {}", push.server);
                }
            }
            state.saw(line);
            let text = if json { Some(line.to_string()) } else { readable(line) };
            match text.map(|t| writeln!(std::io::stdout().lock(), "{t}")) {
                Some(Err(_)) => {
                    stdout_closed = true;
                    ControlFlow::Break(())
                }
                _ => ControlFlow::Continue(()),
            }
        })
        .await;
        if stdout_closed {
            return Ok(());
        }
        connected_once |= opened;
        let why = match result {
            Ok(()) => format!("push server {} closed the stream", push.server),
            Err(e @ (PushError::AuthFailed { .. } | PushError::Rejected { .. })) => {
                return Err(TailError::Refused(e.to_string()))
            }
            Err(e) => e.to_string(),
        };
        let (began, attempts) = outage.get_or_insert_with(|| {
            let from = match (&state.last_id, state.opened_at) {
                (Some(id), _) => format!("resuming after message {id}"),
                (None, Some(t)) => format!("resuming from {}", unix_time(t)),
                (None, None) => "from the start".to_string(),
            };
            eprintln!("svc: {why}; reconnecting for up to {reconnect_timeout} s ({from})");
            (tokio::time::Instant::now(), 0)
        });
        *attempts += 1;
        let wait = RECONNECT.delay_before(*attempts + 1, None);
        let left = timeout.saturating_sub(began.elapsed());
        if left.is_zero() {
            let verb = if connected_once { "reconnect" } else { "connect" };
            return Err(TailError::Unreachable(format!(
                "could not {verb} to push server {} within {reconnect_timeout} s: {why}",
                push.server
            )));
        }
        tokio::time::sleep(wait.min(left)).await;
    }
}

/// Where a new subscription starts so that nothing is printed twice or missed.
struct Resume {
    /// The id of the last message printed.
    last_id: Option<String>,
    /// Unix seconds when the first subscription opened.
    opened_at: Option<i64>,
    /// `--since`.
    since: Option<String>,
}

impl Resume {
    /// `since=` of the next subscription: after the last message, else from the first opening (messages of
    /// that second or later: none was printed), else what the user asked for.
    fn resume(&self) -> Option<String> {
        self.last_id.clone().or_else(|| self.opened_at.map(|t| t.to_string())).or_else(|| self.since.clone())
    }

    /// Remembers the id of a `message` line (other events' ids, such as `open`'s, are not messages).
    fn saw(&mut self, line: &str) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { return };
        if v.get("event").and_then(|e| e.as_str()) == Some("message") {
            if let Some(id) = v.get("id").and_then(|i| i.as_str()) {
                self.last_id = Some(id.to_string());
            }
        }
    }
}

fn unix_time(t: i64) -> String {
    chrono::DateTime::from_timestamp(t, 0).map(|d| d.format("%Y-%m-%d %H:%M:%SZ").to_string()).unwrap_or_default()
}

/// `2026-11-21 09:30:00Z  high     task.done  [n1,executor]  Fix the build` for a `message` event; other
/// events (`open`, `keepalive`, …) print nothing.
pub fn readable(line: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v.get("event").and_then(|e| e.as_str()) != Some("message") {
        return None;
    }
    let time = v.get("time").and_then(|t| t.as_i64()).map(unix_time).unwrap_or_default();
    let priority = match v.get("priority").and_then(|p| p.as_u64()).unwrap_or(3) {
        1 => "min",
        2 => "low",
        4 => "high",
        5 => "urgent",
        _ => "default",
    };
    let title = v.get("title").and_then(|t| t.as_str()).unwrap_or("");
    let tags: Vec<&str> = v
        .get("tags")
        .and_then(|t| t.as_array())
        .map(|a| a.iter().filter_map(|t| t.as_str()).collect())
        .unwrap_or_default();
    let message = v.get("message").and_then(|m| m.as_str()).unwrap_or("");
    let message: String = message.split_whitespace().collect::<Vec<_>>().join(" ");
    Some(format!("{time}  {priority:<7}  {title}  [{}]  {message}", tags.join(",")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn readable_lines() {
        let line = r#"{"id":"x","time":1795238535,"event":"message","topic":"t","title":"task.done","message":"Fix\nit","priority":4,"tags":["n1","exec"]}"#;
        assert_eq!(readable(line).unwrap(), "2026-11-21 05:22:15Z  high     task.done  [n1,exec]  Fix it");
        assert_eq!(readable(r#"{"id":"x","time":1,"event":"open","topic":"t"}"#), None);
        assert_eq!(readable("not json"), None);
    }

    #[test]
    fn resuming_follows_the_last_message() {
        let mut r = Resume { last_id: None, opened_at: None, since: Some("10m".into()) };
        assert_eq!(r.resume().as_deref(), Some("10m"));
        r.opened_at = Some(1_795_238_535);
        r.saw(r#"{"id":"open00000000","event":"open","topic":"t"}"#);
        assert_eq!(r.resume().as_deref(), Some("1795238535"), "an `open` event is not a message");
        r.saw(r#"{"id":"KCBEBnrk9c4A","event":"message","topic":"t","message":"m"}"#);
        assert_eq!(r.resume().as_deref(), Some("KCBEBnrk9c4A"));
    }
}
