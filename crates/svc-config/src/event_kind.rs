//! The event kinds of spec 6.1 (plus `test`), their severities and the push priority each severity maps to.
//!
//! The one closed list of kinds: the configuration checks event patterns against it (`event_pattern.rs`), and
//! svc-events builds and delivers events of these kinds (it re-exports them). This module does not know how an
//! event is built or delivered.

use crate::types::Priority;
use std::fmt;
use std::str::FromStr;

/// One event kind of spec 6.1, or [`EventKind::Test`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// `agent.started` (info).
    AgentStarted,
    /// `agent.stopped` (info).
    AgentStopped,
    /// `agent.crashed` (high).
    AgentCrashed,
    /// `task.created` (info).
    TaskCreated,
    /// `task.done` (info); its `data` has four required fields (spec 2.6).
    TaskDone,
    /// `task.blocked` (warn).
    TaskBlocked,
    /// `epic.closed` (info).
    EpicClosed,
    /// `budget.alert` (warn).
    BudgetAlert,
    /// `budget.exceeded` (urgent).
    BudgetExceeded,
    /// `model.degraded` (warn).
    ModelDegraded,
    /// `model.unavailable` (urgent).
    ModelUnavailable,
    /// `node.offline` (urgent).
    NodeOffline,
    /// `swarm.complete` (info).
    SwarmComplete,
    /// `swarm.timeout` (warn).
    SwarmTimeout,
    /// `test`: a test emission (spec 6.5); its push priority is the push block's configured one.
    Test,
}

/// How serious an event is (spec 6.1). The envelope carries no severity; it only picks the push priority.
/// (svc-events calls it `Severity`; here that name is a [`crate::Diagnostic`]'s.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EventSeverity {
    /// Routine.
    Info,
    /// Worth a look.
    Warn,
    /// Needs attention.
    High,
    /// Needs attention now.
    Urgent,
}

/// A string that names no event kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown event kind `{given}` (expected one of: {})", EventKind::ALL.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", "))]
pub struct UnknownKind {
    /// What was given.
    pub given: String,
}

impl EventKind {
    /// Every kind, in the order of spec 6.1, then `test`.
    pub const ALL: [EventKind; 15] = [
        EventKind::AgentStarted,
        EventKind::AgentStopped,
        EventKind::AgentCrashed,
        EventKind::TaskCreated,
        EventKind::TaskDone,
        EventKind::TaskBlocked,
        EventKind::EpicClosed,
        EventKind::BudgetAlert,
        EventKind::BudgetExceeded,
        EventKind::ModelDegraded,
        EventKind::ModelUnavailable,
        EventKind::NodeOffline,
        EventKind::SwarmComplete,
        EventKind::SwarmTimeout,
        EventKind::Test,
    ];

    /// The wire name, e.g. `task.done`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::AgentStarted => "agent.started",
            EventKind::AgentStopped => "agent.stopped",
            EventKind::AgentCrashed => "agent.crashed",
            EventKind::TaskCreated => "task.created",
            EventKind::TaskDone => "task.done",
            EventKind::TaskBlocked => "task.blocked",
            EventKind::EpicClosed => "epic.closed",
            EventKind::BudgetAlert => "budget.alert",
            EventKind::BudgetExceeded => "budget.exceeded",
            EventKind::ModelDegraded => "model.degraded",
            EventKind::ModelUnavailable => "model.unavailable",
            EventKind::NodeOffline => "node.offline",
            EventKind::SwarmComplete => "swarm.complete",
            EventKind::SwarmTimeout => "swarm.timeout",
            EventKind::Test => "test",
        }
    }

    /// Parses a wire name; exact and case-sensitive, like the rest of the envelope.
    pub fn parse(text: &str) -> Result<EventKind, UnknownKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == text).ok_or_else(|| UnknownKind { given: text.to_string() })
    }

    /// Whether only the gateway emits this kind: `budget.*` (its budgets), `model.*` (its health checks) and
    /// `node.*` (the fleet's health). Posting one of these through `POST /events` would forge an alarm, so
    /// only the master key (a fleet monitor) may; a virtual key may not.
    pub fn gateway_only(self) -> bool {
        matches!(
            self,
            EventKind::BudgetAlert
                | EventKind::BudgetExceeded
                | EventKind::ModelDegraded
                | EventKind::ModelUnavailable
                | EventKind::NodeOffline
        )
    }

    /// The severity of spec 6.1. `test` is `Info` here, but its push priority is the configured one
    /// (see [`EventKind::push_priority`]).
    pub fn severity(self) -> EventSeverity {
        match self {
            EventKind::AgentStarted
            | EventKind::AgentStopped
            | EventKind::TaskCreated
            | EventKind::TaskDone
            | EventKind::EpicClosed
            | EventKind::SwarmComplete
            | EventKind::Test => EventSeverity::Info,
            EventKind::TaskBlocked | EventKind::BudgetAlert | EventKind::ModelDegraded | EventKind::SwarmTimeout => {
                EventSeverity::Warn
            }
            EventKind::AgentCrashed => EventSeverity::High,
            EventKind::BudgetExceeded | EventKind::ModelUnavailable | EventKind::NodeOffline => EventSeverity::Urgent,
        }
    }

    /// The push priority of this kind: its severity's, except `test`, which uses `configured` (the push block's
    /// `priority`). An explicit `--priority` / `priority` override is applied by the caller, not here.
    pub fn push_priority(self, configured: Priority) -> Priority {
        match self {
            EventKind::Test => configured,
            other => other.severity().push_priority(),
        }
    }
}

impl EventSeverity {
    /// The mapping the README documents: info → `low`, warn → `default`, high → `high`, urgent → `urgent`.
    pub fn push_priority(self) -> Priority {
        match self {
            EventSeverity::Info => Priority::Low,
            EventSeverity::Warn => Priority::Default,
            EventSeverity::High => Priority::High,
            EventSeverity::Urgent => Priority::Urgent,
        }
    }

    /// `info`, `warn`, `high` or `urgent`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventSeverity::Info => "info",
            EventSeverity::Warn => "warn",
            EventSeverity::High => "high",
            EventSeverity::Urgent => "urgent",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventKind {
    type Err = UnknownKind;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventKind::parse(s)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn severity_and_priority_table() {
        use Priority::*;
        let table = [
            ("agent.started", EventSeverity::Info, Low),
            ("agent.stopped", EventSeverity::Info, Low),
            ("agent.crashed", EventSeverity::High, High),
            ("task.created", EventSeverity::Info, Low),
            ("task.done", EventSeverity::Info, Low),
            ("task.blocked", EventSeverity::Warn, Default),
            ("epic.closed", EventSeverity::Info, Low),
            ("budget.alert", EventSeverity::Warn, Default),
            ("budget.exceeded", EventSeverity::Urgent, Urgent),
            ("model.degraded", EventSeverity::Warn, Default),
            ("model.unavailable", EventSeverity::Urgent, Urgent),
            ("node.offline", EventSeverity::Urgent, Urgent),
            ("swarm.complete", EventSeverity::Info, Low),
            ("swarm.timeout", EventSeverity::Warn, Default),
        ];
        for (name, severity, priority) in table {
            let kind = EventKind::parse(name).unwrap();
            assert_eq!(kind.as_str(), name);
            assert_eq!(kind.severity(), severity, "{name}");
            assert_eq!(kind.push_priority(Min), priority, "{name}");
        }
        assert_eq!(EventKind::Test.push_priority(Min), Min);
        assert_eq!(EventKind::Test.push_priority(Urgent), Urgent);
    }

    #[test]
    fn gateway_only_kinds() {
        let only: Vec<&str> = EventKind::ALL.iter().filter(|k| k.gateway_only()).map(|k| k.as_str()).collect();
        assert_eq!(only, ["budget.alert", "budget.exceeded", "model.degraded", "model.unavailable", "node.offline"]);
        for k in EventKind::ALL {
            let prefix = k.as_str().split('.').next().unwrap();
            assert_eq!(k.gateway_only(), ["budget", "model", "node"].contains(&prefix), "{k}");
        }
    }

    #[test]
    fn unknown_kind_is_a_clear_error() {
        let err = EventKind::parse("task.finished").unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("unknown event kind `task.finished` (expected one of: agent.started,"), "{text}");
        assert!(EventKind::parse("Task.Done").is_err());
        assert!(EventKind::parse("").is_err());
    }
}
