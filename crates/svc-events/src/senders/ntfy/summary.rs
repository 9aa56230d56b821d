//! The push notification body: `data.task_title` when present, otherwise one human line per kind
//! (e.g. `budget.exceeded: team executor spent 50.02 of 50.00`). Issue 4, "Push (ntfy) delivery"; amounts with
//! the precision they have and an alert's threshold, issue 30.
//!
//! Only text; size limits and header encoding live in `message.rs`.

use crate::envelope::Envelope;
use serde_json::{Map, Value};

/// The body text for an envelope, always one line and never empty.
pub fn body_text(env: &Envelope) -> String {
    if let Some(title) = env.data.get("task_title").and_then(Value::as_str).filter(|t| !t.trim().is_empty()) {
        return one_line(title);
    }
    one_line(&summary(env))
}

/// A one-line summary of an envelope, using the documented `data` fields of its kind when they are there.
pub fn summary(env: &Envelope) -> String {
    let d = &env.data;
    let kind = env.event.as_str();
    let text = |k: &str| field(d, k);
    let specific = match kind {
        "budget.alert" | "budget.exceeded" => {
            // The gateway's fields (README): `budget` is `team` or `key`; money as numbers or decimal strings.
            let whose = match (text("budget").as_deref(), text("key_alias")) {
                (Some("key"), Some(alias)) => Some(format!("key {alias}")),
                _ => text("team_id").or_else(|| text("team")).map(|t| format!("team {t}")),
            };
            // A refusal names what did not fit and what is left: the spend alone may still be under the limit.
            match (whose, money(d, "spent"), money(d, "limit"), money(d, "requested"), money(d, "remaining")) {
                (Some(whose), _, Some(limit), Some(req), Some(left)) => {
                    Some(format!("{whose} refused a request of up to {req}: {left} left of {limit}"))
                }
                (Some(whose), Some(spent), Some(limit), Some(req), None) => {
                    Some(format!("{whose} refused a request of up to {req}, spent {spent} of {limit}"))
                }
                (Some(whose), Some(spent), Some(limit), None, _) => match percent(d, "threshold") {
                    Some(p) => Some(format!("{whose} passed {p} % of its budget: spent {spent} of {limit}")),
                    None => Some(format!("{whose} spent {spent} of {limit}")),
                },
                _ => None,
            }
        }
        "model.degraded" | "model.unavailable" => text("model").map(|m| match text("reason") {
            Some(r) => format!("{m}: {r}"),
            None => m,
        }),
        "node.offline" => text("node").map(|n| format!("node {n} is offline")),
        "task.created" | "task.done" | "task.blocked" => text("task_id").map(|t| match text("reason") {
            Some(r) => format!("task {t}: {r}"),
            None => format!("task {t}"),
        }),
        "epic.closed" => text("epic_id").map(|e| format!("epic {e}")),
        _ => None,
    };
    let rest = specific.or_else(|| text("message")).unwrap_or_else(|| generic(d));
    if rest.is_empty() {
        format!("{kind} from {} on {}", env.agent, env.node)
    } else {
        format!("{kind}: {rest}")
    }
}

/// A scalar field as text (strings as they are, numbers and booleans printed).
fn field(d: &Map<String, Value>, key: &str) -> Option<String> {
    match d.get(key)? {
        Value::String(s) if !s.trim().is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// An amount: a number with the decimals it has (at least two, at most the store's nine: 0.0049 stays 0.0049),
/// a string as written; with the event's `currency` after it when it names one.
fn money(d: &Map<String, Value>, key: &str) -> Option<String> {
    let amount = match d.get(key)? {
        Value::Number(n) => n.as_f64().filter(|f| f.is_finite()).map(decimals)?,
        Value::String(s) if !s.trim().is_empty() => s.clone(),
        _ => return None,
    };
    Some(match d.get("currency").and_then(Value::as_str).filter(|c| !c.trim().is_empty()) {
        Some(currency) => format!("{amount} {currency}"),
        None => amount,
    })
}

/// `f` rounded to nine decimals, written with as many as it needs and at least two.
fn decimals(f: f64) -> String {
    let text = format!("{f:.9}");
    let trimmed = text.trim_end_matches('0');
    match trimmed.split_once('.') {
        Some((_, fraction)) if fraction.len() >= 2 => trimmed.to_string(),
        Some((whole, fraction)) => format!("{whole}.{fraction:0<2}"),
        None => text,
    }
}

/// A fraction (`0.8`) as a percentage (`80`, `87.5`), when it is one.
fn percent(d: &Map<String, Value>, key: &str) -> Option<String> {
    let f = d.get(key)?.as_f64().filter(|f| f.is_finite() && *f > 0.0)?;
    let text = format!("{:.1}", f * 100.0);
    Some(text.strip_suffix(".0").map(str::to_string).unwrap_or(text))
}

/// `key=value, …` of the scalar fields in key order, at most eight of them.
fn generic(d: &Map<String, Value>) -> String {
    // Sorted by key: the map's own order depends on serde_json's `preserve_order` feature in the build.
    let mut keys: Vec<&String> = d.keys().collect();
    keys.sort();
    keys.into_iter().filter_map(|k| field(d, k).map(|v| format!("{k}={v}"))).take(8).collect::<Vec<_>>().join(", ")
}

/// Collapses every run of white space (including CR/LF) into one space.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::envelope::{Meta, Source};
    use crate::kinds::EventKind;
    use serde_json::json;

    fn env(kind: EventKind, data: Value) -> Envelope {
        let s = Source { fleet: "f".into(), node: "n1".into(), agent: "gateway".into(), meta: Meta::default() };
        Envelope::new(kind, data, &s).unwrap()
    }

    #[test]
    fn summaries() {
        let cases = [
            (
                EventKind::BudgetAlert,
                json!({"budget": "team", "team_id": "executor", "spent": 0.0041, "limit": 0.005, "threshold": 0.8}),
                "budget.alert: team executor passed 80 % of its budget: spent 0.0041 of 0.005",
            ),
            (
                EventKind::BudgetAlert,
                json!({"budget": "team", "team_id": "t", "spent": 0.000000123, "limit": 1, "threshold": 0.875, "currency": "USD"}),
                "budget.alert: team t passed 87.5 % of its budget: spent 0.000000123 USD of 1.00 USD",
            ),
            (
                EventKind::BudgetExceeded,
                json!({"team": "executor", "spent": "50.02", "limit": "50.00"}),
                "budget.exceeded: team executor spent 50.02 of 50.00",
            ),
            (
                EventKind::BudgetAlert,
                json!({"budget": "team", "team_id": "executor", "spent": 40.5, "limit": 50.0, "threshold": 0.8}),
                "budget.alert: team executor passed 80 % of its budget: spent 40.50 of 50.00",
            ),
            (
                EventKind::BudgetExceeded,
                json!({"budget": "key", "team_id": "executor", "key_alias": "bot-1", "spent": 10.019, "limit": 10}),
                "budget.exceeded: key bot-1 spent 10.019 of 10.00",
            ),
            (
                EventKind::BudgetExceeded,
                json!({"budget": "team", "team_id": "executor", "spent": 0.0, "limit": 1.0, "requested": 4.096}),
                "budget.exceeded: team executor refused a request of up to 4.096, spent 0.00 of 1.00",
            ),
            (
                EventKind::BudgetExceeded,
                json!({"budget": "team", "team_id": "executor", "spent": 49.6, "limit": 50, "requested": 4.096, "remaining": 0.32}),
                "budget.exceeded: team executor refused a request of up to 4.096: 0.32 left of 50.00",
            ),
            (
                EventKind::BudgetExceeded,
                json!({"budget": "team", "team_id": "executor", "spent": 1.01, "limit": 1.0, "requested": null}),
                "budget.exceeded: team executor spent 1.01 of 1.00",
            ),
            (
                EventKind::ModelUnavailable,
                json!({"model": "openai/gpt-4.1-mini", "reason": "connection refused"}),
                "model.unavailable: openai/gpt-4.1-mini: connection refused",
            ),
            (EventKind::NodeOffline, json!({"node": "n7"}), "node.offline: node n7 is offline"),
            (EventKind::AgentStarted, json!({}), "agent.started from gateway on n1"),
            (
                EventKind::TaskBlocked,
                json!({"task_id": 9, "reason": "waiting\non review"}),
                "task.blocked: task 9: waiting on review",
            ),
            (EventKind::Test, json!({"message": "hello"}), "test: hello"),
            (
                EventKind::SwarmTimeout,
                json!({"swarm": "s1", "after_seconds": 600}),
                "swarm.timeout: after_seconds=600, swarm=s1",
            ),
        ];
        for (kind, data, want) in cases {
            assert_eq!(body_text(&env(kind, data)), want);
        }
    }

    #[test]
    fn task_title_wins() {
        let e = env(
            EventKind::TaskDone,
            json!({"task_id": 1, "task_title": "Fix  the\r\nbuild", "epic_id": 2, "duration_seconds": 3}),
        );
        assert_eq!(body_text(&e), "Fix the build");
    }
}
