//! `svc reload`: asks the running gateway of this configuration to read its file again (`POST /config/reload`
//! with the master key) and prints what it answered.

use super::gateway::{Failed, Gateway};
use super::{load_config, Exit};
use std::path::Path;

/// Runs `svc reload`.
pub async fn run(explicit: Option<&Path>, url: Option<&str>) -> anyhow::Result<()> {
    // The file is checked here first: a configuration that does not check is refused before anything is asked
    // (the same diagnostics the gateway would answer).
    let config = load_config(explicit)?;
    let store = match config.server.master_key {
        Some(_) => None,
        None => Some(super::open_store(&config).await?),
    };
    let gateway = Gateway::of(&config, store.as_ref(), url).await?.ok_or_else(|| Exit {
        code: 1,
        message: "no master key: set SVC_MASTER_KEY or server.master_key (the gateway's own)".into(),
    })?;
    let body = match gateway.call(reqwest::Method::POST, "/config/reload", None).await {
        Ok(body) => body,
        Err(Failed::Refused { status, message }) => {
            let message = format!("the gateway refused the reload ({status}): {message}");
            return Err(Exit { code: 1, message }.into());
        }
        Err(other) => return Err(other.exit().into()),
    };
    let c = &body["config"];
    for w in c["warnings"].as_array().into_iter().flatten().filter_map(|w| w.as_str()) {
        eprintln!("{w}");
    }
    eprintln!(
        "svc: reloaded {}: {} models, {} teams, {} event destinations (config {})",
        c["source"].as_str().unwrap_or("?"),
        c["models"],
        c["teams"],
        c["destinations"],
        c["config_digest"].as_str().map_or("?", |d| d.get(..12).unwrap_or(d)),
    );
    Ok(())
}
