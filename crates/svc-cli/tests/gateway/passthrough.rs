//! Unknown fields pass through untouched, the alias is rewritten both ways, headers are set, and each key
//! sees only its models.

use crate::harness::*;
use serde_json::{json, Value};
use svc_testkit::upstream::Upstream;

#[tokio::test]
async fn unknown_fields_pass_through_and_the_alias_is_rewritten() {
    let up = Upstream::start().await.unwrap();
    let g = Gateway::start(&config_for(&up.base_url, "")).await;
    let key = g.key(json!({"team_id": "executor"})).await;
    let body = json!({
        "model": "openai/gpt-4.1-mini",
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        "temperature": 0.2, "max_tokens": 50,
        "tools": [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}],
        "tool_choice": "auto", "response_format": {"type": "json_object"}, "n": 1, "stop": ["END"], "seed": 42,
        "user": "agent-7", "logprobs": false, "x_vendor_extension": {"nested": [1, 2, 3]},
    });
    // The upstream takes 300 ms: the overhead header must leave that wait out.
    up.set(|b| b.delay = std::time::Duration::from_millis(300));
    let (s, h, b) = post_chat(&g, &key, &body).await;
    up.set(|b| b.delay = std::time::Duration::ZERO);
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["model"], "openai/gpt-4.1-mini");
    assert_eq!(b["object"], "chat.completion");
    assert_eq!(b["choices"][0]["message"], json!({"role": "assistant", "content": "Hello from the test upstream."}));
    assert_eq!(b["system_fingerprint"], "fp_test", "unknown response fields pass back");
    assert_eq!(h["x-svc-model-id"], "openai/gpt-4.1-mini");
    assert!(h["x-request-id"].to_str().unwrap().len() >= 32);
    let overhead: f64 = h["x-svc-overhead-duration-ms"].to_str().unwrap().parse().unwrap();
    assert!(overhead > 0.0 && overhead < 250.0, "overhead {overhead} ms must exclude the 300 ms upstream wait");
    let sent = up.requests()[0].clone();
    let mut expected = body.clone();
    expected["model"] = json!("up-mini");
    assert_eq!(sent.body, expected, "every field forwarded untouched, only model replaced");
    assert_eq!(sent.headers["authorization"], "Bearer upstream-secret");
    // A client's own request id is kept.
    let r = client()
        .post(g.path("/chat/completions"))
        .bearer_auth(&key)
        .header("x-request-id", "trace-123")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-request-id"], "trace-123");
}

#[tokio::test]
async fn models_are_filtered_per_key() {
    let up = Upstream::start().await.unwrap();
    let g = Gateway::start(&config_for(&up.base_url, "")).await;
    let ids = |v: &Value| {
        v["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap().to_string()).collect::<Vec<_>>()
    };
    let get = |key: String| {
        let url = g.path("/v1/models");
        async move { client().get(url).bearer_auth(key).send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let all = get(MASTER.into()).await;
    assert_eq!(all["object"], "list");
    assert_eq!(ids(&all), vec!["openai/gpt-4.1-mini", "openai/gpt-4.1-nano", "anthropic/claude-opus-4-1"]);
    let m = &all["data"][0];
    assert_eq!((m["object"].as_str(), m["owned_by"].as_str()), (Some("model"), Some("openai")));
    assert!(m["created"].as_i64().unwrap() > 1_700_000_000);
    let exec = g.key(json!({"team_id": "executor"})).await;
    assert_eq!(ids(&get(exec).await), vec!["openai/gpt-4.1-mini", "openai/gpt-4.1-nano"]);
    let narrow = g.key(json!({"team_id": "executor", "models": ["openai/gpt-4.1-nano"]})).await;
    assert_eq!(ids(&get(narrow.clone()).await), vec!["openai/gpt-4.1-nano"]);
    let (s, _, b) = post_chat(&g, &narrow, &chat("openai/gpt-4.1-mini")).await;
    assert_eq!((s, b["error"]["type"].as_str()), (403, Some("key_model_access_denied")));
    let orch = g.key(json!({"team_id": "orchestrator"})).await;
    assert_eq!(ids(&get(orch.clone()).await), vec!["anthropic/claude-opus-4-1"]);
    // The mock provider serves the orchestrator's alias.
    let (s, _, b) = post_chat(&g, &orch, &chat("anthropic/claude-opus-4-1")).await;
    assert_eq!(s, 200);
    assert_eq!(b["choices"][0]["message"]["content"], "[mock claude-opus-4-1] hi");
    assert_eq!(b["model"], "anthropic/claude-opus-4-1");
}
