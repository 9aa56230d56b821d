//! Asking the running gateway of a configuration (its admin API, with the master key): what `svc reload`,
//! `svc keys` and `svc teams` changes do, so that a change is in force on that gateway before the command
//! returns (and on the rest of its fleet within a second).

use super::Exit;
use reqwest::Method;
use serde_json::Value;
use svc_config::Config;

/// `value` without its null fields (the absent options of a request).
pub(crate) fn without_nulls(value: Value) -> Value {
    match value {
        Value::Object(m) => Value::Object(m.into_iter().filter(|(_, v)| !v.is_null()).collect()),
        other => other,
    }
}

/// The gateway at `server.host:server.port` of a configuration (or `--url`), with its master key.
pub(crate) struct Gateway {
    client: reqwest::Client,
    base: String,
    master: String,
}

/// Why a call did not give an answer.
pub(crate) enum Failed {
    /// Nothing answers at the address (connection refused, no such host, timeout).
    Unreachable(String),
    /// The gateway answered with an error: its status and message.
    Refused {
        /// The HTTP status.
        status: u16,
        /// The error's message.
        message: String,
    },
}

impl Failed {
    /// As an exit-1 failure (an unreachable gateway named).
    pub(crate) fn exit(self) -> Exit {
        match self {
            Failed::Unreachable(why) => Exit { code: 1, message: why },
            Failed::Refused { message, .. } => Exit { code: 1, message },
        }
    }
}

impl Gateway {
    /// The gateway of `config` (its master key; the demo's is kept in its store, read from `store`), at `url`
    /// when given. `None` when there is no master key to ask with.
    pub(crate) async fn of(
        config: &Config,
        store: Option<&svc_store::Store>,
        url: Option<&str>,
    ) -> anyhow::Result<Option<Gateway>> {
        let master = match (&config.server.master_key, store) {
            (Some(m), _) => m.expose().to_string(),
            (None, Some(store)) if config.source == svc_config::ConfigSource::Builtin => {
                match store.meta_get("demo_master_key").await? {
                    Some(m) => m,
                    None => return Ok(None),
                }
            }
            _ => return Ok(None),
        };
        let host = match config.server.host.as_str() {
            "0.0.0.0" | "" => "127.0.0.1".to_string(),
            "::" => "[::1]".to_string(),
            h if h.contains(':') && !h.starts_with('[') => format!("[{h}]"),
            h => h.to_string(),
        };
        let mut client = reqwest::Client::builder().timeout(std::time::Duration::from_secs(60));
        let scheme = match &config.server.tls {
            Some(files) => {
                // The gateway's own chain is trusted too (a certificate of a private CA, or self-signed).
                if let Ok(pem) = std::fs::read(&files.cert_file) {
                    for cert in reqwest::Certificate::from_pem_bundle(&pem).unwrap_or_default() {
                        client = client.add_root_certificate(cert);
                    }
                }
                "https"
            }
            None => "http",
        };
        let base = match url {
            Some(u) => u.trim_end_matches('/').to_string(),
            None => format!("{scheme}://{host}:{}", config.server.port),
        };
        let client =
            client.build().map_err(|e| Exit { code: 1, message: format!("cannot make an HTTP client: {e}") })?;
        Ok(Some(Gateway { client, base, master }))
    }

    /// `method path` with `body` as JSON; the answer's JSON body on a 2xx.
    pub(crate) async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value, Failed> {
        let url = format!("{}{path}", self.base);
        let mut request = self.client.request(method, &url).bearer_auth(&self.master);
        if let Some(body) = body {
            request = request.json(body);
        }
        let answer = request.send().await.map_err(|e| {
            let why = if e.is_connect() || e.is_timeout() { "no gateway answers" } else { "cannot ask the gateway" };
            Failed::Unreachable(format!("{why} at {url}: {e}"))
        })?;
        let status = answer.status();
        let body: Value = answer.json().await.unwrap_or_default();
        if status.is_success() {
            return Ok(body);
        }
        let message = body["error"]["message"].as_str().map(str::to_string).unwrap_or_else(|| status.to_string());
        Err(Failed::Refused { status: status.as_u16(), message })
    }
}
