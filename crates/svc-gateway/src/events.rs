//! The gateway's side of the event pipeline: gateway-emitted events ([`GatewayEvent`]) go to an
//! [`EventSink`]. In `svc serve` the sink is the durable outbox of svc-events; emitting never waits on the
//! network. Also who may post which kind on `POST /events` ([`poster`]).

use crate::auth::Principal;
use crate::error::ApiError;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use svc_events::{EventKind, Origin};

/// An event raised by the gateway (budget, model health, node).
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayEvent {
    /// Event kind (spec 6.1).
    pub kind: EventKind,
    /// Envelope `agent`: the key's agent role or alias, else `gateway`.
    pub agent: String,
    /// Envelope `data`.
    pub data: Value,
}

/// Where gateway events go.
pub trait EventSink: Send + Sync + 'static {
    /// Hands an event over; must not block.
    fn emit(&self, event: GatewayEvent);

    /// A deployment's health changed on this node to `state` (every transition, recoveries too), with the
    /// event it calls for, if any. In fleet mode the gateway's sink lets the fleet announce each of its own
    /// transitions once; elsewhere the event is emitted as it is.
    fn health_changed(&self, _deployment: &str, _state: &'static str, event: Option<GatewayEvent>) {
        if let Some(e) = event {
            self.emit(e);
        }
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

/// Logs events only (used when no pipeline is configured).
#[derive(Debug, Default)]
pub struct LogSink;

impl EventSink for LogSink {
    fn emit(&self, event: GatewayEvent) {
        tracing::info!(kind = event.kind.as_str(), agent = %event.agent, data = %event.data, "event");
    }
}

/// Keeps events in memory (tests).
#[derive(Debug, Default, Clone)]
pub struct MemorySink(pub Arc<Mutex<Vec<GatewayEvent>>>);

impl EventSink for MemorySink {
    fn emit(&self, event: GatewayEvent) {
        if let Ok(mut v) = self.0.lock() {
            v.push(event);
        }
    }
}

impl MemorySink {
    /// Events so far.
    pub fn events(&self) -> Vec<GatewayEvent> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::keys::VirtualKey;
    use svc_store::KeyRow;

    fn key(events: &[&str]) -> Principal {
        let row =
            KeyRow { events: events.iter().map(|e| e.to_string()).collect(), ..crate::keys::test_row("k-1", "t") };
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
