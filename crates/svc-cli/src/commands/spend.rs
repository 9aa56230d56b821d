//! `svc spend`: spend per team, per key and per model (or per client, agent session or API with `--by`),
//! read from the store.

use super::{load_config, open_store, Exit};
use crate::cli::SpendArgs;
use std::io::Write;
use std::path::Path;
use svc_budget::{BudgetDuration, Money};
use svc_store::{SpendFilter, SpendGroup, SpendTotal};

/// Prints one table per grouping: by team, by key, by model unless `--by` says otherwise.
pub async fn run(explicit: Option<&Path>, args: SpendArgs) -> anyhow::Result<()> {
    let config = load_config(explicit)?;
    let store = open_store(&config).await?;
    let mut filter = SpendFilter { team_id: args.team.clone(), ..Default::default() };
    if let Some(since) = &args.since {
        let d = BudgetDuration::parse(since).map_err(|e| Exit { code: 1, message: format!("--since: {e}") })?;
        let now = chrono::Utc::now();
        let start = match d {
            BudgetDuration::Seconds(s) => chrono::Duration::try_seconds(i64::try_from(s).unwrap_or(i64::MAX))
                .and_then(|d| now.checked_sub_signed(d))
                .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC),
            BudgetDuration::Months(m) => now.checked_sub_months(chrono::Months::new(m)).unwrap_or(now),
        };
        filter.start_ms = Some(start.timestamp_millis());
    }
    let keys = store.list_keys().await?;
    let mut out = super::stdout();
    let by = if args.by.is_empty() { SpendGroup::ALL[..3].to_vec() } else { args.by.clone() };
    for group in by {
        let title = group.name().to_uppercase();
        let totals = store.spend_totals(group, &filter).await?;
        let label = |t: &SpendTotal| -> String {
            if group != SpendGroup::Key {
                return t.group.clone();
            }
            keys.iter()
                .find(|k| k.id == t.group)
                .map(|k| k.key_alias.clone().unwrap_or_else(|| k.key_hint.clone()))
                .unwrap_or_else(|| t.group.clone())
        };
        writeln!(out, "{title:<32}  {:>8}  {:>12}  {:>12}  {:>14}", "REQUESTS", "PROMPT", "COMPLETION", "SPEND")?;
        for t in &totals {
            writeln!(
                out,
                "{:<32}  {:>8}  {:>12}  {:>12}  {:>14}",
                label(t),
                t.requests,
                t.prompt_tokens,
                t.completion_tokens,
                Money::from_nanos(t.cost).to_string()
            )?;
        }
        writeln!(out)?;
    }
    store.close().await;
    Ok(())
}
