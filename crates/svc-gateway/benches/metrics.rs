//! The cost of counting one request in the Prometheus series (`Metrics::request`), the request path's share of
//! `GET /metrics`: per call on one thread, and per call with two threads counting the same series at once (the
//! contended case; this machine has two cores). Run: `cargo bench -p svc-gateway --bench metrics`.

use std::sync::Arc;
use std::time::{Duration, Instant};
use svc_budget::{Money, Usage};
use svc_front::{Api, Caller};
use svc_gateway::observe::{Attempts, Metrics, RequestLine};
use svc_keys::Principal;
use svc_keys::VirtualKey;

fn key() -> Arc<VirtualKey> {
    Arc::new(VirtualKey {
        id: "5f0c8a7e-key".into(),
        hint: "sk-svc-…abcd".into(),
        alias: Some("planner-bot".into()),
        team_id: "executor".into(),
        agent_role: Some("planner".into()),
        models: Vec::new(),
        events: Vec::new(),
        max_budget: None,
        budget_duration: None,
        rpm_limit: None,
        tpm_limit: None,
        expires: None,
        revoked: false,
        anchor: chrono::Utc::now(),
    })
}

/// Counts `n` streamed requests; returns the time per request.
fn run(metrics: &Metrics, principal: &Principal, caller: &Caller, n: u32) -> Duration {
    let started = Instant::now();
    for i in 0..n {
        let line = RequestLine {
            request_id: "0b6f2f0e-4a11-4c47-9d7a-1d2b3c4d5e6f",
            api: Api::Chat,
            principal: Some(principal),
            caller: Some(caller),
            alias: "openai/gpt-4.1-mini",
            alias_label: "openai/gpt-4.1-mini",
            deployment: "openai/gpt-4.1-mini",
            provider: "openai",
            status: 200,
            usage: Usage { prompt_tokens: 120, completion_tokens: 40 + u64::from(i % 7), ..Usage::default() },
            cost: Money::from_nanos(112_000),
            latency: Duration::from_millis(820),
            first_byte: Some(Duration::from_millis(240)),
            attempts: Attempts { count: 1, fallback: false, waited: Duration::from_millis(815) },
            refusal: None,
        };
        metrics.request(std::hint::black_box(&line));
    }
    started.elapsed() / n
}

fn main() {
    let n = 1_000_000;
    for key_labels in [false, true] {
        let metrics = Arc::new(Metrics::new(key_labels).unwrap_or_else(|e| panic!("{e}")));
        let principal = Principal::Key(key());
        let caller = Caller { client: Some("claude-cli".into()), session: Some("s-1".into()) };
        run(&metrics, &principal, &caller, 10_000);
        let mut one = Vec::new();
        let mut two = Vec::new();
        for _ in 0..3 {
            one.push(run(&metrics, &principal, &caller, n));
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let (m, p, c) = (metrics.clone(), principal.clone(), caller.clone());
                    std::thread::spawn(move || run(&m, &p, &c, n))
                })
                .collect();
            two.extend(threads.into_iter().map(|t| t.join().unwrap_or_default()));
        }
        one.sort();
        two.sort();
        println!(
            "metrics_key_labels={key_labels}: one thread {:?} … {:?} per request (median {:?}); two threads at once {:?} … {:?} (median {:?})",
            one[0], one[2], one[1], two[0], two[5], two[3]
        );
    }
}
