//! The event envelope of spec 2.6 and the [`Source`] it is stamped with (fleet, node, agent, meta).
//!
//! Owns the exact JSON shape and the `data` checks (`data` is an object; `task.done` has its four typed fields).
//! It does not deliver anything and does not decide push titles or priorities.

use crate::kinds::{EventKind, UnknownKind};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use svc_config::FleetConfig;

/// The envelope version (spec 9).
pub const ENVELOPE_VERSION: &str = "1";

/// One event, exactly the fields of spec 2.6, serialized in this order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// The kind, e.g. `task.done`.
    pub event: String,
    /// Always `"1"`.
    pub version: String,
    /// ISO 8601 UTC with milliseconds and `Z`, e.g. `2026-11-21T09:30:00.123Z`.
    pub timestamp: String,
    /// Fleet name.
    pub fleet: String,
    /// Node name.
    pub node: String,
    /// Agent name.
    pub agent: String,
    /// Event-specific fields (always an object).
    pub data: Map<String, Value>,
    /// Optional context; omitted when both fields are empty.
    #[serde(default, skip_serializing_if = "Meta::is_empty")]
    pub meta: Meta,
}

/// `meta`: optional string context (spec 2.6). Empty fields are omitted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// Swarm the agent belongs to (`$SVC_SWARM`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swarm: Option<String>,
    /// Build identifier (`$SVC_BUILD`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<String>,
}

/// Who emits: the fleet, node, agent and meta stamped on every envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// `fleet.name`, overridden by `$SVC_FLEET`.
    pub fleet: String,
    /// `fleet.node` (host name by default), overridden by `$SVC_NODE`.
    pub node: String,
    /// The explicit agent (`--agent`), else `$SVC_AGENT`, else the front end's default.
    pub agent: String,
    /// `$SVC_SWARM`, `$SVC_BUILD`.
    pub meta: Meta,
}

/// Why an envelope cannot be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EnvelopeError {
    /// The kind is not one of spec 6.1 or `test`.
    #[error(transparent)]
    UnknownKind(#[from] UnknownKind),
    /// `data` is JSON but not an object.
    #[error("`data` must be a JSON object, found {found}")]
    DataNotObject {
        /// What it was (`an array`, `a string`, …).
        found: &'static str,
    },
    /// A required `data` field is missing or has the wrong type.
    #[error("`{kind}` needs `data.{field}` ({expected})")]
    MissingField {
        /// The kind whose field is missing.
        kind: &'static str,
        /// The field.
        field: &'static str,
        /// Its type, e.g. `an integer`.
        expected: &'static str,
    },
}

impl Meta {
    /// Whether neither field is set (then `meta` is left out of the JSON).
    pub fn is_empty(&self) -> bool {
        self.swarm.is_none() && self.build.is_none()
    }
}

impl Source {
    /// The source from the config and the process environment. `agent` is an explicit choice (`--agent`, a key's
    /// agent role); without it `$SVC_AGENT` is used, then `default_agent`.
    pub fn from_config(fleet: &FleetConfig, agent: Option<&str>, default_agent: &str) -> Source {
        Source::from_config_with_env(fleet, agent, default_agent, &|name| std::env::var(name).ok())
    }

    /// [`Source::from_config`] with an explicit environment lookup (for tests).
    pub fn from_config_with_env(
        fleet: &FleetConfig,
        agent: Option<&str>,
        default_agent: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Source {
        let var = |name: &str| env(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let agent = agent.map(str::to_string).filter(|a| !a.trim().is_empty());
        Source {
            fleet: var("SVC_FLEET").unwrap_or_else(|| fleet.name.clone()),
            node: var("SVC_NODE").unwrap_or_else(|| fleet.node.clone()),
            agent: agent.or_else(|| var("SVC_AGENT")).unwrap_or_else(|| default_agent.to_string()),
            meta: Meta { swarm: var("SVC_SWARM"), build: var("SVC_BUILD") },
        }
    }
}

impl Envelope {
    /// Builds an envelope stamped now. `data` must be an object (`Value::Null` counts as `{}`).
    pub fn new(kind: EventKind, data: Value, source: &Source) -> Result<Envelope, EnvelopeError> {
        Envelope::at(kind, data, source, chrono::Utc::now())
    }

    /// [`Envelope::new`] with a given time.
    pub fn at(
        kind: EventKind,
        data: Value,
        source: &Source,
        when: chrono::DateTime<chrono::Utc>,
    ) -> Result<Envelope, EnvelopeError> {
        let data = match data {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => return Err(EnvelopeError::DataNotObject { found: json_kind(&other) }),
        };
        check_data(kind, &data)?;
        Ok(Envelope {
            event: kind.as_str().to_string(),
            version: ENVELOPE_VERSION.to_string(),
            timestamp: format_timestamp(when),
            fleet: source.fleet.clone(),
            node: source.node.clone(),
            agent: source.agent.clone(),
            data,
            meta: source.meta.clone(),
        })
    }

    /// The kind (the `event` field), parsed.
    pub fn kind(&self) -> Result<EventKind, UnknownKind> {
        EventKind::parse(&self.event)
    }

    /// The JSON text that is signed and delivered. Serializing these plain fields cannot fail.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }

    /// Pretty JSON, for people (dry runs, `svc hooks test`).
    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| String::from("{}"))
    }
}

/// `2026-11-21T09:30:00.123Z`: UTC, milliseconds, `Z`.
pub fn format_timestamp(when: chrono::DateTime<chrono::Utc>) -> String {
    when.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// Spec 2.6: `task.done` holds `task_id` (integer), `task_title` (string), `epic_id` (integer),
/// `duration_seconds` (integer). Other kinds' fields are documented in the README, not enforced.
fn check_data(kind: EventKind, data: &Map<String, Value>) -> Result<(), EnvelopeError> {
    if kind != EventKind::TaskDone {
        return Ok(());
    }
    const REQUIRED: [(&str, Expected); 4] = [
        ("task_id", Expected::Integer),
        ("task_title", Expected::String),
        ("epic_id", Expected::Integer),
        ("duration_seconds", Expected::Integer),
    ];
    for (field, expected) in REQUIRED {
        let ok = match (expected, data.get(field)) {
            (Expected::Integer, Some(v)) => v.is_i64() || v.is_u64(),
            (Expected::String, Some(v)) => v.is_string(),
            (_, None) => false,
        };
        if !ok {
            let expected = match expected {
                Expected::Integer => "an integer",
                Expected::String => "a string",
            };
            return Err(EnvelopeError::MissingField { kind: kind.as_str(), field, expected });
        }
    }
    Ok(())
}

/// The JSON type a required `data` field must have.
#[derive(Clone, Copy)]
enum Expected {
    Integer,
    String,
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    fn source() -> Source {
        Source { fleet: "alpha".into(), node: "n1".into(), agent: "executor".into(), meta: Meta::default() }
    }

    fn when() -> chrono::DateTime<chrono::Utc> {
        chrono::Utc.with_ymd_and_hms(2026, 11, 21, 9, 30, 0).unwrap() + chrono::Duration::milliseconds(123)
    }

    #[test]
    fn json_shape_without_meta() {
        let data = json!({"task_id": 42, "task_title": "Ship it", "epic_id": 7, "duration_seconds": 65});
        let env = Envelope::at(EventKind::TaskDone, data.clone(), &source(), when()).unwrap();
        let text = env.to_json();
        assert!(text.starts_with(r#"{"event":"task.done","version":"1","timestamp":"2026-11-21T09:30:00.123Z","#));
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            value,
            json!({"event": "task.done", "version": "1", "timestamp": "2026-11-21T09:30:00.123Z",
                   "fleet": "alpha", "node": "n1", "agent": "executor", "data": data})
        );
        let back: Envelope = serde_json::from_str(&text).unwrap();
        assert_eq!(back, env);
    }

    #[test]
    fn meta_fields_only_when_set() {
        let mut s = source();
        s.meta.swarm = Some("s1".into());
        let env = Envelope::at(EventKind::Test, Value::Null, &s, when()).unwrap();
        let value: Value = serde_json::from_str(&env.to_json()).unwrap();
        assert_eq!(value["meta"], json!({"swarm": "s1"}));
        assert_eq!(value["data"], json!({}));
    }

    #[test]
    fn task_done_requires_typed_fields() {
        let cases = [
            (json!({}), "task_id"),
            (json!({"task_id": "42", "task_title": "t", "epic_id": 1, "duration_seconds": 1}), "task_id"),
            (json!({"task_id": 42, "task_title": 5, "epic_id": 1, "duration_seconds": 1}), "task_title"),
            (json!({"task_id": 42, "task_title": "t", "duration_seconds": 1}), "epic_id"),
            (json!({"task_id": 42, "task_title": "t", "epic_id": 1, "duration_seconds": 1.5}), "duration_seconds"),
        ];
        for (data, field) in cases {
            let err = Envelope::at(EventKind::TaskDone, data, &source(), when()).unwrap_err();
            assert!(matches!(err, EnvelopeError::MissingField { field: f, .. } if f == field), "{err}");
        }
        let err = Envelope::at(EventKind::Test, json!([1]), &source(), when()).unwrap_err();
        assert_eq!(err.to_string(), "`data` must be a JSON object, found an array");
    }

    #[test]
    fn source_env_overrides() {
        let fleet = FleetConfig { name: "cfg-fleet".into(), node: "cfg-node".into(), ..FleetConfig::default() };
        let env = |name: &str| match name {
            "SVC_FLEET" => Some("env-fleet".to_string()),
            "SVC_AGENT" => Some("env-agent".to_string()),
            "SVC_BUILD" => Some("b42".to_string()),
            "SVC_SWARM" => Some("  ".to_string()),
            _ => None,
        };
        let s = Source::from_config_with_env(&fleet, None, "svc-notify", &env);
        assert_eq!((s.fleet.as_str(), s.node.as_str(), s.agent.as_str()), ("env-fleet", "cfg-node", "env-agent"));
        assert_eq!(s.meta, Meta { swarm: None, build: Some("b42".into()) });
        let s = Source::from_config_with_env(&fleet, Some("cli-agent"), "svc-notify", &env);
        assert_eq!(s.agent, "cli-agent");
        let s = Source::from_config_with_env(&fleet, None, "gateway", &|_| None);
        assert_eq!(s.agent, "gateway");
    }
}
