//! The health probe: every deployment's cheap `Deployment::probe` (`GET {api_base}/models`; nothing for the
//! mock; never a paid completion), all at once, each result fed into the deployment's health. It runs in the
//! background every `health_check_interval_seconds` and on a readiness check whose cached answer is stale.
//!
//! What it does not do: decide anything from a result (`Health::probed` does) or answer HTTP.

use crate::table::ModelTable;
use std::sync::Arc;
use std::time::Duration;
use svc_events::EventSink;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Probes every deployment once, concurrently, and records each result.
pub async fn round(models: &ModelTable, sink: &dyn EventSink) {
    let probes = models.all().map(|route| async move {
        let result = route.deployment.probe().await.map_err(|e| e.to_string());
        route.probed(result, sink);
    });
    futures::future::join_all(probes).await;
}

/// Starts the background probe of `models` on `tasks`: a round at once, then one `every`, until `stop`. Zero
/// interval: no background probe. It holds the models and the sink weakly, so it never keeps them alive.
pub fn spawn(
    models: &Arc<ModelTable>,
    sink: &Arc<dyn EventSink>,
    every: Duration,
    tasks: &TaskTracker,
    stop: CancellationToken,
) {
    if every.is_zero() {
        return;
    }
    let (models, sink) = (Arc::downgrade(models), Arc::downgrade(sink));
    tasks.spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            let (Some(models), Some(sink)) = (models.upgrade(), sink.upgrade()) else { break };
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = round(&models, sink.as_ref()) => {}
            }
        }
    });
}
