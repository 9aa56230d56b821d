//! The validated configuration. Built only by the loader; every field already has its domain type.

use crate::diagnostics::Diagnostic;
use crate::ip_block::IpBlock;
use crate::source::ConfigSource;
use std::fmt;
use std::time::Duration;
use svc_budget::{BudgetDuration, Money};

/// The whole validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where it came from.
    pub source: ConfigSource,
    /// `server:`.
    pub server: ServerConfig,
    /// `fleet:`.
    pub fleet: FleetConfig,
    /// `model_list:`, one entry per deployment, in file order.
    pub models: Vec<ModelEntry>,
    /// `gateway_settings:` (alias `litellm_settings:`).
    pub gateway: GatewaySettings,
    /// `notifications:`.
    pub notifications: NotificationsConfig,
    /// Warnings found while loading (the configuration is still usable).
    pub warnings: Vec<Diagnostic>,
    /// SHA-256 of the file's text as read (lowercase hex; environment references unresolved), which each fleet
    /// node reports so that nodes running different files are found.
    pub digest: String,
}

/// A secret string (master key, API key, webhook secret, push token). Its `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }
    /// The secret itself, for use on the wire only.
    pub fn expose(&self) -> &str {
        &self.0
    }
    /// Whether the secret is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// `server:`.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Listen address (default `127.0.0.1`).
    pub host: String,
    /// Listen port (default 4000; 0 picks a free port).
    pub port: u16,
    /// The admin key: `server.master_key`, else `$SVC_MASTER_KEY`; `None` when neither is set.
    pub master_key: Option<Secret>,
    /// `sqlite://…` or `postgres://…`. A relative SQLite path in a file is resolved against the file's folder
    /// (default `sqlite://svc.db` beside the file); the built-in demo's store is in the user's data folder.
    pub database_url: String,
    /// Requests in flight beyond this get 503 with `Retry-After` (default 512).
    pub max_in_flight: usize,
    /// Request bodies over this many bytes get 413 (default 10 MiB).
    pub max_request_body_bytes: usize,
    /// How long a client may take to send a request's headers, from its first byte (from the connection's
    /// opening for its first request) before the connection is closed (default 10 s).
    pub header_read_timeout: Duration,
    /// How long a keep-alive connection may stay idle between requests before it is closed (default 60 s).
    pub keep_alive_timeout: Duration,
    /// Open connections beyond this are answered 503 with `Retry-After` and closed (default 4096).
    pub max_connections: usize,
    /// At shutdown, how long requests in flight may take to finish before the remaining connections are
    /// closed (default 30 s).
    pub shutdown_timeout: Duration,
    /// A key that may scrape `GET /metrics` besides the master key (`server.metrics_key`).
    pub metrics_key: Option<Secret>,
    /// A second listener serving only `GET /metrics`, without a key (`server.metrics_address`, `host:port`).
    pub metrics_address: Option<String>,
    /// Whether per-key series (`key_alias` label) are exported (`server.metrics_key_labels`, default false:
    /// series by team and alias only).
    pub metrics_key_labels: bool,
    /// How log lines are written (`server.log_format`: `text`, the default, or `json`).
    pub log_format: LogFormat,
    /// Reverse proxies in front of the gateway (`server.trusted_proxies`, default none): a connection from one
    /// of them is taken to come from the right-most `X-Forwarded-For` address that is not one of them.
    pub trusted_proxies: Vec<IpBlock>,
    /// Failed authentications a client address may make at once (`server.auth_failures_burst`, default 20);
    /// 0 turns the limit off.
    pub auth_failures_burst: u32,
    /// Failed authentications a client address gets back per minute once its burst is spent
    /// (`server.auth_failures_per_minute`, default 20); 0 turns the limit off.
    pub auth_failures_per_minute: u32,
    /// `server.tls`: the gateway terminates TLS itself with this certificate and key (default none: plain HTTP,
    /// or TLS at a reverse proxy in front).
    pub tls: Option<TlsFiles>,
}

/// `server.tls`: PEM files, read when the server starts (and again on reload). A relative path is taken from
/// the config file's folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// `cert_file`: the certificate chain, leaf first.
    pub cert_file: std::path::PathBuf,
    /// `key_file`: its private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: std::path::PathBuf,
}

/// `server.log_format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One human-readable line per event, `key=value` fields.
    #[default]
    Text,
    /// One JSON object per line, fields at the top level.
    Json,
}

/// `fleet:`.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetConfig {
    /// Fleet name (default `default`; `$SVC_FLEET` overrides).
    pub name: String,
    /// Node name (default: the host name; `$SVC_NODE` overrides).
    pub node: String,
    /// The address other nodes and operators reach this node at (default `http://<node>:<port>`).
    pub address: Option<String>,
    /// A node whose heartbeats stop for this long is declared offline (default 30 s).
    pub offline_after: Duration,
    /// How often a node sends a heartbeat (default a sixth of `offline_after`, at least 1 s).
    pub heartbeat: Duration,
    /// How long a node's budget slice and its claim on an outbox destination last without renewal (default
    /// `offline_after`): a node that dies keeps them no longer.
    pub lease: Duration,
    /// Where a node on a shared (PostgreSQL) store keeps its local spend journal (default: the folder of the
    /// demo store, `$XDG_DATA_HOME/svc`, else `~/.local/share/svc`).
    pub journal_dir: Option<std::path::PathBuf>,
}

impl Default for FleetConfig {
    /// Fleet `default`, node = this machine's host name (`localhost` when it cannot be read).
    fn default() -> Self {
        let node = hostname::get().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "localhost".into());
        FleetConfig {
            name: "default".into(),
            node,
            address: None,
            offline_after: Duration::from_secs(30),
            heartbeat: Duration::from_secs(5),
            lease: Duration::from_secs(30),
            journal_dir: None,
        }
    }
}

/// Which upstream API a deployment speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProviderKind {
    /// OpenAI chat completions (OpenAI, vLLM, Ollama, Groq, …).
    OpenAi,
    /// Anthropic Messages API.
    Anthropic,
    /// Google's Gemini API with an API key.
    Gemini,
    /// Azure OpenAI.
    Azure,
    /// Google Vertex AI (Gemini and Claude models).
    Vertex,
    /// AWS Bedrock.
    Bedrock,
    /// The built-in deterministic mock.
    Mock,
}

impl ProviderKind {
    /// The prefix written in `params.model`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Gemini => "gemini",
            ProviderKind::Azure => "azure",
            ProviderKind::Vertex => "vertex_ai",
            ProviderKind::Bedrock => "bedrock",
            ProviderKind::Mock => "mock",
        }
    }
}

/// One `model_list` entry: a deployment of an alias.
#[derive(Debug, Clone)]
pub struct ModelEntry {
    /// The alias clients send (`model_name`).
    pub alias: String,
    /// Deployment id, unique in the file: `model_info.id`, else the alias (with `#n` when the alias repeats).
    pub deployment_id: String,
    /// The provider of `params.model`.
    pub provider: ProviderKind,
    /// The upstream model id (after the provider prefix).
    pub upstream_model: String,
    /// `params.api_base`, without a trailing slash.
    pub api_base: Option<String>,
    /// `params.api_key`.
    pub api_key: Option<Secret>,
    /// `params.timeout_seconds` (default 600).
    pub timeout: Duration,
    /// Its prices (`params.input_cost_per_token` and the rest: README, "Configuration").
    pub prices: svc_budget::Prices,
    /// `params.max_input_tokens`: the model's context window, the most input tokens a call can be billed.
    pub max_input_tokens: Option<u64>,
    /// `params.max_output_tokens`.
    pub max_output_tokens: Option<u32>,
    /// `owned_by` in `GET /models`: the entry's `owned_by`, else the alias's provider prefix.
    pub owned_by: String,
    /// `fallbacks`: aliases whose deployments are tried, in order, after this alias's own (not transitive).
    pub fallbacks: Vec<String>,
    /// `params.ssl_ca_file`, else `gateway_settings.ssl_ca_file`: PEM certificates the upstream's TLS
    /// certificate may chain to, besides the public roots (a private CA).
    pub ssl_ca_file: Option<std::path::PathBuf>,
    /// The settings of a cloud provider (Azure, Vertex AI, Bedrock).
    pub cloud: crate::cloud::Cloud,
    /// Line of the entry in the file, for later diagnostics.
    pub line: u64,
}

/// `gateway_settings:`.
#[derive(Debug, Clone)]
pub struct GatewaySettings {
    /// Default length of a budget period (default `30d`).
    pub budget_duration: BudgetDuration,
    /// Fractions of a budget that emit `budget.alert` (default `[0.8]`), in per-mille.
    pub budget_alert_thresholds_permille: Vec<u32>,
    /// How long a readiness answer is reused (default 5 s).
    pub readiness_cache: Duration,
    /// Retries and cooldowns.
    pub routing: RoutingSettings,
    /// Model health thresholds and the background probe.
    pub health: HealthSettings,
    /// What happens when a request's worst case no longer fits a budget.
    pub admission: AdmissionSettings,
    /// Bounds on streams read from upstreams.
    pub streams: StreamSettings,
    /// `teams:`.
    pub teams: Vec<TeamConfig>,
    /// Whether every key of a team may read and continue the stored responses its teammates created (default
    /// false: only the creating key, and the master key).
    pub responses_shared_within_team: bool,
    /// `anthropic_beta_allowed`: the `anthropic-beta` values a client may send to an Anthropic deployment
    /// (exact, or a prefix ending in `*`). `None` (the default): every value that does not change the price, and
    /// those that do (`context-1m-*`, `extended-cache-ttl-*`) when every deployment that may serve the request
    /// prices them.
    pub anthropic_beta_allowed: Option<Vec<String>>,
    /// `currency`: the label of every amount (prices, budgets, spend), e.g. `USD`, shown beside them in events,
    /// refusals, the dashboard and `svc` (none by default: amounts are in the unit the prices are in).
    pub currency: Option<String>,
    /// `ssl_ca_file`: PEM certificates every deployment's upstream may chain to, besides the public roots, unless
    /// the deployment names its own (`params.ssl_ca_file`).
    pub ssl_ca_file: Option<std::path::PathBuf>,
}

/// `budget_admission`: what happens when a request's worst-case cost no longer fits a budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmissionMode {
    /// Admit it with its completion capped to what the budget still pays for (at least
    /// `budget_min_output_tokens`), else refuse (the default).
    Cap,
    /// Refuse it (429 `Budget exceeded`).
    Refuse,
}

/// Budget admission settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionSettings {
    /// `budget_admission` (default `cap`).
    pub mode: AdmissionMode,
    /// `budget_min_output_tokens`: the smallest completion cap worth admitting a request with (default 256).
    pub min_output_tokens: u64,
    /// `web_search_max_uses`: the web searches reserved for a request whose web search tool sets no `max_uses`
    /// (default 5).
    pub web_search_max_uses: u64,
    /// `web_search_result_tokens`: the input tokens reserved for each web search's results (default 10,000; never
    /// more than the model's context window in all).
    pub web_search_result_tokens: u64,
}

impl Default for AdmissionSettings {
    fn default() -> Self {
        AdmissionSettings {
            mode: AdmissionMode::Cap,
            min_output_tokens: 256,
            web_search_max_uses: 5,
            web_search_result_tokens: 10_000,
        }
    }
}

/// Bounds on what is read from an upstream (a stream, or a whole answer), whatever the upstream does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamSettings {
    /// `stream_timeout_seconds`: the longest a stream may run in all (default 3600 s).
    pub total: Duration,
    /// `stream_idle_timeout_seconds`: the longest wait for the upstream's next chunk (default 300 s).
    pub idle: Duration,
    /// `stream_max_event_bytes`: the largest event (or unfinished line) read from an upstream (default 4 MiB).
    pub max_event_bytes: usize,
    /// `max_response_bytes`: the largest answer read whole from an upstream (default 64 MiB).
    pub max_response_bytes: usize,
}

impl Default for StreamSettings {
    fn default() -> Self {
        StreamSettings {
            total: Duration::from_secs(3600),
            idle: Duration::from_secs(300),
            max_event_bytes: 4 * 1024 * 1024,
            max_response_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Retries across deployments and cooldowns of failing deployments (LiteLLM's router names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoutingSettings {
    /// `num_retries`: attempts after the first, on the next deployment or fallback (default 2).
    pub num_retries: u32,
    /// `allowed_fails`: failures in a row after which a deployment is cooled down (default 3, at least 1).
    pub allowed_fails: u32,
    /// `cooldown_seconds` (LiteLLM `cooldown_time`): how long a cooled-down deployment stays out of rotation
    /// (default 5 s; 0 disables cooldowns).
    pub cooldown: Duration,
}

impl Default for RoutingSettings {
    fn default() -> Self {
        RoutingSettings { num_retries: 2, allowed_fails: 3, cooldown: Duration::from_secs(5) }
    }
}

/// When a deployment counts as degraded or unavailable, judged on live traffic over a sliding window and on a
/// background probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthSettings {
    /// `health_window_seconds`: length of the sliding window of live calls (default 60 s).
    pub window: Duration,
    /// `health_min_requests`: calls the window must hold before its figures are judged (default 10).
    pub min_requests: u32,
    /// `degraded_error_rate`, in per-mille: at or above it a deployment is degraded (default 0.2).
    pub degraded_error_permille: u32,
    /// `unavailable_error_rate`, in per-mille: at or above it a deployment is unavailable (default 0.5).
    pub unavailable_error_permille: u32,
    /// `degraded_p95_latency_ms`: a p95 latency (time to the answer, or to a stream's first chunk) at or above
    /// it makes a deployment degraded (default 60 s; zero disables the latency check).
    pub degraded_p95_latency: Duration,
    /// `health_check_interval_seconds` (LiteLLM `health_check_interval`): period of the background probe
    /// (`GET {api_base}/models`, never a paid completion; default 30 s; zero disables it).
    pub probe_interval: Duration,
}

impl Default for HealthSettings {
    fn default() -> Self {
        HealthSettings {
            window: Duration::from_secs(60),
            min_requests: 10,
            degraded_error_permille: 200,
            unavailable_error_permille: 500,
            degraded_p95_latency: Duration::from_secs(60),
            probe_interval: Duration::from_secs(30),
        }
    }
}

/// One `teams` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamConfig {
    /// `team_id`.
    pub team_id: String,
    /// `budget_limit`; `None` means unlimited.
    pub budget_limit: Option<Money>,
    /// Aliases the team may use.
    pub models: Vec<String>,
    /// `budget_duration` of this team, else the gateway default.
    pub budget_duration: BudgetDuration,
    /// `budget_start`: anchor of the team's periods (calendar alignment).
    pub budget_start: Option<chrono::DateTime<chrono::Utc>>,
    /// Requests per minute for the whole team.
    pub rpm_limit: Option<u32>,
    /// Tokens per minute for the whole team.
    pub tpm_limit: Option<u64>,
    /// Where the team is defined: the config file, or the admin API at runtime.
    pub origin: TeamOrigin,
}

/// Where a team is defined, and so what may change it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TeamOrigin {
    /// The config file's `gateway_settings.teams` (changed by editing the file and reloading).
    #[default]
    File,
    /// `/team/new` or `svc teams new` (changed by `/team/update` and `/team/delete`).
    Api,
}

impl TeamOrigin {
    /// `file` or `api`, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            TeamOrigin::File => "file",
            TeamOrigin::Api => "api",
        }
    }
}

/// `notifications:`.
#[derive(Debug, Clone, Default)]
pub struct NotificationsConfig {
    /// `ntfy:` (the push block).
    pub ntfy: Option<NtfyConfig>,
    /// `webhooks:`.
    pub webhooks: Vec<WebhookConfig>,
    /// `hooks:` settings for local shell hooks.
    pub hooks: HookSettings,
}

/// Push priority scale (spec 2.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// 1
    Min,
    /// 2
    Low,
    /// 3
    Default,
    /// 4
    High,
    /// 5
    Urgent,
}

impl Priority {
    /// Parses `min|low|default|high|urgent` (also ntfy's `1`-`5` and `max`).
    pub fn parse(text: &str) -> Option<Priority> {
        match text.trim().to_ascii_lowercase().as_str() {
            "min" | "1" => Some(Priority::Min),
            "low" | "2" => Some(Priority::Low),
            "default" | "3" => Some(Priority::Default),
            "high" | "4" => Some(Priority::High),
            "urgent" | "max" | "5" => Some(Priority::Urgent),
            _ => None,
        }
    }
    /// The word ntfy understands.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Min => "min",
            Priority::Low => "low",
            Priority::Default => "default",
            Priority::High => "high",
            Priority::Urgent => "urgent",
        }
    }
}

/// The push block (spec 2.7).
#[derive(Debug, Clone)]
pub struct NtfyConfig {
    /// `enabled`.
    pub enabled: bool,
    /// `server`, http(s), without a trailing slash.
    pub server: String,
    /// `topic`, `^[-_A-Za-z0-9]{1,64}$`, not reserved.
    pub topic: String,
    /// `priority` (default `default`), used for `test` events.
    pub priority: Priority,
    /// `token`; `None` when empty.
    pub token: Option<Secret>,
}

/// One `webhooks` entry (spec 2.7, 6.4).
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// Receiving endpoint, http(s).
    pub url: String,
    /// Event kinds forwarded: exact kinds, `*`, or prefixes like `task.*`.
    pub events: Vec<String>,
    /// Signing secret.
    pub secret: Secret,
    /// Bound on one attempt (default 10 s).
    pub timeout: Duration,
    /// Retries after the first attempt (default 3).
    pub retry: u32,
}

impl WebhookConfig {
    /// The key of the Standard Webhooks signature (`webhook-signature`), see [`standard_webhooks_key`]. A
    /// secret the loader would refuse falls back to its raw bytes.
    pub fn standard_key(&self) -> Vec<u8> {
        let secret = self.secret.expose();
        standard_webhooks_key(secret).unwrap_or_else(|_| secret.as_bytes().to_vec())
    }
}

/// The Standard Webhooks key of a webhook secret: `whsec_` followed by base64 (the convention of the Standard
/// Webhooks libraries; padding optional) is the decoded bytes, any other secret its own bytes. An error when
/// the rest of a `whsec_` secret is empty or not base64 (the message never shows the secret).
pub fn standard_webhooks_key(secret: &str) -> Result<Vec<u8>, String> {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    use base64::Engine as _;
    const LENIENT: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    match secret.strip_prefix("whsec_") {
        None => Ok(secret.as_bytes().to_vec()),
        Some(rest) => match LENIENT.decode(rest) {
            Ok(key) if !key.is_empty() => Ok(key),
            _ => Err("starts with `whsec_` but the rest is not base64 (a Standard Webhooks secret is `whsec_` and the base64 of the key)".to_string()),
        },
    }
}

/// `notifications.hooks:`.
#[derive(Debug, Clone)]
pub struct HookSettings {
    /// A hook still running after this is killed with its process group (default 30 s).
    pub timeout: Duration,
    /// At most this many hooks run at once (default 4).
    pub max_concurrent: usize,
}

impl Default for HookSettings {
    fn default() -> Self {
        HookSettings { timeout: Duration::from_secs(30), max_concurrent: 4 }
    }
}

impl Config {
    /// The settings of `new` a server running `self` cannot take (a reload refuses them, naming them): what it
    /// bound, opened or sized at start.
    pub fn needs_restart(&self, new: &Config) -> Vec<&'static str> {
        let (old, o, n) = (self, &self.server, &new.server);
        let checks: [(&'static str, bool); 15] = [
            ("server.host", o.host != n.host),
            ("server.port", o.port != n.port),
            ("server.database_url", o.database_url != n.database_url),
            ("server.master_key", o.master_key != n.master_key),
            ("server.max_in_flight", o.max_in_flight != n.max_in_flight),
            ("server.max_connections", o.max_connections != n.max_connections),
            ("server.header_read_timeout_seconds", o.header_read_timeout != n.header_read_timeout),
            ("server.keep_alive_timeout_seconds", o.keep_alive_timeout != n.keep_alive_timeout),
            ("server.shutdown_timeout_seconds", o.shutdown_timeout != n.shutdown_timeout),
            ("server.metrics_address", o.metrics_address != n.metrics_address),
            ("server.metrics_key_labels", o.metrics_key_labels != n.metrics_key_labels),
            ("server.log_format", o.log_format != n.log_format),
            (
                "server.trusted_proxies, server.auth_failures_*",
                o.trusted_proxies != n.trusted_proxies
                    || o.auth_failures_burst != n.auth_failures_burst
                    || o.auth_failures_per_minute != n.auth_failures_per_minute,
            ),
            ("server.tls (on or off)", o.tls.is_some() != n.tls.is_some()),
            ("fleet", old.fleet != new.fleet),
        ];
        checks.into_iter().filter(|(_, changed)| *changed).map(|(name, _)| name).collect()
    }

    /// The deployments of an alias, in file order.
    pub fn deployments<'a>(&'a self, alias: &'a str) -> impl Iterator<Item = &'a ModelEntry> + 'a {
        self.models.iter().filter(move |m| m.alias == alias)
    }

    /// The team with this id.
    pub fn team(&self, team_id: &str) -> Option<&TeamConfig> {
        self.gateway.teams.iter().find(|t| t.team_id == team_id)
    }

    /// Distinct aliases, in file order.
    pub fn aliases(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for m in &self.models {
            if !out.contains(&m.alias.as_str()) {
                out.push(&m.alias);
            }
        }
        out
    }
}
