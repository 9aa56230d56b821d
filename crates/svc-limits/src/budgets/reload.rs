//! A configuration reload reaching the budgets: the config they read and the teams' anchors, swapped whole.

use super::{Budgets, Scope};
use chrono::{DateTime, Utc};
use foldhash::HashMap;
use std::sync::Arc;
use svc_config::Config;
use svc_store::Store;

impl Budgets {
    /// A reload: the teams, their limits and periods, the alert thresholds and admission settings of `config`
    /// hold from the next request (the teams' anchors read again: a new team was stored by the reload). A
    /// team whose periods changed (their length, `budget_start`, or its stored anchor: a team deleted and made
    /// again under its name) starts a new account (its spend this period read from the store); requests
    /// admitted before settle into the account they were admitted by.
    pub async fn reconfigure(&self, config: Arc<Config>) -> Result<(), svc_store::StoreError> {
        let anchors = anchors(&self.store).await?;
        let old = self.config.swap(config.clone());
        let old_anchors = self.team_anchors.swap(Arc::new(anchors));
        let new_anchors = self.team_anchors.load();
        let moved = |t: &svc_config::TeamConfig| match old.team(&t.team_id) {
            Some(o) => o.budget_duration != t.budget_duration || o.budget_start != t.budget_start,
            None => true,
        } || old_anchors.get(&t.team_id) != new_anchors.get(&t.team_id);
        let changed: Vec<Scope> =
            config.gateway.teams.iter().filter(|t| moved(t)).map(|t| Scope::Team(t.team_id.clone())).collect();
        if let Ok(mut accounts) = self.accounts.write() {
            for scope in &changed {
                accounts.remove(scope);
            }
        }
        Ok(())
    }
}

/// The teams' anchors as stored.
pub(super) async fn anchors(store: &Store) -> Result<HashMap<String, DateTime<Utc>>, svc_store::StoreError> {
    Ok(store
        .list_teams()
        .await?
        .into_iter()
        .map(|t| (t.team_id, DateTime::<Utc>::from_timestamp_millis(t.anchor_ms).unwrap_or_default()))
        .collect())
}
