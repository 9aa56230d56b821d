//! `svc keys …`: the admin operations on the store directly, so they work whether or not a server runs (a
//! running server notices the change within a second), checked against the teams that run.

use super::{load_config, open_store, Exit};
use crate::cli::{KeyFieldsArgs, KeysCommand};
use std::io::Write;
use std::path::Path;
use svc_keys::admin::{Admin, KeyInfo, KeyRequest};

/// A refused administration rule: exit 1 with its message (the field it names, when the rule names one).
fn api_err(e: svc_keys::admin::AdminError) -> anyhow::Error {
    anyhow::Error::new(Exit { code: 1, message: e.to_string() })
}

/// Runs a `svc keys` command.
pub async fn run(explicit: Option<&Path>, cmd: KeysCommand) -> anyhow::Result<()> {
    let file = load_config(explicit)?;
    let store = open_store(&file).await?;
    // The rules hold against the teams that run (the store's), never the file's: the CLI does not apply it.
    let (config, _) = super::teams::running(&file, &store.list_teams().await?);
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
