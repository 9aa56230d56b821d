//! The event kinds of spec 6.1 (plus `test`), their severities and push priorities: svc-config's
//! [`svc_config::EventKind`], the one list, which the configuration also checks event patterns against. Here
//! under the names svc-events has always given them.

pub use svc_config::{EventKind, EventSeverity as Severity, UnknownKind};
