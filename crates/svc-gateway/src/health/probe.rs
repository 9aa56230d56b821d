//! The health probe: every deployment's cheap `Deployment::probe` (`GET {api_base}/models`; nothing for the
//! mock; never a paid completion), all at once, each result fed into the deployment's health. It runs in the
//! background every `health_check_interval_seconds` and on a readiness check whose cached answer is stale.
//!
//! What it does not do: decide anything from a result (`Health::probed` does) or answer HTTP.

use crate::events::EventSink;
use crate::pipeline::routing::ModelTable;
use crate::state::AppState;
use std::sync::Arc;
use tokio::time::MissedTickBehavior;

/// Probes every deployment once, concurrently, and records each result.
pub async fn round(models: &ModelTable, sink: &dyn EventSink) {
    let probes = models.all().map(|route| async move {
        let result = route.deployment.probe().await.map_err(|e| e.to_string());
        route.probed(result, sink);
    });
    futures::future::join_all(probes).await;
}

/// Starts the background probe on the state's task tracker: a round at once, then one every interval, until
/// shutdown. Zero interval: no background probe. It holds the state weakly, so it never keeps it alive.
pub fn spawn(state: &AppState) {
    let every = state.config.gateway.health.probe_interval;
    if every.is_zero() {
        return;
    }
    let weak = Arc::downgrade(&state.0);
    let stop = state.shutdown.clone();
    state.tasks.spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            let Some(inner) = weak.upgrade() else { break };
            let state = AppState(inner);
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = round(&state.models, state.events.as_ref()) => {}
            }
        }
    });
}
