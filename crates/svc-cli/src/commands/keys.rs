//! `svc keys …`: a change asks the running gateway of the configuration (its admin API), which applies it before
//! it answers; when no gateway answers, the store is changed directly and gateways take the change from there
//! within a second. Checked against the teams that run either way.

use super::gateway::{without_nulls, Failed, Gateway};
use super::{load_config, open_store, Exit};
use crate::cli::{KeyFieldsArgs, KeysCommand};
use serde_json::json;
use std::io::Write;
use std::path::Path;
use svc_keys::admin::{Admin, KeyInfo, KeyRequest};

/// A refused administration rule: exit 1 with its message (the field it names, when the rule names one).
fn api_err(e: svc_keys::admin::AdminError) -> anyhow::Error {
    anyhow::Error::new(Exit { code: 1, message: e.to_string() })
}

/// What a change did.
enum Done {
    /// A key made, changed or rotated (its secret only when made or rotated).
    Key(Box<KeyInfo>),
    /// Keys deleted.
    Deleted(Vec<String>),
}

/// Runs a `svc keys` command.
pub async fn run(explicit: Option<&Path>, url: Option<&str>, cmd: KeysCommand) -> anyhow::Result<()> {
    let file = load_config(explicit)?;
    let store = open_store(&file).await?;
    let mut out = super::stdout();
    if let KeysCommand::List { json } = cmd {
        let (config, _) = super::teams::running(&file, &store.list_teams().await?);
        let keys = Admin { store: &store, config: &config, cache: None }.list().await.map_err(api_err)?;
        if json {
            writeln!(out, "{}", serde_json::to_string_pretty(&keys)?)?;
        } else {
            print_table(&mut out, &keys)?;
        }
        store.close().await;
        return Ok(());
    }
    let verb = match &cmd {
        KeysCommand::Revoke { .. } => "revoked",
        KeysCommand::Restore { .. } => "restored",
        _ => "updated",
    };
    let asked = match Gateway::of(&file, Some(&store), url).await? {
        Some(gateway) => match ask(&gateway, &cmd).await {
            Ok(done) => Some(done),
            Err(Failed::Unreachable(why)) => {
                eprintln!("svc: {why}; changing the store directly (its gateways apply it within a second)");
                None
            }
            Err(refused) => return Err(refused.exit().into()),
        },
        None => None,
    };
    let done = match asked {
        Some(done) => done,
        None => direct(&file, &store, cmd).await?,
    };
    store.close().await;
    match done {
        Done::Key(info) if info.key.is_some() => writeln!(out, "{}", info.key.unwrap_or_default())?,
        Done::Key(info) => eprintln!("svc: {verb} key {} ({})", info.key_id, info.key_hint),
        Done::Deleted(ids) => eprintln!("svc: deleted key {}", ids.join(", ")),
    }
    Ok(())
}

/// The change asked of the gateway's admin API.
async fn ask(gateway: &Gateway, cmd: &KeysCommand) -> Result<Done, Failed> {
    let refused = |message: String| Failed::Refused { status: 0, message };
    let (path, body) = match cmd {
        KeysCommand::List { .. } => return Err(refused("`list` reads the store".into())),
        KeysCommand::Create(a) => {
            let req =
                KeyRequest { team_id: Some(a.team.clone()), ..request(&a.fields).map_err(|e| refused(e.message))? };
            ("/key/generate", serde_json::to_value(req).unwrap_or_default())
        }
        KeysCommand::Update(a) => {
            let req = KeyRequest { key: Some(a.key.clone()), ..request(&a.fields).map_err(|e| refused(e.message))? };
            ("/key/update", serde_json::to_value(req).unwrap_or_default())
        }
        KeysCommand::Revoke { key } => ("/key/block", json!({ "key": key })),
        KeysCommand::Restore { key } => ("/key/unblock", json!({ "key": key })),
        KeysCommand::Rotate { key } => ("/key/regenerate", json!({ "key": key })),
        KeysCommand::Delete { key } => ("/key/delete", json!({ "keys": [key] })),
    };
    let answer = gateway.call(reqwest::Method::POST, path, Some(&without_nulls(body))).await?;
    if let Some(ids) = answer.get("deleted_keys") {
        return Ok(Done::Deleted(serde_json::from_value(ids.clone()).unwrap_or_default()));
    }
    let info =
        serde_json::from_value(answer).map_err(|e| refused(format!("the gateway's answer is not a key: {e}")))?;
    Ok(Done::Key(Box::new(info)))
}

/// The change made in the store directly (no gateway answers).
async fn direct(file: &svc_config::Config, store: &svc_store::Store, cmd: KeysCommand) -> anyhow::Result<Done> {
    // The rules hold against the teams that run (the store's), never the file's: the CLI does not apply it.
    let (config, _) = super::teams::running(file, &store.list_teams().await?);
    let admin = Admin { store, config: &config, cache: None };
    let done = match cmd {
        KeysCommand::List { .. } => Done::Deleted(Vec::new()),
        KeysCommand::Create(a) => Done::Key(Box::new(
            admin.create(KeyRequest { team_id: Some(a.team), ..request(&a.fields)? }).await.map_err(api_err)?,
        )),
        KeysCommand::Update(a) => Done::Key(Box::new(
            admin.update(KeyRequest { key: Some(a.key), ..request(&a.fields)? }).await.map_err(api_err)?,
        )),
        KeysCommand::Revoke { key } => Done::Key(Box::new(admin.revoke(&key).await.map_err(api_err)?)),
        KeysCommand::Restore { key } => {
            let req = KeyRequest { key: Some(key), blocked: Some(false), ..Default::default() };
            Done::Key(Box::new(admin.update(req).await.map_err(api_err)?))
        }
        KeysCommand::Rotate { key } => Done::Key(Box::new(admin.regenerate(&key).await.map_err(api_err)?)),
        KeysCommand::Delete { key } => Done::Deleted(admin.delete(std::slice::from_ref(&key)).await.map_err(api_err)?),
    };
    Ok(done)
}

/// The request of the options given (absent ones: left as they are, or none at creation).
fn request(a: &KeyFieldsArgs) -> Result<KeyRequest, Exit> {
    let max_budget = match &a.max_budget {
        Some(text) => Some(
            text.parse::<serde_json::Number>()
                .map_err(|_| Exit { code: 1, message: format!("--max-budget: `{text}` is not a number") })?,
        ),
        None => None,
    };
    Ok(KeyRequest {
        agent_role: a.role.clone(),
        key_alias: a.alias.clone(),
        models: (!a.models.is_empty()).then(|| a.models.clone()),
        events: (!a.events.is_empty()).then(|| a.events.clone()),
        max_budget,
        budget_duration: a.budget_duration.clone(),
        rpm_limit: a.rpm_limit,
        tpm_limit: a.tpm_limit,
        expires: a.expires.clone(),
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
