//! The outbox for people (master key or a dashboard session): `GET /events/recent`,
//! `GET /events/destinations`, `POST /events/redeliver`.

use crate::error::ApiError;
use crate::handlers::{parse_json, read_body, ApiQuery};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Extension, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use svc_keys::Principal;
use svc_store::{DeliveryRow, DeliveryState, EventFilter, EventRow};

type Answer = Result<Json<Value>, ApiError>;

/// Query of `/events/recent`.
#[derive(Debug, Deserialize)]
pub struct RecentQuery {
    limit: Option<String>,
    kind: Option<String>,
    state: Option<String>,
}

/// The most events one answer holds.
const MAX_EVENTS: i64 = 500;

fn time(ms: Option<i64>) -> Value {
    ms.filter(|ms| *ms > 0)
        .and_then(chrono::DateTime::<chrono::Utc>::from_timestamp_millis)
        .map(|t| json!(t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)))
        .unwrap_or(Value::Null)
}

fn delivery_json(d: &DeliveryRow) -> Value {
    json!({
        "destination": d.destination, "state": d.state.as_str(), "attempts": d.attempts,
        "last_error": d.last_error,
        "next_attempt": if d.state == DeliveryState::Pending { time(Some(d.next_attempt_ms)) } else { Value::Null },
        "delivered": time(d.delivered_ms), "dead_since": time(d.failed_ms),
    })
}

fn event_json(e: &EventRow) -> Value {
    let envelope: Value = serde_json::from_str(&e.envelope).unwrap_or(Value::Null);
    let data = &envelope["data"];
    let text = |fields: &[&str]| fields.iter().find_map(|f| data.get(*f).and_then(Value::as_str)).map(str::to_owned);
    let severity = svc_events::EventKind::parse(&e.kind).ok().map(|k| k.severity().as_str());
    json!({
        "id": e.id, "kind": e.kind, "created": time(Some(e.created_ms)), "origin": e.origin,
        "agent": envelope.get("agent"), "node": envelope.get("node"),
        "title": text(&["title", "task_title"]), "message": text(&["message", "summary", "reason"]), "severity": severity,
        "data": data,
        "deliveries": e.deliveries.iter().map(delivery_json).collect::<Vec<_>>(),
    })
}

/// `GET /events/recent?limit=&kind=&state=pending|delivered|dead`: the newest events (default 50, at most
/// 500), newest first, each with its deliveries per destination.
pub async fn recent(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    ApiQuery(q): ApiQuery<RecentQuery>,
) -> Answer {
    p.require_master()?;
    let limit = super::bounded(q.limit.as_deref(), "limit", 50, 1, MAX_EVENTS)?;
    let state = match q.state.as_deref() {
        None | Some("") => None,
        Some(text) => Some(DeliveryState::parse(text).ok_or_else(|| {
            ApiError::bad_request(
                format!("`state` must be `pending`, `delivered` or `dead`, not `{text}`"),
                Some("state".into()),
            )
        })?),
    };
    let filter = EventFilter { kind: q.kind.filter(|k| !k.is_empty()), state };
    let events = s.pipeline().store.outbox_recent(&filter, limit).await?;
    Ok(Json(json!({ "data": events.iter().map(event_json).collect::<Vec<_>>() })))
}

/// `GET /events/destinations`: per destination, its pending, delivered and dead deliveries and the age of the
/// oldest pending one.
pub async fn destinations(State(s): State<AppState>, Extension(p): Extension<Principal>) -> Answer {
    p.require_master()?;
    let now = chrono::Utc::now().timestamp_millis();
    let data: Vec<Value> = s
        .pipeline()
        .store
        .outbox_destinations()
        .await?
        .iter()
        .map(|d| {
            json!({
                "destination": d.destination, "pending": d.pending, "delivered": d.delivered, "dead": d.dead,
                "oldest_pending": time(d.oldest_pending_ms),
                "oldest_pending_age_seconds": d.oldest_pending_ms.map(|t| (now - t).max(0) / 1000),
            })
        })
        .collect();
    Ok(Json(json!({ "data": data })))
}

/// The body of `POST /events/redeliver`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Redeliver {
    /// Outbox id of the event.
    id: i64,
    /// Only this destination (default: every dead delivery of the event).
    destination: Option<String>,
}

/// `POST /events/redeliver {"id", "destination"?}`: dead deliveries of the event are queued again (attempts
/// from zero, due at once) and the worker woken → `{"id", "redelivered": [destinations]}`; 404 when nothing
/// dead matches.
pub async fn redeliver(State(s): State<AppState>, Extension(p): Extension<Principal>, body: Body) -> Answer {
    p.require_master()?;
    let bytes = read_body(body, 4096).await?;
    let req: Redeliver = parse_json(&bytes)?;
    let revived = s.pipeline().store.outbox_redeliver(req.id, req.destination.as_deref()).await?;
    if revived.is_empty() {
        let which = req.destination.map(|d| format!(" to `{d}`")).unwrap_or_default();
        return Err(ApiError::not_found("not_found_error", format!("event {} has no dead delivery{which}", req.id))
            .with_param("id"));
    }
    s.edge.outbox.load().wake();
    tracing::info!(id = req.id, destinations = ?revived, "dead deliveries queued again by hand");
    Ok(Json(json!({ "id": req.id, "redelivered": revived })))
}
