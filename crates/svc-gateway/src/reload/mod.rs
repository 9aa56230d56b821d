//! Reloading the configuration while serving (`SIGHUP`, `POST /config/reload`, `svc reload`).
//!
//! The file the gateway started with is read again and checked whole: a configuration that does not check is
//! refused with every problem, and one that changes what a running server cannot (its address, store, key,
//! connection limits, log format, fleet identity, whether it speaks TLS) is refused naming those settings; the
//! running configuration stays either way. Otherwise everything is built first (the model table, the TLS
//! certificate, the teams in the store, the next outbox worker) and then swapped in at once: models and prices,
//! teams and their budgets and rate limits, alert thresholds and admission, notifications and hooks, the TLS
//! certificate. A request under way finishes with the configuration it started with: it holds its
//! [`Pipeline`]. Deployments' health starts over (their counters are the new table's); stored responses keep
//! their homes.

pub(crate) mod refusal;
pub(crate) mod teams;

pub use refusal::{Overrides, ReloadError};

use crate::pipeline::Pipeline;
use crate::state::{outbox_generation, AppState};
use std::sync::Arc;
use svc_config::{Config, ConfigSource};
use svc_events::EventSink;
use svc_routing::ModelTable;

/// What a reload applied.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Reloaded {
    /// The file read (or `<built-in demo>`).
    pub source: String,
    /// Aliases served now.
    pub models: usize,
    /// Teams running now (the file's and those made at runtime).
    pub teams: usize,
    /// The SHA-256 of the file applied (what each fleet node reports in its heartbeats).
    pub config_digest: String,
    /// Webhooks and push destinations now.
    pub destinations: usize,
    /// The configuration's warnings (as `config check` prints them).
    pub warnings: Vec<String>,
}

/// Reads the file the gateway started with again and applies it (see the module docs).
pub async fn reload_file(state: &AppState) -> Result<Reloaded, ReloadError> {
    let source = state.pipeline().config.source.clone();
    let read = tokio::task::spawn_blocking(move || match source {
        ConfigSource::File(path) => svc_config::load_file(&path),
        ConfigSource::Builtin => svc_config::load_builtin(),
    })
    .await
    .map_err(|e| ReloadError::Unreadable(format!("the configuration could not be read: {e}")))?;
    reload(state, read?).await
}

/// Applies `config` (see the module docs); one reload at a time.
pub async fn reload(state: &AppState, mut config: Config) -> Result<Reloaded, ReloadError> {
    let live = &state.edge.live;
    let _one = live.one_at_a_time.lock().await;
    let old = state.pipeline();
    if let Ok(overrides) = live.overrides.lock() {
        overrides.apply(&mut config);
    }
    let restart = old.config.needs_restart(&config);
    if !restart.is_empty() {
        return Err(ReloadError::NeedsRestart(restart));
    }
    // What can fail, built before anything changes.
    let tls = config.server.tls.as_ref().map(crate::tls_acceptor).transpose()?;
    let mut table = ModelTable::build(&config, &live.client, old.metrics.as_ref()).map_err(ReloadError::Model)?;
    table.homes = old.models.homes.clone();
    let models = Arc::new(table);
    let generation = svc_keys::teams::mirror(&old.store, &mut config).await?;
    let config = Arc::new(config);
    let shutdown = &state.edge.shutdown;
    let (outbox, sink, stop) =
        outbox_generation(&config, &old.store, &old.metrics, live.injected.clone(), &old.tasks, shutdown).await?;
    old.budgets.reconfigure(config.clone()).await?;
    // From here on nothing fails.
    old.node.set_running(crate::state::running(&config));
    live.teams_seen.store(generation, std::sync::atomic::Ordering::Release);
    live.events.replace(sink);
    let destinations = outbox.destination_names().len();
    state.edge.outbox.store(Arc::new(outbox));
    if let Ok(mut running) = live.outbox_stop.lock() {
        std::mem::replace(&mut *running, stop).cancel();
    }
    if let Some(tls) = tls {
        live.tls.store(Some(Arc::new(tls)));
    }
    let events: Arc<dyn EventSink> = live.events.clone();
    // The probe of the old table ends with it (it holds it weakly).
    let every = config.gateway.health.probe_interval;
    svc_routing::health::probe::spawn(&models, &events, every, &old.tasks, shutdown.clone());
    let reloaded = Reloaded {
        source: match &config.source {
            ConfigSource::File(p) => p.display().to_string(),
            ConfigSource::Builtin => "<built-in demo>".into(),
        },
        models: config.aliases().len(),
        teams: config.gateway.teams.len(),
        config_digest: config.digest.clone(),
        destinations,
        warnings: config.warnings.iter().map(|w| w.to_string()).collect(),
    };
    state.pipeline.store(Arc::new(Pipeline { config, models, events, ..Pipeline::clone(&old) }));
    tracing::info!(
        config = %reloaded.source,
        models = reloaded.models,
        teams = reloaded.teams,
        destinations = reloaded.destinations,
        "configuration reloaded"
    );
    Ok(reloaded)
}
