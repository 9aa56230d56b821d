//! One module per `svc` command. Each returns `anyhow::Result`; `main` prints errors as one line.

pub mod config;
pub mod keys;
pub mod serve;
pub mod spend;

use anyhow::Context;
use std::path::Path;
use svc_config::{Config, ConfigError};

/// A failure with the exit code it should give.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Exit {
    /// Exit code.
    pub code: u8,
    /// One-line (or multi-line diagnostics) message.
    pub message: String,
}

/// Loads the configuration the way every command does: `--config`, `$SVC_CONFIG`, `./svc.yaml`, or the
/// built-in demo configuration.
pub fn load_config(explicit: Option<&Path>) -> anyhow::Result<Config> {
    let loaded = match svc_config::find_config(explicit) {
        Some(path) => svc_config::load_file(&path),
        None => svc_config::load_builtin(),
    };
    loaded.map_err(|e| match e {
        ConfigError::Invalid { .. } => {
            anyhow::Error::new(Exit { code: 1, message: format!("invalid configuration:\n{e}") })
        }
        other => anyhow::Error::new(Exit { code: 1, message: other.to_string() }),
    })
}

/// Opens the configured store.
pub async fn open_store(config: &Config) -> anyhow::Result<svc_store::Store> {
    svc_store::Store::connect(&config.server.database_url).await.with_context(|| "cannot open the store".to_string())
}
