//! Routing reliability (issue 5): retries across deployments, 529 retried and 400 not, streams retried only
//! before their first chunk, cooldowns out of and back into rotation, fallbacks answering under the alias
//! asked for. Round robin starts at the first deployment in file order, so which deployment a request tries
//! first is known; the background probe is off unless a test needs it.

use crate::harness::*;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::time::Duration;
use svc_testkit::upstream::Upstream;

/// A gateway config: `models` (model_list entries) and `settings` (gateway_settings lines), with a team
/// `agents` that may use `team_models` only.
fn config(models: &str, settings: &str, team_models: &str) -> String {
    format!(
        "server:\n  host: 127.0.0.1\n  port: 0\nmodel_list:\n{models}gateway_settings:\n  health_check_interval_seconds: 0\n{settings}  teams:\n    - team_id: agents\n      budget_limit: 10\n      models: [{team_models}]\n"
    )
}

/// A `model_list` entry for `alias` with deployment id `id` at `base`.
fn entry(alias: &str, id: &str, base: &str, extra: &str) -> String {
    format!(
        "  - model_name: {alias}\n    model_info: {{ id: {id} }}\n    params: {{ model: openai/up-{id}, api_base: '{base}', timeout_seconds: 5, input_cost_per_token: 0.000001, output_cost_per_token: 0.000002 }}\n{extra}"
    )
}

fn dead_base() -> String {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    format!("http://{dead}/v1")
}

fn calls(up: &Upstream) -> usize {
    up.shared.calls.load(Ordering::SeqCst)
}

/// `GET /health/models` as the master key: deployment id → its entry.
async fn health(g: &Gateway) -> std::collections::HashMap<String, Value> {
    let r = client().get(g.path("/health/models")).bearer_auth(MASTER).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    v["data"].as_array().unwrap().iter().map(|d| (d["deployment"].as_str().unwrap().to_string(), d.clone())).collect()
}

/// The `data:` payloads of an SSE body.
fn sse(text: &str) -> Vec<String> {
    text.split("\n\n").filter_map(|e| e.strip_prefix("data: ")).map(String::from).collect()
}

async fn post_stream(g: &Gateway, model: &str) -> (u16, String, Vec<String>) {
    let mut body = chat(model);
    body["stream"] = json!(true);
    let r = client().post(g.path("/v1/chat/completions")).bearer_auth(MASTER).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    let id = r.headers().get("x-svc-model-id").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    (status, id, sse(&r.text().await.unwrap()))
}

#[tokio::test]
async fn the_first_deployment_refusing_connections_leaves_the_second_to_serve() {
    let up = Upstream::start().await.unwrap();
    let models = entry("pool", "pool-a", &dead_base(), "") + &entry("pool", "pool-b", &up.base_url, "");
    let g = Gateway::start(&config(&models, "", "pool")).await;
    let key = g.key(json!({"team_id": "agents"})).await;
    for i in 0..4 {
        let (s, h, b) = post_chat(&g, &key, &chat("pool")).await;
        assert_eq!(s, 200, "request {i}: {b}");
        assert_eq!(h["x-svc-model-id"], "pool-b", "request {i}");
        assert_eq!(b["model"], "pool");
    }
    assert_eq!(calls(&up), 4);
    // Requests 0 and 2 tried pool-a first (round robin), failed to connect, and were retried on pool-b.
    let h = health(&g).await;
    assert_eq!(h["pool-a"]["errors"], 2, "{}", h["pool-a"]);
    assert_eq!(h["pool-a"]["consecutive_failures"], 2);
    assert_eq!((h["pool-b"]["calls"].as_u64(), h["pool-b"]["errors"].as_u64()), (Some(4), Some(0)));
    // Spend names the deployment that served.
    let r = client().get(g.path("/spend/logs")).bearer_auth(MASTER).send().await.unwrap();
    let logs: Value = r.json().await.unwrap();
    let served: Vec<&str> =
        logs["data"].as_array().unwrap().iter().map(|r| r["deployment"].as_str().unwrap()).collect();
    assert_eq!(served, vec!["pool-b"; 4]);
    // /health/models is for the master key only.
    let r = client().get(g.path("/health/models")).bearer_auth(&key).send().await.unwrap();
    assert_eq!(r.status(), 403);
}

#[tokio::test]
async fn a_529_is_retried_on_another_deployment_and_a_400_is_not() {
    let (u1, u2) = (Upstream::start().await.unwrap(), Upstream::start().await.unwrap());
    let models = entry("pool", "pool-a", &u1.base_url, "") + &entry("pool", "pool-b", &u2.base_url, "");
    let g = Gateway::start(&config(&models, "", "pool")).await;
    u1.set(|b| b.fail_next.push_back((529, "Overloaded".into())));
    let (s, h, b) = post_chat(&g, MASTER, &chat("pool")).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(h["x-svc-model-id"], "pool-b");
    assert_eq!((calls(&u1), calls(&u2)), (1, 1), "one 529 from pool-a, then pool-b served");
    assert_eq!(u2.requests()[0].body["model"], "up-pool-b");
    // A request error is the client's: answered at once, not retried, not held against the deployment.
    for u in [&u1, &u2] {
        u.set(|b| b.fail_next.push_back((400, "bad temperature".into())));
    }
    let (s, _, b) = post_chat(&g, MASTER, &chat("pool")).await;
    assert_eq!((s, b["error"]["message"].as_str()), (400, Some("bad temperature")));
    assert_eq!(calls(&u1) + calls(&u2), 3, "exactly one upstream call for the 400");
}

#[tokio::test]
async fn a_stream_is_retried_before_its_first_chunk_and_never_after() {
    let (u1, u2) = (Upstream::start().await.unwrap(), Upstream::start().await.unwrap());
    let models = entry("pool", "pool-a", &u1.base_url, "") + &entry("pool", "pool-b", &u2.base_url, "");
    let g = Gateway::start(&config(&models, "", "pool")).await;
    // Both upstreams break their streams after two chunks: the client gets those, then the error event.
    // (The delay makes the upstream flush each chunk before the cut.)
    for u in [&u1, &u2] {
        u.set(|b| {
            b.cut_stream_after = Some(2);
            b.chunk_delay = Duration::from_millis(100);
        });
    }
    let (s, id, evs) = post_stream(&g, "pool").await;
    assert_eq!((s, id.as_str()), (200, "pool-a"));
    let last: Value = serde_json::from_str(evs.last().unwrap()).unwrap();
    assert_eq!(last["error"]["type"], "upstream_unreachable", "{evs:?}");
    let first: Value = serde_json::from_str(&evs[0]).unwrap();
    assert_eq!(
        (first["model"].as_str(), first["choices"][0]["delta"]["role"].as_str()),
        (Some("pool"), Some("assistant"))
    );
    assert!(!evs.contains(&"[DONE]".to_string()));
    assert_eq!((calls(&u1), calls(&u2)), (1, 0), "a stream that reached the client is not retried");
    // A stream that breaks before its first chunk reached the client is retried on the other deployment.
    u1.set(|b| b.cut_stream_after = Some(0));
    u2.set(|b| {
        b.cut_stream_after = None;
        b.chunk_delay = Duration::ZERO;
    });
    let (s, id, evs) = post_stream(&g, "pool").await; // round robin: pool-b first, served
    assert_eq!((s, id.as_str(), evs.last().map(String::as_str)), (200, "pool-b", Some("[DONE]")));
    let (s, id, evs) = post_stream(&g, "pool").await; // pool-a first: broken before its first chunk
    assert_eq!((s, id.as_str(), evs.last().map(String::as_str)), (200, "pool-b", Some("[DONE]")));
    let text: String = evs[..evs.len() - 1]
        .iter()
        .filter_map(|e| {
            serde_json::from_str::<Value>(e).unwrap()["choices"][0]["delta"]["content"].as_str().map(String::from)
        })
        .collect();
    assert_eq!(text, "Hello from the test upstream.", "the client saw one whole stream");
    assert_eq!((calls(&u1), calls(&u2)), (2, 2));
}

#[tokio::test]
async fn cooldown_takes_a_failing_deployment_out_of_rotation_and_brings_it_back() {
    let (u1, u2) = (Upstream::start().await.unwrap(), Upstream::start().await.unwrap());
    let models = entry("pool", "pool-a", &u1.base_url, "") + &entry("pool", "pool-b", &u2.base_url, "");
    // Health thresholds out of the way: this test is about the cooldown alone.
    let settings = "  allowed_fails: 2\n  cooldown_seconds: 3\n  health_min_requests: 1000\n";
    let g = Gateway::start(&config(&models, settings, "pool")).await;
    u1.set(|b| b.fail_next.extend(std::iter::repeat_n((500, "boom".to_string()), 100)));
    // Round robin sends requests 0 and 2 to pool-a first: two failures in a row, then it cools down.
    for _ in 0..4 {
        let (s, h, b) = post_chat(&g, MASTER, &chat("pool")).await;
        assert_eq!((s, h["x-svc-model-id"].to_str().unwrap()), (200, "pool-b"), "{b}");
    }
    assert_eq!(calls(&u1), 2);
    let h = health(&g).await;
    assert_eq!(h["pool-a"]["cooling_down"], true, "{}", h["pool-a"]);
    // Out of rotation: nothing reaches it while it cools down.
    for _ in 0..6 {
        let (s, h, _) = post_chat(&g, MASTER, &chat("pool")).await;
        assert_eq!((s, h["x-svc-model-id"].to_str().unwrap()), (200, "pool-b"));
    }
    assert_eq!(calls(&u1), 2, "a cooled-down deployment gets no traffic while another is available");
    // It recovers upstream, the cooldown ends, and it is back in rotation.
    u1.set(|b| b.fail_next.clear());
    let mut back = false;
    for _ in 0..80 {
        if health(&g).await["pool-a"]["cooling_down"] == false {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(back, "the cooldown ended within 8 s");
    let mut served = Vec::new();
    for _ in 0..4 {
        let (s, h, _) = post_chat(&g, MASTER, &chat("pool")).await;
        assert_eq!(s, 200);
        served.push(h["x-svc-model-id"].to_str().unwrap().to_string());
    }
    assert!(served.iter().any(|d| d == "pool-a"), "{served:?}");
    assert_eq!(calls(&u1), 2 + served.iter().filter(|d| *d == "pool-a").count());
}

#[tokio::test]
async fn fallbacks_serve_under_the_alias_asked_for() {
    let backup = Upstream::start().await.unwrap();
    let models = entry("primary", "primary-1", &dead_base(), "    fallbacks: [backup]\n")
        + &entry("backup", "backup-1", &backup.base_url, "");
    let g = Gateway::start(&config(&models, "", "primary")).await;
    // The team may use `primary` only; the operator's fallback still serves it.
    let key = g.key(json!({"team_id": "agents"})).await;
    let (s, h, b) = post_chat(&g, &key, &chat("primary")).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["model"], "primary", "the client sees the alias it asked for");
    assert_eq!(h["x-svc-model-id"], "backup-1");
    assert_eq!(backup.requests()[0].body["model"], "up-backup-1");
    let mut body = chat("primary");
    body["stream"] = json!(true);
    let r = client().post(g.path("/v1/chat/completions")).bearer_auth(&key).json(&body).send().await.unwrap();
    assert_eq!(r.headers()["x-svc-model-id"], "backup-1");
    let evs = sse(&r.text().await.unwrap());
    assert_eq!(evs.last().unwrap(), "[DONE]");
    for e in &evs[..evs.len() - 1] {
        assert_eq!(serde_json::from_str::<Value>(e).unwrap()["model"], "primary", "{e}");
    }
    // Spend: the alias asked for, the deployment that served, at its prices (10 × 0.000001 + 5 × 0.000002).
    let r = client().get(g.path("/spend/logs")).bearer_auth(MASTER).send().await.unwrap();
    let logs: Value = r.json().await.unwrap();
    for rec in logs["data"].as_array().unwrap() {
        assert_eq!((rec["model"].as_str(), rec["deployment"].as_str()), (Some("primary"), Some("backup-1")));
        assert_eq!((rec["upstream_model"].as_str(), rec["spend_nanos"].as_i64()), (Some("up-backup-1"), Some(20_000)));
    }
    assert_eq!(logs["data"].as_array().unwrap().len(), 2);
}
