//! `GET /metrics`: the gauges of state read now (requests in flight, deployment health, budgets, the outbox's
//! backlog, the fleet's nodes), then every series in Prometheus's text format (version 0.0.4). Served on the
//! main listener to the master key or `server.metrics_key`, and without a key on `server.metrics_address`.

use crate::auth::client::Origin;
use crate::error::ApiError;
use crate::pipeline::Pipeline;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus::Encoder;
use svc_keys::hash_secret;
use svc_routing::health::State as Health;

/// Every series, with the gauges of state brought up to date.
pub async fn scrape(state: &AppState) -> Result<Vec<u8>, ApiError> {
    let p = state.pipeline();
    let m = &p.metrics;
    let limit = p.config.server.max_in_flight;
    m.gauges.in_flight_limit.set(i64::try_from(limit).unwrap_or(i64::MAX));
    m.gauges.in_flight.set(i64::try_from(p.in_flight()).unwrap_or(0));
    health(&p);
    budgets(state, &p).await?;
    outbox(state, &p).await?;
    fleet(&p).await?;
    let mut out = Vec::with_capacity(16 * 1024);
    prometheus::TextEncoder::new().encode(&m.registry.gather(), &mut out).map_err(|e| {
        tracing::error!(error = %e, "cannot encode the metrics");
        ApiError::internal("cannot encode the metrics")
    })?;
    Ok(out)
}

fn health(p: &Pipeline) {
    let m = &p.metrics;
    m.gauges.health.reset();
    m.gauges.cooling_down.reset();
    for r in p.models.all() {
        let view = r.health.view();
        let (alias, id, provider) = (r.alias.as_str(), r.deployment.id.as_str(), r.deployment.provider_name());
        for s in [Health::Healthy, Health::Degraded, Health::Unavailable] {
            m.gauges.health.with_label_values(&[alias, id, provider, s.as_str()]).set(i64::from(view.state == s));
        }
        m.gauges.cooling_down.with_label_values(&[alias, id]).set(i64::from(view.cooling_down));
    }
}

async fn budgets(state: &AppState, p: &Pipeline) -> Result<(), ApiError> {
    let m = &p.metrics;
    for g in [&m.gauges.budget_limit, &m.gauges.budget_spent, &m.gauges.budget_reserved, &m.gauges.budget_reset] {
        g.reset();
    }
    let set = |labels: [&str; 3], v: &svc_limits::budgets::BudgetView| {
        m.gauges.budget_limit.with_label_values(&labels).set(v.limit);
        m.gauges.budget_spent.with_label_values(&labels).set(v.spent);
        m.gauges.budget_reserved.with_label_values(&labels).set(v.reserved);
        let reset = chrono::DateTime::parse_from_rfc3339(&v.reset_at).map(|t| t.timestamp()).unwrap_or(0);
        m.gauges.budget_reset.with_label_values(&labels).set(reset as f64);
    };
    for t in &p.config.gateway.teams {
        if let Some(v) = p.budgets.team_view(&t.team_id).await? {
            set(["team", &t.team_id, ""], &v);
        }
    }
    if !m.key_labels() {
        return Ok(());
    }
    for k in state.auth.keys.all() {
        let Some(limit) = k.max_budget else { continue };
        if k.revoked {
            continue;
        }
        let duration = k.period(&p.config);
        let scope = svc_limits::budgets::Scope::Key(k.id.clone());
        let v = p.budgets.view(scope, limit, duration, k.anchor).await?;
        set(["key", &k.team_id, k.alias.as_deref().unwrap_or(&k.hint)], &v);
    }
    Ok(())
}

async fn outbox(state: &AppState, p: &Pipeline) -> Result<(), ApiError> {
    let m = &p.metrics;
    let backlog = p.store.outbox_backlog().await?;
    let now = chrono::Utc::now().timestamp_millis();
    m.gauges.outbox_pending.reset();
    m.gauges.outbox_dead.reset();
    m.gauges.outbox_oldest.reset();
    // Every destination has its series, at 0 when nothing waits for it.
    for name in state.edge.outbox.load().destination_names() {
        let d = [name.as_str()];
        m.gauges.outbox_pending.with_label_values(&d).set(0);
        m.gauges.outbox_dead.with_label_values(&d).set(0);
        m.gauges.outbox_oldest.with_label_values(&d).set(0.0);
    }
    for b in backlog {
        let d = [b.destination.as_str()];
        m.gauges.outbox_pending.with_label_values(&d).set(b.pending);
        m.gauges.outbox_dead.with_label_values(&d).set(b.dead);
        let age = b.oldest_pending_ms.map(|t| (now - t).max(0) as f64 / 1000.0).unwrap_or(0.0);
        m.gauges.outbox_oldest.with_label_values(&d).set(age);
    }
    Ok(())
}

async fn fleet(p: &Pipeline) -> Result<(), ApiError> {
    if p.store.backend() != svc_store::Backend::Postgres {
        return Ok(());
    }
    let m = &p.metrics;
    let nodes = p.store.list_nodes(&p.config.fleet.name).await?;
    let now = chrono::Utc::now().timestamp_millis();
    m.gauges.nodes.reset();
    m.gauges.heartbeat_age.reset();
    for s in [svc_store::NodeState::Online, svc_store::NodeState::Offline, svc_store::NodeState::Stopped] {
        let n = nodes.iter().filter(|n| n.state == s).count();
        m.gauges.nodes.with_label_values(&[s.as_str()]).set(i64::try_from(n).unwrap_or(i64::MAX));
    }
    for n in &nodes {
        let age = (now - n.heartbeat_ms).max(0) as f64 / 1000.0;
        m.gauges.heartbeat_age.with_label_values(&[n.node.as_str(), n.state.as_str()]).set(age);
    }
    Ok(())
}

/// The exposition as a response.
async fn exposition(state: &AppState) -> Response {
    match scrape(state).await {
        Ok(body) => {
            let mut resp = body.into_response();
            resp.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
            resp
        }
        Err(e) => e.into_response(),
    }
}

/// `GET /metrics` on the main listener: the master key or `server.metrics_key` (as `Authorization: Bearer`),
/// else 401. A wrong key is a failed authentication like any other (`AuthState::failed`): past the limit of its
/// address it is answered 429, and so are the right keys from that address (both are chosen by an operator, so
/// both can be guessed).
pub async fn handler(State(state): State<AppState>, req: Request) -> Response {
    let from = Origin::new(req.headers(), req.extensions());
    let failed = |e: ApiError| state.auth.failed(&from, e).into_response();
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        return failed(ApiError::unauthorized(
            "No api key passed in: /metrics needs the master key or server.metrics_key.",
        ));
    };
    let digest = hash_secret(token);
    let master = state.auth.is_master(&digest);
    let scraper = state.pipeline().config.server.metrics_key.as_ref().is_some_and(|k| {
        let want = hash_secret(k.expose());
        crate::auth::same_hash(&digest, &want)
    });
    if !(master || scraper) {
        return failed(ApiError::unauthorized("/metrics needs the master key or server.metrics_key."));
    }
    if let Err(limited) = state.auth.refuse_if_limited(&from) {
        return limited.into_response();
    }
    exposition(&state).await
}

/// The router of `server.metrics_address`: `GET /metrics` without a key, nothing else.
pub fn metrics_router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(|State(s): State<AppState>| async move { exposition(&s).await }))
        .with_state(state)
}
