//! The Prometheus series (crate `prometheus`: its registry, vectors and text encoder; nothing here writes the
//! exposition format). Names follow the OpenTelemetry GenAI semantic conventions where one exists, in their
//! Prometheus spelling (`gen_ai.server.request.duration` → `gen_ai_server_request_duration_seconds`, label
//! `gen_ai.request.model` → `gen_ai_request_model`); the rest are `svc_*`.
//!
//! Label cardinality is bounded by the configuration: aliases, deployments, teams, destinations and event kinds
//! are the config's; status classes, outcomes and refusal reasons are fixed sets; a key's alias appears only
//! with `server.metrics_key_labels: true` (else the label is empty); client names and session ids never do
//! (they are in the request log). The request path updates counters and histograms through each thread's
//! cache of resolved series (atomic adds, no lock shared between requests); gauges of state (budgets, health,
//! outbox, fleet) are read when scraped (`gauges.rs`, set by `handlers::metrics`).

use super::gauges::Gauges;
use super::register::Registrar;
use super::series::{Cached, Called, Labels, Series};
use super::timings::Timings;
use super::RequestLine;
use prometheus::{CounterVec, IntCounter, IntCounterVec, Registry};
use svc_events::{DeliveryOutcome, HookOutcome};
use svc_front::Api;

/// Every series the gateway exports, registered in its own registry (one per gateway, not process-global).
#[derive(Debug)]
pub struct Metrics {
    pub(crate) registry: Registry,
    names: Vec<String>,
    /// This gateway's among the metrics of the process (tests run several), for [`Cached`].
    id: u64,
    key_labels: bool,
    requests: IntCounterVec,
    /// The histograms of each request's times and tokens.
    timings: Timings,
    retries: IntCounterVec,
    fallbacks: IntCounterVec,
    cooldowns: IntCounterVec,
    spend: CounterVec,
    refusals: IntCounterVec,
    auth_failures: IntCounterVec,
    flagged: IntCounterVec,
    events: IntCounterVec,
    deliveries: IntCounterVec,
    hooks: IntCounterVec,
    /// The gauges of state, set when `/metrics` is read.
    pub(crate) gauges: Gauges,
}

impl Metrics {
    /// Every series, registered; `key_labels` fills the `key_alias` label (`server.metrics_key_labels`).
    pub fn new(key_labels: bool) -> Result<Metrics, prometheus::Error> {
        let mut r = Registrar::default();
        static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Ok(Metrics {
            id: IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            key_labels,
            requests: r.counters(
                "svc_requests_total",
                "Model requests by client API, alias, serving deployment, team and status class.",
                &["api", "alias", "deployment", "team", "status_class"],
            )?,
            timings: Timings::new(&mut r)?,
            retries: r.counters(
                "svc_upstream_retries_total",
                "Upstream attempts after a request's first.",
                &["alias"],
            )?,
            fallbacks: r.counters(
                "svc_fallbacks_total",
                "Requests answered by a fallback alias's deployment.",
                &["alias", "deployment"],
            )?,
            cooldowns: r.counters(
                "svc_deployment_cooldowns_total",
                "Cooldowns started (a deployment out of rotation after consecutive failures).",
                &["deployment"],
            )?,
            spend: r.float_counters(
                "svc_spend_total",
                "Spend charged, in the budget unit, by team, key alias and alias.",
                &["team", "key_alias", "alias"],
            )?,
            refusals: r.counters(
                "svc_refusals_total",
                "Requests refused before any upstream call: budget, rate_limit, overload.",
                &["reason", "team"],
            )?,
            auth_failures: r.counters(
                "svc_auth_failures_total",
                "Failed authentications: answered 401 (rejected), or 429 past the limit per client address (limited).",
                &["outcome"],
            )?,
            flagged: r.counters(
                "svc_spend_flagged_total",
                "Calls charged on a flagged basis: over_reservation (billed above what was reserved), reservation (usage that cannot be right, or a stream cut at its cap).",
                &["deployment", "basis"],
            )?,
            events: r.counters("svc_events_emitted_total", "Events stored for delivery, by kind.", &["kind"])?,
            deliveries: r.counters(
                "svc_event_deliveries_total",
                "Delivery attempts by destination and outcome (delivered, retry, dead).",
                &["destination", "outcome"],
            )?,
            hooks: r.counters(
                "svc_hook_runs_total",
                "Shell hook runs by outcome (succeeded, failed, timed_out, not_started).",
                &["outcome"],
            )?,
            gauges: Gauges::new(&mut r)?,
            names: r.names,
            registry: r.registry,
        })
    }

    /// The name of every family, whether it has a series yet or not.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Counts one request by its line. The series of a label set are looked up in the registry once per
    /// thread ([`Cached`]); after that, counting is atomic adds on them, with no lock.
    pub fn request(&self, line: &RequestLine<'_>) {
        let team = line.principal.and_then(|p| p.key()).map(|k| k.team_id.as_str()).unwrap_or("");
        if let Some(reason) = line.refusal {
            self.requests
                .with_label_values(&[line.api.as_str(), line.alias_label, "", team, status_class(line.status)])
                .inc();
            self.refusals.with_label_values(&[reason.as_str(), team]).inc();
            return;
        }
        let key = match line.principal.and_then(|p| p.key()) {
            Some(k) if self.key_labels => k.alias.as_deref().unwrap_or(k.hint.as_str()),
            _ => "",
        };
        let labels = Labels {
            api: line.api,
            status: status_class(line.status),
            alias: line.alias_label,
            deployment: line.deployment,
            provider: line.provider,
            team,
            key,
        };
        Cached::with(self, &labels, |s| s.count(line));
    }

    /// Resolves the series of one label set in the registry (the first time a thread counts it).
    pub(super) fn series(&self, l: &Labels<'_>) -> Series {
        let genai = [operation(l.api), l.alias, l.provider];
        let called = !l.deployment.is_empty();
        Series {
            requests: self.requests.with_label_values(&[l.api.as_str(), l.alias, l.deployment, l.team, l.status]),
            called: called.then(|| Called {
                duration: self.timings.duration.with_label_values(&genai),
                ttft: self.timings.ttft.with_label_values(&genai),
                tpot: self.timings.tpot.with_label_values(&genai),
                input: self.timings.tokens.with_label_values(&[genai[0], genai[1], genai[2], "input"]),
                output: self.timings.tokens.with_label_values(&[genai[0], genai[1], genai[2], "output"]),
                overhead: self.timings.overhead.with_label_values(&[l.api.as_str()]),
                retries: self.retries.with_label_values(&[l.alias]),
                fallbacks: self.fallbacks.with_label_values(&[l.alias, l.deployment]),
                spend: self.spend.with_label_values(&[l.team, l.key, l.alias]),
            }),
        }
    }

    /// Counts a call of `deployment` charged on a flagged `basis` (`over_reservation`, `reservation`): rare, so
    /// the series is looked up when it happens.
    pub fn flagged(&self, deployment: &str, basis: &str) {
        self.flagged.with_label_values(&[deployment, basis]).inc();
    }

    /// The counter of failed authentications with `outcome` (`rejected`, `limited`), resolved once by its holder.
    pub fn auth_failures(&self, outcome: &str) -> IntCounter {
        self.auth_failures.with_label_values(&[outcome])
    }

    /// This gateway's id among the metrics of the process (the per-thread cache's key).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Whether per-key series are exported.
    pub fn key_labels(&self) -> bool {
        self.key_labels
    }
}

impl svc_events::Observer for Metrics {
    fn emitted(&self, kind: &str) {
        self.events.with_label_values(&[kind]).inc();
    }

    fn delivery(&self, destination: &str, outcome: DeliveryOutcome) {
        self.deliveries.with_label_values(&[destination, outcome.as_str()]).inc();
    }

    fn hook_ran(&self, outcome: HookOutcome) {
        self.hooks.with_label_values(&[outcome.as_str()]).inc();
    }
}

/// OpenTelemetry's `gen_ai.operation.name` of a client API.
fn operation(api: Api) -> &'static str {
    match api {
        Api::Embeddings => "embeddings",
        Api::Chat | Api::Messages | Api::Responses | Api::Gemini => "chat",
    }
}

/// `2xx`, `4xx`, `5xx` (and `1xx`, `3xx`).
fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

impl svc_routing::DeploymentSeries for Metrics {
    /// The counter of `deployment`'s cooldowns (held by its route: counting takes no lookup).
    fn cooldowns(&self, deployment: &str) -> IntCounter {
        self.cooldowns.with_label_values(&[deployment])
    }

    /// Makes the flagged-spend series of `deployment` exist at 0, so an alert on them sees a rate from the start.
    fn flag_series(&self, deployment: &str) {
        for basis in ["over_reservation", "reservation"] {
            self.flagged.with_label_values(&[deployment, basis]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Metrics;
    use std::collections::HashSet;

    /// The series names (`svc_*`, `gen_ai_*`) a text mentions.
    fn mentioned(text: &str) -> HashSet<String> {
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| (w.starts_with("svc_") && w.len() > 4) || (w.starts_with("gen_ai_") && w.len() > 7))
            .map(str::to_string)
            .collect()
    }

    fn read(path: &str) -> anyhow::Result<String> {
        Ok(std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(path))?)
    }

    /// Every name in the example dashboard, the alert rules and the README's metrics table is a series the
    /// gateway exports (or one of its labels), and the README names every family: a renamed series would leave
    /// a panel empty or an alert silent without any error.
    #[test]
    fn examples_and_readme_name_only_exported_series() -> anyhow::Result<()> {
        let m = Metrics::new(false)?;
        let families: HashSet<String> = m.names().iter().cloned().collect();
        assert_eq!(families.len(), m.names().len(), "a family registered twice");
        let exported: HashSet<String> = families
            .iter()
            .flat_map(|n| [n.clone(), format!("{n}_bucket"), format!("{n}_sum"), format!("{n}_count")])
            .chain(
                ["gen_ai_request_model", "gen_ai_token_type", "gen_ai_operation_name", "gen_ai_provider_name"]
                    .map(String::from),
            )
            .collect();
        let dashboard = read("examples/grafana/svc-dashboard.json")?;
        let _: serde_json::Value = serde_json::from_str(&dashboard)?;
        // The README's Observability section (elsewhere `svc_…` names other things, such as the session cookie).
        let readme = read("README.md")?;
        let start = readme.find("## Observability").ok_or_else(|| anyhow::anyhow!("no Observability section"))?;
        let section = &readme[start..];
        let readme = section[2..].find("\n## ").map_or(section, |end| &section[..end + 2]).to_string();
        for (file, text) in [
            ("dashboard", &dashboard),
            ("alert rules", &read("examples/prometheus/svc-alerts.yml")?),
            ("README", &readme),
        ] {
            for name in mentioned(text) {
                assert!(exported.contains(&name), "the {file} names `{name}`, which is not exported");
            }
        }
        let documented = mentioned(&readme);
        for name in &families {
            assert!(documented.contains(name), "the README does not document `{name}`");
        }
        Ok(())
    }
}
