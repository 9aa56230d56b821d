//! How a webhook URL is shown: URLs often carry a token (Slack and Discord put it in the path, others in the
//! query or the user info), so logs, error messages, dry runs and the outbox's destination names show
//! [`redact_url`] of it, never the URL itself. Only the request on the wire uses the real URL.
//!
//! The rule: scheme, host and port are kept; user info becomes `***@`; the first path segment is kept and
//! everything after it becomes `…`; a query becomes `?…`; a fragment is dropped.
//! `https://user:pw@hooks.example.com:8443/services/T0/B1/xyz?token=abc#f` is shown
//! `https://***@hooks.example.com:8443/services/…?…`.

/// The URL as it may be shown (see the module documentation); `<invalid URL>` when it does not parse.
pub fn redact_url(url: &str) -> String {
    let Ok(u) = reqwest::Url::parse(url) else {
        return "<invalid URL>".to_string();
    };
    let mut out = format!("{}://", u.scheme());
    if !u.username().is_empty() || u.password().is_some() {
        out.push_str("***@");
    }
    out.push_str(u.host_str().unwrap_or_default());
    if let Some(port) = u.port() {
        out.push_str(&format!(":{port}"));
    }
    let path = u.path();
    let mut segments = path.trim_start_matches('/').splitn(2, '/');
    let first = segments.next().unwrap_or_default();
    match segments.next() {
        Some(rest) if !rest.is_empty() => {
            out.push('/');
            out.push_str(first);
            out.push_str("/…");
        }
        _ => out.push_str(path),
    }
    if u.query().is_some() {
        out.push_str("?…");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_table() {
        let cases = [
            ("https://hooks.example.com/svc", "https://hooks.example.com/svc"),
            ("https://hooks.example.com/", "https://hooks.example.com/"),
            ("https://hooks.example.com", "https://hooks.example.com/"),
            ("http://127.0.0.1:8080/hook/", "http://127.0.0.1:8080/hook/"),
            ("https://hooks.slack.com/services/T0001/B0002/xoxb-secret", "https://hooks.slack.com/services/…"),
            ("https://discord.com/api/webhooks/123/tok-en", "https://discord.com/api/…"),
            ("https://example.com/hook?token=abc&x=1", "https://example.com/hook?…"),
            ("https://example.com/hook?", "https://example.com/hook?…"),
            ("https://user:pw@example.com:8443/a/b?c=d#frag", "https://***@example.com:8443/a/…?…"),
            ("https://token@example.com/hook", "https://***@example.com/hook"),
            ("http://[::1]:9000/x/y", "http://[::1]:9000/x/…"),
            ("not a url", "<invalid URL>"),
        ];
        for (url, shown) in cases {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }
}
