//! What `svc-notify` is about to send (steps 3 and 4 of `run`'s flow): the envelope built from the arguments and
//! the configuration, and the destinations that take it. Printed by `dry_run`, delivered by `run`.

use super::args::NotifyArgs;
use super::error::NotifyError;
use svc_config::{Config, Priority};
use svc_events::senders::hooks::{HookFile, HookRunner};
use svc_events::{Deliverer, Destination, Envelope, EventKind, PushOverrides, Source};

/// What `svc-notify` is about to send.
pub(super) struct Plan {
    pub envelope: Envelope,
    pub overrides: PushOverrides,
    pub deliverer: Deliverer,
    pub destinations: Vec<Destination>,
    pub hook_refusal: Option<String>,
}

/// The plan for `args` under `config`; a configuration error when there is nowhere to send the event.
pub(super) fn plan(args: &NotifyArgs, config: &Config) -> Result<Plan, NotifyError> {
    let kind =
        EventKind::parse(args.event.as_deref().unwrap_or("test")).map_err(|e| NotifyError::Config(e.to_string()))?;
    let data = match &args.data {
        Some(arg) => {
            let text = read_data(arg)?;
            serde_json::from_str::<serde_json::Value>(&text)
                .map_err(|e| NotifyError::Config(format!("`--data` is not valid JSON: {e}")))?
        }
        None => serde_json::Value::Null,
    };
    let priority = match &args.priority {
        Some(p) => Some(Priority::parse(p).ok_or_else(|| {
            NotifyError::Config(format!("`--priority {p}` is not one of min, low, default, high, urgent"))
        })?),
        None => None,
    };
    let source = Source::from_config(&config.fleet, args.agent.as_deref(), "svc-notify");
    let envelope = Envelope::new(kind, data, &source).map_err(|e| NotifyError::Config(e.to_string()))?;

    let depth = svc_events::senders::hooks::current_depth();
    let runner =
        HookFile::locate().ok().map(|f| HookRunner::new(f, config.notifications.hooks.clone()).with_depth(depth));
    let registered = runner.as_ref().and_then(|r| r.registry().current().ok()).is_some_and(|h| !h.is_empty());
    let hook_refusal = runner.as_ref().and_then(|r| r.allowed().err()).map(|e| e.to_string());
    let deliverer = Deliverer::from_config(&config.notifications, runner.filter(|_| registered));

    if deliverer.push().is_none() && config.notifications.webhooks.is_empty() && !registered {
        let why = match &config.notifications.ntfy {
            Some(n) if !n.enabled => "the push block `notifications.ntfy` is disabled",
            _ => "no push block `notifications.ntfy`",
        };
        return Err(NotifyError::Config(format!(
            "{why} and no webhook or hook is configured: nowhere to send the event"
        )));
    }
    let destinations = deliverer.destinations_for(kind.as_str());
    let overrides = PushOverrides { title: args.title.clone(), priority };
    Ok(Plan { envelope, overrides, deliverer, destinations, hook_refusal })
}

/// `--data JSON`, `--data @PATH` (read a file) or `--data -` (read stdin). One command-line argument is
/// capped at 128 KiB on Linux, so large data must come from a file or stdin.
fn read_data(arg: &str) -> Result<String, NotifyError> {
    if arg == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .map_err(|e| NotifyError::Config(format!("cannot read `--data` from stdin: {e}")))?;
        return Ok(text);
    }
    match arg.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| NotifyError::Config(format!("cannot read `--data` file `{path}`: {e}"))),
        None => Ok(arg.to_string()),
    }
}
