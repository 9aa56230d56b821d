//! Reading the push topic back (spec 6.2): `GET {server}/{topic}/json`, ntfy's newline-delimited JSON stream,
//! with the token and an optional `since=` (`10m`, `all`, a Unix time or a message id). Used by
//! `svc events tail`. Lines are handed over raw; rendering them is the caller's choice.

use super::PushError;
use std::ops::ControlFlow;
use svc_config::NtfyConfig;

/// Subscribes to the push block's topic and calls `on_line` with every JSON line (the `open` event included)
/// until the server closes the stream or `on_line` breaks. `poll` asks for the cached messages only, then ends.
pub async fn subscribe(
    client: &reqwest::Client,
    cfg: &NtfyConfig,
    since: Option<&str>,
    poll: bool,
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
    let mut resp = req.send().await.map_err(unreachable)?;
    let status = resp.status().as_u16();
    if !resp.status().is_success() {
        let reason = crate::http::reason_from_body(&resp.text().await.unwrap_or_default());
        return Err(match status {
            401 | 403 => PushError::AuthFailed { server, status, reason },
            429 => PushError::RateLimited { server, reason },
            500..=599 => PushError::ServerError { server, status, reason },
            _ => PushError::Rejected { server, status, reason },
        });
    }
    let mut pending: Vec<u8> = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(unreachable)? {
        pending.extend_from_slice(&chunk);
        while let Some(nl) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=nl).collect();
            let text = String::from_utf8_lossy(&line);
            let text = text.trim();
            if !text.is_empty() && on_line(text).is_break() {
                return Ok(());
            }
        }
    }
    let text = String::from_utf8_lossy(&pending);
    if !text.trim().is_empty() {
        let _ = on_line(text.trim());
    }
    Ok(())
}
