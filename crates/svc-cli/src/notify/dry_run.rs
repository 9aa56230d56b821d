//! `svc-notify --dry-run` output (spec 6.3): the first line is `DRY RUN: would POST to <server>/<topic>`, then
//! the push headers (the token shown as `***`), a blank line and the body; then one block per matching webhook
//! (`DRY RUN: would POST to <url>`, the URL redacted as everywhere else, and its headers, the secret never
//! shown; headers that differ per delivery or attempt are described) and per hook that would run; last, after
//! a blank line, the envelope as pretty JSON. When there is no push block the first block is the first
//! webhook's.

use super::plan::Plan;
use std::io::Write as _;
use svc_events::{Destination, Origin};

/// Prints the plan on stdout.
pub(super) fn print(plan: &Plan) {
    let mut out = String::new();
    let env = &plan.envelope;
    if let Some(push) = plan.deliverer.push() {
        match push.message(env, &plan.overrides) {
            Ok(msg) => {
                out.push_str(&format!("DRY RUN: would POST to {}\n", msg.url));
                for (name, value) in msg.headers(false) {
                    out.push_str(&format!("{name}: {value}\n"));
                }
                out.push_str(&format!("\n{}\n\n", msg.body));
            }
            Err(e) => out.push_str(&format!("DRY RUN: cannot build the push message: {e}\n\n")),
        }
    }
    let json = env.to_json();
    for d in &plan.destinations {
        if let Destination::Webhook(i) = d {
            if let Some((_, sender)) = plan.deliverer.webhooks().get(*i) {
                out.push_str(&format!("DRY RUN: would POST to {}\n", sender.shown_url()));
                for (name, value) in sender.preview_headers(json.as_bytes(), &env.event, &Origin::Notify.to_string()) {
                    out.push_str(&format!("{name}: {value}\n"));
                }
                out.push('\n');
            }
        }
    }
    if let Some(runner) = plan.deliverer.hooks().filter(|_| plan.destinations.contains(&Destination::Hooks)) {
        let scripts = runner.registry().scripts_for(&env.event).unwrap_or_default();
        for s in &scripts {
            out.push_str(&format!("DRY RUN: would run hook {}\n", s.display()));
        }
        if !scripts.is_empty() {
            out.push('\n');
        }
    }
    if out.is_empty() {
        out.push_str(&format!("DRY RUN: no destination takes `{}`\n\n", env.event));
    }
    out.push_str(&env.to_json_pretty());
    out.push('\n');
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
}
