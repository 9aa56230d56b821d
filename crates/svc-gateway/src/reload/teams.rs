//! Teams changed while serving (`/team/*`, `svc teams`, on any node): the store's API teams run beside the file's,
//! applied within a second (the key watch polls the teams generation; `NOTIFY` on PostgreSQL), and by the node
//! asked before it answers. Only the configuration's teams are swapped; models, events and TLS stay.

use crate::state::AppState;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use svc_config::Config;
use svc_store::StoreError;

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
    old.node.set_running(crate::state::running(&config));
    let teams = config.gateway.teams.len();
    state.pipeline.store(Arc::new(crate::pipeline::Pipeline { config, ..crate::pipeline::Pipeline::clone(&old) }));
    tracing::info!(teams, "teams changed at runtime applied");
    Ok(())
}
