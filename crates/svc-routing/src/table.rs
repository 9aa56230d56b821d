//! Routing: the table of aliases and their deployments built from the config, and the [`Plan`] of a request:
//! which deployments it may try, in which order.
//!
//! 1. Several `model_list` entries with one `model_name` are deployments of that alias. The deployments in
//!    rotation (not unavailable, not cooled down) come first, fewest requests in flight first; ties go round
//!    robin, so light traffic is spread too.
//! 2. Then the deployments of the alias's `fallbacks`, in the order listed, ranked the same way (fallbacks are
//!    not transitive: a fallback's own fallbacks are not followed).
//! 3. Last, the deployments out of rotation: used only when nothing else is left.
//! 4. A request makes at most `1 + num_retries` attempts along the plan, wrapping around to the start when it
//!    is shorter. [`classify`] says which failures may be retried; a deployment that answered 429 is not asked
//!    again within the request; a deployment tried again is waited for with [`backoff`].

use crate::health::{announce, Health, Outcome, Subject};
use foldhash::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use svc_budget::Prices;
use svc_config::Config;
use svc_events::EventSink;
use svc_events::RetryPolicy;
use svc_providers::{Deployment, ProviderError};

/// Completion tokens reserved when neither the request nor the model gives a cap (a route's default cap).
pub const DEFAULT_MAX_OUTPUT_TOKENS: u64 = 4096;

/// One deployment of an alias, with what the gateway (not the provider) needs to know of it.
#[derive(Debug)]
pub struct Route {
    /// The alias it serves.
    pub alias: String,
    /// The provider side.
    pub deployment: Deployment,
    /// What it charges for (every part a provider bills).
    pub prices: Prices,
    /// The model's context window, when configured.
    pub max_input_tokens: Option<u64>,
    /// The model's output cap (for reservations).
    pub max_output_tokens: Option<u32>,
    /// Requests now in flight on it.
    pub in_flight: AtomicUsize,
    /// Its health and cooldown.
    pub health: Arc<Health>,
    /// Counts its cooldowns (`svc_deployment_cooldowns_total`).
    pub cooldowns: prometheus::IntCounter,
}

/// An alias as listed by `GET /models`.
#[derive(Debug, Clone)]
pub struct AliasInfo {
    /// The alias.
    pub id: String,
    /// `owned_by`.
    pub owned_by: String,
}

/// The deployments of one alias.
#[derive(Debug, Default)]
struct Group {
    routes: Vec<Arc<Route>>,
    fallbacks: Vec<String>,
    /// Round-robin start among equally loaded deployments.
    next: AtomicUsize,
}

/// Aliases → deployments.
#[derive(Debug, Default)]
pub struct ModelTable {
    groups: HashMap<String, Group>,
    /// The wildcard aliases (`claude-*`), in config order: a name no alias matches exactly is served by the
    /// first of these it matches.
    wildcards: Vec<String>,
    routes: Vec<Arc<Route>>,
    attempts: usize,
    /// Aliases in config order.
    pub aliases: Vec<AliasInfo>,
    /// The stored responses this node served lately: where each is kept and whose it is.
    pub homes: Arc<crate::homes::ResponseHomes>,
}

/// A plan holds at most this many deployments (attempts beyond it wrap around).
const MAX_PLAN: usize = 64;

/// How a failed attempt counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The deployment's fault (connect error, timeout, 408, 5xx, 529, an invalid answer): retried.
    Fault,
    /// 429: retried on another deployment, never this one again within the request.
    RateLimited,
    /// The request's fault (400, 401, 403, 404, 413, 422…, or a request the provider cannot express):
    /// answered at once, not counted against the deployment.
    Final,
}

/// Classifies an upstream error.
pub fn classify(e: &ProviderError) -> Failure {
    match e {
        ProviderError::Unreachable { .. } | ProviderError::Timeout { .. } | ProviderError::BadResponse { .. } => {
            Failure::Fault
        }
        ProviderError::Status { status: 429, .. } => Failure::RateLimited,
        ProviderError::Status { status, .. } if *status == 408 || *status >= 500 => Failure::Fault,
        ProviderError::Status { .. } | ProviderError::Unsupported { .. } => Failure::Final,
    }
}

/// The wait before asking a deployment again within one request (`repeat`: how many times it was asked
/// already, at least 1): [`RetryPolicy::UPSTREAM`], 50 ms doubling per repeat, jittered, at most 1 s, so that
/// retrying clients do not march in step.
pub fn backoff(repeat: u32) -> Duration {
    RetryPolicy::UPSTREAM.delay_before(repeat.saturating_add(1), None)
}

impl ModelTable {
    /// Builds the table, one upstream client per deployment sharing the pooled `client`.
    pub fn build(
        config: &Config,
        client: &svc_providers::UpstreamClient,
        series: &dyn crate::DeploymentSeries,
    ) -> Result<ModelTable, String> {
        let mut t = ModelTable { attempts: 1 + config.gateway.routing.num_retries as usize, ..ModelTable::default() };
        let origin = Instant::now();
        // Deployments that trust a private CA: one client (and pool) per CA file.
        let mut trusting: Vec<(&std::path::Path, svc_providers::UpstreamClient)> = Vec::new();
        for m in &config.models {
            let client = match m.ssl_ca_file.as_deref() {
                None => client,
                Some(ca) => match trusting.iter().position(|(file, _)| *file == ca) {
                    Some(i) => &trusting[i].1,
                    None => {
                        let made = svc_providers::UpstreamClient::trusting(ca)
                            .map_err(|e| format!("model `{}` (deployment `{}`): {e}", m.alias, m.deployment_id))?;
                        trusting.push((ca, made));
                        &trusting[trusting.len() - 1].1
                    }
                },
            };
            let upstream = crate::upstream::of(m, client, DEFAULT_MAX_OUTPUT_TOKENS as u32)?;
            let route = Arc::new(Route {
                alias: m.alias.clone(),
                deployment: Deployment {
                    id: m.deployment_id.clone(),
                    upstream_model: m.upstream_model.clone(),
                    timeout: m.timeout,
                    max_event_bytes: config.gateway.streams.max_event_bytes,
                    max_response_bytes: config.gateway.streams.max_response_bytes,
                    upstream,
                },
                prices: m.prices,
                max_input_tokens: m.max_input_tokens,
                max_output_tokens: m.max_output_tokens,
                in_flight: AtomicUsize::new(0),
                health: Arc::new(Health::new(config.gateway.health, config.gateway.routing, origin)),
                cooldowns: series.cooldowns(&m.deployment_id),
            });
            series.flag_series(&m.deployment_id);
            if !t.groups.contains_key(&m.alias) {
                if m.alias.contains('*') {
                    t.wildcards.push(m.alias.clone());
                }
                t.aliases.push(AliasInfo { id: m.alias.clone(), owned_by: m.owned_by.clone() });
            }
            let group = t.groups.entry(m.alias.clone()).or_default();
            group.routes.push(route.clone());
            for f in &m.fallbacks {
                if !group.fallbacks.contains(f) {
                    group.fallbacks.push(f.clone());
                }
            }
            t.routes.push(route);
        }
        Ok(t)
    }

    /// Whether the alias exists (as written, or matched by a wildcard alias).
    pub fn contains(&self, alias: &str) -> bool {
        self.group(alias).is_some()
    }

    /// The configured alias that serves `name`: `name` itself when it is an alias, else the first wildcard
    /// alias it matches (the metrics label a request by it: a client's model names are unbounded, the config's
    /// aliases are not).
    pub fn configured(&self, name: &str) -> Option<&str> {
        if let Some((alias, _)) = self.groups.get_key_value(name) {
            return Some(alias);
        }
        self.wildcards.iter().find(|p| matches(p, name).is_some()).map(String::as_str)
    }

    /// The deployments of `name`: its own alias, else the first wildcard alias it matches.
    fn group(&self, name: &str) -> Option<&Group> {
        if let Some(g) = self.groups.get(name) {
            return Some(g);
        }
        let pattern = self.wildcards.iter().find(|p| matches(p, name).is_some())?;
        self.groups.get(pattern)
    }

    /// The deployment with id `id`.
    pub fn deployment(&self, id: &str) -> Option<&Arc<Route>> {
        self.routes.iter().find(|r| r.deployment.id == id)
    }

    /// Every deployment, in config order.
    pub fn all(&self) -> impl Iterator<Item = &Arc<Route>> {
        self.routes.iter()
    }

    /// The deployments a request for `alias` may try, in order (see the module documentation).
    pub fn plan(&self, alias: &str, sink: &dyn EventSink) -> Option<Plan> {
        let group = self.group(alias)?;
        let fallbacks = group.fallbacks.iter().filter_map(|f| self.groups.get(f));
        let mut candidates = Vec::with_capacity(self.attempts.min(MAX_PLAN));
        let mut spare = Vec::new();
        for g in std::iter::once(group).chain(fallbacks) {
            g.rank(&mut candidates, &mut spare, sink);
        }
        candidates.append(&mut spare);
        candidates.truncate(self.attempts.min(MAX_PLAN));
        Some(Plan { candidates, attempts: self.attempts, cursor: 0, tried: 0, excluded: 0 })
    }
}

impl Group {
    /// Appends the deployments in rotation to `into`, fewest in flight first (round robin among equals), and
    /// the others to `spare`.
    fn rank(&self, into: &mut Vec<Arc<Route>>, spare: &mut Vec<Arc<Route>>, sink: &dyn EventSink) {
        let n = self.routes.len();
        if n == 0 {
            return;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        let first = into.len();
        for i in 0..n {
            let r = &self.routes[(start + i) % n];
            r.refresh(sink);
            if r.health.available() {
                into.push(r.clone());
            } else {
                spare.push(r.clone());
            }
        }
        // Stable: equal loads keep the rotated order.
        into[first..].sort_by_key(|r| r.in_flight.load(Ordering::Relaxed));
    }
}

/// The deployments a request may try and how far it got.
#[derive(Debug)]
pub struct Plan {
    candidates: Vec<Arc<Route>>,
    attempts: usize,
    cursor: usize,
    /// Bit i: candidate i was tried.
    tried: u64,
    /// Bit i: candidate i answered 429.
    excluded: u64,
}

/// One attempt of a plan.
#[derive(Debug)]
pub struct Attempt {
    /// The deployment to call.
    pub route: Arc<Route>,
    /// How many times it was already tried in this request (0: never).
    pub repeat: u32,
    /// Its index in the plan.
    index: usize,
}

impl Plan {
    /// The deployments the plan may use, in order.
    pub fn candidates(&self) -> &[Arc<Route>] {
        &self.candidates
    }

    /// Keeps only the deployments that count input as the first one does (its provider and upstream model).
    pub fn keep_like_first(&mut self) {
        let Some(first) = self.candidates.first().cloned() else { return };
        let like = |r: &Arc<Route>| {
            r.deployment.provider_name() == first.deployment.provider_name()
                && r.deployment.upstream_model == first.deployment.upstream_model
        };
        self.candidates.retain(like);
    }

    /// Keeps only the deployment `id` (a stored response's home), when the plan holds it.
    pub fn pin(&mut self, id: &str) {
        if self.candidates.iter().any(|r| r.deployment.id == id) {
            self.candidates.retain(|r| r.deployment.id == id);
        }
    }

    /// The next attempt, if any is left: attempts are not used up and a deployment not excluded remains.
    pub fn next_attempt(&mut self) -> Option<Attempt> {
        let n = self.candidates.len();
        if self.attempts == 0 || n == 0 {
            return None;
        }
        for _ in 0..n {
            let index = self.cursor % n;
            let repeat = (self.cursor / n) as u32;
            self.cursor += 1;
            if self.excluded & (1 << index) != 0 {
                continue;
            }
            self.attempts -= 1;
            self.tried |= 1 << index;
            return Some(Attempt { route: self.candidates[index].clone(), repeat, index });
        }
        None
    }

    /// The attempt failed with a 429: do not ask that deployment again.
    pub fn exclude(&mut self, attempt: &Attempt) {
        self.excluded |= 1 << attempt.index;
    }
}

impl Route {
    /// Who this deployment is, for events.
    pub fn subject(&self) -> Subject<'_> {
        Subject { alias: &self.alias, provider: self.deployment.provider_name(), deployment: &self.deployment.id }
    }

    /// Records a call's outcome in its health, announcing a transition and logging a cooldown.
    pub fn record(&self, outcome: Outcome, sink: &dyn EventSink) {
        let recorded = self.health.record(outcome);
        if recorded.cooled_down {
            self.cooldowns.inc();
            tracing::warn!(
                alias = %self.alias,
                deployment = %self.deployment.id,
                "deployment failed too many times in a row: out of rotation while it cools down"
            );
        }
        if let Some(t) = recorded.transition {
            announce(self.subject(), &t, sink);
        }
    }

    /// Lets an unavailable deployment whose failures have aged out come back (see [`Health::refresh`]): no
    /// event, but a fleet learns of the recovery.
    pub fn refresh(&self, sink: &dyn EventSink) {
        if let Some(t) = self.health.refresh() {
            announce(self.subject(), &t, sink);
        }
    }

    /// Records a probe's result, announcing a transition.
    pub fn probed(&self, result: Result<(), String>, sink: &dyn EventSink) {
        if let Some(t) = self.health.probed(result) {
            announce(self.subject(), &t, sink);
        }
    }

    /// What `usage` costs on this deployment, part by part (prompt-cache tokens, the long-context tier and
    /// server tool uses at their own prices).
    pub fn cost(&self, usage: svc_budget::Usage) -> svc_budget::Cost {
        usage.bill(&self.prices)
    }

    /// The upstream model id for a request that asked for `name`: the configured one, with a `*` in it
    /// replaced (for a wildcard alias) by the part of `name` the alias's `*` matched, or by all of `name`
    /// when the upstream model is `*` alone (`anthropic/*` passes the requested name upstream).
    pub fn upstream_model(&self, name: &str) -> std::borrow::Cow<'_, str> {
        let configured = &self.deployment.upstream_model;
        if !configured.contains('*') {
            return std::borrow::Cow::Borrowed(configured);
        }
        if configured == "*" {
            return std::borrow::Cow::Owned(name.to_string());
        }
        let matched = matches(&self.alias, name).unwrap_or(name);
        std::borrow::Cow::Owned(configured.replacen('*', matched, 1))
    }

    /// This deployment answering for another alias (a fallback, or a name a wildcard alias matched): the same
    /// provider, prices and health, with `alias` in the client's answer and the spend record, and the upstream
    /// model that name means.
    pub fn serving_as(&self, alias: &str) -> Route {
        let mut deployment = self.deployment.clone();
        deployment.upstream_model = self.upstream_model(alias).into_owned();
        Route {
            alias: alias.to_string(),
            deployment,
            prices: self.prices,
            max_input_tokens: self.max_input_tokens,
            max_output_tokens: self.max_output_tokens,
            in_flight: AtomicUsize::new(0),
            health: self.health.clone(),
            cooldowns: self.cooldowns.clone(),
        }
    }
}

/// Whether `name` matches the wildcard `pattern` (one `*`, any text), and what the `*` matched. A pattern
/// without `*` matches only itself (with nothing matched).
pub fn matches<'n>(pattern: &str, name: &'n str) -> Option<&'n str> {
    let Some((prefix, suffix)) = pattern.split_once('*') else {
        return (pattern == name).then_some("");
    };
    if name.len() < prefix.len() + suffix.len() || !name.starts_with(prefix) || !name.ends_with(suffix) {
        return None;
    }
    Some(&name[prefix.len()..name.len() - suffix.len()])
}

/// Counts a request in flight on a route while alive. A stream's outcome is recorded in the route's health
/// when it ends (see [`InFlight::watch_stream`]).
pub struct InFlight {
    route: Arc<Route>,
    stream: Option<(Duration, Arc<dyn EventSink>)>,
    broken: bool,
}

impl InFlight {
    /// Starts counting.
    pub fn new(route: Arc<Route>) -> InFlight {
        route.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight { route, stream: None, broken: false }
    }

    /// The deployment.
    pub fn route(&self) -> &Arc<Route> {
        &self.route
    }

    /// A stream began after `first_chunk`: when this ends, it is recorded as answered, or as failed when
    /// [`InFlight::broken`] was called.
    pub fn watch_stream(&mut self, first_chunk: Duration, sink: Arc<dyn EventSink>) {
        self.stream = Some((first_chunk, sink));
    }

    /// The upstream broke the stream mid-way.
    pub fn broken(&mut self) {
        self.broken = true;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.route.in_flight.fetch_sub(1, Ordering::Relaxed);
        if let Some((first_chunk, sink)) = self.stream.take() {
            let outcome = if self.broken { Outcome::Failed } else { Outcome::Answered(first_chunk) };
            self.route.record(outcome, sink.as_ref());
        }
    }
}

impl std::fmt::Debug for InFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlight").field("deployment", &self.route.deployment.id).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::State;
    use svc_config::{load_str, ConfigSource};

    fn table(yaml: &str) -> ModelTable {
        let config = load_str(yaml, "t.yaml", ConfigSource::Builtin, &|_| None).unwrap_or_else(|e| panic!("{e}"));
        let client = svc_providers::UpstreamClient::new().unwrap_or_else(|e| panic!("{e}"));
        ModelTable::build(&config, &client, &crate::NoSeries).unwrap_or_else(|e| panic!("{e}"))
    }

    const YAML: &str = "\
model_list:
  - { model_name: a, params: { model: mock/a1 }, model_info: { id: a1 }, fallbacks: [b] }
  - { model_name: a, params: { model: mock/a2 }, model_info: { id: a2 } }
  - { model_name: b, params: { model: mock/b1 }, model_info: { id: b1 } }
gateway_settings: { num_retries: 4, allowed_fails: 1, cooldown_seconds: 60 }
";

    fn ids(t: &ModelTable, alias: &str) -> Vec<String> {
        let plan = t.plan(alias, &svc_events::LogSink).unwrap_or_else(|| panic!("no plan for {alias}"));
        plan.candidates().iter().map(|r| r.deployment.id.clone()).collect()
    }

    #[test]
    fn wildcard_aliases_pass_the_requested_name_and_exact_ones_win() {
        let t = table(
            "model_list:\n  - { model_name: claude-opus-5-5, params: { model: mock/pinned }, model_info: { id: exact } }\n  \
             - { model_name: 'claude-*', params: { model: 'mock/*' }, model_info: { id: any-claude } }\n  \
             - { model_name: 'gpt-*', params: { model: 'mock/openai-gpt-*' }, model_info: { id: any-gpt } }\n",
        );
        assert_eq!(ids(&t, "claude-opus-5-5"), ["exact"]);
        assert_eq!(ids(&t, "claude-haiku-5-5"), ["any-claude"]);
        assert!(!t.contains("llama-3") && t.contains("gpt-5-codex"));
        let plan = t.plan("gpt-5-codex", &svc_events::LogSink).unwrap_or_else(|| panic!("no plan"));
        let route = plan.candidates()[0].clone();
        assert_eq!(route.upstream_model("gpt-5-codex"), "openai-gpt-5-codex");
        let served = route.serving_as("gpt-5-codex");
        assert_eq!(
            (served.alias.as_str(), served.deployment.upstream_model.as_str()),
            ("gpt-5-codex", "openai-gpt-5-codex")
        );
        let any = t.plan("claude-x", &svc_events::LogSink).map(|p| p.candidates()[0].clone());
        assert_eq!(any.map(|r| r.upstream_model("claude-x").into_owned()).as_deref(), Some("claude-x"));
        assert_eq!(matches("claude-*", "claude-"), Some(""));
        assert_eq!(matches("a*z", "az"), Some(""));
        assert_eq!(matches("a*z", "a"), None);
    }

    #[test]
    fn plans_spread_load_then_fall_back() {
        let t = table(YAML);
        assert_eq!(ids(&t, "a"), ["a1", "a2", "b1"]);
        assert_eq!(ids(&t, "a"), ["a2", "a1", "b1"], "round robin when idle");
        let busy = t.all().next().cloned().unwrap_or_else(|| panic!("no route"));
        let _held = InFlight::new(busy);
        for _ in 0..3 {
            assert_eq!(ids(&t, "a")[0], "a2", "least in flight");
        }
        assert_eq!(ids(&t, "b"), ["b1"]);
        assert!(t.plan("c", &svc_events::LogSink).is_none());
    }

    #[test]
    fn cooled_and_unavailable_deployments_go_last() {
        let t = table(YAML);
        let a1 = t.all().next().cloned().unwrap_or_else(|| panic!("no route"));
        a1.record(Outcome::Failed, &svc_events::LogSink);
        assert!(a1.health.cooling_down());
        for _ in 0..2 {
            assert_eq!(ids(&t, "a"), ["a2", "b1", "a1"]);
        }
        let b1 = t.all().nth(2).cloned().unwrap_or_else(|| panic!("no route"));
        b1.probed(Err("down".into()), &svc_events::LogSink);
        assert_eq!(b1.health.state(), State::Unavailable);
        assert_eq!(ids(&t, "a"), ["a2", "a1", "b1"]);
    }

    #[test]
    fn attempts_wrap_around_and_skip_rate_limited_deployments() {
        let t = table(YAML);
        let mut plan = t.plan("b", &svc_events::LogSink).unwrap_or_else(|| panic!("no plan"));
        let repeats: Vec<u32> = std::iter::from_fn(|| plan.next_attempt().map(|a| a.repeat)).collect();
        assert_eq!(repeats, vec![0, 1, 2, 3, 4], "1 + num_retries attempts on the only deployment");
        let mut plan = t.plan("a", &svc_events::LogSink).unwrap_or_else(|| panic!("no plan"));
        let first = plan.next_attempt().unwrap_or_else(|| panic!("no attempt"));
        plan.exclude(&first);
        let rest: Vec<String> =
            std::iter::from_fn(|| plan.next_attempt().map(|a| a.route.deployment.id.clone())).collect();
        assert_eq!(first.route.deployment.id, "a1");
        assert_eq!(rest, ["a2", "b1", "a2", "b1"], "the rate-limited deployment is not asked again");
    }

    #[test]
    fn failures_are_classified() {
        let status = |status| ProviderError::Status {
            deployment: "d".into(),
            status,
            message: String::new(),
            kind: None,
            param: None,
            retry_after: None,
        };
        let cases = [
            (ProviderError::Unreachable { deployment: "d".into(), detail: String::new() }, Failure::Fault),
            (ProviderError::Timeout { deployment: "d".into(), after: Duration::from_secs(1) }, Failure::Fault),
            (ProviderError::BadResponse { deployment: "d".into(), detail: String::new() }, Failure::Fault),
            (status(500), Failure::Fault),
            (status(503), Failure::Fault),
            (status(529), Failure::Fault),
            (status(408), Failure::Fault),
            (status(429), Failure::RateLimited),
            (status(400), Failure::Final),
            (status(401), Failure::Final),
            (status(404), Failure::Final),
            (ProviderError::Unsupported { message: String::new(), param: None }, Failure::Final),
        ];
        for (e, expected) in cases {
            assert_eq!(classify(&e), expected, "{e}");
        }
        for repeat in 1..10 {
            let b = backoff(repeat);
            assert!(b <= Duration::from_secs(1) && b >= Duration::from_millis(50), "{b:?}");
        }
    }
}
