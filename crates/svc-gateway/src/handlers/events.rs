//! `POST /events`: a key emits a fleet event through the durable outbox. 202 with exactly the envelope (its
//! outbox id in `X-SVC-Outbox-Id`); 400 on a bad kind, data or priority; 403 when the key may not post the
//! kind ([`poster`]).

use crate::error::ApiError;
use crate::handlers::{parse_json, read_body};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::Value;
use svc_events::{EmitError, EventKind, Meta, Origin, PushOverrides, Source};
use svc_keys::Principal;

/// The largest `data` of a posted event, in bytes of JSON text (it is stored in the outbox and delivered to
/// every destination; a push message holds a few KiB).
pub const MAX_DATA_BYTES: usize = 16 * 1024;
/// The longest `agent`, `meta.swarm` and `meta.build`, in bytes.
pub const MAX_NAME_BYTES: usize = 128;
/// The longest `title`, in bytes.
pub const MAX_TITLE_BYTES: usize = 256;

impl PostedEvent {
    /// 400 naming the field that is over its bound (README, "Limits"): an event is stored whole.
    fn check_bounds(&self) -> Result<(), ApiError> {
        let meta = self.meta.as_ref();
        let names = [
            ("agent", self.agent.as_deref(), MAX_NAME_BYTES),
            ("meta.swarm", meta.and_then(|m| m.swarm.as_deref()), MAX_NAME_BYTES),
            ("meta.build", meta.and_then(|m| m.build.as_deref()), MAX_NAME_BYTES),
            ("title", self.title.as_deref(), MAX_TITLE_BYTES),
        ];
        for (param, text, max) in names {
            if let Some(t) = text.filter(|t| t.len() > max) {
                let message = format!("`{param}` is {} bytes long; at most {max}", t.len());
                return Err(ApiError::bad_request(message, Some(param.into())));
            }
        }
        let data = serde_json::to_string(&self.data).map_or(0, |t| t.len());
        if data > MAX_DATA_BYTES {
            let message = format!("`data` is {data} bytes of JSON; at most {MAX_DATA_BYTES}");
            return Err(ApiError::bad_request(message, Some("data".into())));
        }
        Ok(())
    }
}

/// The body of `POST /events`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostedEvent {
    /// Kind (spec 6.1) or `test`.
    pub event: String,
    /// Event data (an object).
    #[serde(default)]
    pub data: Value,
    /// Envelope `agent` (default: the key's agent role or alias, `gateway` for the master key).
    pub agent: Option<String>,
    /// Envelope `meta`.
    pub meta: Option<Meta>,
    /// Push title override.
    pub title: Option<String>,
    /// Push priority override: `min|low|default|high|urgent`.
    pub priority: Option<String>,
}

/// Stores the event, with who posted it, for every destination that takes it and answers 202 with the
/// envelope.
pub async fn post(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    body: Body,
) -> Result<Response, ApiError> {
    let pipeline = s.pipeline();
    let bytes = read_body(body, pipeline.config.server.max_request_body_bytes).await?;
    let posted: PostedEvent = parse_json(&bytes)?;
    posted.check_bounds()?;
    let kind =
        EventKind::parse(&posted.event).map_err(|e| ApiError::bad_request(e.to_string(), Some("event".into())))?;
    let origin = poster(&p, kind)?;
    let priority = match posted.priority.as_deref() {
        Some(text) => Some(svc_config::Priority::parse(text).ok_or_else(|| {
            ApiError::bad_request(
                format!("`{text}` is not one of min, low, default, high, urgent"),
                Some("priority".into()),
            )
        })?),
        None => None,
    };
    let default_agent = p.key().map(|k| k.agent_name().to_string()).unwrap_or_else(|| "gateway".into());
    let mut source =
        Source::from_config(&pipeline.config.fleet, posted.agent.as_deref().or(Some(&default_agent)), "gateway");
    if let Some(meta) = posted.meta {
        source.meta = meta;
    }
    let overrides = PushOverrides { title: posted.title, priority };
    match s.edge.outbox.load().emit(&source, &origin, kind, posted.data, &overrides).await {
        Ok((envelope, id)) => {
            Ok((StatusCode::ACCEPTED, [("x-svc-outbox-id", id.to_string())], Json(envelope)).into_response())
        }
        Err(EmitError::Envelope(e)) => Err(ApiError::bad_request(e.to_string(), Some("data".into()))),
        Err(EmitError::Store(e)) => Err(e.into()),
    }
}

/// Who posts `kind` on `POST /events`, or why they may not: the master key may post every kind (a fleet
/// monitor posts `node.offline`); a virtual key may not post the kinds only the gateway emits (`budget.*`,
/// `model.*`, `node.*`: that would forge an alarm), nor a kind its `events` list leaves out. A refusal is 403
/// with `param: "event"`; nothing is stored.
pub fn poster(principal: &Principal, kind: EventKind) -> Result<Origin, ApiError> {
    let Some(key) = principal.key() else {
        return Ok(Origin::Master);
    };
    let refuse = |message: String| Err(ApiError::forbidden("permission_error", message).with_param("event"));
    if kind.gateway_only() {
        return refuse(format!(
            "`{kind}` is emitted by the gateway itself; a virtual key may not post `budget.*`, `model.*` or `node.*` events (the master key may)"
        ));
    }
    if !key.events.is_empty() && !key.events.iter().any(|p| svc_config::event_pattern_matches(p, kind.as_str())) {
        return refuse(format!("this key may post only `{}` events, not `{kind}`", key.events.join("`, `")));
    }
    Ok(Origin::Key(key.id.clone()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::Arc;
    use svc_keys::VirtualKey;
    use svc_store::KeyRow;

    fn key(events: &[&str]) -> Principal {
        let row = KeyRow {
            events: events.iter().map(|e| e.to_string()).collect(),
            ..svc_store::KeyRow { id: "k-1".into(), team_id: "t".into(), ..Default::default() }
        };
        Principal::Key(Arc::new(VirtualKey::from_row(&row)))
    }

    #[test]
    fn who_may_post_what() {
        let any = key(&[]);
        let narrow = key(&["task.*", "agent.crashed"]);
        for kind in EventKind::ALL {
            assert_eq!(poster(&Principal::Master, kind).unwrap(), Origin::Master, "{kind}");
            let by_any = poster(&any, kind);
            assert_eq!(by_any.is_ok(), !kind.gateway_only(), "{kind}");
            let narrow_ok = ["task.created", "task.done", "task.blocked", "agent.crashed"].contains(&kind.as_str());
            assert_eq!(poster(&narrow, kind).is_ok(), narrow_ok, "{kind}");
        }
        assert_eq!(poster(&any, EventKind::TaskDone).unwrap(), Origin::Key("k-1".into()));
        let refused = poster(&any, EventKind::NodeOffline).unwrap_err().body();
        assert_eq!(refused["error"]["param"], "event");
        assert_eq!(refused["error"]["code"], "403");
        let refused = poster(&narrow, EventKind::AgentStarted).unwrap_err().body();
        assert!(refused["error"]["message"].as_str().unwrap().contains("`task.*`, `agent.crashed`"), "{refused}");
    }
}
