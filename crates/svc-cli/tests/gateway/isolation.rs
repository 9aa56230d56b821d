//! Isolation of stored responses through the real binary: a key reaches only the responses it created (the
//! master key every one; its team's when the operator shares them), whichever node it asks and after a
//! restart; anyone else gets the answer of an unknown id, and nothing reaches the upstream for them.

use crate::fleet::node_config;
use crate::harness::*;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use svc_testkit::upstream::Upstream;

fn config(openai: &str, extra: &str) -> String {
    format!(
        "server:\n  host: 127.0.0.1\n  port: 0\n\
model_list:
  - model_name: gpt
    params:
      model: openai/up-gpt
      api_base: {openai}
      input_cost_per_token: 0.000001
      output_cost_per_token: 0.000002
gateway_settings:
{extra}  teams:
    - team_id: a
      models: [gpt]
    - team_id: b
      models: [gpt]
"
    )
}

/// A Responses request (`store` left to the upstream's default: kept).
fn ask(extra: Value) -> Value {
    let mut body = json!({"model": "gpt", "input": "remember the number 7"});
    if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
        b.extend(e);
    }
    body
}

/// Sends `method path` with `key` (and `body` when given); status and JSON answer.
async fn call(g: &Gateway, key: &str, method: reqwest::Method, path: &str, body: Option<&Value>) -> (u16, Value) {
    let mut r = client().request(method, g.path(path)).bearer_auth(key);
    if let Some(b) = body {
        r = r.json(b);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// Creates a stored response with `key`; its id.
async fn create(g: &Gateway, key: &str, extra: Value) -> String {
    let (status, reply) = call(g, key, reqwest::Method::POST, "/v1/responses", Some(&ask(extra))).await;
    assert_eq!(status, 200, "{reply}");
    reply["id"].as_str().unwrap().to_string()
}

/// Every way of reaching response `id`, as `key` would try them: retrieve, input items, cancel, delete, and a
/// continuation. Each answer's status and error (the id replaced by `ID`, so that answers about different ids
/// compare).
async fn every_way(g: &Gateway, key: &str, id: &str) -> Vec<(u16, Value)> {
    use reqwest::Method;
    let tries = [
        (Method::GET, format!("/v1/responses/{id}"), None),
        (Method::GET, format!("/v1/responses/{id}/input_items"), None),
        (Method::POST, format!("/v1/responses/{id}/cancel"), None),
        (Method::DELETE, format!("/responses/{id}"), None),
        (Method::POST, "/v1/responses".to_string(), Some(ask(json!({"previous_response_id": id})))),
    ];
    let mut out = Vec::new();
    for (method, path, body) in tries {
        let (status, answer) = call(g, key, method, &path, body.as_ref()).await;
        let text = answer["error"].to_string().replace(id, "ID");
        out.push((status, serde_json::from_str(&text).unwrap()));
    }
    out
}

#[tokio::test]
async fn a_key_reaches_only_the_stored_responses_it_created() {
    let up = Upstream::start().await.unwrap();
    let g = Gateway::start(&config(&up.base_url, "")).await;
    let a1 = g.key(json!({"team_id": "a"})).await;
    let a2 = g.key(json!({"team_id": "a"})).await;
    let b1 = g.key(json!({"team_id": "b"})).await;

    let id = create(&g, &a1, json!({})).await;
    // A streamed one is known from its first event.
    let r = client().post(g.path("/v1/responses")).bearer_auth(&a1).json(&ask(json!({"stream": true}))).send().await;
    let text = r.unwrap().text().await.unwrap();
    let created = text.lines().find(|l| l.starts_with("data: ") && l.contains("response.created")).unwrap();
    let streamed: Value = serde_json::from_str(&created["data: ".len()..]).unwrap();
    let streamed = streamed["response"]["id"].as_str().unwrap().to_string();

    // Another team's key and a teammate's get what an id nobody created gets, and the upstream is not asked.
    let unknown = every_way(&g, &b1, "resp_nobody_made_this").await;
    assert!(unknown.iter().all(|(status, _)| *status == 404), "{unknown:?}");
    assert_eq!(unknown[0].1["message"], "Response with id 'ID' not found.");
    assert_eq!(unknown[4].1["code"], "previous_response_not_found");
    assert_eq!(unknown[4].1["param"], "previous_response_id");
    let asked = up.shared.calls.load(std::sync::atomic::Ordering::Relaxed);
    for key in [&b1, &a2] {
        for target in [&id, &streamed] {
            assert_eq!(every_way(&g, key, target).await, unknown, "a key that did not create {target}");
        }
    }
    assert_eq!(up.shared.calls.load(std::sync::atomic::Ordering::Relaxed), asked, "nothing went upstream");

    // The creator and the master key reach it.
    let (status, got) = call(&g, &a1, reqwest::Method::GET, &format!("/v1/responses/{id}"), None).await;
    assert_eq!((status, got["id"].as_str(), got["model"].as_str()), (200, Some(id.as_str()), Some("gpt")));
    let (status, items) = call(&g, &a1, reqwest::Method::GET, &format!("/v1/responses/{id}/input_items"), None).await;
    assert_eq!(status, 200);
    assert_eq!(items["data"][0]["content"][0]["text"], "remember the number 7");
    let (status, _) = call(&g, MASTER, reqwest::Method::GET, &format!("/v1/responses/{streamed}"), None).await;
    assert_eq!(status, 200);
    let next = ask(json!({"previous_response_id": streamed}));
    let (status, _) = call(&g, &a1, reqwest::Method::POST, "/v1/responses", Some(&next)).await;
    assert_eq!(status, 200);
    assert_eq!(up.requests().last().unwrap().body["previous_response_id"], json!(streamed));

    // A background response: cancelled by its creator only.
    let background = create(&g, &a1, json!({"background": true})).await;
    let cancel = format!("/v1/responses/{background}/cancel");
    assert_eq!(call(&g, &b1, reqwest::Method::POST, &cancel, None).await.0, 404);
    let (status, cancelled) = call(&g, &a1, reqwest::Method::POST, &cancel, None).await;
    assert_eq!((status, cancelled["status"].as_str()), (200, Some("cancelled")));

    // Deleted by its creator: gone upstream.
    let (status, deleted) = call(&g, &a1, reqwest::Method::DELETE, &format!("/v1/responses/{id}"), None).await;
    assert_eq!((status, deleted["deleted"].as_bool()), (200, Some(true)));
    assert_eq!(call(&g, &a1, reqwest::Method::GET, &format!("/v1/responses/{id}"), None).await.0, 404);

    // After kill -9 the node has forgotten everything in memory: the store still knows whose each one is.
    let config = g.config.clone();
    let dir = g.kill().await;
    let yaml = std::fs::read_to_string(&config).unwrap();
    let g = Gateway::start_in(dir, &yaml).await;
    let path = format!("/v1/responses/{streamed}");
    assert_eq!(call(&g, &a1, reqwest::Method::GET, &path, None).await.0, 200);
    assert_eq!(every_way(&g, &b1, &streamed).await, unknown);
}

#[tokio::test]
async fn a_team_shares_its_stored_responses_only_when_the_operator_says_so() {
    let up = Upstream::start().await.unwrap();
    let g = Gateway::start(&config(&up.base_url, "  responses_shared_within_team: true\n")).await;
    let a1 = g.key(json!({"team_id": "a"})).await;
    let a2 = g.key(json!({"team_id": "a"})).await;
    let b1 = g.key(json!({"team_id": "b"})).await;
    let id = create(&g, &a1, json!({})).await;
    let path = format!("/v1/responses/{id}");
    assert_eq!(call(&g, &a2, reqwest::Method::GET, &path, None).await.0, 200, "a teammate");
    let next = ask(json!({"previous_response_id": id}));
    assert_eq!(call(&g, &a2, reqwest::Method::POST, "/v1/responses", Some(&next)).await.0, 200);
    assert_eq!(call(&g, &b1, reqwest::Method::GET, &path, None).await.0, 404, "another team");
    // The master key's own responses are its alone.
    let mine = create(&g, MASTER, json!({})).await;
    assert_eq!(call(&g, &a1, reqwest::Method::GET, &format!("/v1/responses/{mine}"), None).await.0, 404);
}

#[tokio::test]
async fn every_node_of_a_fleet_answers_the_same_for_a_stored_response() {
    let up = Upstream::start().await.unwrap();
    let db = svc_testkit::postgres::fresh_database().await;
    let base = config(&up.base_url, "");
    let dirs: Vec<Arc<tempfile::TempDir>> = (0..2).map(|_| Arc::new(tempfile::tempdir().unwrap())).collect();
    let n1 = Gateway::start_in(dirs[0].clone(), &node_config(&base, &db, "n1", "")).await;
    let n2 = Gateway::start_in(dirs[1].clone(), &node_config(&base, &db, "n2", "")).await;
    let a1 = n1.key(json!({"team_id": "a"})).await;
    let b1 = n1.key(json!({"team_id": "b"})).await;
    let id = create(&n1, &a1, json!({})).await;
    let path = format!("/v1/responses/{id}");
    // n2 never saw it: it knows it once n1's spend record is in the store (its writer's next batch).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _) = call(&n2, &a1, reqwest::Method::GET, &path, None).await;
        if status == 200 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "n2 never found {id}: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(every_way(&n2, &b1, &id).await, every_way(&n1, &b1, &id).await);
    assert_eq!(call(&n2, &b1, reqwest::Method::GET, &path, None).await.0, 404);
    let next = ask(json!({"previous_response_id": id}));
    let (status, answer) = call(&n2, &a1, reqwest::Method::POST, "/v1/responses", Some(&next)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(up.requests().last().unwrap().body["previous_response_id"], json!(id));
}
