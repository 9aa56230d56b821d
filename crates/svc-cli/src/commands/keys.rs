//! `svc keys …` and `svc teams list`: the admin operations on the store directly, so they work whether or
//! not a server runs (a running server notices the change within a second).

use super::{load_config, open_store, Exit};
use crate::cli::{KeyFieldsArgs, KeysCommand, TeamsCommand};
use std::io::Write;
use std::path::Path;
use svc_budget::Money;
use svc_keys::admin::{sync_teams, Admin, KeyInfo, KeyRequest};

/// A refused administration rule: exit 1 with its message (the field it names, when the rule names one).
fn api_err(e: svc_keys::admin::AdminError) -> anyhow::Error {
    anyhow::Error::new(Exit { code: 1, message: e.to_string() })
}

/// Runs a `svc keys` command.
pub async fn run(explicit: Option<&Path>, cmd: KeysCommand) -> anyhow::Result<()> {
    let config = load_config(explicit)?;
    let store = open_store(&config).await?;
    sync_teams(&store, &config).await?;
    let admin = Admin { store: &store, config: &config, cache: None };
    let mut out = super::stdout();
    match cmd {
        KeysCommand::Create(a) => {
            let req = KeyRequest { team_id: Some(a.team), ..request(a.fields)? };
            let info = admin.create(req).await.map_err(api_err)?;
            writeln!(out, "{}", info.key.unwrap_or_default())?;
        }
        KeysCommand::List { json } => {
            let keys = admin.list().await.map_err(api_err)?;
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&keys)?)?;
            } else {
                print_table(&mut out, &keys)?;
            }
        }
        KeysCommand::Update(a) => {
            let info = admin.update(KeyRequest { key: Some(a.key), ..request(a.fields)? }).await.map_err(api_err)?;
            eprintln!("svc: updated key {} ({})", info.key_id, info.key_hint);
        }
        KeysCommand::Revoke { key } => {
            let info = admin.revoke(&key).await.map_err(api_err)?;
            eprintln!("svc: revoked key {} ({})", info.key_id, info.key_hint);
        }
        KeysCommand::Restore { key } => {
            let info = admin
                .update(KeyRequest { key: Some(key), blocked: Some(false), ..Default::default() })
                .await
                .map_err(api_err)?;
            eprintln!("svc: restored key {} ({})", info.key_id, info.key_hint);
        }
        KeysCommand::Rotate { key } => {
            let info = admin.regenerate(&key).await.map_err(api_err)?;
            writeln!(out, "{}", info.key.unwrap_or_default())?;
        }
        KeysCommand::Delete { key } => {
            let ids = admin.delete(std::slice::from_ref(&key)).await.map_err(api_err)?;
            eprintln!("svc: deleted key {}", ids.join(", "));
        }
    }
    store.close().await;
    Ok(())
}

/// The request of the options given (absent ones: left as they are, or none at creation).
fn request(a: KeyFieldsArgs) -> anyhow::Result<KeyRequest> {
    let max_budget = match a.max_budget {
        Some(text) => Some(
            text.parse::<serde_json::Number>()
                .map_err(|_| Exit { code: 1, message: format!("--max-budget: `{text}` is not a number") })?,
        ),
        None => None,
    };
    Ok(KeyRequest {
        agent_role: a.role,
        key_alias: a.alias,
        models: (!a.models.is_empty()).then_some(a.models),
        events: (!a.events.is_empty()).then_some(a.events),
        max_budget,
        budget_duration: a.budget_duration,
        rpm_limit: a.rpm_limit,
        tpm_limit: a.tpm_limit,
        expires: a.expires,
        ..Default::default()
    })
}

fn print_table(out: &mut impl Write, keys: &[KeyInfo]) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<36}  {:<16}  {:<14}  {:<12}  {:<13}  {:<20}  {:<7}  EVENTS",
        "ID", "ALIAS", "TEAM", "ROLE", "KEY", "EXPIRES", "STATUS"
    )?;
    let now = chrono::Utc::now();
    for k in keys {
        let expired =
            k.expires.as_deref().and_then(|e| chrono::DateTime::parse_from_rfc3339(e).ok()).is_some_and(|e| e <= now);
        let status = if k.blocked {
            "revoked"
        } else if expired {
            "expired"
        } else {
            "active"
        };
        let events = if k.events.is_empty() { "(all)".to_string() } else { k.events.join(",") };
        writeln!(
            out,
            "{:<36}  {:<16}  {:<14}  {:<12}  {:<13}  {:<20}  {status:<7}  {events}",
            k.key_id,
            k.key_alias.as_deref().unwrap_or("-"),
            k.team_id,
            k.agent_role.as_deref().unwrap_or("-"),
            k.key_hint,
            k.expires.as_deref().unwrap_or("never"),
        )?;
    }
    Ok(())
}

/// Runs a `svc teams` command.
pub async fn teams(explicit: Option<&Path>, cmd: TeamsCommand) -> anyhow::Result<()> {
    let config = load_config(explicit)?;
    let TeamsCommand::List = cmd;
    let store = open_store(&config).await?;
    sync_teams(&store, &config).await?;
    let anchors: std::collections::HashMap<String, i64> =
        store.list_teams().await?.into_iter().map(|t| (t.team_id, t.anchor_ms)).collect();
    let now = chrono::Utc::now();
    let currency = config.gateway.currency.as_deref();
    let mut out = super::stdout();
    writeln!(
        out,
        "{:<16}  {:>12}  {:<8}  {:>12}  {:>6}  {:<20}  MODELS",
        "TEAM",
        super::spend::with_currency("BUDGET", currency),
        "PERIOD",
        super::spend::with_currency("SPENT", currency),
        "USED",
        "RESETS"
    )?;
    for t in &config.gateway.teams {
        // The team's current budget period, as the gateway counts it (its anchor is kept in the store).
        let anchor = t
            .budget_start
            .or_else(|| anchors.get(&t.team_id).and_then(|ms| chrono::DateTime::from_timestamp_millis(*ms)))
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
            "{:<16}  {:>12}  {:<8}  {:>12}  {:>6}  {:<20}  {models}",
            t.team_id,
            budget,
            t.budget_duration.to_string(),
            spent.to_string(),
            used,
            resets
        )?;
    }
    store.close().await;
    Ok(())
}
