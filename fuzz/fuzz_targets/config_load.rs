//! `svc_config::load_str` on arbitrary text: it never panics, every problem is a diagnostic (an invalid file
//! has at least one error, each with a message), and a configuration that loads can be used: its budget
//! periods can be computed.

#![no_main]

use libfuzzer_sys::fuzz_target;
use svc_config::{load_str, ConfigError, ConfigSource, Severity};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // `os.environ/SET_…` resolves, any other name is unset: both paths of every string field.
    let env = |name: &str| name.starts_with("SET").then(|| format!("value-of-{name}"));
    match load_str(text, "fuzz.yaml", ConfigSource::Builtin, &env) {
        Ok(config) => {
            assert!(config.warnings.iter().all(|d| d.severity == Severity::Warning));
            let now = chrono::DateTime::UNIX_EPOCH + chrono::Duration::days(20_000);
            for team in &config.gateway.teams {
                let anchor = team.budget_start.unwrap_or(now);
                let period = team.budget_duration.period_at(anchor, now);
                assert!(period.start < period.end, "empty period for {team:?}");
            }
        }
        Err(ConfigError::Invalid { diagnostics }) => {
            assert!(diagnostics.iter().any(|d| d.severity == Severity::Error), "invalid without an error");
            for d in &diagnostics {
                assert!(!d.message.trim().is_empty(), "a diagnostic without a message: {d:?}");
                assert_eq!(d.file, "fuzz.yaml");
            }
        }
        Err(e @ (ConfigError::Read { .. } | ConfigError::NoDataDir)) => panic!("load_str of a file's text: {e}"),
    }
});
