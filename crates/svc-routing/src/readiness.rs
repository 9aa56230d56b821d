//! Readiness (spec 4.4): ready when no deployment is unavailable and the store answers a query. A stale
//! answer triggers a probe round (`health::probe::round`) first, so readiness reflects every configured
//! provider's reachability even with the background probe off; the states themselves come from
//! `crate::health` (live traffic and probes). Answers are cached for `gateway_settings.readiness_cache_seconds`
//! (default 5) and computed by one caller at a time, so a storm of readiness checks cannot hammer the upstreams.

use crate::health::State;
use crate::table::ModelTable;
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};
use svc_events::EventSink;
use svc_store::Store;
use tokio::sync::Mutex;

/// The readiness of one deployment.
#[derive(Debug, Clone, Serialize)]
pub struct ProviderStatus {
    /// Deployment id.
    pub deployment: String,
    /// Alias it serves.
    pub model: String,
    /// Provider name.
    pub provider: String,
    /// Endpoint probed (never a secret).
    pub endpoint: String,
    /// Whether it is usable: any state but unavailable.
    pub ready: bool,
    /// Its health: `healthy`, `degraded` or `unavailable`.
    pub state: State,
    /// Why not ready (or why degraded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A readiness answer.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `ready` or `not_ready`.
    pub status: &'static str,
    /// Whether the store answered.
    pub store: bool,
    /// Each deployment.
    pub providers: Vec<ProviderStatus>,
    /// When it was computed (RFC 3339).
    pub checked_at: String,
}

impl Report {
    /// Whether everything is ready.
    pub fn ready(&self) -> bool {
        self.status == "ready"
    }
}

/// The cached readiness.
pub struct Readiness {
    ttl: Duration,
    cached: Mutex<Option<(Instant, Arc<Report>)>>,
}

impl Readiness {
    /// A cache that keeps answers for `ttl`.
    pub fn new(ttl: Duration) -> Readiness {
        Readiness { ttl, cached: Mutex::new(None) }
    }

    /// The current answer, probing when the cached one is stale. Probe results feed the deployments' health
    /// (and so may emit `model.unavailable` through `sink`).
    pub async fn check(&self, models: &ModelTable, store: &Store, sink: &dyn EventSink) -> Arc<Report> {
        // Holding the lock across the probes makes concurrent callers wait for one probe round.
        let mut cached = self.cached.lock().await;
        if let Some((at, report)) = cached.as_ref() {
            if at.elapsed() < self.ttl {
                return report.clone();
            }
        }
        let ((), store_ok) = tokio::join!(crate::health::probe::round(models, sink), store.ping());
        let mut providers: Vec<ProviderStatus> = models
            .all()
            .map(|r| {
                let view = r.health.view();
                ProviderStatus {
                    deployment: r.deployment.id.clone(),
                    model: r.alias.clone(),
                    provider: r.deployment.provider_name().to_string(),
                    endpoint: r.deployment.endpoint(),
                    ready: view.state != State::Unavailable,
                    state: view.state,
                    error: (view.state != State::Healthy).then_some(view.reason),
                }
            })
            .collect();
        providers.sort_by(|a, b| a.deployment.cmp(&b.deployment));
        let all = store_ok.is_ok() && providers.iter().all(|p| p.ready);
        let report = Arc::new(Report {
            status: if all { "ready" } else { "not_ready" },
            store: store_ok.is_ok(),
            providers,
            checked_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        });
        *cached = Some((Instant::now(), report.clone()));
        report
    }
}
