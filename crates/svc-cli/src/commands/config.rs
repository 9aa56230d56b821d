//! `svc config check`.

use std::path::Path;
use std::process::ExitCode;
use svc_config::ConfigError;

/// Validates the configuration; prints every problem (errors and warnings) with file:line:column.
pub fn check(explicit: Option<&Path>) -> ExitCode {
    let Some(path) = svc_config::find_config(explicit) else {
        eprintln!("svc: no configuration file (give --config PATH, set SVC_CONFIG or create ./svc.yaml)");
        return ExitCode::from(1);
    };
    match svc_config::load_file(&path) {
        Ok(config) => {
            for w in &config.warnings {
                eprintln!("{w}");
            }
            let models = config.aliases().len();
            let teams = config.gateway.teams.len();
            let count = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
            eprintln!(
                "{}: valid ({}, {}, {})",
                path.display(),
                count(models, "model"),
                count(teams, "team"),
                count(config.warnings.len(), "warning")
            );
            ExitCode::SUCCESS
        }
        Err(ConfigError::Invalid { diagnostics }) => {
            for d in &diagnostics {
                eprintln!("{d}");
            }
            let errors = diagnostics.iter().filter(|d| d.severity == svc_config::Severity::Error).count();
            let plural = if errors == 1 { "" } else { "s" };
            eprintln!("{}: invalid ({errors} error{plural})", path.display());
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("svc: {e}");
            ExitCode::from(1)
        }
    }
}
