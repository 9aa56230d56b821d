//! Table tests for the loader: every diagnostic carries file, line and column.

use super::*;
use svc_budget::Price;

pub(crate) fn load(text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let lookup = move |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    load_str(text, "svc.yaml", ConfigSource::File("svc.yaml".into()), &lookup)
}

fn errors(text: &str) -> Vec<String> {
    match load(text, &[]) {
        Ok(_) => Vec::new(),
        Err(ConfigError::Invalid { diagnostics }) => diagnostics.iter().map(|d| d.to_string()).collect(),
        Err(e) => vec![e.to_string()],
    }
}

/// The warnings of a valid configuration (panics, listing the errors, when it is not valid).
fn warnings(text: &str) -> Vec<String> {
    match load(text, &[]) {
        Ok(c) => c.warnings.iter().map(|d| d.to_string()).collect(),
        Err(_) => panic!("not valid: {:?}", errors(text)),
    }
}

const GOOD: &str = "\
server:
  port: 4100
  master_key: os.environ/TEST_MASTER
model_list:
  - model_name: openai/gpt-4.1-mini
    litellm_params:
      model: openai/gpt-4.1-mini
      api_base: http://127.0.0.1:9/v1/
      api_key: os.environ/TEST_OPENAI
      input_cost_per_token: 0.0000004
      output_cost_per_token: 0.0000016
      cache_read_input_token_cost: 0.0000001
litellm_settings:
  budget_duration: 1mo
  teams:
    - team_id: executor
      budget_limit: 50
      models: [openai/gpt-4.1-mini]
";

#[test]
fn loads_litellm_shaped_config() {
    let c = load(GOOD, &[("TEST_MASTER", "sk-master"), ("TEST_OPENAI", "sk-up")]);
    let c = match c {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(c.server.port, 4100);
    assert_eq!(c.server.master_key.as_ref().map(|k| k.expose()), Some("sk-master"));
    let m = &c.models[0];
    assert_eq!(m.provider, ProviderKind::OpenAi);
    assert_eq!(m.upstream_model, "gpt-4.1-mini");
    assert_eq!(m.api_base.as_deref(), Some("http://127.0.0.1:9/v1"));
    assert_eq!(m.owned_by, "openai");
    assert_eq!(m.deployment_id, "openai/gpt-4.1-mini");
    assert_eq!(m.prices.input, Price::from_picos(400_000));
    assert_eq!(c.gateway.budget_duration, BudgetDuration::Months(1));
    assert_eq!(c.gateway.teams[0].budget_limit, Some(Money::from_nanos(50_000_000_000)));
}

#[test]
fn builtin_config_is_valid() {
    let c = load_str(BUILTIN_YAML, "<built-in>", ConfigSource::Builtin, &|_| None);
    let c = match c {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(c.aliases().len(), 6, "the spec's four and the agent CLIs' two wildcards");
    assert!(c.models.iter().all(|m| m.provider == ProviderKind::Mock));
    assert_eq!(c.models[2].owned_by, "anthropic");
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
}

#[test]
fn missing_environment_variable_names_the_key() {
    let errs = errors(GOOD);
    assert_eq!(
        errs,
        vec![
            "svc.yaml:3:15: server.master_key: environment variable `TEST_MASTER` is not set",
            "svc.yaml:9:16: model_list[0].params.api_key: environment variable `TEST_OPENAI` is not set",
        ]
    );
}

#[test]
fn reports_every_problem_with_its_position() {
    let text = "\
server:
  prot: 4000
model_list:
  - model_name: a/b
    params:
      modle: openai/x
  - model_name: c/d
    params:
      model: nope/x
      input_cost_per_token: -1
gateway_settings:
  budget_duration: 30x
  teams:
    - team_id: t
      budget_limit: lots
      models: [a/b, e/f]
";
    let errs = errors(text);
    assert_eq!(
        errs,
        vec![
            "svc.yaml:2:3: server: unknown field `prot` (did you mean `port`?)",
            "svc.yaml:6:7: model_list[0].params: unknown field `modle` (did you mean `model`?)",
            "svc.yaml:6:7: model_list[0].params: missing `model`",
            "svc.yaml:9:14: model_list[1].params.model: `nope/x` must be `<provider>/<model id>` with provider openai, anthropic, gemini, azure, vertex_ai, bedrock or mock",
            "svc.yaml:10:29: model_list[1].params.input_cost_per_token: `-1` is negative; amounts and prices must be zero or more",
            "svc.yaml:12:20: gateway_settings.budget_duration: `30x` is not a duration; write a positive whole number and a unit: s, m, h, d, w or mo (e.g. `30d`)",
            "svc.yaml:15:21: gateway_settings.teams[0].budget_limit: `lots` is not a decimal number",
            "svc.yaml:16:21: gateway_settings.teams[0].models: unknown model `e/f`; it is not a `model_name` in model_list",
        ]
    );
}

#[test]
fn negative_budget_and_syntax_errors() {
    let errs = errors("gateway_settings:\n  teams:\n    - team_id: t\n      budget_limit: -5\n");
    assert_eq!(errs, vec!["svc.yaml:4:21: gateway_settings.teams[0].budget_limit: `-5` is negative; amounts and prices must be zero or more"]);
    let errs = errors("server:\n  port: [1,\n");
    assert_eq!(errs.len(), 1);
    assert!(errs[0].starts_with("svc.yaml:"), "{errs:?}");
    let errs = errors("server:\n  port: 99999\n");
    assert_eq!(errs, vec!["svc.yaml:2:9: server.port: expected a whole number of the right size, found `99999`"]);
}

#[test]
fn notifications_are_validated() {
    let text = "\
notifications:
  ntfy:
    server: ftp://x
    topic: v1
    priority: loud
  webhooks:
    - url: http://127.0.0.1:1/hook
      events: [task.done, task.*, '*', nope.kind]
      secret: s
    - url: http://127.0.0.1:1/hook
      events: [nope.*]
      secret: whsec_not*base64
";
    let errs = errors(text);
    assert_eq!(
        errs,
        vec![
            "svc.yaml:3:13: notifications.ntfy.server: `ftp://x` must be an http:// or https:// URL",
            "svc.yaml:4:12: notifications.ntfy.topic: `v1` is not a valid topic: use 1-64 of A-Z a-z 0-9 - _, not a reserved name",
            "svc.yaml:5:15: notifications.ntfy.priority: `loud` is not one of min, low, default, high, urgent",
            "svc.yaml:8:40: notifications.webhooks[0].events: unknown event kind `nope.kind`",
            "svc.yaml:11:16: notifications.webhooks[1].events: `nope.*` matches no event kind",
            "svc.yaml:12:15: notifications.webhooks[1].secret: starts with `whsec_` but the rest is not base64 (a Standard Webhooks secret is `whsec_` and the base64 of the key)",
        ]
    );
}

#[test]
fn unpriced_model_of_a_budgeted_team_is_a_warning() {
    let text = "\
model_list:
  - model_name: m
    params: { model: mock/m }
gateway_settings:
  teams:
    - { team_id: t, budget_limit: 1, models: [m] }
";
    assert_eq!(warnings(text), vec!["svc.yaml:6:47: warning: gateway_settings.teams[0].models: model `m` has no prices, so its use costs 0 against this team's budget"]);
}

/// A budgeted team without a `models` list (or with an empty one) may use every model: each unpriced alias is
/// named once, whatever its number of deployments; priced ones and unbudgeted teams give no warning.
#[test]
fn unpriced_models_of_a_budgeted_team_without_a_list_are_warnings() {
    let text = "\
model_list:
  - model_name: free
    params: { model: mock/a }
  - model_name: free
    params: { model: mock/b }
  - model_name: paid
    params: { model: mock/c, input_cost_per_token: 0.000001 }
gateway_settings:
  teams:
    - { team_id: t, budget_limit: 1 }
    - { team_id: u, budget_limit: 1, models: [] }
    - { team_id: v }
";
    let tail = "model `free` has no prices, so its use costs 0 against this team's budget (with no `models` list, \
                or an empty one, the team may use every model)";
    assert_eq!(
        warnings(text),
        vec![
            format!("svc.yaml:10:7: warning: gateway_settings.teams[0]: {tail}"),
            format!("svc.yaml:11:46: warning: gateway_settings.teams[1]: {tail}"),
        ]
    );
}

#[test]
fn routing_and_health_have_defaults() {
    let c = load("model_list:\n  - model_name: m\n    params: { model: mock/m }\n", &[]);
    let c = c.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.gateway.routing,
        RoutingSettings { num_retries: 2, allowed_fails: 3, cooldown: Duration::from_secs(5) }
    );
    let h = c.gateway.health;
    assert_eq!((h.window, h.min_requests), (Duration::from_secs(60), 10));
    assert_eq!((h.degraded_error_permille, h.unavailable_error_permille), (200, 500));
    assert_eq!((h.degraded_p95_latency, h.probe_interval), (Duration::from_secs(60), Duration::from_secs(30)));
    assert!(c.models[0].fallbacks.is_empty());
}

#[test]
fn routing_health_and_fallbacks_load_with_litellm_names() {
    let text = "\
model_list:
  - model_name: a
    params: { model: mock/a }
    fallbacks: [b, c, b]
  - model_name: a
    params: { model: mock/a2 }
    fallbacks: [c]
  - model_name: b
    params: { model: mock/b }
  - model_name: c
    params: { model: mock/c }
litellm_settings:
  num_retries: 4
  allowed_fails: 1
  cooldown_time: 0
  health_window_seconds: 10
  health_min_requests: 3
  degraded_error_rate: 0.25
  unavailable_error_rate: 0.75
  degraded_p95_latency_ms: 0
  health_check_interval: 2
";
    let c = load(text, &[]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.models[0].fallbacks, vec!["b", "c"]);
    assert_eq!(c.models[1].fallbacks, vec!["c"]);
    assert_eq!(c.gateway.routing, RoutingSettings { num_retries: 4, allowed_fails: 1, cooldown: Duration::ZERO });
    let h = c.gateway.health;
    assert_eq!((h.window, h.min_requests), (Duration::from_secs(10), 3));
    assert_eq!((h.degraded_error_permille, h.unavailable_error_permille), (250, 750));
    assert_eq!((h.degraded_p95_latency, h.probe_interval), (Duration::ZERO, Duration::from_secs(2)));
}

#[test]
fn routing_health_and_fallback_mistakes_are_reported() {
    let text = "\
model_list:
  - model_name: openai/gpt-4.1-mini
    params: { model: mock/a }
    fallbacks: [openai/gpt-4.1-mimi, openai/gpt-4.1-mini, nothing]
    fallback: [x]
gateway_settings:
  num_retry: 1
  allowed_fails: 0
  degraded_error_rate: 1.5
  unavailable_error_rate: 0.1
  health_window_seconds: 0
  cooldown_seconds: soon
";
    assert_eq!(
        errors(text),
        vec![
            "svc.yaml:4:17: model_list[0].fallbacks: unknown model `openai/gpt-4.1-mimi`; it is not a `model_name` in model_list (did you mean `openai/gpt-4.1-mini`?)",
            "svc.yaml:4:38: model_list[0].fallbacks: `openai/gpt-4.1-mini` is this entry's own alias; name other aliases to fall back to",
            "svc.yaml:4:59: model_list[0].fallbacks: unknown model `nothing`; it is not a `model_name` in model_list",
            "svc.yaml:5:5: model_list[0]: unknown field `fallback` (did you mean `fallbacks`?)",
            "svc.yaml:7:3: gateway_settings: unknown field `num_retry` (did you mean `num_retries`?)",
            "svc.yaml:8:18: gateway_settings.allowed_fails: must be at least 1 (set `cooldown_seconds: 0` to disable cooldowns)",
            "svc.yaml:9:24: gateway_settings.degraded_error_rate: `1.5` is not a fraction in (0, 1], such as 0.5",
            "svc.yaml:10:27: gateway_settings: `unavailable_error_rate` (0.1) must not be below `degraded_error_rate` (0.2)",
            "svc.yaml:11:26: gateway_settings.health_window_seconds: must be at least 1",
            "svc.yaml:12:21: gateway_settings.cooldown_seconds: expected a whole number of the right size, found `soon`",
        ]
    );
}

#[test]
fn string_fields_keep_scalars_as_written() {
    // YAML 1.1 reads `on` as true and `1.10` as 1.1: an id is the text the user wrote.
    let text = "\
fleet:
  name: &n 007
model_list:
  - model_name: 1.10
    params:
      model: mock/1.10
gateway_settings:
  teams:
    - team_id: on # a comment
      models: [ 1.10 ]
    - team_id: &t off
    - team_id: !!int \"7\"
    - team_id: *n
";
    let c = match load(text, &[]) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(c.fleet.name, "007");
    assert_eq!(c.models[0].alias, "1.10");
    let teams: Vec<&str> = c.gateway.teams.iter().map(|t| t.team_id.as_str()).collect();
    assert_eq!(teams, ["on", "off", "7", "007"]);
    assert_eq!(c.gateway.teams[0].models, ["1.10"]);
    // A value of the wrong kind is quoted as written.
    assert!(
        errors("server:\n  port: on\n").iter().any(|e| e.contains("`on`")),
        "{:?}",
        errors("server:\n  port: on\n")
    );
}

#[test]
fn admission_and_stream_bounds_load_and_are_checked() {
    let base = "model_list:\n  - model_name: m\n    params: { model: mock/m }\n";
    let c = load(base, &[]).unwrap_or_else(|e| panic!("{e}"));
    let defaults = AdmissionSettings::default();
    assert_eq!(c.gateway.admission, AdmissionSettings { mode: AdmissionMode::Cap, min_output_tokens: 256, ..defaults });
    assert_eq!((defaults.web_search_max_uses, defaults.web_search_result_tokens), (5, 10_000));
    assert_eq!(c.gateway.streams, StreamSettings::default());
    let set = format!(
        "{base}gateway_settings:\n  budget_admission: refuse\n  budget_min_output_tokens: 512\n  \
         web_search_max_uses: 2\n  web_search_result_tokens: 500\n  stream_timeout_seconds: 60\n  stream_idle_timeout_seconds: 5\n  stream_max_event_bytes: 65536\n  max_response_bytes: 2097152\n"
    );
    let c = load(&set, &[]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.gateway.admission,
        AdmissionSettings {
            mode: AdmissionMode::Refuse,
            min_output_tokens: 512,
            web_search_max_uses: 2,
            web_search_result_tokens: 500
        }
    );
    assert_eq!(
        c.gateway.streams,
        StreamSettings {
            total: Duration::from_secs(60),
            idle: Duration::from_secs(5),
            max_event_bytes: 65536,
            max_response_bytes: 2 << 20
        }
    );
    let bad = format!(
        "{base}gateway_settings:\n  budget_admission: maybe\n  budget_min_output_tokens: 0\n  \
         stream_idle_timeout_seconds: 0\n  stream_max_event_bytes: 10\n  max_response_bytes: 65536\n"
    );
    assert_eq!(
        errors(&bad),
        [
            "svc.yaml:5:21: gateway_settings.budget_admission: `maybe` is not `cap` or `refuse`",
            "svc.yaml:6:29: gateway_settings.budget_min_output_tokens: must be at least 1",
            "svc.yaml:7:32: gateway_settings.stream_idle_timeout_seconds: must be at least 1",
            "svc.yaml:8:27: gateway_settings.stream_max_event_bytes: must be at least 65536",
            "svc.yaml:9:23: gateway_settings.max_response_bytes: must be at least 1048576",
        ]
    );
}

/// `svc events tail` reads only the push block: variables that other parts name need not be set, while the
/// push block itself is checked as usual.
#[test]
#[allow(clippy::unwrap_used)]
fn the_push_block_alone() {
    let text = "\
server:
  master_key: os.environ/UNSET_MASTER
model_list:
  - model_name: m
    params: { model: openai/m, api_key: os.environ/UNSET_UPSTREAM }
notifications:
  ntfy:
    server: http://127.0.0.1:8080/
    topic: os.environ/TOPIC
  webhooks:
    - { url: 'https://x.example/h', events: ['*'], secret: os.environ/UNSET_SECRET }
";
    let env = |name: &str| (name == "TOPIC").then(|| "svc-fleet-x".to_string());
    let push = crate::load_push_str(text, "svc.yaml", &env).unwrap().unwrap();
    assert_eq!((push.server.as_str(), push.topic.as_str()), ("http://127.0.0.1:8080", "svc-fleet-x"));
    assert!(crate::load_str(text, "svc.yaml", ConfigSource::Builtin, &env).is_err(), "the whole file is not valid");
    let err = crate::load_push_str(text, "svc.yaml", &|_| None).unwrap_err().to_string();
    assert!(err.contains("svc.yaml:9:12: notifications.ntfy.topic: environment variable `TOPIC` is not set"), "{err}");
    assert!(!err.contains("UNSET_"), "{err}");
    assert!(crate::load_push_str("fleet: {name: a}\n", "svc.yaml", &|_| None).unwrap().is_none());
    assert!(crate::load_push_builtin().is_ok());
}

/// Every problem of one entry is reported, not only the first; a team and a fallback naming the alias of an
/// entry with errors are not told that the model does not exist.
#[test]
fn every_problem_of_a_model_entry_is_reported() {
    let text = "\
model_list:
  - model_name: openai/gpt-4.1-mini
    params:
      model: opneai/gpt-4.1-mini
      api_base: ftp://example.com
      timeout_seconds: soon
      input_cost_per_token: -0.000001
      output_cost_per_token: cheap
    fallbacks: [openai/gpt-4.1-nano, nothing]
  - model_name: openai/gpt-4.1-nano
    params:
  - model_name: other
    params: { model: mock/x }
    fallbacks: [openai/gpt-4.1-mini]
gateway_settings:
  teams:
    - team_id: executor
      budget_limit: 10
      models: [openai/gpt-4.1-mini, openai/gpt-4.1-nano]
";
    assert_eq!(
        errors(text),
        vec![
            "svc.yaml:4:14: model_list[0].params.model: `opneai/gpt-4.1-mini` must be `<provider>/<model id>` with provider openai, anthropic, gemini, azure, vertex_ai, bedrock or mock",
            "svc.yaml:5:17: model_list[0].params.api_base: `ftp://example.com` must be an http:// or https:// URL",
            "svc.yaml:6:24: model_list[0].params.timeout_seconds: expected a whole number of the right size, found `soon`",
            "svc.yaml:7:29: model_list[0].params.input_cost_per_token: `-0.000001` is negative; amounts and prices must be zero or more",
            "svc.yaml:8:30: model_list[0].params.output_cost_per_token: `cheap` is not a decimal number",
            "svc.yaml:9:38: model_list[0].fallbacks: unknown model `nothing`; it is not a `model_name` in model_list",
            "svc.yaml:11:11: model_list[1].params: missing `model`",
        ]
    );
}

#[test]
fn server_limits_have_defaults_and_are_checked() {
    let c = load("server:\n  port: 0\n", &[]).unwrap_or_else(|e| panic!("{e}"));
    let s = &c.server;
    assert_eq!((s.header_read_timeout, s.keep_alive_timeout), (Duration::from_secs(10), Duration::from_secs(60)));
    assert_eq!((s.max_connections, s.shutdown_timeout), (4096, Duration::from_secs(30)));
    let text = "\
server:
  header_read_timeout_seconds: 5
  keep_alive_timeout_seconds: 7
  max_connections: 100
  shutdown_timeout_seconds: 0
";
    let c = load(text, &[]).unwrap_or_else(|e| panic!("{e}"));
    let s = &c.server;
    assert_eq!((s.header_read_timeout, s.keep_alive_timeout), (Duration::from_secs(5), Duration::from_secs(7)));
    assert_eq!((s.max_connections, s.shutdown_timeout), (100, Duration::ZERO));
    let text = "\
server:
  header_read_timeout_seconds: 0
  keep_alive_timeout_seconds: -1
  max_connections: 0
  shutdown_timeout_seconds: later
  max_conections: 5
";
    assert_eq!(
        errors(text),
        vec![
            "svc.yaml:2:32: server.header_read_timeout_seconds: must be at least 1",
            "svc.yaml:3:31: server.keep_alive_timeout_seconds: expected a whole number of the right size, found `-1`",
            "svc.yaml:4:20: server.max_connections: must be at least 1",
            "svc.yaml:5:29: server.shutdown_timeout_seconds: expected a whole number of the right size, found `later`",
            "svc.yaml:6:3: server: unknown field `max_conections` (did you mean `max_connections`?)",
        ]
    );
}

/// A relative SQLite path (the default one included) is the config file's neighbour, whatever the working
/// directory; the built-in demo's path is left to `load_builtin`.
#[test]
fn relative_store_paths_are_taken_from_the_config_files_folder() {
    let env = |_: &str| None;
    let file = ConfigSource::File("/srv/fleet/svc.yaml".into());
    let load_at = |text: &str| load_str(text, "svc.yaml", file.clone(), &env).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(load_at("server:\n  port: 1\n").server.database_url, "sqlite:///srv/fleet/svc.db");
    let c = load_at("server:\n  database_url: sqlite://data/gw.db\n");
    assert_eq!(c.server.database_url, "sqlite:///srv/fleet/data/gw.db");
    let c = load_at("server:\n  database_url: sqlite:///var/lib/svc.db\n");
    assert_eq!(c.server.database_url, "sqlite:///var/lib/svc.db");
    let c = load_at("server:\n  database_url: postgres://u@h/db\n");
    assert_eq!(c.server.database_url, "postgres://u@h/db");
}

#[test]
fn trusted_proxies_and_the_failed_authentication_limit_are_read_and_checked() {
    let c = load("server:\n  port: 0\n", &[]).unwrap_or_else(|e| panic!("{e}"));
    let s = &c.server;
    assert_eq!((s.trusted_proxies.len(), s.auth_failures_burst, s.auth_failures_per_minute), (0, 20, 20));
    let text = "\
server:
  trusted_proxies: [10.0.0.0/8, 192.168.1.7, 'fd00::/8']
  auth_failures_burst: 5
  auth_failures_per_minute: 0
";
    let c = load(text, &[]).unwrap_or_else(|e| panic!("{e}"));
    let s = &c.server;
    let shown: Vec<String> = s.trusted_proxies.iter().map(ToString::to_string).collect();
    assert_eq!(shown, ["10.0.0.0/8", "192.168.1.7", "fd00::/8"]);
    assert_eq!((s.auth_failures_burst, s.auth_failures_per_minute), (5, 0));
    let text = "\
server:
  trusted_proxies:
    - 10.0.0.1/8
    - lb.internal
  auth_failures_burst: -1
  auth_failures_per_minut: 3
";
    assert_eq!(
        errors(text),
        vec![
            "svc.yaml:3:7: server.trusted_proxies[0]: `10.0.0.1/8` has bits set past its prefix length (did you mean `10.0.0.0/8`?)",
            "svc.yaml:4:7: server.trusted_proxies[1]: `lb.internal` is not an IP address or a CIDR block (such as `10.0.0.0/8` or `fd00::/8`)",
            "svc.yaml:5:24: server.auth_failures_burst: expected a whole number of the right size, found `-1`",
            "svc.yaml:6:3: server: unknown field `auth_failures_per_minut` (did you mean `auth_failures_per_minute`?)",
        ]
    );
}

#[test]
fn every_billed_price_is_read_and_unpriced_cache_dimensions_are_warned_about() {
    let text = "\
model_list:
  - model_name: claude
    params:
      model: anthropic/claude-x
      input_cost_per_token: 0.000003
      output_cost_per_token: 0.000015
      cache_creation_input_token_cost_above_1hr: 0.000006
      input_cost_per_token_above_200k_tokens: 0.000006
      output_cost_per_token_above_200k_tokens: 0.0000225
      search_context_cost_per_query: {search_context_size_low: 0.01, search_context_size_medium: 0.02}
      max_input_tokens: 1000000
";
    let c = load(text, &[]).unwrap_or_else(|e| panic!("{e}"));
    let m = &c.models[0];
    assert_eq!(m.prices.cache_write_1h, Some(Price::from_picos(6_000_000)));
    assert_eq!(m.prices.long.map(|l| (l.above_tokens, l.input)), Some((200_000, Price::from_picos(6_000_000))));
    assert_eq!(m.prices.per_tool_use, Money::from_nanos(20_000_000), "the medium size's price");
    assert_eq!(m.max_input_tokens, Some(1_000_000));
    assert_eq!(
        warnings(text),
        vec![
            "svc.yaml:4:7: warning: model_list[0].params: no `cache_read_input_token_cost`: the provider bills it apart, and cache reads are priced at the input price",
            "svc.yaml:4:7: warning: model_list[0].params: no `cache_creation_input_token_cost`: the provider bills it apart, and cache writes are priced at the input price",
        ]
    );
    let bad = "\
model_list:
  - model_name: m
    params:
      model: openai/x
      output_cost_per_token_above_200k_tokens: 0.0000225
      search_context_cost_per_query: lots
      max_input_tokens: 0
";
    let errs = errors(bad);
    assert!(errs.iter().any(|e| e.contains("output_cost_per_token_above_200k_tokens: is used only with")), "{errs:?}");
    assert!(errs.iter().any(|e| e.contains("search_context_cost_per_query")), "{errs:?}");
    assert!(errs.iter().any(|e| e.contains("max_input_tokens: must be at least 1")), "{errs:?}");
}

#[test]
fn the_currency_label_is_read_and_checked() {
    let base = "model_list:\n  - model_name: m\n    params:\n      model: mock/m\n";
    let config = load(&format!("{base}gateway_settings:\n  currency: USD\n"), &[]);
    assert_eq!(config.ok().and_then(|c| c.gateway.currency).as_deref(), Some("USD"));
    let none = load(base, &[]);
    assert_eq!(none.ok().map(|c| c.gateway.currency), Some(None));
    assert_eq!(
        errors(&format!("{base}gateway_settings:\n  currency: US dollars\n")),
        ["svc.yaml:6:13: gateway_settings.currency: expected a label such as `USD` (1 to 16 characters, no spaces)"]
    );
}

#[test]
fn server_tls_names_two_files_that_exist() -> std::io::Result<()> {
    let dir = tempfile::tempdir()?;
    let cert = dir.path().join("cert.pem");
    std::fs::write(&cert, "x")?;
    let base = "model_list:\n  - model_name: m\n    params:\n      model: mock/m\n";
    let ok = format!("server:\n  tls:\n    cert_file: {}\n    key_file: {}\n{base}", cert.display(), cert.display());
    let tls = load(&ok, &[]).ok().and_then(|c| c.server.tls);
    assert_eq!(tls.map(|t| t.key_file), Some(cert.clone()));
    let missing = format!("server:\n  tls:\n    cert_file: {}\n{base}", cert.display());
    assert_eq!(errors(&missing), ["svc.yaml:3:5: server.tls: missing `key_file` (the PEM private key)"]);
    let absent =
        format!("server:\n  tls:\n    cert_file: {}\n    key_file: /nonexistent/key.pem\n{base}", cert.display());
    assert_eq!(errors(&absent), ["svc.yaml:4:15: server.tls.key_file: no file `/nonexistent/key.pem`"]);
    Ok(())
}

#[test]
fn ssl_ca_file_is_a_deployments_own_else_the_gateways() -> std::io::Result<()> {
    let dir = tempfile::tempdir()?;
    let (own, global) = (dir.path().join("own.pem"), dir.path().join("global.pem"));
    std::fs::write(&own, "x")?;
    std::fs::write(&global, "x")?;
    let text = format!(
        "model_list:\n  - model_name: a\n    params:\n      model: openai/a\n      ssl_ca_file: {}\n  - model_name: b\n    params:\n      model: openai/b\ngateway_settings:\n  ssl_ca_file: {}\n",
        own.display(),
        global.display()
    );
    let files: Vec<_> =
        load(&text, &[]).map(|c| c.models.into_iter().map(|m| m.ssl_ca_file).collect()).unwrap_or_default();
    assert_eq!(files, [Some(own), Some(global)]);
    let missing =
        "model_list:\n  - model_name: a\n    params:\n      model: openai/a\n      ssl_ca_file: /nonexistent/ca.pem\n";
    assert_eq!(errors(missing), ["svc.yaml:5:20: model_list[0].params.ssl_ca_file: no file `/nonexistent/ca.pem`"]);
    Ok(())
}
