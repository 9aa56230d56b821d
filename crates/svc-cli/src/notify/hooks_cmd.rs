//! `svc hooks add|list|remove|test`: manage this node's hook registrations (the hooks file of
//! svc-events: `$SVC_HOOKS_FILE`, else `$XDG_STATE_HOME/svc/hooks.json`, else `~/.local/state/svc/hooks.json`)
//! and try them with a test envelope. A running `svc serve` re-reads the file on its next event. Every command
//! takes the event patterns webhooks take: an exact kind, `*`, or a prefix such as `budget.*`.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use svc_config::Config;
use svc_events::senders::hooks::{HookError, HookFile, HookRunner};
use svc_events::{Envelope, EventKind, Source};

/// `svc hooks …`; the doc comments are the commands' help.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum HooksCommand {
    /// Run a script on every event of a kind, or of a pattern such as task.* (or * for every kind)
    ///
    /// The script must exist and be executable; it is registered by its absolute path.
    Add {
        /// Event kind or pattern, e.g. task.done, task.*, *
        event: String,
        /// The script to run
        script_path: PathBuf,
    },
    /// List this machine's hooks, one `<event> <script>` per line
    List,
    /// Stop running a script on an event kind
    Remove {
        /// Event kind or pattern as registered
        event: String,
        /// The script
        script_path: PathBuf,
    },
    /// Run the hooks of an event kind (or of every kind a pattern takes) now, with a test event, and show
    /// their output and exit status
    Test {
        /// Event kind or pattern, e.g. task.done, budget.*
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

/// Runs the hooks `pattern` concerns, each once: for every kind the pattern takes, in spec order (`test` last),
/// the hooks registered for that kind and not run yet, with a test envelope of that kind.
async fn test(file: HookFile, pattern: &str, config: Option<&Config>) -> ExitCode {
    if let Some(why) = svc_config::event_pattern_error(pattern) {
        return fail(&HookError::UnknownKind(why).to_string());
    }
    let settings = config.map(|c| c.notifications.hooks.clone()).unwrap_or_default();
    let fleet = config.map(|c| c.fleet.clone()).unwrap_or_default();
    let source = Source::from_config(&fleet, None, "svc-hooks-test");
    // A test run is started by a person: the loop guard starts from this process's depth like svc-notify's.
    let runner = HookRunner::new(file, settings);
    let exact = EventKind::parse(pattern).is_ok();
    let mut done: Vec<PathBuf> = Vec::new();
    let mut out = String::new();
    let mut all_ok = true;
    for kind in EventKind::ALL.into_iter().filter(|k| svc_config::event_pattern_matches(pattern, k.as_str())) {
        let scripts = match runner.registry().scripts_for(kind.as_str()) {
            Ok(s) => s.into_iter().filter(|s| !done.contains(s)).collect::<Vec<_>>(),
            Err(e) => return fail(&e.to_string()),
        };
        if scripts.is_empty() {
            continue;
        }
        done.extend(scripts.iter().cloned());
        let envelope = match Envelope::new(kind, sample_data(kind), &source) {
            Ok(e) => e,
            Err(e) => return fail(&e.to_string()),
        };
        let runs = match runner.run_scripts(&envelope, None, &scripts).await {
            Ok(r) => r,
            Err(e) => return fail(&e.to_string()),
        };
        for r in &runs {
            let on = if exact { String::new() } else { format!(" on {kind}") };
            let secs = r.elapsed.as_secs_f32();
            out.push_str(&format!("== {}{on} ({}, {secs:.1}s)\n", r.script.display(), r.status));
            if !r.stdout.is_empty() {
                out.push_str(&format!("-- stdout\n{}\n", r.stdout.trim_end()));
            }
            if !r.stderr.is_empty() {
                out.push_str(&format!("-- stderr\n{}\n", r.stderr.trim_end()));
            }
            all_ok &= r.succeeded();
        }
    }
    if done.is_empty() {
        out.push_str(&format!("no hook is registered for `{pattern}`\n"));
    }
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
    if all_ok {
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
