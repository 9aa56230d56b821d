//! The `server:` and `fleet:` sections, and where the store lives: a relative `sqlite://` path in a file is
//! taken from the file's folder (never from the working directory), and the built-in demo's store has one
//! fixed place per user, `$XDG_DATA_HOME/svc/svc.db`, else `~/.local/share/svc/svc.db`.
//!
//! What this module does not do: create folders or files (the CLI and the store do, when they open it).

use crate::node::Node;
use crate::reader::{Fields, Key, Reader};
use crate::types::*;
use crate::IpBlock;
use percent_encoding::{utf8_percent_encode, AsciiSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The characters of a folder name that would change the meaning of an SQLite URL: `%` starts an escape,
/// `?` the parameters and `#` a fragment (sqlx percent-decodes the path).
const URL_PATH: &AsciiSet = &percent_encoding::CONTROLS.add(b'%').add(b'?').add(b'#');

/// The keys of `server:`.
const SERVER: &[Key] = &[
    ("host", &[]),
    ("port", &[]),
    ("master_key", &[]),
    ("database_url", &[]),
    ("max_in_flight", &[]),
    ("max_request_body_bytes", &[]),
    ("header_read_timeout_seconds", &[]),
    ("keep_alive_timeout_seconds", &[]),
    ("max_connections", &[]),
    ("shutdown_timeout_seconds", &[]),
    ("metrics_key", &[]),
    ("metrics_address", &[]),
    ("metrics_key_labels", &[]),
    ("log_format", &[]),
    ("trusted_proxies", &[]),
    ("auth_failures_burst", &[]),
    ("auth_failures_per_minute", &[]),
    ("tls", &[]),
];

pub(crate) fn server(r: &mut Reader, node: Option<&Node>, base: Option<&Path>) -> ServerConfig {
    let f = node.and_then(|n| r.fields(n, "server", SERVER));
    let mut s = ServerConfig {
        host: "127.0.0.1".into(),
        port: 4000,
        master_key: (r.env)("SVC_MASTER_KEY").filter(|k| !k.is_empty()).map(Secret::new),
        database_url: "sqlite://svc.db".into(),
        max_in_flight: 512,
        max_request_body_bytes: 10 * 1024 * 1024,
        header_read_timeout: Duration::from_secs(10),
        keep_alive_timeout: Duration::from_secs(60),
        max_connections: 4096,
        shutdown_timeout: Duration::from_secs(30),
        metrics_key: None,
        metrics_address: None,
        metrics_key_labels: false,
        log_format: LogFormat::Text,
        trusted_proxies: Vec::new(),
        auth_failures_burst: 20,
        auth_failures_per_minute: 20,
        tls: None,
    };
    if let Some(f) = f {
        if let Some(v) = r.string(&f, "host") {
            s.host = v;
        }
        if let Some(v) = r.int(&f, "port") {
            s.port = v;
        }
        key_and_store(r, &f, &mut s);
        limits(r, &f, &mut s);
        metrics(r, &f, &mut s);
        clients(r, &f, &mut s);
        s.tls = tls(r, &f, base);
    }
    if let Some(base) = base {
        s.database_url = resolve_sqlite(&s.database_url, base);
    }
    s
}

/// `master_key` (not empty; `SVC_MASTER_KEY` is its default) and `database_url` (SQLite or PostgreSQL).
fn key_and_store(r: &mut Reader, f: &Fields, s: &mut ServerConfig) {
    if f.get("master_key").is_some() {
        match r.string(f, "master_key") {
            Some(k) if k.trim().is_empty() => {
                if let Some(n) = f.get("master_key") {
                    r.error(n, "server.master_key: is empty");
                }
            }
            Some(k) => s.master_key = Some(Secret::new(k)),
            None => {}
        }
    }
    if let Some(v) = r.string(f, "database_url") {
        if !(v.starts_with("sqlite:") || v.starts_with("postgres://") || v.starts_with("postgresql://")) {
            if let Some(n) = f.get("database_url") {
                r.error(n, "server.database_url: expected `sqlite://PATH` or `postgres://…`");
            }
        }
        s.database_url = v;
    }
}

/// The request and connection bounds: `max_in_flight`, `max_request_body_bytes`, the header and keep-alive
/// timeouts, `max_connections`, `shutdown_timeout_seconds`.
fn limits(r: &mut Reader, f: &Fields, s: &mut ServerConfig) {
    if let Some(v) = at_least_one(r, f, "max_in_flight") {
        s.max_in_flight = v;
    }
    if let Some(v) = r.int(f, "max_request_body_bytes") {
        s.max_request_body_bytes = v;
    }
    if let Some(v) = at_least_one(r, f, "header_read_timeout_seconds") {
        s.header_read_timeout = Duration::from_secs(v);
    }
    if let Some(v) = at_least_one(r, f, "keep_alive_timeout_seconds") {
        s.keep_alive_timeout = Duration::from_secs(v);
    }
    if let Some(v) = at_least_one(r, f, "max_connections") {
        s.max_connections = v;
    }
    if let Some(v) = r.int::<u64>(f, "shutdown_timeout_seconds") {
        s.shutdown_timeout = Duration::from_secs(v);
    }
}

/// `metrics_key`, `metrics_address`, `metrics_key_labels` and `log_format`.
fn metrics(r: &mut Reader, f: &Fields, s: &mut ServerConfig) {
    match r.string(f, "metrics_key") {
        Some(k) if k.trim().len() < 16 => {
            if let Some(n) = f.get("metrics_key") {
                r.error(n, "server.metrics_key: must be at least 16 characters (a scraper's secret)");
            }
        }
        Some(k) => s.metrics_key = Some(Secret::new(k)),
        None => {}
    }
    if let Some(v) = r.string(f, "metrics_address") {
        if v.parse::<std::net::SocketAddr>().is_err() {
            if let Some(n) = f.get("metrics_address") {
                r.error(n, format!("server.metrics_address: `{v}` is not `host:port` (an IP address and a port)"));
            }
        }
        s.metrics_address = Some(v);
    }
    if let Some(v) = r.boolean(f, "metrics_key_labels") {
        s.metrics_key_labels = v;
    }
    match r.string(f, "log_format").as_deref() {
        None => {}
        Some("text") => s.log_format = LogFormat::Text,
        Some("json") => s.log_format = LogFormat::Json,
        Some(other) => {
            if let Some(n) = f.get("log_format") {
                r.error(n, format!("server.log_format: `{other}` is not one of `text`, `json`"));
            }
        }
    }
}

/// `trusted_proxies`, `auth_failures_burst` and `auth_failures_per_minute`.
fn clients(r: &mut Reader, f: &Fields, s: &mut ServerConfig) {
    for (i, (text, node)) in r.strings(f, "trusted_proxies").unwrap_or_default().into_iter().enumerate() {
        match IpBlock::parse(&text) {
            Ok(block) => s.trusted_proxies.push(block),
            Err(why) => r.error(&node, format!("{}[{i}]: {why}", f.child("trusted_proxies"))),
        }
    }
    if let Some(v) = r.int(f, "auth_failures_burst") {
        s.auth_failures_burst = v;
    }
    if let Some(v) = r.int(f, "auth_failures_per_minute") {
        s.auth_failures_per_minute = v;
    }
}

/// `server.tls`: `cert_file` and `key_file`, both required, each a file that exists (its content is read, and
/// checked, when the server starts).
fn tls(r: &mut Reader, f: &Fields, base: Option<&Path>) -> Option<TlsFiles> {
    const KEYS: &[Key] = &[("cert_file", &["cert", "certificate"]), ("key_file", &["key"])];
    let node = f.get("tls")?;
    let t = r.fields(node, "server.tls", KEYS)?;
    let file = |r: &mut Reader, key: &str, what: &str| {
        if t.get(key).is_none() {
            r.error(node, format!("server.tls: missing `{key}` ({what})"));
        }
        existing_file(r, &t, key, base)
    };
    let cert_file = file(r, "cert_file", "the PEM certificate chain");
    let key_file = file(r, "key_file", "the PEM private key");
    Some(TlsFiles { cert_file: cert_file?, key_file: key_file? })
}

/// The file `key` names, taken from the config file's folder when relative; an error naming the key when no
/// such file exists (its content is read by whoever uses it).
pub(crate) fn existing_file(r: &mut Reader, f: &Fields, key: &str, base: Option<&Path>) -> Option<PathBuf> {
    let text = r.string(f, key)?;
    let path = match base {
        Some(base) if Path::new(&text).is_relative() => base.join(&text),
        _ => PathBuf::from(&text),
    };
    if !path.is_file() {
        if let Some(n) = f.get(key) {
            r.error(n, format!("{}: no file `{}`", f.child(key), path.display()));
        }
        return None;
    }
    Some(path)
}

/// A whole number of at least 1 (0 is an error naming the key).
fn at_least_one<T: TryFrom<i128> + PartialEq + From<u8>>(r: &mut Reader, f: &Fields, key: &str) -> Option<T> {
    let v = r.int::<T>(f, key)?;
    if v == T::from(0) {
        if let Some(n) = f.get(key) {
            r.error(n, format!("{}: must be at least 1", f.child(key)));
        }
        return None;
    }
    Some(v)
}

pub(crate) fn fleet(r: &mut Reader, node: Option<&Node>, base: Option<&Path>) -> FleetConfig {
    const KEYS: &[Key] = &[
        ("name", &[]),
        ("node", &[]),
        ("address", &[]),
        ("offline_after_seconds", &[]),
        ("heartbeat_seconds", &[]),
        ("lease_seconds", &[]),
        ("journal_dir", &[]),
    ];
    let f = node.and_then(|n| r.fields(n, "fleet", KEYS));
    let mut out = FleetConfig::default();
    let (mut heartbeat, mut lease) = (None, None);
    if let Some(f) = f {
        if let Some(v) = r.string(&f, "name") {
            out.name = v;
        }
        if let Some(v) = r.string(&f, "node") {
            out.node = v;
        }
        out.address = r.string(&f, "address");
        // A relative folder is taken from the config file's folder, as a relative SQLite path is.
        out.journal_dir = r.string(&f, "journal_dir").map(|d| match base {
            Some(base) if Path::new(&d).is_relative() => base.join(d),
            _ => PathBuf::from(d),
        });
        let seconds = |r: &mut Reader, key: &str, min: u64| match r.int::<u64>(&f, key) {
            Some(v) if v < min => {
                if let Some(n) = f.get(key) {
                    r.error(n, format!("{}: must be at least {min}", f.child(key)));
                }
                None
            }
            other => other.map(Duration::from_secs),
        };
        if let Some(d) = seconds(r, "offline_after_seconds", 2) {
            out.offline_after = d;
        }
        heartbeat = seconds(r, "heartbeat_seconds", 1);
        lease = seconds(r, "lease_seconds", 1);
        if let (Some(h), Some(n)) = (heartbeat, f.get("heartbeat_seconds")) {
            if h >= out.offline_after {
                let path = f.child("heartbeat_seconds");
                r.error(n, format!("{path}: must be shorter than `offline_after_seconds`"));
            }
        }
    }
    out.heartbeat = heartbeat.unwrap_or_else(|| (out.offline_after / 6).max(Duration::from_secs(1)));
    out.lease = lease.unwrap_or(out.offline_after);
    // The same overrides as the envelope's (`svc_events::Source`): one name for the node everywhere.
    if let Some(v) = r.env_var("SVC_FLEET").filter(|v| !v.is_empty()) {
        out.name = v;
    }
    if let Some(v) = r.env_var("SVC_NODE").filter(|v| !v.is_empty()) {
        out.node = v;
    }
    out
}

/// `url` with a relative SQLite path taken from `base` (an absolute folder); any other URL as it is:
/// PostgreSQL, an absolute path, an in-memory database.
pub(crate) fn resolve_sqlite(url: &str, base: &Path) -> String {
    let Some(rest) = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")) else {
        return url.to_string();
    };
    let (path, params) = match rest.split_once('?') {
        Some((path, params)) => (path, Some(params)),
        None => (rest, None),
    };
    if path.is_empty() || path.starts_with('/') || path.starts_with(":memory:") || path.starts_with("file:") {
        return url.to_string();
    }
    // The path as written is already in URL form (sqlx percent-decodes it): only the folder is escaped.
    let mut out = format!("{}/{path}", sqlite_url(base).trim_end_matches('/'));
    if let Some(params) = params {
        out.push('?');
        out.push_str(params);
    }
    out
}

/// `sqlite://` followed by `path`, escaped so that sqlx reads back exactly `path`.
fn sqlite_url(path: &Path) -> String {
    format!("sqlite://{}", utf8_percent_encode(&path.to_string_lossy(), URL_PATH))
}

/// The built-in demo's store: `$XDG_DATA_HOME/svc/svc.db` (when that is an absolute path), else
/// `$HOME/.local/share/svc/svc.db`; `None` when neither variable is usable.
pub fn demo_store_path(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let var = |name: &str| env(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(data) = var("XDG_DATA_HOME").filter(|p| p.is_absolute()) {
        return Some(data.join("svc").join("svc.db"));
    }
    var("HOME").map(|home| home.join(".local/share/svc/svc.db"))
}

/// The demo store's URL (see [`demo_store_path`]).
pub(crate) fn demo_store_url(env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    demo_store_path(env).map(|p| sqlite_url(&p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_sqlite_paths_are_taken_from_the_base() {
        let base = Path::new("/etc/svc");
        let cases = [
            ("sqlite://svc.db", "sqlite:///etc/svc/svc.db"),
            ("sqlite:svc.db", "sqlite:///etc/svc/svc.db"),
            ("sqlite://data/svc.db?mode=rwc", "sqlite:///etc/svc/data/svc.db?mode=rwc"),
            ("sqlite://../svc.db", "sqlite:///etc/svc/../svc.db"),
            ("sqlite:///var/lib/svc.db", "sqlite:///var/lib/svc.db"),
            ("sqlite::memory:", "sqlite::memory:"),
            ("sqlite://?mode=memory", "sqlite://?mode=memory"),
            ("postgres://u@h/db", "postgres://u@h/db"),
        ];
        for (url, want) in cases {
            assert_eq!(resolve_sqlite(url, base), want, "{url}");
        }
        // A folder whose name holds URL syntax is escaped, so sqlx decodes it back to the same folder.
        assert_eq!(resolve_sqlite("sqlite://svc.db", Path::new("/tmp/a%b?c#d")), "sqlite:///tmp/a%25b%3Fc%23d/svc.db");
    }

    #[test]
    fn the_demo_store_is_in_the_users_data_folder() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
        };
        let both = env(&[("XDG_DATA_HOME", "/d"), ("HOME", "/h")]);
        assert_eq!(demo_store_path(&both), Some(PathBuf::from("/d/svc/svc.db")));
        let relative_xdg = env(&[("XDG_DATA_HOME", "rel"), ("HOME", "/h")]);
        assert_eq!(demo_store_path(&relative_xdg), Some(PathBuf::from("/h/.local/share/svc/svc.db")));
        assert_eq!(demo_store_url(&env(&[("HOME", "/h")])).as_deref(), Some("sqlite:///h/.local/share/svc/svc.db"));
        assert_eq!(demo_store_path(&env(&[])), None);
    }
}
