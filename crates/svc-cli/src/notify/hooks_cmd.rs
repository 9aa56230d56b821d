//! `svc hooks add|list|remove|test` (spec 6.5): manage this node's hook registrations (the hooks file of
//! svc-events: `$SVC_HOOKS_FILE`, else `$XDG_STATE_HOME/svc/hooks.json`, else `~/.local/state/svc/hooks.json`)
//! and try them with a test envelope. A running `svc serve` re-reads the file on its next event.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use svc_config::Config;
use svc_events::sinks::hooks::{HookFile, HookRunner};
use svc_events::{Envelope, EventKind, Source};

/// `svc hooks …`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum HooksCommand {
    /// Register a script for an event kind (`*` for every kind). The script must exist and be executable.
    Add {
        /// Event kind, e.g. `task.done`, or `*`.
        event: String,
        /// Path of the script (stored as an absolute path).
        script_path: PathBuf,
    },
    /// List the registrations of this node: `<event> <script>` per line.
    List,
    /// Remove a registration.
    Remove {
        /// Event kind as registered, or `*`.
        event: String,
        /// Path of the script.
        script_path: PathBuf,
    },
    /// Run the hooks of an event kind now with a test envelope; show their output and exit status.
    Test {
        /// Event kind, e.g. `task.done`.
        event: String,
    },
}

/// Runs a `svc hooks` command. `config` gives the hook timeout and the fleet/node names (defaults without).
pub async fn run(cmd: HooksCommand, config: Option<&Config>) -> ExitCode {
    match HookFile::locate() {
        Ok(file) => run_with_file(cmd, config, file).await,
        Err(e) => fail(&e.to_string()),
    }
}

/// [`run`] on an explicit hooks file (tests).
pub async fn run_with_file(cmd: HooksCommand, config: Option<&Config>, file: HookFile) -> ExitCode {
    match cmd {
        HooksCommand::Add { event, script_path } => match file.add(&event, &script_path) {
            Ok(reg) => {
                eprintln!(
                    "svc: hook `{}` registered for `{}` in {}",
                    reg.script.display(),
                    reg.event,
                    file.path().display()
                );
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e.to_string()),
        },
        HooksCommand::List => match file.load() {
            Ok(hooks) => {
                let mut out = String::new();
                for h in hooks {
                    out.push_str(&format!("{}\t{}\n", h.event, h.script.display()));
                }
                let _ = std::io::stdout().lock().write_all(out.as_bytes());
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e.to_string()),
        },
        HooksCommand::Remove { event, script_path } => match file.remove(&event, &script_path) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => fail(&format!("no hook `{}` is registered for `{event}`", script_path.display())),
            Err(e) => fail(&e.to_string()),
        },
        HooksCommand::Test { event } => test(file, &event, config).await,
    }
}

async fn test(file: HookFile, event: &str, config: Option<&Config>) -> ExitCode {
    let kind = match EventKind::parse(event) {
        Ok(k) => k,
        Err(e) => return fail(&e.to_string()),
    };
    let settings = config.map(|c| c.notifications.hooks.clone()).unwrap_or_default();
    let fleet = config.map(|c| c.fleet.clone()).unwrap_or_default();
    let source = Source::from_config(&fleet, None, "svc-hooks-test");
    let envelope = match Envelope::new(kind, sample_data(kind), &source) {
        Ok(e) => e,
        Err(e) => return fail(&e.to_string()),
    };
    // A test run is started by a person: the loop guard starts from this process's depth like svc-notify's.
    let runner = HookRunner::new(file, settings);
    let runs = match runner.run(&envelope).await {
        Ok(r) => r,
        Err(e) => return fail(&e.to_string()),
    };
    let mut out = String::new();
    if runs.is_empty() {
        out.push_str(&format!("no hook is registered for `{event}`\n"));
    }
    for r in &runs {
        out.push_str(&format!("== {} ({}, {:.1}s)\n", r.script.display(), r.status, r.elapsed.as_secs_f32()));
        if !r.stdout.is_empty() {
            out.push_str(&format!("-- stdout\n{}\n", r.stdout.trim_end()));
        }
        if !r.stderr.is_empty() {
            out.push_str(&format!("-- stderr\n{}\n", r.stderr.trim_end()));
        }
    }
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
    if runs.iter().all(|r| r.succeeded()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Test `data`: the required fields of `task.done`, a marker otherwise.
fn sample_data(kind: EventKind) -> serde_json::Value {
    match kind {
        EventKind::TaskDone => serde_json::json!({
            "task_id": 0, "task_title": "svc hooks test", "epic_id": 0, "duration_seconds": 0, "test": true
        }),
        _ => serde_json::json!({"test": true, "message": "svc hooks test"}),
    }
}

fn fail(message: &str) -> ExitCode {
    eprintln!("svc: {message}");
    ExitCode::FAILURE
}
