//! Which event kinds a webhook takes: its `events` list holds exact kinds, `*` (every kind, `test` included)
//! or a prefix such as `task.*` (every `task.` kind). The config loader has already rejected unknown entries.

/// Whether the filter list `events` takes `kind`.
pub fn accepts(events: &[String], kind: &str) -> bool {
    events.iter().any(|f| matches(f, kind))
}

/// Whether one filter entry takes `kind`.
pub fn matches(filter: &str, kind: &str) -> bool {
    if filter == "*" || filter == kind {
        return true;
    }
    match filter.strip_suffix('*') {
        Some(prefix) if prefix.ends_with('.') => kind.starts_with(prefix),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_table() {
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
        for (filter, kind, want) in cases {
            assert_eq!(matches(filter, kind), want, "{filter} vs {kind}");
        }
        assert!(accepts(&["agent.crashed".into(), "task.*".into()], "task.done"));
        assert!(!accepts(&[], "task.done"));
    }
}
