//! The `svc-notify` flow.
//!
//! 1. Parse arguments (`try_parse`: usage errors exit 1; `--help` and `--version` exit 0).
//! 2. Load the configuration (`--config`, `$SVC_CONFIG`, `./svc.yaml`; no file is a configuration error).
//! 3. Build the envelope (`plan::plan`): kind (default `test`), `--data` (a JSON object), `--priority`, source from the
//!    config and `SVC_FLEET`/`SVC_NODE`/`SVC_AGENT`/`SVC_SWARM`/`SVC_BUILD`.
//! 4. Decide the destinations: the push block when enabled, the webhooks whose `events` take the kind, the
//!    hooks registered on this node. No push block (or a disabled one), no webhook and no registered hook is
//!    a configuration error.
//! 5. `--dry-run`: print what would be sent, exit 0.
//! 6. Deliver in order: push (one attempt and two quick retries on unreachable/5xx/429), then the matching
//!    webhooks concurrently (one attempt and up to its `retry` more, short waits), then the hooks, unless the
//!    loop guard refuses them. The senders make single attempts; the retries are these, `RetryPolicy::run`'s.
//!    Every destination is tried even when an earlier one failed; the exit code is the push failure's when
//!    push failed, else 2 when a webhook failed. Hook failures are reported but do not change the exit code.

use super::args::NotifyArgs;
use super::dry_run;
use super::error::NotifyError;
use super::plan::{plan, Plan};
use clap::Parser as _;
use std::process::ExitCode;
use svc_config::Config;
use svc_events::{Destination, Origin, PushError, RetryPolicy};

/// Quick retries of the push server: 2 after the first attempt (about 0.75 s in all).
const PUSH_RETRIES: u32 = 2;

/// The binary's `main`: parses `std::env::args`, runs, reports, and returns the exit code.
pub fn main() -> ExitCode {
    let args = match NotifyArgs::try_parse() {
        Ok(a) => a,
        Err(e) => return usage_error(e),
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return NotifyError::Config(format!("cannot start the async runtime: {e}")).report(),
    };
    match rt.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.report(),
    }
}

fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        _ => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid arguments").trim_start_matches("error: ").to_string();
            NotifyError::Config(format!("{first} (see `svc-notify --help`)")).report()
        }
    }
}

/// Runs `svc-notify` with parsed arguments.
pub async fn run(args: NotifyArgs) -> Result<(), NotifyError> {
    let config = load_config(&args)?;
    let plan = plan(&args, &config)?;
    if args.dry_run {
        dry_run::print(&plan);
        return Ok(());
    }
    deliver(plan).await
}

fn load_config(args: &NotifyArgs) -> Result<Config, NotifyError> {
    let Some(path) = svc_config::find_config(args.config.as_deref()) else {
        return Err(NotifyError::Config(
            "no configuration file: pass `--config PATH`, set `SVC_CONFIG`, or create ./svc.yaml".into(),
        ));
    };
    svc_config::load_file(&path).map_err(|e| NotifyError::Config(e.to_string()))
}

async fn deliver(plan: Plan) -> Result<(), NotifyError> {
    let Plan { envelope, overrides, deliverer, destinations, hook_refusal } = plan;
    let mut failure: Option<NotifyError> = None;
    let mut webhook_errors: Vec<String> = Vec::new();

    if let Some(push) = deliverer.push() {
        let msg = push.message(&envelope, &overrides).map_err(|e| NotifyError::Config(e.to_string()))?;
        if let Err(e) = push.publish_with_retries(&msg, &RetryPolicy::PUSH_CLI, PUSH_RETRIES).await {
            failure = Some(push_failure(e));
        }
    }

    let (origin, json) = (Origin::Notify.to_string(), envelope.to_json());
    let webhooks = deliverer.deliver_to_webhooks(&envelope.event, &json, Some(&origin), &RetryPolicy::WEBHOOK_CLI);
    for (_, result) in webhooks.await {
        if let Err(e) = result {
            webhook_errors.push(e.to_string());
        }
    }

    if destinations.contains(&Destination::Hooks) {
        match hook_refusal {
            Some(why) => eprintln!("svc-notify: {why}"),
            None => match deliverer.run_hooks(&envelope, Some(&origin)).await {
                Ok(runs) => {
                    for run in runs.iter().filter(|r| !r.succeeded()) {
                        eprintln!("svc-notify: hook {}: {}", run.script.display(), run.status);
                    }
                }
                Err(e) => eprintln!("svc-notify: hooks not run: {e}"),
            },
        }
    }

    // One line per failure; the last one is returned and decides the exit code (push first, spec 6.3).
    let last_webhook = if failure.is_none() { webhook_errors.pop() } else { None };
    for e in &webhook_errors {
        eprintln!("svc-notify: {e}");
    }
    match (failure, last_webhook) {
        (Some(f), _) => Err(f),
        (None, Some(e)) => Err(NotifyError::Unreachable(e)),
        (None, None) => Ok(()),
    }
}

fn push_failure(e: PushError) -> NotifyError {
    match e {
        PushError::AuthFailed { .. } => NotifyError::Auth(e.to_string()),
        PushError::Unreachable { .. }
        | PushError::ServerError { .. }
        | PushError::RateLimited { .. }
        | PushError::Protocol { .. } => NotifyError::Unreachable(e.to_string()),
        PushError::Rejected { .. } => NotifyError::Config(e.to_string()),
    }
}
