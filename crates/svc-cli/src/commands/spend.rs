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
        filter.start_ms = Some(since_ms(since, chrono::Local::now())?);
    }
    let keys = store.list_keys().await?;
    let mut out = super::stdout();
    // The amounts' currency label, when the config names one: in the column's title.
    let spend_title = with_currency("SPEND", config.gateway.currency.as_deref());
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
        writeln!(out, "{title:<32}  {:>8}  {:>12}  {:>12}  {:>14}", "REQUESTS", "PROMPT", "COMPLETION", spend_title)?;
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

/// The start of `--since`, in Unix ms: `today` (since midnight, the local time of the machine running the
/// command), an RFC 3339 time or date (`2026-11-24`, midnight local time), or a period length back from `now`
/// (`1d` is the last 24 hours).
fn since_ms(since: &str, now: chrono::DateTime<chrono::Local>) -> anyhow::Result<i64> {
    use chrono::{NaiveTime, TimeZone};
    let midnight = |date: chrono::NaiveDate| {
        chrono::Local.from_local_datetime(&date.and_time(NaiveTime::MIN)).earliest().map(|t| t.timestamp_millis())
    };
    let bad = |why: String| Exit { code: 1, message: format!("--since: {why}") };
    if since == "today" {
        return midnight(now.date_naive()).ok_or_else(|| bad("no local midnight today".into()).into());
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(since) {
        return Ok(t.timestamp_millis());
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(since, "%Y-%m-%d") {
        return midnight(d).ok_or_else(|| bad(format!("no local midnight on {since}")).into());
    }
    let d = BudgetDuration::parse(since)
        .map_err(|e| bad(format!("{e}; or `today`, a date (2026-11-24) or an RFC 3339 time")))?;
    let now = now.with_timezone(&chrono::Utc);
    let start = match d {
        BudgetDuration::Seconds(s) => chrono::Duration::try_seconds(i64::try_from(s).unwrap_or(i64::MAX))
            .and_then(|d| now.checked_sub_signed(d))
            .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC),
        BudgetDuration::Months(m) => now.checked_sub_months(chrono::Months::new(m)).unwrap_or(now),
    };
    Ok(start.timestamp_millis())
}

/// A column title with the currency label of its amounts, when there is one (`SPEND (USD)`).
pub(crate) fn with_currency(title: &str, currency: Option<&str>) -> String {
    match currency {
        Some(c) => format!("{title} ({c})"),
        None => title.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::since_ms;
    use chrono::{Local, TimeZone, Timelike};

    #[test]
    fn since_today_is_local_midnight_and_1d_is_24_hours() -> anyhow::Result<()> {
        let now = Local.with_ymd_and_hms(2026, 11, 24, 15, 30, 0).earliest().ok_or_else(|| anyhow::anyhow!("time"))?;
        let today = since_ms("today", now)?;
        let t = Local.timestamp_millis_opt(today).earliest().ok_or_else(|| anyhow::anyhow!("ms"))?;
        assert_eq!((t.date_naive(), t.hour(), t.minute()), (now.date_naive(), 0, 0));
        assert_eq!(since_ms("1d", now)?, now.timestamp_millis() - 86_400_000);
        assert_eq!(since_ms("2026-11-24", now)?, today);
        assert_eq!(since_ms("2026-11-24T00:00:00Z", now)?, 1_795_478_400_000);
        assert!(since_ms("yesterday-ish", now).is_err());
        Ok(())
    }
}
