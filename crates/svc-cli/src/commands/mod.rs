//! One module per `svc` command. Each returns `anyhow::Result`; `main` prints errors as one line.

pub mod config;
pub mod fleet;
mod gateway;
pub mod keys;
pub mod reload;
pub mod serve;
pub mod spend;
pub mod team_changes;
pub mod teams;

use anyhow::Context;
use std::io::Write;
use std::path::Path;
use svc_config::{Config, ConfigError, ConfigSource};

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
    loaded.map_err(config_error)
}

/// Only the push block of the configuration found the same way (see [`svc_config::load_push_file`]).
pub fn load_push(explicit: Option<&Path>) -> anyhow::Result<Option<svc_config::NtfyConfig>> {
    let loaded = match svc_config::find_config(explicit) {
        Some(path) => svc_config::load_push_file(&path),
        None => svc_config::load_push_builtin(),
    };
    loaded.map_err(config_error)
}

/// A configuration that cannot be used, as an exit-1 failure.
fn config_error(e: ConfigError) -> anyhow::Error {
    let message = match e {
        ConfigError::Invalid { .. } => format!("invalid configuration:\n{e}"),
        other => other.to_string(),
    };
    anyhow::Error::new(Exit { code: 1, message })
}

/// Opens the configured store. The built-in demo's store is the user's own, wherever the command runs: its
/// folder is created (readable by the user only) when missing, and stderr says which store is used, so a
/// command run without a config file never writes to another store without a word.
pub async fn open_store(config: &Config) -> anyhow::Result<svc_store::Store> {
    if config.source == ConfigSource::Builtin {
        if let Some(path) = svc_store::sqlite_path(&config.server.database_url) {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                let mut folder = tokio::fs::DirBuilder::new();
                folder.recursive(true);
                #[cfg(unix)]
                folder.mode(0o700);
                folder.create(dir).await.with_context(|| format!("cannot create the folder `{}`", dir.display()))?;
            }
            eprintln!(
                "svc: using the demo store {} (no config file; give --config, set SVC_CONFIG or create ./svc.yaml \
                 to use another)",
                path.display()
            );
        }
    }
    svc_store::Store::connect(&config.server.database_url).await.with_context(|| "cannot open the store".to_string())
}

/// The standard output of a command's product (tables, keys, JSON). A write to a closed stdout, as in
/// `svc spend | head`, fails with [`StdoutClosed`], which `main` turns into a quiet success, as ripgrep
/// does; every other failure stays an error.
pub fn stdout() -> Product {
    Product(std::io::stdout().lock())
}

/// See [`stdout`].
pub struct Product(std::io::StdoutLock<'static>);

/// The reader of stdout went away (a closed pipe).
#[derive(Debug, thiserror::Error)]
#[error("stdout is closed")]
pub struct StdoutClosed;

impl Product {
    fn closed(e: std::io::Error) -> std::io::Error {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::io::Error::new(std::io::ErrorKind::BrokenPipe, StdoutClosed)
        } else {
            e
        }
    }
}

impl Write for Product {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf).map_err(Product::closed)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush().map_err(Product::closed)
    }
}

/// Whether `e` comes from a write to a closed stdout (see [`stdout`]).
pub fn is_stdout_closed(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause.is::<StdoutClosed>()
            || cause
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .is_some_and(|inner| inner.is::<StdoutClosed>())
    })
}

/// Logs to stderr in `format` (`server.log_format`); `RUST_LOG` overrides the default level (`info`, quiet for
/// sqlx and hyper). JSON lines carry every field at the top level (`jq .status`), the time in RFC 3339.
///
/// Every line is written by the request log's thread (`svc_gateway::observe::line`), so a line costs its
/// formatting, not a write to stderr on the request's thread, and a stderr that is slow or full never stalls a
/// request: past 4 MiB waiting, lines are dropped (and the writer says how many). Request lines are gathered for
/// up to 100 ms; every other line wakes the thread at once. Keep the returned guard until the process ends;
/// dropping it writes what is waiting.
pub fn init_logging(format: svc_config::LogFormat) -> LogGuard {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn,hyper=warn"));
    // Request lines are formatted by the gateway itself (the cheaper formatter); they and the other lines are
    // written in runs by one thread, so lines never cut into each other.
    svc_gateway::observe::line::install(svc_gateway::observe::line::LineWriter {
        json: format == svc_config::LogFormat::Json,
        write: Box::new(|lines| {
            let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), lines);
        }),
    });
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(|| LogLine(Vec::new()));
    // A second call (tests running several commands in one process) keeps the first subscriber.
    let _ = match format {
        svc_config::LogFormat::Text => {
            builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).with_target(false).try_init()
        }
        svc_config::LogFormat::Json => builder.json().flatten_event(true).with_current_span(false).try_init(),
    };
    LogGuard { _private: () }
}

/// One log line as tracing-subscriber writes it, handed whole to the log's thread when done.
struct LogLine(Vec<u8>);

impl std::io::Write for LogLine {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LogLine {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            svc_gateway::observe::line::write_soon(&self.0);
        }
    }
}

/// Held until the process ends: dropping it writes the log lines still waiting.
pub struct LogGuard {
    _private: (),
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        svc_gateway::observe::line::flush();
    }
}
