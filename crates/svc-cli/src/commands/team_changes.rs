//! `svc teams new|update|delete`: teams made and changed at runtime. Asked of the running gateway (its
//! `/team/new`, `/team/update`, `/team/delete`), which applies the change before it answers, as `svc keys` does;
//! when no gateway answers, the store is changed directly and gateways take the change from there within a
//! second. A team of the config file is refused either way: the file changes it.

use super::gateway::{Failed, Gateway};
use super::Exit;
use crate::cli::{TeamChange, TeamFieldsArgs};
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

/// A change `svc teams` makes, its request read from the options once.
enum Change {
    New(TeamRequest),
    Update(TeamRequest),
    Delete(Vec<String>),
}

impl Change {
    /// The admin API's path and body for it (absent options left out; a `null` says "none").
    fn api(&self) -> anyhow::Result<(&'static str, Value)> {
        Ok(match self {
            Change::New(r) => ("/team/new", serde_json::to_value(r)?),
            Change::Update(r) => ("/team/update", serde_json::to_value(r)?),
            Change::Delete(teams) => ("/team/delete", json!({ "team_ids": teams })),
        })
    }

    /// What is printed of its answer.
    fn made(&self) -> Made {
        match self {
            Change::New(_) => Made::New,
            Change::Update(_) => Made::Updated,
            Change::Delete(_) => Made::Deleted,
        }
    }

    /// The change made in the store directly (no gateway answers), answered as the admin API answers.
    async fn direct(self, admin: &TeamAdmin<'_>) -> anyhow::Result<Value> {
        let fail = |e: svc_keys::AdminError| Exit { code: 1, message: e.to_string() };
        Ok(match self {
            Change::New(r) => serde_json::to_value(admin.create(r).await.map_err(fail)?)?,
            Change::Update(r) => serde_json::to_value(admin.update(r).await.map_err(fail)?)?,
            Change::Delete(ids) => {
                let (teams, keys) = admin.delete(&ids).await.map_err(fail)?;
                json!({ "deleted_teams": teams, "deleted_keys": keys })
            }
        })
    }
}

/// Runs `svc teams new|update|delete` (`list`: `teams.rs`).
pub async fn run(explicit: Option<&std::path::Path>, url: Option<&str>, change: TeamChange) -> anyhow::Result<()> {
    let change = match change {
        TeamChange::New(a) => Change::New(request(a)?),
        TeamChange::Update(a) if a.team.is_none() => {
            return Err(Exit { code: 2, message: "give the team to change".into() }.into())
        }
        TeamChange::Update(a) => Change::Update(request(a)?),
        TeamChange::Delete { teams } => Change::Delete(teams),
    };
    let file = super::load_config(explicit)?;
    let store = super::open_store(&file).await?;
    let result = make(&file, &store, url, change).await;
    store.close().await;
    result
}

async fn make(file: &Config, store: &Store, url: Option<&str>, change: Change) -> anyhow::Result<()> {
    let (path, body) = change.api()?;
    let made = change.made();
    if let Some(gateway) = Gateway::of(file, Some(store), url).await? {
        match gateway.call(reqwest::Method::POST, path, Some(&body)).await {
            Ok(answer) => return made.print(&answer),
            Err(Failed::Unreachable(why)) => {
                eprintln!("svc: {why}; changing the store directly (its gateways apply it within a second)");
            }
            Err(refused) => return Err(refused.exit().into()),
        }
    }
    let (config, _) = super::teams::running(file, &store.list_teams().await?);
    let answer = change.direct(&TeamAdmin { store, config: &config }).await?;
    made.print(&answer)
}

/// What a change prints of its answer.
#[derive(Clone, Copy)]
enum Made {
    New,
    Updated,
    Deleted,
}

impl Made {
    /// A made team's name on stdout (it may have been made up), the rest on stderr.
    fn print(self, answer: &Value) -> anyhow::Result<()> {
        let team = answer["team_id"].as_str().unwrap_or("?");
        match self {
            Made::New => {
                writeln!(super::stdout(), "{team}")?;
                eprintln!("svc: made team {team} (budget {})", budget(answer));
            }
            Made::Updated => eprintln!("svc: updated team {team} (budget {})", budget(answer)),
            Made::Deleted => {
                let names = |v: &Value| -> Vec<String> {
                    v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_string)).collect()
                };
                let (teams, keys) = (names(&answer["deleted_teams"]), names(&answer["deleted_keys"]));
                eprintln!("svc: deleted team {} and its {} key(s)", teams.join(", "), keys.len());
            }
        }
        Ok(())
    }
}

/// The budget of a team answer: its limit with the precision it has (and the currency, when one is set) and its
/// period, or unlimited.
fn budget(team: &Value) -> String {
    let Some(limit) = team["max_budget"].as_number() else { return "unlimited".into() };
    let limit = svc_budget::Money::parse(&limit.to_string()).map_or_else(|_| limit.to_string(), |m| m.to_string());
    let currency = team["currency"].as_str().map(|c| format!(" {c}")).unwrap_or_default();
    format!("{limit}{currency} per {}", team["budget_duration"].as_str().unwrap_or("?"))
}
