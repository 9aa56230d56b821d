//! The `notifications:` section (spec 2.7): the push block, webhooks and shell-hook settings; and loading the
//! push block alone ([`load_push_file`]), for a command that reads nothing else.

use crate::diagnostics::{checked, parse_root, ConfigError};
use crate::event_pattern::event_pattern_error;
use crate::node::{Node, Value};
use crate::reader::{Key, Reader};
use crate::source::BUILTIN_YAML;
use crate::types::*;
use std::path::Path;
use std::time::Duration;

/// Topic names a real ntfy server reserves (reference: ntfy.md, "Topics").
const RESERVED_TOPICS: &[&str] =
    &["docs", "static", "file", "app", "metrics", "account", "settings", "signup", "login", "v1"];

pub(crate) fn notifications(r: &mut Reader, node: Option<&Node>) -> NotificationsConfig {
    const KEYS: &[Key] = &[("ntfy", &["push"]), ("webhooks", &[]), ("hooks", &[])];
    let mut out = NotificationsConfig::default();
    let Some(f) = node.and_then(|n| r.fields(n, "notifications", KEYS)) else {
        return out;
    };
    if let Some(n) = f.get("ntfy") {
        out.ntfy = ntfy(r, n);
    }
    for (i, item) in r.list(&f, "webhooks").into_iter().enumerate() {
        if let Some(w) = webhook(r, item, &format!("notifications.webhooks[{i}]")) {
            out.webhooks.push(w);
        }
    }
    if let Some(n) = f.get("hooks") {
        const HOOKS: &[Key] = &[("timeout_seconds", &[]), ("max_concurrent", &[])];
        if let Some(h) = r.fields(n, "notifications.hooks", HOOKS) {
            if let Some(t) = r.int::<u64>(&h, "timeout_seconds") {
                out.hooks.timeout = Duration::from_secs(t.max(1));
            }
            if let Some(m) = r.int::<usize>(&h, "max_concurrent") {
                out.hooks.max_concurrent = m.max(1);
            }
        }
    }
    out
}

/// Only the push block (`notifications.ntfy`) of a configuration file, validated as [`crate::load_file`]
/// validates it; nothing else of the file is resolved or checked, so an unset environment variable or a
/// problem elsewhere (a master key, a webhook secret, a model) does not matter. `None`: no push block.
pub fn load_push_file(path: &Path) -> Result<Option<NtfyConfig>, ConfigError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
    load_push_str(&text, &path.display().to_string(), &|name| std::env::var(name).ok())
}

/// [`load_push_file`] for the built-in demo configuration.
pub fn load_push_builtin() -> Result<Option<NtfyConfig>, ConfigError> {
    load_push_str(BUILTIN_YAML, "<built-in>", &|name| std::env::var(name).ok())
}

/// [`load_push_file`] of configuration text; `env` resolves environment references.
pub fn load_push_str(
    text: &str,
    file: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<NtfyConfig>, ConfigError> {
    let root = parse_root(text, file)?;
    let mut r = Reader::new(file, env);
    let block = entry(&root, "notifications").and_then(|n| entry(n, "ntfy").or_else(|| entry(n, "push")));
    let push = block.and_then(|n| ntfy(&mut r, n));
    checked(r.diags)?;
    Ok(push)
}

/// The value of `key` in a mapping node, without checking anything else of it.
fn entry<'n>(node: &'n Node, key: &str) -> Option<&'n Node> {
    let Value::Map(entries) = &node.value else { return None };
    entries.iter().find(|(k, _)| matches!(&k.value, Value::Str(s) if s == key)).map(|(_, v)| v)
}

/// Whether `topic` is a valid, unreserved ntfy topic name.
pub fn valid_topic(topic: &str) -> bool {
    !topic.is_empty()
        && topic.len() <= 64
        && topic.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && !RESERVED_TOPICS.contains(&topic)
}

fn http_url(r: &mut Reader, node: &Node, path: &str, url: &str) -> bool {
    let ok = (url.starts_with("http://") || url.starts_with("https://"))
        && url.len() > "https://".len()
        && !url.contains(char::is_whitespace);
    if !ok {
        r.error(node, format!("{path}: `{url}` must be an http:// or https:// URL"));
    }
    ok
}

fn ntfy(r: &mut Reader, node: &Node) -> Option<NtfyConfig> {
    const KEYS: &[Key] = &[("enabled", &[]), ("server", &[]), ("topic", &[]), ("priority", &[]), ("token", &[])];
    let path = "notifications.ntfy";
    let f = r.fields(node, path, KEYS)?;
    let enabled = r.boolean(&f, "enabled").unwrap_or(true);
    let server = r.string(&f, "server");
    let topic = r.string(&f, "topic");
    let mut ok = true;
    match (&server, f.get("server")) {
        (Some(s), Some(n)) => ok &= http_url(r, n, &f.child("server"), s),
        _ => {
            r.error(node, format!("{path}: missing `server` (e.g. `https://ntfy.sh`)"));
            ok = false;
        }
    }
    match (&topic, f.get("topic")) {
        (Some(t), Some(n)) if !valid_topic(t) => {
            r.error(
                n,
                format!(
                    "{}: `{t}` is not a valid topic: use 1-64 of A-Z a-z 0-9 - _, not a reserved name",
                    f.child("topic")
                ),
            );
            ok = false;
        }
        (Some(_), _) => {}
        _ => {
            r.error(node, format!("{path}: missing `topic` (form `svc-fleet-<token>`)"));
            ok = false;
        }
    }
    let priority = match r.string(&f, "priority") {
        Some(p) => match Priority::parse(&p) {
            Some(p) => p,
            None => {
                if let Some(n) = f.get("priority") {
                    r.error(n, format!("{}: `{p}` is not one of min, low, default, high, urgent", f.child("priority")));
                }
                Priority::Default
            }
        },
        None => Priority::Default,
    };
    let token = r.string(&f, "token").filter(|t| !t.trim().is_empty()).map(Secret::new);
    if !ok {
        return None;
    }
    Some(NtfyConfig {
        enabled,
        server: server.unwrap_or_default().trim_end_matches('/').to_string(),
        topic: topic.unwrap_or_default(),
        priority,
        token,
    })
}

fn webhook(r: &mut Reader, node: &Node, path: &str) -> Option<WebhookConfig> {
    const KEYS: &[Key] =
        &[("url", &[]), ("events", &[]), ("secret", &[]), ("timeout_seconds", &["timeout"]), ("retry", &["retries"])];
    let f = r.fields(node, path, KEYS)?;
    let url = r.string(&f, "url");
    let mut ok = match (&url, f.get("url")) {
        (Some(u), Some(n)) => http_url(r, n, &f.child("url"), u),
        _ => {
            r.error(node, format!("{path}: missing `url`"));
            false
        }
    };
    let mut events = Vec::new();
    for (e, n) in r.strings(&f, "events").unwrap_or_default() {
        match event_pattern_error(&e) {
            None => events.push(e),
            Some(why) => r.error(&n, format!("{}: {why}", f.child("events"))),
        }
    }
    if f.get("events").is_none() {
        r.error(node, format!("{path}: missing `events` (a list of event kinds, `*` or prefixes like `task.*`)"));
        ok = false;
    }
    let given = f.get("secret").is_some();
    let read = r.string(&f, "secret");
    let secret = read.as_ref().filter(|s| !s.is_empty()).cloned();
    // A secret given but unreadable (an unset variable, not a string) has its own error already.
    if secret.is_none() && (!given || read.is_some()) {
        r.error(node, format!("{path}: missing `secret` (the HMAC signing secret)"));
    }
    ok &= secret.is_some();
    // A Standard Webhooks secret is `whsec_` and the base64 of the key; the key signs `webhook-signature`.
    if let (Some(Err(why)), Some(n)) = (secret.as_deref().map(standard_webhooks_key), f.get("secret")) {
        r.error(n, format!("{}: {why}", f.child("secret")));
        ok = false;
    }
    let timeout = r.int::<u64>(&f, "timeout_seconds").unwrap_or(10);
    let retry = r.int::<u32>(&f, "retry").unwrap_or(3);
    if !ok {
        return None;
    }
    Some(WebhookConfig {
        url: url.unwrap_or_default(),
        events,
        secret: Secret::new(secret.unwrap_or_default()),
        timeout: Duration::from_secs(timeout.max(1)),
        retry,
    })
}
