//! `svc events tail [--since 10m] [--json]`: follow the push topic (`{server}/{topic}/json`, ntfy's JSON
//! stream, with the push block's token) and print one readable line per message, or the raw JSON lines.

use std::io::Write as _;
use std::ops::ControlFlow;
use std::process::ExitCode;
use svc_config::Config;

/// `svc events …`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum EventsCommand {
    /// Follow the fleet's push topic.
    Tail {
        /// Also print cached messages from this far back: a duration (`10m`, `2h`), a Unix time or `all`.
        #[arg(long)]
        since: Option<String>,
        /// Print ntfy's raw JSON lines (every event, `open` included) instead of readable lines.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a `svc events` command until the stream ends (or stdout is closed).
pub async fn run(cmd: EventsCommand, config: &Config) -> ExitCode {
    let EventsCommand::Tail { since, json } = cmd;
    let Some(push) = config.notifications.ntfy.as_ref() else {
        eprintln!("svc: no push block `notifications.ntfy` in the configuration: nothing to tail");
        return ExitCode::FAILURE;
    };
    let client = svc_events::http::client();
    let result = svc_events::sinks::ntfy::subscribe(&client, push, since.as_deref(), false, |line| {
        let text = if json { Some(line.to_string()) } else { readable(line) };
        match text {
            Some(t) => match writeln!(std::io::stdout().lock(), "{t}") {
                Ok(()) => ControlFlow::Continue(()),
                Err(_) => ControlFlow::Break(()),
            },
            None => ControlFlow::Continue(()),
        }
    })
    .await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("svc: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `2026-11-21 09:30:00Z  high     task.done  [n1,executor]  Fix the build` for a `message` event; other
/// events (`open`, `keepalive`, …) print nothing.
pub fn readable(line: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v.get("event").and_then(|e| e.as_str()) != Some("message") {
        return None;
    }
    let time = v
        .get("time")
        .and_then(|t| t.as_i64())
        .and_then(|t| chrono::DateTime::from_timestamp(t, 0))
        .map(|t| t.format("%Y-%m-%d %H:%M:%SZ").to_string())
        .unwrap_or_default();
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
}
