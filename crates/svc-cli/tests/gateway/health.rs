//! Model health (issue 5): a deployment getting worse on live traffic emits exactly one `model.degraded` then
//! one `model.unavailable`, readiness follows it to 503 and back to 200 on recovery, which emits nothing; a
//! failing probe makes a deployment unavailable on its own. Events are read from a signed webhook.

use crate::harness::*;
use serde_json::{json, Value};
use std::time::Duration;
use svc_testkit::upstream::Upstream;
use svc_testkit::webhook::WebhookReceiver;

/// One alias `flaky` on `base`, health thresholds small enough to reach in a test, events `model.*` to `hook`,
/// node `node-1` of fleet `ci-fleet`.
fn config(base: &str, hook: &WebhookReceiver, probe_seconds: u64) -> String {
    flaky_config(base, hook, probe_seconds) + "fleet:\n  name: ci-fleet\n  node: node-1\n"
}

/// [`config`] without its fleet section (the fleet tests add their own).
pub(crate) fn flaky_config(base: &str, hook: &WebhookReceiver, probe_seconds: u64) -> String {
    format!(
        "server:\n  host: 127.0.0.1\n  port: 0
model_list:
  - model_name: flaky
    model_info: {{ id: flaky-1 }}
    params: {{ model: openai/up-flaky, api_base: '{base}', timeout_seconds: 5 }}
gateway_settings:
  num_retries: 0
  cooldown_seconds: 0
  readiness_cache_seconds: 0
  health_window_seconds: 60
  health_min_requests: 4
  degraded_error_rate: 0.25
  unavailable_error_rate: 0.5
  health_check_interval_seconds: {probe_seconds}
  teams:
    - team_id: agents
      models: [flaky]
notifications:
  webhooks:
    - url: {}
      events: ['model.*']
      secret: s3cret
",
        hook.url()
    )
}

async fn calls(g: &Gateway, n: usize, status: u16) {
    for i in 0..n {
        let (s, _, b) = post_chat(g, MASTER, &chat("flaky")).await;
        assert_eq!(s, status, "call {i}: {b}");
    }
}

async fn readiness(g: &Gateway) -> (u16, Value) {
    let r = client().get(g.path("/health/readiness")).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

async fn state(g: &Gateway) -> Value {
    let r = client().get(g.path("/health/models")).bearer_auth(MASTER).send().await.unwrap();
    let v: Value = r.json().await.unwrap();
    v["data"][0].clone()
}

/// Waits up to `secs` for readiness to answer `status`.
async fn readiness_becomes(g: &Gateway, status: u16, secs: u64) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let (s, report) = readiness(g).await;
        if s == status {
            return report;
        }
        assert!(tokio::time::Instant::now() < deadline, "readiness stayed {s}: {report}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_failing_deployment_degrades_then_becomes_unavailable_and_recovers_without_an_event() {
    let up = Upstream::start().await.unwrap();
    let hook = WebhookReceiver::start().await;
    // The probe runs every second and keeps answering: live traffic alone moves the state.
    let g = Gateway::start(&config(&up.base_url, &hook, 1)).await;
    calls(&g, 6, 200).await;
    assert_eq!(readiness(&g).await.0, 200);
    assert_eq!(state(&g).await["state"], "healthy");
    // 2 of 8 failed: degraded, still ready.
    up.set(|b| b.fail_next.extend([(500, "boom".to_string()), (500, "boom".to_string())]));
    calls(&g, 2, 500).await;
    let s = state(&g).await;
    assert_eq!((s["state"].as_str(), s["error_rate"].as_f64()), (Some("degraded"), Some(0.25)), "{s}");
    assert_eq!(readiness(&g).await.0, 200, "degraded is still ready");
    // 6 of 12 failed: unavailable, readiness 503 naming it; more failures change nothing.
    up.set(|b| b.fail_next.extend(std::iter::repeat_n((503, "down".to_string()), 8)));
    calls(&g, 8, 503).await;
    assert_eq!(state(&g).await["state"], "unavailable");
    let (status, report) = readiness(&g).await;
    assert_eq!(status, 503, "{report}");
    let p = &report["providers"][0];
    assert_eq!(
        (p["deployment"].as_str(), p["ready"].as_bool(), p["state"].as_str()),
        (Some("flaky-1"), Some(false), Some("unavailable"))
    );
    assert!(p["error"].as_str().unwrap().contains("calls failed"), "{p}");
    // It answers again: the failures are diluted (8 of 42: under 0.25), it is healthy and ready, silently.
    calls(&g, 28, 200).await;
    assert_eq!(state(&g).await["state"], "healthy");
    readiness_becomes(&g, 200, 5).await;
    let got = hook.wait_for(2, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let events: Vec<Value> = hook.received().iter().map(|r| r.json()).collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(kinds, vec!["model.degraded", "model.unavailable"], "{events:#?}");
    assert_eq!(got.len(), 2);
    let (d, u) = (&events[0]["data"], &events[1]["data"]);
    assert_eq!(
        (d["alias"].as_str(), d["model"].as_str(), d["provider"].as_str(), d["deployment"].as_str()),
        (Some("flaky"), Some("flaky"), Some("openai"), Some("flaky-1"))
    );
    assert_eq!((d["previous_state"].as_str(), d["state"].as_str()), (Some("healthy"), Some("degraded")));
    assert_eq!(d["error_rate"], json!(0.25));
    assert!(d["p95_latency_ms"].as_u64().is_some(), "{d}");
    assert_eq!(d["reason"], "2 of 8 calls failed in the last 60 s (error rate 0.250)");
    assert_eq!((u["previous_state"].as_str(), u["state"].as_str()), (Some("degraded"), Some("unavailable")));
    assert_eq!(
        (u["error_rate"].as_f64(), u["reason"].as_str()),
        (Some(0.5), Some("6 of 12 calls failed in the last 60 s (error rate 0.500)"))
    );
    assert_eq!(events[0]["agent"], "gateway");
    assert_eq!(events[0]["node"], "node-1");
    // Recovery is visible, and logged.
    assert!(g.log.lock().unwrap().iter().any(|l| l.contains("model recovered")));
}

#[tokio::test]
async fn a_failing_probe_makes_a_deployment_unavailable_until_it_answers() {
    let up = Upstream::start().await.unwrap();
    up.set(|b| b.models_status = 503);
    let hook = WebhookReceiver::start().await;
    let g = Gateway::start(&config(&up.base_url, &hook, 1)).await;
    let report = readiness_becomes(&g, 503, 10).await;
    let p = &report["providers"][0];
    assert_eq!(p["state"], "unavailable");
    assert!(p["error"].as_str().unwrap().starts_with("probe failed: upstream `flaky-1` returned 503"), "{p}");
    let got = hook.wait_for(1, Duration::from_secs(10)).await;
    let e = got[0].json();
    assert_eq!(e["event"], "model.unavailable");
    assert_eq!((e["data"]["previous_state"].as_str(), e["data"]["error_rate"].clone()), (Some("healthy"), Value::Null));
    // /health/models shows the probe, for the master key only.
    let s = state(&g).await;
    assert_eq!((s["last_probe"]["ok"].as_bool(), s["model"].as_str()), (Some(false), Some("flaky")), "{s}");
    let key = g.key(json!({"team_id": "agents"})).await;
    let r = client().get(g.path("/v1/health/models")).bearer_auth(&key).send().await.unwrap();
    assert_eq!(r.status(), 403);
    // The probe answers again: healthy and ready within a probe interval, with no further event.
    up.set(|b| b.models_status = 200);
    readiness_becomes(&g, 200, 10).await;
    assert_eq!(state(&g).await["state"], "healthy");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(hook.received().len(), 1, "recovery emits no event");
}
