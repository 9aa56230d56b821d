//! Reading the push topic back (spec 6.2): `GET {server}/{topic}/json`, ntfy's newline-delimited JSON stream,
//! with the token and an optional `since=` (`10m`, `all`, a Unix time or a message id). Used by
//! `svc events tail`. Lines are handed over raw; rendering them, and reconnecting, is the caller's choice.
//!
//! The server decides what it sends, so the reader bounds both: a line longer than [`MAX_LINE_BYTES`] ends the
//! subscription with [`PushError::Protocol`] (nothing beyond that is kept), and a stream silent for longer than
//! the idle timeout ([`IDLE_TIMEOUT`]: ntfy sends a keepalive every 45 s) ends it as unreachable.

use super::PushError;
use std::ops::ControlFlow;
use std::time::Duration;
use svc_config::NtfyConfig;

/// The longest line of a subscription stream that is read (an ntfy message is at most 4 KiB of text plus its
/// JSON fields).
pub const MAX_LINE_BYTES: usize = 256 * 1024;

/// A subscription silent for this long is taken as dead (two of ntfy's 45 s keepalives missed).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(100);

/// Subscribes to the push block's topic and calls `on_line` with every JSON line (the `open` event included)
/// until the server closes the stream or `on_line` breaks. `poll` asks for the cached messages only, then ends.
pub async fn subscribe(
    client: &reqwest::Client,
    cfg: &NtfyConfig,
    since: Option<&str>,
    poll: bool,
    on_line: impl FnMut(&str) -> ControlFlow<()>,
) -> Result<(), PushError> {
    subscribe_with(client, cfg, since, poll, IDLE_TIMEOUT, on_line).await
}

/// [`subscribe`] with another idle timeout.
pub async fn subscribe_with(
    client: &reqwest::Client,
    cfg: &NtfyConfig,
    since: Option<&str>,
    poll: bool,
    idle: Duration,
    mut on_line: impl FnMut(&str) -> ControlFlow<()>,
) -> Result<(), PushError> {
    let server = cfg.server.clone();
    let url = format!("{}/{}/json", server.trim_end_matches('/'), cfg.topic);
    let mut query: Vec<(&str, &str)> = Vec::new();
    if let Some(s) = since {
        query.push(("since", s));
    }
    if poll {
        query.push(("poll", "1"));
    }
    let mut req = client.get(&url).query(&query);
    if let Some(token) = &cfg.token {
        req = req.bearer_auth(token.expose());
    }
    let unreachable =
        |e: reqwest::Error| PushError::Unreachable { server: server.clone(), reason: crate::http::describe(&e) };
    let silent = || PushError::Unreachable {
        server: server.clone(),
        reason: format!("the stream was silent for {} s", idle.as_secs_f32()),
    };
    let mut resp = tokio::time::timeout(idle, req.send()).await.map_err(|_| silent())?.map_err(unreachable)?;
    let status = resp.status().as_u16();
    if !resp.status().is_success() {
        let reason = crate::http::reason_from_body(&crate::http::read_error_body(resp).await);
        return Err(match status {
            401 | 403 => PushError::AuthFailed { server, status, reason },
            429 => PushError::RateLimited { server, reason },
            500..=599 => PushError::ServerError { server, status, reason },
            _ => PushError::Rejected { server, status, reason },
        });
    }
    let mut pending: Vec<u8> = Vec::new();
    while let Some(chunk) =
        tokio::time::timeout(idle, resp.chunk()).await.map_err(|_| silent())?.map_err(unreachable)?
    {
        let mut rest: &[u8] = &chunk;
        while let Some(nl) = rest.iter().position(|b| *b == b'\n') {
            if pending.len() + nl > MAX_LINE_BYTES {
                return Err(too_long(&server));
            }
            pending.extend_from_slice(&rest[..nl]);
            rest = &rest[nl + 1..];
            let text = String::from_utf8_lossy(&pending);
            let text = text.trim();
            if !text.is_empty() && on_line(text).is_break() {
                return Ok(());
            }
            pending.clear();
        }
        if pending.len() + rest.len() > MAX_LINE_BYTES {
            return Err(too_long(&server));
        }
        pending.extend_from_slice(rest);
    }
    let text = String::from_utf8_lossy(&pending);
    if !text.trim().is_empty() {
        let _ = on_line(text.trim());
    }
    Ok(())
}

fn too_long(server: &str) -> PushError {
    PushError::Protocol {
        server: server.to_string(),
        reason: format!("a line longer than {} KiB (not an ntfy JSON stream?)", MAX_LINE_BYTES / 1024),
    }
}
