//! `svc teams new|update|delete`: teams made and changed at runtime. Asked of the running gateway (its
//! `/team/new`, `/team/update`, `/team/delete`), which applies the change before it answers, as `svc keys` does;
//! when no gateway answers, the store is changed directly and gateways take the change from there within a
//! second. A team of the config file is refused either way: the file changes it.

use super::gateway::{Failed, Gateway};
use super::Exit;
use crate::cli::{TeamFieldsArgs, TeamsCommand};
use serde_json::{json, Value};
use std::io::Write;
use svc_config::Config;
use svc_keys::teams::{TeamAdmin, TeamRequest};
use svc_store::Store;

/// The request of the options given (absent ones: left as they are, or the defaults at creation; `unlimited` or
/// `none` for a budget or limit: none).
fn request(a: TeamFieldsArgs) -> Result<TeamRequest, Exit> {
    let none = |text: &str| matches!(text, "unlimited" | "none");
    let max_budget = match a.max_budget {
        Some(text) if none(&text) => Some(None),
        Some(text) => Some(Some(
            text.parse::<serde_json::Number>()
                .map_err(|_| Exit { code: 1, message: format!("--max-budget: `{text}` is not a number") })?,
        )),
        None => None,
    };
    let limit = |option: &str, text: Option<String>| -> Result<Option<Option<u64>>, Exit> {
        match text {
            Some(text) if none(&text) => Ok(Some(None)),
            Some(text) => text.parse::<u64>().map(|n| Some(Some(n))).map_err(|_| Exit {
                code: 1,
                message: format!("--{option}: `{text}` is not a whole number (or `none`)"),
            }),
            None => Ok(None),
        }
    };
    let rpm_limit = limit("rpm-limit", a.rpm_limit)?
        .map(|v| v.map(u32::try_from).transpose())
        .transpose()
        .map_err(|_| Exit { code: 1, message: "--rpm-limit: too large".into() })?;
    Ok(TeamRequest {
        team_id: a.team,
        team_alias: a.alias,
        models: (!a.models.is_empty()).then_some(a.models),
        max_budget,
        budget_duration: a.budget_duration,
        rpm_limit,
        tpm_limit: limit("tpm-limit", a.tpm_limit)?,
        metadata: None,
    })
}

/// Runs `svc teams new|update|delete` (`list`: `teams.rs`).
pub async fn run(explicit: Option<&std::path::Path>, url: Option<&str>, cmd: TeamsCommand) -> anyhow::Result<()> {
    let file = super::load_config(explicit)?;
    let store = super::open_store(&file).await?;
    let result = change(&file, &store, url, cmd).await;
    store.close().await;
    result
}

async fn change(file: &Config, store: &Store, url: Option<&str>, cmd: TeamsCommand) -> anyhow::Result<()> {
    let (path, body) = match cmd {
        TeamsCommand::List => return Ok(()),
        TeamsCommand::New(a) => ("/team/new", serde_json::to_value(request(a)?)?),
        TeamsCommand::Update(a) => {
            if a.team.is_none() {
                return Err(Exit { code: 2, message: "give the team to change".into() }.into());
            }
            ("/team/update", serde_json::to_value(request(a)?)?)
        }
        TeamsCommand::Delete { teams } => ("/team/delete", json!({ "team_ids": teams })),
    };
    // Absent options are left out of the body; a `null` left in says "none" (`--max-budget unlimited`).
    if let Some(gateway) = Gateway::of(file, Some(store), url).await? {
        match gateway.call(reqwest::Method::POST, path, Some(&body)).await {
            Ok(answer) => return report(path, &answer),
            Err(Failed::Unreachable(why)) => {
                eprintln!("svc: {why}; changing the store directly (its gateways apply it within a second)");
            }
            Err(refused) => return Err(refused.exit().into()),
        }
    }
    let (config, _) = super::teams::running(file, &store.list_teams().await?);
    let admin = TeamAdmin { store, config: &config };
    let fail = |e: svc_keys::AdminError| Exit { code: 1, message: e.to_string() };
    let answer = match path {
        "/team/new" => serde_json::to_value(admin.create(serde_json::from_value(body)?).await.map_err(fail)?)?,
        "/team/update" => serde_json::to_value(admin.update(serde_json::from_value(body)?).await.map_err(fail)?)?,
        _ => {
            let ids: Vec<String> = serde_json::from_value(body["team_ids"].clone())?;
            let (teams, keys) = admin.delete(&ids).await.map_err(fail)?;
            json!({ "deleted_teams": teams, "deleted_keys": keys })
        }
    };
    report(path, &answer)
}

/// Prints what was done: a made team's name on stdout (it may have been made up), the rest on stderr.
fn report(path: &str, answer: &Value) -> anyhow::Result<()> {
    let team = answer["team_id"].as_str().unwrap_or("?");
    match path {
        "/team/new" => {
            writeln!(super::stdout(), "{team}")?;
            eprintln!("svc: made team {team} (budget {})", budget(answer));
        }
        "/team/update" => eprintln!("svc: updated team {team} (budget {})", budget(answer)),
        _ => {
            let names = |v: &Value| -> Vec<String> {
                v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_string)).collect()
            };
            let (teams, keys) = (names(&answer["deleted_teams"]), names(&answer["deleted_keys"]));
            eprintln!("svc: deleted team {} and its {} key(s)", teams.join(", "), keys.len());
        }
    }
    Ok(())
}

/// The budget of a team answer: its limit and period, or unlimited.
fn budget(team: &Value) -> String {
    match team["max_budget"].as_f64() {
        Some(_) => format!("{} per {}", team["max_budget"], team["budget_duration"].as_str().unwrap_or("?")),
        None => "unlimited".into(),
    }
}
