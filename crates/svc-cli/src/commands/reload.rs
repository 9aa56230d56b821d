//! `svc reload`: asks the running gateway of this configuration to read its file again (`POST /config/reload`
//! with the master key) and prints what it answered.

use super::{load_config, Exit};
use std::path::Path;

/// Runs `svc reload`.
pub async fn run(explicit: Option<&Path>, url: Option<&str>) -> anyhow::Result<()> {
    // The file is checked here first: a configuration that does not check is refused before anything is asked
    // (the same diagnostics the gateway would answer).
    let config = load_config(explicit)?;
    let master = config.server.master_key.as_ref().ok_or_else(|| Exit {
        code: 1,
        message: "no master key: set SVC_MASTER_KEY or server.master_key (the gateway's own)".into(),
    })?;
    let host = match config.server.host.as_str() {
        "0.0.0.0" => "127.0.0.1".to_string(),
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
    let url = match url {
        Some(u) => format!("{}/config/reload", u.trim_end_matches('/')),
        None => format!("{scheme}://{host}:{}/config/reload", config.server.port),
    };
    let client = client.build().map_err(|e| Exit { code: 1, message: format!("cannot make an HTTP client: {e}") })?;
    let answer = client
        .post(&url)
        .bearer_auth(master.expose())
        .send()
        .await
        .map_err(|e| Exit { code: 1, message: format!("no gateway answers at {url}: {e}") })?;
    let status = answer.status();
    let body: serde_json::Value = answer.json().await.unwrap_or_default();
    if status.is_success() {
        let c = &body["config"];
        for w in c["warnings"].as_array().into_iter().flatten().filter_map(|w| w.as_str()) {
            eprintln!("{w}");
        }
        eprintln!(
            "svc: reloaded {}: {} models, {} teams, {} event destinations",
            c["source"].as_str().unwrap_or("?"),
            c["models"],
            c["teams"],
            c["destinations"]
        );
        return Ok(());
    }
    let message = body["error"]["message"].as_str().map(str::to_string).unwrap_or_else(|| format!("{status}"));
    Err(Exit { code: 1, message: format!("the gateway refused the reload ({}): {message}", status.as_u16()) }.into())
}
