//! Which event kinds a webhook takes: its `events` list holds event patterns (exact kinds, `*` for every kind,
//! `test` included, or a prefix such as `task.*`), checked by the config loader and matched by
//! [`svc_config::event_pattern_matches`], the same rule hooks and virtual keys use.

/// Whether the filter list `events` takes `kind`.
pub fn accepts(events: &[String], kind: &str) -> bool {
    events.iter().any(|f| svc_config::event_pattern_matches(f, kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_entry_takes_the_kind() {
        assert!(accepts(&["agent.crashed".into(), "task.*".into()], "task.done"));
        assert!(!accepts(&["agent.crashed".into(), "task.*".into()], "budget.alert"));
        assert!(!accepts(&[], "task.done"));
    }
}
