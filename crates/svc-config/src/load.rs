//! Finding and loading the configuration: raw YAML → [`Node`] tree → validated [`Config`], collecting every
//! problem on the way.
//!
//! 1. `source::find_config`: `--config PATH`, else `$SVC_CONFIG`, else `./svc.yaml`, else the built-in demo.
//! 2. `node::parse`: YAML syntax (the only stage that stops at the first problem).
//! 3. `build`: section by section, every unknown key, wrong type, bad value and missing variable is recorded
//!    with its position; cross-references (team models → aliases) are checked last.
//! 4. A relative SQLite path is taken from the file's folder; the demo's store goes to the user's data folder.

use crate::diagnostics::{checked, parse_root, ConfigError};
use crate::load_limits::{admission, streams};
use crate::load_models::{did_you_mean, models, Models};
use crate::load_notify::notifications;
use crate::load_server::{demo_store_url, fleet, server};
use crate::node::Node;
use crate::reader::{Fields, Key, Reader};
use crate::source::{ConfigSource, BUILTIN_YAML};
use crate::types::*;
use std::path::Path;
use std::time::Duration;
use svc_budget::{BudgetDuration, Money};

/// Loads and validates a file, reading `os.environ/NAME` references from the process environment.
pub fn load_file(path: &Path) -> Result<Config, ConfigError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
    let env = |name: &str| std::env::var(name).ok();
    load_str(&text, &path.display().to_string(), ConfigSource::File(path.to_path_buf()), &env)
}

/// Loads the built-in demo configuration, whose store is `$XDG_DATA_HOME/svc/svc.db`, else
/// `~/.local/share/svc/svc.db`, wherever the command runs.
pub fn load_builtin() -> Result<Config, ConfigError> {
    let env = |name: &str| std::env::var(name).ok();
    let mut config = load_str(BUILTIN_YAML, "<built-in>", ConfigSource::Builtin, &env)?;
    // Without HOME in the environment, the account's home directory (from the user database) will do.
    let home = || std::env::home_dir().map(|h| h.to_string_lossy().into_owned());
    let fallback = |name: &str| env(name).filter(|v| !v.is_empty()).or_else(|| (name == "HOME").then(home).flatten());
    config.server.database_url = demo_store_url(&fallback).ok_or(ConfigError::NoDataDir)?;
    Ok(config)
}

/// Loads configuration text; `file` names it in diagnostics and `env` resolves environment references.
pub fn load_str(
    text: &str,
    file: &str,
    source: ConfigSource,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let root = parse_root(text, file)?;
    let mut r = Reader::new(file, env);
    let mut config = build(&mut r, &root, source);
    config.warnings = checked(r.diags)?;
    config.digest = digest(text);
    Ok(config)
}

/// The SHA-256 of `text`, in lowercase hex.
fn digest(text: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

const ROOT: &[Key] = &[
    ("server", &["general_settings"]),
    ("fleet", &[]),
    ("model_list", &[]),
    ("gateway_settings", &["litellm_settings"]),
    ("notifications", &[]),
];

fn build(r: &mut Reader, root: &Node, source: ConfigSource) -> Config {
    let top = r.fields(root, "", ROOT);
    let get = |k: &str| top.as_ref().and_then(|f| f.get(k));
    // Relative store paths are taken from the file's folder, never from the working directory.
    let base = match &source {
        ConfigSource::File(path) => std::path::absolute(path).ok().and_then(|p| p.parent().map(Path::to_path_buf)),
        ConfigSource::Builtin => None,
    };
    let server = server(r, get("server"), base.as_deref());
    let fleet = fleet(r, get("fleet"), base.as_deref());
    let mut models = models(r, get("model_list"), base.as_deref());
    let gateway = gateway(r, get("gateway_settings"), &models, base.as_deref());
    // `gateway_settings.ssl_ca_file`: the private CA of every deployment that names none of its own.
    for m in &mut models.entries {
        if m.ssl_ca_file.is_none() {
            m.ssl_ca_file.clone_from(&gateway.ssl_ca_file);
        }
    }
    let notifications = notifications(r, get("notifications"));
    Config {
        source,
        server,
        fleet,
        models: models.entries,
        gateway,
        notifications,
        warnings: Vec::new(),
        digest: String::new(),
    }
}

fn duration(r: &mut Reader, f: &Fields, key: &str) -> Option<BudgetDuration> {
    let text = r.string(f, key)?;
    match BudgetDuration::parse(&text) {
        Ok(d) => Some(d),
        Err(e) => {
            if let Some(n) = f.get(key) {
                r.error(n, format!("{}: {e}", f.child(key)));
            }
            None
        }
    }
}

/// The keys of `gateway_settings:`.
const GATEWAY: &[Key] = &[
    ("budget_duration", &[]),
    ("budget_alert_thresholds", &[]),
    ("readiness_cache_seconds", &[]),
    ("teams", &[]),
    ("num_retries", &[]),
    ("allowed_fails", &[]),
    ("cooldown_seconds", &["cooldown_time"]),
    ("health_window_seconds", &[]),
    ("health_min_requests", &[]),
    ("degraded_error_rate", &[]),
    ("unavailable_error_rate", &[]),
    ("degraded_p95_latency_ms", &[]),
    ("health_check_interval_seconds", &["health_check_interval"]),
    ("budget_admission", &[]),
    ("budget_min_output_tokens", &[]),
    ("web_search_max_uses", &[]),
    ("web_search_result_tokens", &[]),
    ("stream_timeout_seconds", &[]),
    ("stream_idle_timeout_seconds", &[]),
    ("stream_max_event_bytes", &[]),
    ("max_response_bytes", &[]),
    ("responses_shared_within_team", &[]),
    ("anthropic_beta_allowed", &[]),
    ("currency", &[]),
    ("ssl_ca_file", &[]),
];

fn gateway(r: &mut Reader, node: Option<&Node>, models: &Models, base: Option<&Path>) -> GatewaySettings {
    let mut out = GatewaySettings {
        budget_duration: BudgetDuration::Seconds(30 * 86_400),
        budget_alert_thresholds_permille: vec![800],
        readiness_cache: Duration::from_secs(5),
        routing: RoutingSettings::default(),
        health: HealthSettings::default(),
        admission: AdmissionSettings::default(),
        streams: StreamSettings::default(),
        teams: Vec::new(),
        responses_shared_within_team: false,
        anthropic_beta_allowed: None,
        currency: None,
        ssl_ca_file: None,
    };
    let Some(f) = node.and_then(|n| r.fields(n, "gateway_settings", GATEWAY)) else {
        return out;
    };
    out.routing = routing(r, &f);
    out.health = health(r, &f);
    out.admission = admission(r, &f);
    out.streams = streams(r, &f);
    if let Some(d) = duration(r, &f, "budget_duration") {
        out.budget_duration = d;
    }
    if let Some(v) = r.int::<u64>(&f, "readiness_cache_seconds") {
        out.readiness_cache = Duration::from_secs(v);
    }
    if let Some(v) = r.boolean(&f, "responses_shared_within_team") {
        out.responses_shared_within_team = v;
    }
    if let Some(list) = r.strings(&f, "anthropic_beta_allowed") {
        out.anthropic_beta_allowed = Some(list.into_iter().map(|(s, _)| s.trim().to_string()).collect());
    }
    if let (Some(text), Some(n)) = (r.string(&f, "currency"), f.get("currency")) {
        let label = text.trim();
        if label.is_empty() || label.len() > 16 || label.chars().any(|c| c.is_whitespace() || c.is_control()) {
            r.error(
                n,
                format!("{}: expected a label such as `USD` (1 to 16 characters, no spaces)", f.child("currency")),
            );
        } else {
            out.currency = Some(label.to_string());
        }
    }
    out.ssl_ca_file = crate::load_server::existing_file(r, &f, "ssl_ca_file", base);
    if let Some(list) = f.get("budget_alert_thresholds") {
        out.budget_alert_thresholds_permille = alert_thresholds(r, list);
    }
    out.teams = teams(r, &f, models, out.budget_duration);
    out
}

/// `budget_alert_thresholds`: fractions in (0, 1], as per-mille, sorted and without repeats.
fn alert_thresholds(r: &mut Reader, list: &Node) -> Vec<u32> {
    let wrapper = Fields::single("gateway_settings.budget_alert_thresholds", list);
    let mut ts = Vec::new();
    for (i, item) in r.list(&wrapper, "").into_iter().enumerate() {
        let one = Fields::single(&format!("gateway_settings.budget_alert_thresholds[{i}]"), item);
        let parsed = r.decimal(&one, "").and_then(|(t, _)| Money::parse(&t).ok());
        match parsed.map(|m| m.nanos() / 1_000_000) {
            Some(pm) if pm > 0 && pm <= 1000 => ts.push(pm as u32),
            _ => r.error(
                item,
                format!("gateway_settings.budget_alert_thresholds[{i}]: expected a fraction in (0, 1], such as 0.8"),
            ),
        }
    }
    ts.sort_unstable();
    ts.dedup();
    ts
}

/// `teams`, each once; a team without its own `budget_duration` takes `default`.
fn teams(r: &mut Reader, f: &Fields, models: &Models, default: BudgetDuration) -> Vec<TeamConfig> {
    let mut out: Vec<TeamConfig> = Vec::new();
    for (i, item) in r.list(f, "teams").into_iter().enumerate() {
        if let Some(t) = team(r, item, &format!("gateway_settings.teams[{i}]"), models, default) {
            if out.iter().any(|o| o.team_id == t.team_id) {
                r.error(item, format!("gateway_settings.teams[{i}]: team `{}` is listed twice", t.team_id));
            }
            out.push(t);
        }
    }
    out
}

/// `num_retries`, `allowed_fails`, `cooldown_seconds`.
fn routing(r: &mut Reader, f: &Fields) -> RoutingSettings {
    let mut out = RoutingSettings::default();
    if let Some(v) = r.int(f, "num_retries") {
        out.num_retries = v;
    }
    match r.int::<u32>(f, "allowed_fails") {
        Some(0) => {
            if let Some(n) = f.get("allowed_fails") {
                r.error(
                    n,
                    format!(
                        "{}: must be at least 1 (set `cooldown_seconds: 0` to disable cooldowns)",
                        f.child("allowed_fails")
                    ),
                );
            }
        }
        Some(v) => out.allowed_fails = v,
        None => {}
    }
    if let Some(v) = r.int::<u64>(f, "cooldown_seconds") {
        out.cooldown = Duration::from_secs(v);
    }
    out
}

/// The health thresholds and the probe interval.
fn health(r: &mut Reader, f: &Fields) -> HealthSettings {
    let mut out = HealthSettings::default();
    match r.int::<u64>(f, "health_window_seconds") {
        Some(0) => {
            if let Some(n) = f.get("health_window_seconds") {
                r.error(n, format!("{}: must be at least 1", f.child("health_window_seconds")));
            }
        }
        Some(v) => out.window = Duration::from_secs(v),
        None => {}
    }
    if let Some(v) = r.int(f, "health_min_requests") {
        out.min_requests = v;
    }
    if let Some(v) = fraction(r, f, "degraded_error_rate") {
        out.degraded_error_permille = v;
    }
    if let Some(v) = fraction(r, f, "unavailable_error_rate") {
        out.unavailable_error_permille = v;
    }
    if out.unavailable_error_permille < out.degraded_error_permille {
        if let Some(n) = f.get("unavailable_error_rate").or(f.get("degraded_error_rate")) {
            let msg = format!(
                "{}: `unavailable_error_rate` ({}) must not be below `degraded_error_rate` ({})",
                f.path,
                out.unavailable_error_permille as f64 / 1000.0,
                out.degraded_error_permille as f64 / 1000.0
            );
            r.error(n, msg);
        }
    }
    if let Some(v) = r.int::<u64>(f, "degraded_p95_latency_ms") {
        out.degraded_p95_latency = Duration::from_millis(v);
    }
    if let Some(v) = r.int::<u64>(f, "health_check_interval_seconds") {
        out.probe_interval = Duration::from_secs(v);
    }
    out
}

/// A fraction in (0, 1], as per-mille.
fn fraction(r: &mut Reader, f: &Fields, key: &str) -> Option<u32> {
    let (text, _) = r.decimal(f, key)?;
    match Money::parse(&text).ok().map(|m| m.nanos() / 1_000_000) {
        Some(pm) if pm > 0 && pm <= 1000 => Some(pm as u32),
        _ => {
            if let Some(n) = f.get(key) {
                r.error(n, format!("{}: `{text}` is not a fraction in (0, 1], such as 0.5", f.child(key)));
            }
            None
        }
    }
}

/// The keys of a team.
const TEAM: &[Key] = &[
    ("team_id", &[]),
    ("budget_limit", &["max_budget"]),
    ("models", &[]),
    ("budget_duration", &[]),
    ("budget_start", &[]),
    ("rpm_limit", &[]),
    ("tpm_limit", &[]),
];

fn team(r: &mut Reader, node: &Node, path: &str, all: &Models, default: BudgetDuration) -> Option<TeamConfig> {
    let f = r.fields(node, path, TEAM)?;
    let Some(team_id) = r.string(&f, "team_id") else {
        r.error(node, format!("{path}: missing `team_id`"));
        return None;
    };
    let budget_limit = r.parsed_decimal(&f, "budget_limit", Money::parse);
    let models = team_models(r, &f, node, all, budget_limit.is_some());
    Some(TeamConfig {
        team_id,
        budget_limit,
        models,
        budget_duration: duration(r, &f, "budget_duration").unwrap_or(default),
        budget_start: time(r, &f, "budget_start"),
        rpm_limit: r.int(&f, "rpm_limit"),
        tpm_limit: r.int(&f, "tpm_limit"),
        origin: TeamOrigin::File,
    })
}

/// A team's `models`: the aliases it may use, each known (a wildcard is not checked by name). A budgeted team's
/// unpriced models cost it nothing: worth a warning, as `svc config check` promises. An alias whose entry has
/// errors is known (its entry's errors say what is wrong) but has no prices to judge.
fn team_models(r: &mut Reader, f: &Fields, node: &Node, all: &Models, budgeted: bool) -> Vec<String> {
    let path = &f.path;
    let models = &all.entries;
    let is_free = |alias: &str| {
        models.iter().filter(|m| m.alias == alias).all(|m| m.prices.input.is_zero() && m.prices.output.is_zero())
    };
    let unpriced =
        |alias: &str| format!("model `{alias}` has no prices, so its use costs 0 against this team's budget");
    let listed = r.strings(f, "models").unwrap_or_default();
    if budgeted && listed.is_empty() {
        // No list: the team may use every alias, so every unpriced one is free against its budget.
        let mut warned: Vec<&str> = Vec::new();
        for m in models {
            if !warned.contains(&m.alias.as_str()) && is_free(&m.alias) {
                warned.push(&m.alias);
                let why = "(with no `models` list, or an empty one, the team may use every model)";
                r.warn(f.get("models").unwrap_or(node), format!("{path}: {} {why}", unpriced(&m.alias)));
            }
        }
    }
    let mut allowed = Vec::new();
    for (name, n) in listed {
        // A wildcard (`claude-*`) may name a wildcard alias or cover plain ones; it is not checked by name.
        if !name.contains('*') && !all.knows(&name) {
            let hint = did_you_mean(&name, all.aliases());
            r.error(
                &n,
                format!("{}: unknown model `{name}`; it is not a `model_name` in model_list{hint}", f.child("models")),
            );
            continue;
        }
        if budgeted && models.iter().any(|m| m.alias == name) && is_free(&name) {
            r.warn(&n, format!("{}: {}", f.child("models"), unpriced(&name)));
        }
        allowed.push(name);
    }
    allowed
}

/// An RFC 3339 time at `key`, if given and valid.
fn time(r: &mut Reader, f: &Fields, key: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let text = r.string(f, key)?;
    match chrono::DateTime::parse_from_rfc3339(&text) {
        Ok(t) => Some(t.with_timezone(&chrono::Utc)),
        Err(_) => {
            if let Some(n) = f.get(key) {
                r.error(
                    n,
                    format!("{}: `{text}` is not an RFC 3339 time such as `2026-11-01T00:00:00Z`", f.child(key)),
                );
            }
            None
        }
    }
}

#[cfg(test)]
#[path = "load_tests.rs"]
pub(crate) mod tests;
