//! `svc keys …`: a change asks the running gateway of the configuration (its admin API), which applies it before
//! it answers; when no gateway answers, the store is changed directly and gateways take the change from there
//! within a second. Checked against the teams that run either way.

use super::gateway::{without_nulls, Failed, Gateway};
use super::{load_config, open_store, Exit};
use crate::cli::{KeyFieldsArgs, KeysCommand};
use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;
use svc_keys::admin::{Admin, KeyInfo, KeyRequest};

/// A refused administration rule: exit 1 with its message (the field it names, when the rule names one).
fn api_err(e: svc_keys::admin::AdminError) -> anyhow::Error {
    anyhow::Error::new(Exit { code: 1, message: e.to_string() })
}

/// A change `svc keys` makes, its request read from the options once.
enum Change {
    Create(KeyRequest),
    Update(KeyRequest),
    Revoke(String),
    Restore(String),
    Rotate(String),
    Delete(String),
}

impl Change {
    /// The admin API's path and body for it.
    fn api(&self) -> (&'static str, Value) {
        let request = |r: &KeyRequest| without_nulls(serde_json::to_value(r).unwrap_or_default());
        match self {
            Change::Create(r) => ("/key/generate", request(r)),
            Change::Update(r) => ("/key/update", request(r)),
            Change::Revoke(key) => ("/key/block", json!({ "key": key })),
            Change::Restore(key) => ("/key/unblock", json!({ "key": key })),
            Change::Rotate(key) => ("/key/regenerate", json!({ "key": key })),
            Change::Delete(key) => ("/key/delete", json!({ "keys": [key] })),
        }
    }

    /// The change made in the store directly (no gateway answers), answered as the admin API answers.
    async fn direct(self, admin: &Admin<'_>) -> anyhow::Result<Value> {
        let key = |info: KeyInfo| serde_json::to_value(info).map_err(anyhow::Error::from);
        match self {
            Change::Create(r) => key(admin.create(r).await.map_err(api_err)?),
            Change::Update(r) => key(admin.update(r).await.map_err(api_err)?),
            Change::Revoke(k) => key(admin.revoke(&k).await.map_err(api_err)?),
            Change::Restore(k) => {
                let r = KeyRequest { key: Some(k), blocked: Some(false), ..Default::default() };
                key(admin.update(r).await.map_err(api_err)?)
            }
            Change::Rotate(k) => key(admin.regenerate(&k).await.map_err(api_err)?),
            Change::Delete(k) => {
                let ids = admin.delete(std::slice::from_ref(&k)).await.map_err(api_err)?;
                Ok(json!({ "deleted_keys": ids }))
            }
        }
    }

    /// What is printed of its answer.
    fn shown(&self) -> Shown {
        match self {
            Change::Create(_) | Change::Rotate(_) => Shown::Secret,
            Change::Update(_) => Shown::Key("updated"),
            Change::Revoke(_) => Shown::Key("revoked"),
            Change::Restore(_) => Shown::Key("restored"),
            Change::Delete(_) => Shown::Deleted,
        }
    }
}

/// What a change prints of its answer.
#[derive(Clone, Copy)]
enum Shown {
    /// The key's secret alone on stdout (made or rotated: shown this once).
    Secret,
    /// The key's id and hint on stderr, after what was done.
    Key(&'static str),
    /// The ids deleted, on stderr.
    Deleted,
}

impl Shown {
    fn print(self, answer: Value) -> anyhow::Result<()> {
        if let Shown::Deleted = self {
            let ids: Vec<String> = serde_json::from_value(answer["deleted_keys"].clone()).unwrap_or_default();
            eprintln!("svc: deleted key {}", ids.join(", "));
            return Ok(());
        }
        let info: KeyInfo = serde_json::from_value(answer)
            .map_err(|e| Exit { code: 1, message: format!("the gateway's answer is not a key: {e}") })?;
        match self {
            Shown::Key(verb) => eprintln!("svc: {verb} key {} ({})", info.key_id, info.key_hint),
            _ => writeln!(super::stdout(), "{}", info.key.unwrap_or_default())?,
        }
        Ok(())
    }
}

/// Runs a `svc keys` command.
pub async fn run(explicit: Option<&Path>, url: Option<&str>, cmd: KeysCommand) -> anyhow::Result<()> {
    let file = load_config(explicit)?;
    let store = open_store(&file).await?;
    let change = match cmd {
        KeysCommand::List { json } => {
            let result = list(&file, &store, json).await;
            store.close().await;
            return result;
        }
        KeysCommand::Create(a) => Change::Create(KeyRequest { team_id: Some(a.team), ..request(&a.fields)? }),
        KeysCommand::Update(a) => Change::Update(KeyRequest { key: Some(a.key), ..request(&a.fields)? }),
        KeysCommand::Revoke { key } => Change::Revoke(key),
        KeysCommand::Restore { key } => Change::Restore(key),
        KeysCommand::Rotate { key } => Change::Rotate(key),
        KeysCommand::Delete { key } => Change::Delete(key),
    };
    let (path, body) = change.api();
    let shown = change.shown();
    let asked = match Gateway::of(&file, Some(&store), url).await? {
        Some(gateway) => match gateway.call(reqwest::Method::POST, path, Some(&body)).await {
            Ok(answer) => Some(answer),
            Err(Failed::Unreachable(why)) => {
                eprintln!("svc: {why}; changing the store directly (its gateways apply it within a second)");
                None
            }
            Err(refused) => return Err(refused.exit().into()),
        },
        None => None,
    };
    let answer = match asked {
        Some(answer) => Ok(answer),
        None => {
            // The rules hold against the teams that run (the store's), never the file's: the CLI does not apply it.
            let (config, _) = super::teams::running(&file, &store.list_teams().await?);
            change.direct(&Admin { store: &store, config: &config, cache: None }).await
        }
    };
    store.close().await;
    shown.print(answer?)
}

/// `svc keys list`: the keys, never their secrets (`--json`: as `/key/list`'s `keys`).
async fn list(file: &svc_config::Config, store: &svc_store::Store, json: bool) -> anyhow::Result<()> {
    let (config, _) = super::teams::running(file, &store.list_teams().await?);
    let keys = Admin { store, config: &config, cache: None }.list().await.map_err(api_err)?;
    let mut out = super::stdout();
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&keys)?)?;
    } else {
        print_table(&mut out, &keys)?;
    }
    Ok(())
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
