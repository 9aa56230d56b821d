//! The publish request for one envelope (spec 6.2, issue 4): URL, `X-Title`, `X-Priority`, `X-Tags`, bearer token
//! and a body of at most 4095 bytes. Header values are made safe here: CR/LF and other control characters
//! never reach a header, and non-ASCII text is sent as an RFC 2047 encoded word (`=?UTF-8?B?…?=`), which ntfy
//! decodes (reference ntfy.md, "Publish parameters").
//!
//! Pure: building and printing the request only. Sending it is `mod.rs`.

use super::summary::body_text;
use crate::envelope::Envelope;
use crate::http::cut_to_bytes;
use crate::kinds::{EventKind, UnknownKind};
use base64::Engine as _;
use svc_config::{NtfyConfig, Priority, Secret};

/// A real ntfy treats a body of 4096 bytes or more as an attachment and refuses it by default
/// (reference ntfy.md, "Size"), so bodies are cut to this many bytes.
pub const MAX_BODY_BYTES: usize = 4095;

/// Titles longer than this (bytes, before encoding) are cut; ntfy has no limit but headers should stay small.
pub const MAX_TITLE_BYTES: usize = 1024;

/// Per-event choices that override the defaults: `--title`, `--priority` (or `title`/`priority` of `POST /events`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PushOverrides {
    /// Replaces the event kind as `X-Title`.
    pub title: Option<String>,
    /// Replaces the severity's priority.
    pub priority: Option<Priority>,
}

/// Everything one publish sends.
#[derive(Debug, Clone)]
pub struct PushMessage {
    /// `{server}/{topic}`.
    pub url: String,
    /// The title before header encoding.
    pub title: String,
    /// The mapped (or overridden) priority.
    pub priority: Priority,
    /// Node and agent.
    pub tags: Vec<String>,
    /// The body, already cut to [`MAX_BODY_BYTES`].
    pub body: String,
    /// The bearer token, when configured.
    pub token: Option<Secret>,
}

impl PushMessage {
    /// Builds the request for `env` under the push block `cfg`.
    pub fn build(env: &Envelope, cfg: &NtfyConfig, overrides: &PushOverrides) -> Result<PushMessage, UnknownKind> {
        let kind = EventKind::parse(&env.event)?;
        let title = overrides.title.clone().filter(|t| !t.trim().is_empty()).unwrap_or_else(|| env.event.clone());
        let priority = overrides.priority.unwrap_or_else(|| kind.push_priority(cfg.priority));
        let tags =
            [&env.node, &env.agent].iter().map(|t| t.replace(',', "_")).filter(|t| !t.trim().is_empty()).collect();
        Ok(PushMessage {
            url: format!("{}/{}", cfg.server.trim_end_matches('/'), cfg.topic),
            title,
            priority,
            tags,
            body: cut_to_bytes(&body_text(env), MAX_BODY_BYTES).to_string(),
            token: cfg.token.clone(),
        })
    }

    /// The headers as sent, names and wire values; the token is included only when `reveal_token` is set.
    pub fn headers(&self, reveal_token: bool) -> Vec<(&'static str, String)> {
        let mut out = vec![
            ("X-Title", header_value(cut_to_bytes(&self.title, MAX_TITLE_BYTES))),
            ("X-Priority", self.priority.as_str().to_string()),
        ];
        if !self.tags.is_empty() {
            out.push(("X-Tags", header_value(&self.tags.join(","))));
        }
        if let Some(token) = &self.token {
            let shown = if reveal_token { token.expose() } else { "***" };
            out.push(("Authorization", format!("Bearer {shown}")));
        }
        out
    }
}

/// A header-safe value: control characters (CR, LF, tab, …) become spaces, then the value is trimmed; printable
/// ASCII is sent as is, anything else as one RFC 2047 `B` encoded word of the UTF-8 text.
pub fn header_value(text: &str) -> String {
    let clean: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let clean = clean.trim();
    if clean.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        clean.to_string()
    } else {
        format!("=?UTF-8?B?{}?=", base64::engine::general_purpose::STANDARD.encode(clean.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::envelope::{Meta, Source};
    use serde_json::json;

    fn cfg(priority: Priority, token: Option<&str>) -> NtfyConfig {
        NtfyConfig {
            enabled: true,
            server: "http://127.0.0.1:9".into(),
            topic: "svc-fleet-abc".into(),
            priority,
            token: token.map(Secret::new),
        }
    }

    fn env(kind: EventKind, data: serde_json::Value) -> Envelope {
        let s = Source { fleet: "f".into(), node: "nöde".into(), agent: "exec,utor".into(), meta: Meta::default() };
        Envelope::new(kind, data, &s).unwrap()
    }

    #[test]
    fn cut_on_char_boundary() {
        assert_eq!(cut_to_bytes("abc", 4095), "abc");
        let s = "é".repeat(3000); // 6000 bytes, 2 per char
        let cut = cut_to_bytes(&s, MAX_BODY_BYTES);
        assert_eq!(cut.len(), 4094);
        let s = format!("a{}", "€".repeat(2000)); // 1 + 3 per char
        assert_eq!(cut_to_bytes(&s, MAX_BODY_BYTES).len(), 4093);
        let s = "x".repeat(5000);
        assert_eq!(cut_to_bytes(&s, MAX_BODY_BYTES).len(), 4095);
    }

    #[test]
    fn rfc2047_and_no_newlines() {
        assert_eq!(header_value("task.done"), "task.done");
        assert_eq!(header_value("a\r\nX-Evil: 1"), "a  X-Evil: 1");
        assert_eq!(header_value("Grüße"), "=?UTF-8?B?R3LDvMOfZQ==?=");
        assert_eq!(
            header_value("déjà\nvu"),
            format!("=?UTF-8?B?{}?=", base64::engine::general_purpose::STANDARD.encode("déjà vu"))
        );
    }

    #[test]
    fn builds_headers_and_body() {
        let e = env(EventKind::BudgetExceeded, json!({"team": "t", "spent": "2.00", "limit": "1.00"}));
        let m = PushMessage::build(&e, &cfg(Priority::Min, Some("tk_secret")), &PushOverrides::default()).unwrap();
        assert_eq!(m.url, "http://127.0.0.1:9/svc-fleet-abc");
        assert_eq!(m.body, "budget.exceeded: team t spent 2.00 of 1.00");
        let h = m.headers(false);
        assert_eq!(h[0], ("X-Title", "budget.exceeded".to_string()));
        assert_eq!(h[1], ("X-Priority", "urgent".to_string()));
        assert_eq!(h[2], ("X-Tags", header_value("nöde,exec_utor")));
        assert_eq!(h[3], ("Authorization", "Bearer ***".to_string()));
        assert_eq!(m.headers(true)[3].1, "Bearer tk_secret");
    }

    #[test]
    fn overrides_and_test_priority() {
        let e = env(EventKind::Test, json!({}));
        let m = PushMessage::build(&e, &cfg(Priority::High, None), &PushOverrides::default()).unwrap();
        assert_eq!(m.priority, Priority::High);
        assert!(m.headers(false).iter().all(|(n, _)| *n != "Authorization"));
        let o = PushOverrides { title: Some("Hello".into()), priority: Some(Priority::Min) };
        let m = PushMessage::build(&e, &cfg(Priority::High, None), &o).unwrap();
        assert_eq!((m.title.as_str(), m.priority), ("Hello", Priority::Min));
    }

    #[test]
    fn long_task_title_is_cut() {
        let title = "ü".repeat(3000);
        let e =
            env(EventKind::TaskDone, json!({"task_id": 1, "task_title": title, "epic_id": 1, "duration_seconds": 1}));
        let m = PushMessage::build(&e, &cfg(Priority::Default, None), &PushOverrides::default()).unwrap();
        assert_eq!(m.body.len(), 4094);
        assert!(m.body.chars().all(|c| c == 'ü'));
    }
}
