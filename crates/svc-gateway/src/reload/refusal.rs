//! What a reload answers when it refuses, and the address it keeps: no other part of the gateway (so the error
//! mapping may name it without reaching the reload itself).

use crate::server::tls::TlsError;
use svc_config::{Config, ConfigError, Diagnostic};

/// Why a reload was refused (the running configuration stays).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file does not check: every problem, as `config check` prints them.
    #[error("the configuration does not check:\n{}", render(.0))]
    Invalid(Vec<Diagnostic>),
    /// The file cannot be read (or the demo has no store folder).
    #[error("{0}")]
    Unreadable(String),
    /// Settings a running server cannot change.
    #[error("these settings change only with a restart: {}", .0.join(", "))]
    NeedsRestart(Vec<&'static str>),
    /// A model entry cannot be served (an `ssl_ca_file` that holds no certificate, say).
    #[error("{0}")]
    Model(String),
    /// The certificate or key of `server.tls` cannot serve.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The store refused (writing the teams, reading their anchors).
    #[error(transparent)]
    Store(#[from] svc_store::StoreError),
}

fn render(diagnostics: &[Diagnostic]) -> String {
    diagnostics.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("\n")
}

impl From<ConfigError> for ReloadError {
    fn from(e: ConfigError) -> ReloadError {
        match e {
            ConfigError::Invalid { diagnostics } => ReloadError::Invalid(diagnostics),
            other => ReloadError::Unreadable(other.to_string()),
        }
    }
}

/// The address given on the command line (`svc serve --host/--port`), which a reload keeps over the file's.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--host`.
    pub host: Option<String>,
    /// `--port`.
    pub port: Option<u16>,
}

impl Overrides {
    pub(crate) fn apply(&self, config: &mut Config) {
        if let Some(h) = &self.host {
            config.server.host.clone_from(h);
        }
        if let Some(p) = self.port {
            config.server.port = p;
        }
    }
}
