//! `svc teams list`: the teams that run (as the running gateway stored them, and those made at runtime), their
//! budget this period, and what
//! the config file would change. The CLI reads the store the server writes and never applies the file itself:
//! the gateway applies it when it starts.

use super::{load_config, open_store};
use std::io::Write;
use std::path::Path;
use svc_budget::Money;
use svc_config::{Config, TeamConfig, TeamOrigin};
use svc_keys::teams::team_of_row;
use svc_store::TeamRow;

/// `file` with the teams of `rows` that run (its file teams as a gateway last applied them, and the teams made at
/// runtime) in place of its own, and whether any gateway has stored the file's teams (when none has, the file's
/// teams run beside the stored runtime teams).
pub(crate) fn running(file: &Config, rows: &[TeamRow]) -> (Config, bool) {
    let default = file.gateway.budget_duration;
    let ran = rows.iter().any(|r| !r.api && r.in_config);
    let mut config = file.clone();
    if ran {
        config.gateway.teams = rows.iter().filter(|r| r.running()).map(|r| team_of_row(r, default)).collect();
    } else {
        svc_keys::teams::with_api_teams(&mut config, rows);
    }
    (config, ran)
}

/// How the file's teams differ from the running ones, one line each (empty: they agree).
pub(crate) fn differences(file: &[TeamConfig], running: &[TeamConfig]) -> Vec<String> {
    let money = |m: Option<Money>| m.map_or_else(|| "unlimited".to_string(), |m| m.to_string());
    let list = |m: &[String]| if m.is_empty() { "(all)".to_string() } else { m.join(", ") };
    let limit = |v: Option<u64>| v.map_or_else(|| "none".to_string(), |v| v.to_string());
    let mut out = Vec::new();
    for f in file {
        let Some(r) = running.iter().find(|r| r.team_id == f.team_id) else {
            out.push(format!("team {}: in the file, not running", f.team_id));
            continue;
        };
        let mut field = |name: &str, in_file: String, runs: String| {
            if in_file != runs {
                out.push(format!("team {}: {name} {in_file} in the file, {runs} running", f.team_id));
            }
        };
        field("budget_limit", money(f.budget_limit), money(r.budget_limit));
        field("budget_duration", f.budget_duration.to_string(), r.budget_duration.to_string());
        field("models", list(&f.models), list(&r.models));
        field("rpm_limit", limit(f.rpm_limit.map(u64::from)), limit(r.rpm_limit.map(u64::from)));
        field("tpm_limit", limit(f.tpm_limit), limit(r.tpm_limit));
    }
    let from_files = running.iter().filter(|r| r.origin == TeamOrigin::File);
    for r in from_files.filter(|r| !file.iter().any(|f| f.team_id == r.team_id)) {
        out.push(format!("team {}: running, not in the file", r.team_id));
    }
    out
}

/// Runs a `svc teams` command.
pub async fn run(explicit: Option<&Path>) -> anyhow::Result<()> {
    let file = load_config(explicit)?;
    let store = open_store(&file).await?;
    let rows = store.list_teams().await?;
    let (config, ran) = running(&file, &rows);
    let anchors: std::collections::HashMap<&str, i64> =
        rows.iter().map(|t| (t.team_id.as_str(), t.anchor_ms)).collect();
    let now = chrono::Utc::now();
    let currency = config.gateway.currency.as_deref();
    let mut out = super::stdout();
    writeln!(
        out,
        "{:<16}  {:<4}  {:>12}  {:<8}  {:>12}  {:>6}  {:<20}  MODELS",
        "TEAM",
        "FROM",
        super::spend::with_currency("BUDGET", currency),
        "PERIOD",
        super::spend::with_currency("SPENT", currency),
        "USED",
        "RESETS"
    )?;
    for t in &config.gateway.teams {
        // The team's current budget period, as the gateway counts it (its anchor is kept in the store).
        let file_start = file.team(&t.team_id).and_then(|f| f.budget_start);
        let anchor = anchors
            .get(t.team_id.as_str())
            .and_then(|ms| chrono::DateTime::from_timestamp_millis(*ms))
            .or(file_start)
            .unwrap_or(now);
        let period = t.budget_duration.period_at(anchor, now);
        let filter = svc_store::SpendFilter {
            team_id: Some(t.team_id.clone()),
            start_ms: Some(period.start.timestamp_millis()),
            ..Default::default()
        };
        let spent = Money::from_nanos_i128(store.sum_spend(&filter).await?);
        let budget = t.budget_limit.map(|b| b.to_string()).unwrap_or_else(|| "unlimited".into());
        let used = match t.budget_limit {
            Some(limit) if limit.nanos() > 0 => format!("{:.0}%", 100.0 * spent.as_f64() / limit.as_f64()),
            _ => "-".into(),
        };
        let resets = period.end.format("%Y-%m-%d %H:%M UTC").to_string();
        let models = if t.models.is_empty() { "(all)".to_string() } else { t.models.join(", ") };
        writeln!(
            out,
            "{:<16}  {:<4}  {:>12}  {:<8}  {:>12}  {:>6}  {:<20}  {models}",
            t.team_id,
            t.origin.as_str(),
            budget,
            t.budget_duration.to_string(),
            spent.to_string(),
            used,
            resets
        )?;
    }
    if !ran {
        eprintln!("svc: no gateway has run on this store yet: these are the config file's teams");
    } else {
        let differ = differences(&file.gateway.teams, &config.gateway.teams);
        if !differ.is_empty() {
            eprintln!("svc: the config file differs from what runs (the gateway applies the file when it starts):");
            for d in differ {
                eprintln!("  {d}");
            }
        }
    }
    store.close().await;
    Ok(())
}
