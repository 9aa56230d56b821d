//! Event patterns, the one syntax for choosing event kinds: a webhook's `events`, a hook registration, a
//! virtual key's `events`. A pattern is an exact [`EventKind`] (`test` included), `*` (every kind, `test`
//! included), or a prefix such as `task.*` (every `task.` kind). Nothing else: `task*` or `*.done` are refused.
//!
//! This module checks and matches patterns; what a pattern is used for is its caller's business.

use crate::event_kind::EventKind;

/// Why `pattern` is not a valid event pattern, or `None` when it is.
pub fn event_pattern_error(pattern: &str) -> Option<String> {
    if pattern == "*" || EventKind::parse(pattern).is_ok() {
        return None;
    }
    // A prefix names a family of kinds; `test` is in none, so `test.*` takes nothing.
    let in_family = |prefix: &str| {
        EventKind::ALL.iter().any(|k| *k != EventKind::Test && k.as_str().split('.').next() == Some(prefix))
    };
    match pattern.strip_suffix(".*") {
        Some(prefix) if in_family(prefix) => None,
        Some(_) => Some(format!("`{pattern}` matches no event kind")),
        None => Some(format!("unknown event kind `{pattern}`")),
    }
}

/// Whether the (valid) pattern `pattern` takes the kind `kind`.
pub fn event_pattern_matches(pattern: &str, kind: &str) -> bool {
    if pattern == "*" || pattern == kind {
        return true;
    }
    match pattern.strip_suffix('*') {
        Some(prefix) if prefix.ends_with('.') => kind.starts_with(prefix),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        for ok in ["*", "test", "task.done", "task.*", "budget.*", "node.offline"] {
            assert_eq!(event_pattern_error(ok), None, "{ok}");
        }
        for bad in ["task*", "*.done", "nope.*", "test.*", "task.finished", "", "Task.done", "task.**"] {
            assert!(event_pattern_error(bad).is_some(), "{bad}");
        }
        let cases = [
            ("*", "task.done", true),
            ("*", "test", true),
            ("task.done", "task.done", true),
            ("task.done", "task.created", false),
            ("task.*", "task.blocked", true),
            ("task.*", "test", false),
            ("task.*", "taskx.done", false),
            ("budget.*", "budget.exceeded", true),
            ("budget.*", "task.done", false),
            ("task*", "task.done", false),
            ("test", "test", true),
        ];
        for (pattern, kind, want) in cases {
            assert_eq!(event_pattern_matches(pattern, kind), want, "{pattern} vs {kind}");
        }
    }
}
