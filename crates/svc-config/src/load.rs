//! Finding and loading the configuration: raw YAML → [`Node`] tree → validated [`Config`], collecting every
//! problem on the way.
//!
//! 1. `find_config`: `--config PATH`, else `$SVC_CONFIG`, else `./svc.yaml`, else the built-in demo.
//! 2. `node::parse`: YAML syntax (the only stage that stops at the first problem).
//! 3. `build`: section by section, every unknown key, wrong type, bad value and missing variable is recorded
//!    with its position; cross-references (team models → aliases) are checked last.

use crate::diagnostics::{Diagnostic, Severity};
use crate::node::{self, Node};
use crate::reader::{Fields, Key, Reader};
use crate::types::*;
use std::path::{Path, PathBuf};
use std::time::Duration;
use svc_budget::{BudgetDuration, Money, Price};

/// The built-in demo configuration (four mock-served aliases).
pub const BUILTIN_YAML: &str = include_str!("builtin.yaml");

/// Where a configuration came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// A file.
    File(PathBuf),
    /// The built-in demo configuration.
    Builtin,
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file `{path}`: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file has problems; every one is listed (warnings too).
    #[error("{}", render(.diagnostics))]
    Invalid { diagnostics: Vec<Diagnostic> },
}

fn render(diags: &[Diagnostic]) -> String {
    diags.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("\n")
}

/// Picks the configuration file: `explicit`, else `$SVC_CONFIG`, else `./svc.yaml` when it exists.
/// `None` means: use the built-in demo configuration.
pub fn find_config(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("SVC_CONFIG").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let local = PathBuf::from("svc.yaml");
    local.exists().then_some(local)
}

/// Loads and validates a file, reading `os.environ/NAME` references from the process environment.
pub fn load_file(path: &Path) -> Result<Config, ConfigError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
    let env = |name: &str| std::env::var(name).ok();
    load_str(&text, &path.display().to_string(), ConfigSource::File(path.to_path_buf()), &env)
}

/// Loads the built-in demo configuration.
pub fn load_builtin() -> Result<Config, ConfigError> {
    let env = |name: &str| std::env::var(name).ok();
    load_str(BUILTIN_YAML, "<built-in>", ConfigSource::Builtin, &env)
}

/// Loads configuration text; `file` names it in diagnostics and `env` resolves environment references.
pub fn load_str(
    text: &str,
    file: &str,
    source: ConfigSource,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let root = match node::parse(text) {
        Ok(root) => root,
        Err((line, col, message)) => {
            let d = Diagnostic { file: file.to_string(), line, col, severity: Severity::Error, message };
            return Err(ConfigError::Invalid { diagnostics: vec![d] });
        }
    };
    let mut r = Reader::new(file, env);
    let config = build(&mut r, &root, source);
    let mut diags = r.diags;
    diags.sort_by_key(|d| (d.line, d.col));
    if diags.iter().any(|d| d.severity == Severity::Error) {
        return Err(ConfigError::Invalid { diagnostics: diags });
    }
    let mut config = config;
    config.warnings = diags;
    Ok(config)
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
    let server = server(r, get("server"));
    let fleet = fleet(r, get("fleet"));
    let models = models(r, get("model_list"));
    let gateway = gateway(r, get("gateway_settings"), &models);
    let notifications = crate::load_notify::notifications(r, get("notifications"));
    Config { source, server, fleet, models, gateway, notifications, warnings: Vec::new() }
}

fn server(r: &mut Reader, node: Option<&Node>) -> ServerConfig {
    const KEYS: &[Key] = &[
        ("host", &[]),
        ("port", &[]),
        ("master_key", &[]),
        ("database_url", &[]),
        ("max_in_flight", &[]),
        ("max_request_body_bytes", &[]),
    ];
    let f = node.and_then(|n| r.fields(n, "server", KEYS));
    let mut s = ServerConfig {
        host: "127.0.0.1".into(),
        port: 4000,
        master_key: (r.env)("SVC_MASTER_KEY").filter(|k| !k.is_empty()).map(Secret::new),
        database_url: "sqlite://svc.db".into(),
        max_in_flight: 512,
        max_request_body_bytes: 10 * 1024 * 1024,
    };
    let Some(f) = f else { return s };
    if let Some(v) = r.string(&f, "host") {
        s.host = v;
    }
    if let Some(v) = r.int(&f, "port") {
        s.port = v;
    }
    if f.get("master_key").is_some() {
        match r.string(&f, "master_key") {
            Some(k) if k.trim().is_empty() => {
                if let Some(n) = f.get("master_key") {
                    r.error(n, "server.master_key: is empty");
                }
            }
            Some(k) => s.master_key = Some(Secret::new(k)),
            None => {}
        }
    }
    if let Some(v) = r.string(&f, "database_url") {
        if !(v.starts_with("sqlite:") || v.starts_with("postgres://") || v.starts_with("postgresql://")) {
            if let Some(n) = f.get("database_url") {
                r.error(n, "server.database_url: expected `sqlite://PATH` or `postgres://…`");
            }
        }
        s.database_url = v;
    }
    if let Some(v) = r.int::<usize>(&f, "max_in_flight") {
        if v == 0 {
            if let Some(n) = f.get("max_in_flight") {
                r.error(n, "server.max_in_flight: must be at least 1");
            }
        }
        s.max_in_flight = v.max(1);
    }
    if let Some(v) = r.int(&f, "max_request_body_bytes") {
        s.max_request_body_bytes = v;
    }
    s
}

fn fleet(r: &mut Reader, node: Option<&Node>) -> FleetConfig {
    const KEYS: &[Key] = &[("name", &[]), ("node", &[])];
    let f = node.and_then(|n| r.fields(n, "fleet", KEYS));
    let mut out = FleetConfig::default();
    if let Some(f) = f {
        if let Some(v) = r.string(&f, "name") {
            out.name = v;
        }
        if let Some(v) = r.string(&f, "node") {
            out.node = v;
        }
    }
    out
}

fn models(r: &mut Reader, node: Option<&Node>) -> Vec<ModelEntry> {
    let Some(node) = node else { return Vec::new() };
    let root = Fields::single("model_list", node);
    let mut out: Vec<ModelEntry> = Vec::new();
    let mut fallbacks: Vec<(String, Vec<(String, Node)>)> = Vec::new();
    for (i, item) in r.list(&root, "").into_iter().enumerate() {
        if let Some((m, f)) = model(r, item, &format!("model_list[{i}]")) {
            fallbacks.push((format!("model_list[{i}].fallbacks"), f));
            out.push(m);
        }
    }
    // Fallbacks name other aliases: checked once every alias is known.
    let aliases: Vec<String> = out.iter().map(|m| m.alias.clone()).collect();
    for (m, (path, names)) in out.iter_mut().zip(fallbacks) {
        for (name, n) in names {
            if name == m.alias {
                r.error(&n, format!("{path}: `{name}` is this entry's own alias; name other aliases to fall back to"));
            } else if !aliases.contains(&name) {
                let hint = did_you_mean(&name, aliases.iter().map(String::as_str));
                r.error(&n, format!("{path}: unknown model `{name}`; it is not a `model_name` in model_list{hint}"));
            } else if !m.fallbacks.contains(&name) {
                m.fallbacks.push(name);
            }
        }
    }
    // Deployment ids: explicit ids must be unique; implicit ones get `#n` when an alias repeats.
    let mut seen: Vec<String> = Vec::new();
    for i in 0..out.len() {
        if out[i].deployment_id.is_empty() {
            let alias = out[i].alias.clone();
            let count = out.iter().filter(|m| m.alias == alias).count();
            let nth = out[..i].iter().filter(|m| m.alias == alias).count();
            out[i].deployment_id = if count > 1 { format!("{alias}#{}", nth + 1) } else { alias };
        }
        if seen.contains(&out[i].deployment_id) {
            let msg = format!("model_list[{i}]: deployment id `{}` is used twice", out[i].deployment_id);
            r.push(out[i].line, 1, Severity::Error, msg);
        }
        seen.push(out[i].deployment_id.clone());
    }
    out
}

/// One entry, and the aliases its `fallbacks` names (checked by the caller once every alias is known).
fn model(r: &mut Reader, node: &Node, path: &str) -> Option<(ModelEntry, Vec<(String, Node)>)> {
    const KEYS: &[Key] = &[
        ("model_name", &[]),
        ("params", &["litellm_params"]),
        ("owned_by", &[]),
        ("model_info", &[]),
        ("fallbacks", &[]),
    ];
    const PARAMS: &[Key] = &[
        ("model", &[]),
        ("api_base", &["base_url"]),
        ("api_key", &[]),
        ("timeout_seconds", &["timeout"]),
        ("input_cost_per_token", &[]),
        ("output_cost_per_token", &[]),
        ("max_output_tokens", &["max_tokens"]),
    ];
    const INFO: &[Key] = &[("id", &[])];
    let f = r.fields(node, path, KEYS)?;
    let alias = r.string(&f, "model_name");
    if alias.is_none() && f.get("model_name").is_none() {
        r.error(node, format!("{path}: missing `model_name`"));
    }
    let Some(params_node) = f.get("params") else {
        r.error(node, format!("{path}: missing `params` (the upstream `model` and its settings)"));
        return None;
    };
    let p = r.fields(params_node, &f.child("params"), PARAMS)?;
    let (provider, upstream) = match (p.get("model"), r.string(&p, "model")) {
        (Some(n), Some(m)) => match m.split_once('/') {
            Some(("openai", id)) if !id.is_empty() => (ProviderKind::OpenAi, id.to_string()),
            Some(("anthropic", id)) if !id.is_empty() => (ProviderKind::Anthropic, id.to_string()),
            Some(("mock", id)) if !id.is_empty() => (ProviderKind::Mock, id.to_string()),
            _ => {
                r.error(
                    n,
                    format!(
                        "{}: `{m}` must be `<provider>/<model id>` with provider openai, anthropic or mock",
                        p.child("model")
                    ),
                );
                return None;
            }
        },
        (None, _) => {
            r.error(params_node, format!("{}: missing `model`", p.path));
            return None;
        }
        (Some(_), None) => return None,
    };
    let api_base = r.string(&p, "api_base").map(|s| s.trim_end_matches('/').to_string());
    if let (Some(b), Some(n)) = (&api_base, p.get("api_base")) {
        if !(b.starts_with("http://") || b.starts_with("https://")) {
            r.error(n, format!("{}: `{b}` must be an http:// or https:// URL", p.child("api_base")));
        }
    }
    let api_key = r.string(&p, "api_key").map(Secret::new);
    let timeout = r.int::<u64>(&p, "timeout_seconds").unwrap_or(600);
    let input = price(r, &p, "input_cost_per_token");
    let output = price(r, &p, "output_cost_per_token");
    let max_output_tokens = r.int(&p, "max_output_tokens");
    let mut deployment_id = String::new();
    if let Some(info) = f.get("model_info").and_then(|n| r.fields(n, &f.child("model_info"), INFO)) {
        deployment_id = r.string(&info, "id").unwrap_or_default();
    }
    let fallbacks = r.strings(&f, "fallbacks").unwrap_or_default();
    let alias = alias?;
    let owned_by = r.string(&f, "owned_by").unwrap_or_else(|| match alias.split_once('/') {
        Some((prefix, _)) => prefix.to_string(),
        None => provider.as_str().to_string(),
    });
    let entry = ModelEntry {
        alias,
        deployment_id,
        provider,
        upstream_model: upstream,
        api_base,
        api_key,
        timeout: Duration::from_secs(timeout.max(1)),
        input_cost_per_token: input,
        output_cost_per_token: output,
        max_output_tokens,
        owned_by,
        fallbacks: Vec::new(),
        line: node.line,
    };
    Some((entry, fallbacks))
}

/// ` (did you mean `x`?)` when one of `known` is close to `name`, else nothing.
fn did_you_mean<'k>(name: &str, known: impl Iterator<Item = &'k str>) -> String {
    known
        .map(|k| (k, strsim::jaro_winkler(name, k)))
        .filter(|(_, s)| *s > 0.8)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(k, _)| format!(" (did you mean `{k}`?)"))
        .unwrap_or_default()
}

fn price(r: &mut Reader, f: &Fields, key: &str) -> Price {
    let Some((text, _)) = r.decimal(f, key) else {
        return Price::ZERO;
    };
    match Price::parse(&text) {
        Ok(p) => p,
        Err(e) => {
            if let Some(n) = f.get(key) {
                r.error(n, format!("{}: {e}", f.child(key)));
            }
            Price::ZERO
        }
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

fn gateway(r: &mut Reader, node: Option<&Node>, models: &[ModelEntry]) -> GatewaySettings {
    const KEYS: &[Key] = &[
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
    ];
    let mut out = GatewaySettings {
        budget_duration: BudgetDuration::Seconds(30 * 86_400),
        budget_alert_thresholds_permille: vec![800],
        readiness_cache: Duration::from_secs(5),
        routing: RoutingSettings::default(),
        health: HealthSettings::default(),
        teams: Vec::new(),
    };
    let Some(f) = node.and_then(|n| r.fields(n, "gateway_settings", KEYS)) else {
        return out;
    };
    out.routing = routing(r, &f);
    out.health = health(r, &f);
    if let Some(d) = duration(r, &f, "budget_duration") {
        out.budget_duration = d;
    }
    if let Some(v) = r.int::<u64>(&f, "readiness_cache_seconds") {
        out.readiness_cache = Duration::from_secs(v);
    }
    if let Some(list) = f.get("budget_alert_thresholds") {
        let wrapper = Fields::single("gateway_settings.budget_alert_thresholds", list);
        let mut ts = Vec::new();
        for (i, item) in r.list(&wrapper, "").into_iter().enumerate() {
            let one = Fields::single(&format!("gateway_settings.budget_alert_thresholds[{i}]"), item);
            let parsed = r.decimal(&one, "").and_then(|(t, _)| Money::parse(&t).ok());
            match parsed.map(|m| m.0 / 1_000_000) {
                Some(pm) if pm > 0 && pm <= 1000 => ts.push(pm as u32),
                _ => r.error(
                    item,
                    format!(
                        "gateway_settings.budget_alert_thresholds[{i}]: expected a fraction in (0, 1], such as 0.8"
                    ),
                ),
            }
        }
        ts.sort_unstable();
        ts.dedup();
        out.budget_alert_thresholds_permille = ts;
    }
    let default_duration = out.budget_duration;
    for (i, item) in r.list(&f, "teams").into_iter().enumerate() {
        if let Some(t) = team(r, item, &format!("gateway_settings.teams[{i}]"), models, default_duration) {
            if out.teams.iter().any(|o| o.team_id == t.team_id) {
                r.error(item, format!("gateway_settings.teams[{i}]: team `{}` is listed twice", t.team_id));
            }
            out.teams.push(t);
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
    match Money::parse(&text).ok().map(|m| m.0 / 1_000_000) {
        Some(pm) if pm > 0 && pm <= 1000 => Some(pm as u32),
        _ => {
            if let Some(n) = f.get(key) {
                r.error(n, format!("{}: `{text}` is not a fraction in (0, 1], such as 0.5", f.child(key)));
            }
            None
        }
    }
}

fn team(r: &mut Reader, node: &Node, path: &str, models: &[ModelEntry], default: BudgetDuration) -> Option<TeamConfig> {
    const KEYS: &[Key] = &[
        ("team_id", &[]),
        ("budget_limit", &["max_budget"]),
        ("models", &[]),
        ("budget_duration", &[]),
        ("budget_start", &[]),
        ("rpm_limit", &[]),
        ("tpm_limit", &[]),
    ];
    let f = r.fields(node, path, KEYS)?;
    let Some(team_id) = r.string(&f, "team_id") else {
        r.error(node, format!("{path}: missing `team_id`"));
        return None;
    };
    let budget_limit = match r.decimal(&f, "budget_limit") {
        Some((text, _)) => match Money::parse(&text) {
            Ok(m) => Some(m),
            Err(e) => {
                if let Some(n) = f.get("budget_limit") {
                    r.error(n, format!("{}: {e}", f.child("budget_limit")));
                }
                None
            }
        },
        None => None,
    };
    // A budgeted team's unpriced models cost it nothing: worth a warning, as `svc config check` promises.
    let known = |alias: &str| models.iter().any(|m| m.alias == alias);
    let is_free = |alias: &str| {
        models
            .iter()
            .filter(|m| m.alias == alias)
            .all(|m| m.input_cost_per_token.is_zero() && m.output_cost_per_token.is_zero())
    };
    let unpriced =
        |alias: &str| format!("model `{alias}` has no prices, so its use costs 0 against this team's budget");
    let listed = r.strings(&f, "models").unwrap_or_default();
    if budget_limit.is_some() && listed.is_empty() {
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
        if !known(&name) {
            let hint = did_you_mean(&name, models.iter().map(|m| m.alias.as_str()));
            r.error(
                &n,
                format!("{}: unknown model `{name}`; it is not a `model_name` in model_list{hint}", f.child("models")),
            );
            continue;
        }
        if budget_limit.is_some() && is_free(&name) {
            r.warn(&n, format!("{}: {}", f.child("models"), unpriced(&name)));
        }
        allowed.push(name);
    }
    let budget_duration = duration(r, &f, "budget_duration").unwrap_or(default);
    let budget_start = match r.string(&f, "budget_start") {
        Some(text) => match chrono::DateTime::parse_from_rfc3339(&text) {
            Ok(t) => Some(t.with_timezone(&chrono::Utc)),
            Err(_) => {
                if let Some(n) = f.get("budget_start") {
                    r.error(
                        n,
                        format!(
                            "{}: `{text}` is not an RFC 3339 time such as `2026-11-01T00:00:00Z`",
                            f.child("budget_start")
                        ),
                    );
                }
                None
            }
        },
        None => None,
    };
    Some(TeamConfig {
        team_id,
        budget_limit,
        models: allowed,
        budget_duration,
        budget_start,
        rpm_limit: r.int(&f, "rpm_limit"),
        tpm_limit: r.int(&f, "tpm_limit"),
    })
}

#[cfg(test)]
#[path = "load_tests.rs"]
mod tests;
