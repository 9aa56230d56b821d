//! Teams changed while serving, without a reload: the store's API teams (`/team/new`, `/team/update`,
//! `/team/delete`, `svc teams`, on any node) run beside the file's. Each node applies a change within a second
//! (the key watch polls the teams generation, and hears of it at once on PostgreSQL); the node that took the
//! change applies it before it answers. Applying swaps the configuration's teams (budgets, rate limits and
//! access read them from there); models, events and TLS stay as they are.

use crate::state::AppState;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use svc_config::Config;
use svc_routing::node::Running;
use svc_store::{Store, StoreError};

/// Stores the file's teams (at start and reload) and runs the store's API teams beside them in `config`.
/// Returns the teams generation read before the teams were listed.
pub(crate) async fn mirror(store: &Store, config: &mut Config) -> Result<i64, StoreError> {
    svc_keys::admin::sync_teams(store, config).await?;
    let generation = store.teams_generation().await?;
    svc_keys::teams::with_api_teams(config, &store.list_teams().await?);
    Ok(generation)
}

/// What a node running `config` reports in its heartbeats.
pub(crate) fn running(config: &Config) -> Running {
    Running { teams: svc_keys::admin::teams_fingerprint(config), config_digest: config.digest.clone() }
}

/// Applies the store's API teams when they changed since this node last looked (always with `force`).
pub(crate) async fn refresh(state: &AppState, force: bool) -> Result<(), StoreError> {
    let live = &state.edge.live;
    let store = state.store();
    let generation = store.teams_generation().await?;
    if !force && generation == live.teams_seen.load(Ordering::Acquire) {
        return Ok(());
    }
    let _one = live.one_at_a_time.lock().await;
    let old = state.pipeline();
    let mut config = Config::clone(&old.config);
    let changed = svc_keys::teams::with_api_teams(&mut config, &store.list_teams().await?);
    live.teams_seen.store(generation, Ordering::Release);
    if !changed {
        return Ok(());
    }
    let config = Arc::new(config);
    old.budgets.reconfigure(config.clone()).await?;
    old.node.set_running(running(&config));
    let teams = config.gateway.teams.len();
    state.pipeline.store(Arc::new(crate::pipeline::Pipeline { config, ..crate::pipeline::Pipeline::clone(&old) }));
    tracing::info!(teams, "teams changed at runtime applied");
    Ok(())
}
