//! The agent APIs through the real binary: Anthropic Messages and OpenAI Responses passed through to
//! deployments that speak them and translated for those that do not, embeddings, wildcard aliases, errors in
//! each API's shape, and spend recorded with the API, client and session.

use crate::harness::*;
use serde_json::{json, Value};
use svc_testkit::anthropic::{Canned, FakeAnthropic};
use svc_testkit::upstream::Upstream;

fn config(anthropic: &str, openai: &str) -> String {
    format!(
        "server:\n  host: 127.0.0.1\n  port: 0\n\
model_list:
  - model_name: 'claude-*'
    params:
      model: 'anthropic/claude-*-up'
      api_base: {anthropic}
      api_key: ant-secret
      max_output_tokens: 32000
      input_cost_per_token: 0.000003
      output_cost_per_token: 0.000015
      cache_creation_input_token_cost: 0.00000375
      cache_read_input_token_cost: 0.0000003
  - model_name: gpt-5-codex
    params:
      model: openai/up-codex
      api_base: {openai}
      api_key: upstream-secret
      input_cost_per_token: 0.000001
      output_cost_per_token: 0.000002
  - model_name: mock-chat
    params:
      model: mock/mock-chat
      input_cost_per_token: 0.000001
      output_cost_per_token: 0.000002
  - model_name: chat-up
    params:
      model: openai/up-chat
      api_base: {openai}
  - model_name: embed
    params:
      model: openai/up-embed
      api_base: {openai}
      input_cost_per_token: 0.0000001
  - model_name: mock-embed
    params:
      model: mock/e
  - model_name: dead
    params:
      model: openai/dead
      api_base: http://127.0.0.1:9/v1
gateway_settings:
  num_retries: 1
  teams:
    - team_id: coders
      budget_limit: 50
      models: ['claude-*', gpt-5-codex, mock-chat, chat-up, embed, mock-embed, dead]
    - team_id: other
      models: [mock-chat]
"
    )
}

struct Setup {
    g: Gateway,
    ant: FakeAnthropic,
    up: Upstream,
    key: String,
}

async fn setup() -> Setup {
    let ant = FakeAnthropic::start(Some("ant-secret")).await.unwrap();
    let up = Upstream::start().await.unwrap();
    let g = Gateway::start(&config(ant.base_url(), &up.base_url)).await;
    let key = g.key(json!({"team_id": "coders", "key_alias": "coder-1"})).await;
    Setup { g, ant, up, key }
}

/// The events of an SSE body: (event name, data).
fn events(text: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut name = String::new();
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("event: ") {
            name = n.to_string();
        } else if let Some(d) = line.strip_prefix("data: ") {
            out.push((std::mem::take(&mut name), serde_json::from_str(d).unwrap_or(Value::String(d.into()))));
        }
    }
    out
}

async fn post(g: &Gateway, path: &str, key: &str, body: &Value, headers: &[(&str, &str)]) -> (u16, String) {
    let mut r = client().post(g.path(path)).header("x-api-key", key).json(body);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let r = r.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// The spend records of the gateway, once `n` are written.
async fn spend(g: &Gateway, n: usize) -> Vec<Value> {
    let mut data = Vec::new();
    for _ in 0..100 {
        data = admin_get(g, "/spend/logs?limit=100").await["data"].as_array().cloned().unwrap_or_default();
        if data.len() >= n {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    data
}

fn claude_code_body(stream: bool) -> Value {
    json!({
        "model": "claude-opus-5-5", "max_tokens": 128000, "stream": stream,
        "system": [{"type": "text", "text": "You are Claude Code."}, {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "say hi"}]},
            {"role": "system", "content": [{"type": "text", "text": "<env/>", "cache_control": {"type": "ephemeral"}}]}
        ],
        "tools": [{"name": "Read", "description": "reads a file", "input_schema": {"type": "object"}, "defer_loading": true}],
        "metadata": {"user_id": "{\"session\":\"s\"}"},
        "thinking": {"type": "adaptive", "display": "omitted"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "medium"},
        "x_future_field": {"a": [1, 2]}
    })
}

#[tokio::test]
async fn messages_pass_through_to_anthropic_unchanged_but_for_model_and_cap() {
    let s = setup().await;
    let message = json!({"id": "msg_up", "type": "message", "role": "assistant", "model": "claude-opus-5-5-up",
        "content": [{"type": "thinking", "thinking": "hm", "signature": "sig"}, {"type": "text", "text": "hi there"}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 10, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 1000, "output_tokens": 5}});
    s.ant.push(Canned::Message(message.clone()));
    let headers = [
        ("anthropic-version", "2023-06-01"),
        ("anthropic-beta", "claude-code-20250219,context-management-2025-06-27"),
        ("user-agent", "claude-cli/2.1.330 (external, sdk-cli)"),
        ("x-claude-code-session-id", "sess-1"),
    ];
    let body = claude_code_body(true);
    let (status, text) = post(&s.g, "/v1/messages?beta=true", &s.key, &body, &headers).await;
    assert_eq!(status, 200, "{text}");
    let evs = events(&text);
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert!(names.contains(&"ping") && names.ends_with(&["message_delta", "message_stop"]), "{names:?}");
    assert_eq!(evs[0].1["message"]["model"], "claude-opus-5-5", "the client's name comes back");
    assert!(text.contains("\"thinking\":\"hm\""), "thinking blocks pass untouched: {text}");
    let sent: Vec<_> = s.ant.requests().into_iter().filter(|r| r.method == "POST").collect();
    assert_eq!(sent.len(), 1);
    let mut expected = body.clone();
    expected["model"] = json!("claude-opus-5-5-up");
    expected["max_tokens"] = json!(32000);
    assert_eq!(sent[0].body, expected, "only model and the cap change");
    assert_eq!(sent[0].headers.get("anthropic-beta").map(String::as_str), Some(headers[1].1));
    assert_eq!(sent[0].headers.get("x-api-key").map(String::as_str), Some("ant-secret"));
    assert!(!format!("{:?}", sent[0].headers).contains(&s.key), "the virtual key never goes upstream");

    // Non-streaming, through `/messages` at the root.
    s.ant.push(Canned::Message(message));
    let (status, text) = post(&s.g, "/messages", &s.key, &claude_code_body(false), &headers).await;
    assert_eq!(status, 200, "{text}");
    let reply: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (reply["model"].as_str(), reply["content"][1]["text"].as_str()),
        (Some("claude-opus-5-5"), Some("hi there"))
    );

    let records = spend(&s.g, 2).await;
    assert_eq!(records.len(), 2);
    for r in &records {
        assert_eq!((r["prompt_tokens"].as_i64(), r["completion_tokens"].as_i64()), (Some(1110), Some(5)), "{r}");
        // 10 × 3e-6 + 100 cache writes × 3.75e-6 + 1000 cache reads × 3e-7 + 5 × 1.5e-5.
        assert_eq!(r["spend_nanos"].as_i64(), Some(780_000), "{r}");
        assert_eq!(
            (r["api"].as_str(), r["client"].as_str(), r["session_id"].as_str()),
            (Some("messages"), Some("claude-cli"), Some("sess-1"))
        );
        assert_eq!(
            (r["model"].as_str(), r["upstream_model"].as_str()),
            (Some("claude-opus-5-5"), Some("claude-opus-5-5-up"))
        );
        assert_eq!(r["team_id"], "coders");
    }
    let by_session = admin_get(&s.g, "/spend/logs?group_by=session").await;
    assert_eq!(by_session["data"][0]["group"], "sess-1");
    assert_eq!(by_session["data"][0]["requests"], 2);
    let r = client().get(s.g.path("/spend/logs?group_by=colour")).bearer_auth(MASTER).send().await.unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["param"], "group_by");
    // The same from the command line, grouped by client and by session.
    let out = svc().arg("--config").arg(&s.g.config).args(["spend", "--by", "client,session"]).output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("CLIENT") && lines[1].starts_with("claude-cli"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("SESSION")) && text.lines().any(|l| l.starts_with("sess-1")), "{text}");
    let out = svc().arg("--config").arg(&s.g.config).args(["spend", "--by", "colour"]).output().await.unwrap();
    assert_eq!(out.status.code(), Some(2), "a bad grouping is a command-line usage error");
}

#[tokio::test]
async fn messages_translate_for_openai_and_mock_deployments() {
    let s = setup().await;
    // A tool round trip through an OpenAI-compatible upstream.
    s.up.set(|b| {
        b.reply_override = Some(json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "up-chat",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
                "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "Read", "arguments": "{\"file_path\":\"hello.txt\"}"}}]}}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28}}))
    });
    let mut body = claude_code_body(false);
    body["model"] = json!("chat-up");
    let (status, text) = post(&s.g, "/v1/messages", &s.key, &body, &[]).await;
    assert_eq!(status, 200, "{text}");
    let reply: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(reply["type"], "message");
    assert_eq!(reply["stop_reason"], "tool_use");
    assert_eq!(
        reply["content"][0],
        json!({"type": "tool_use", "id": "call_1", "name": "Read", "input": {"file_path": "hello.txt"}})
    );
    assert_eq!(reply["usage"], json!({"input_tokens": 20, "output_tokens": 8}));
    let sent = s.up.requests().last().cloned().unwrap().body;
    assert_eq!(sent["messages"][0], json!({"role": "system", "content": "You are Claude Code.\n\nBe brief."}));
    assert_eq!(sent["tools"][0]["function"]["name"], "Read");
    assert!(sent.get("thinking").is_none() && sent.get("context_management").is_none(), "{sent}");
    body["messages"] = json!([
        {"role": "user", "content": "read hello.txt"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "Read", "input": {"file_path": "hello.txt"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "hi there", "cache_control": {"type": "ephemeral"}}]}
    ]);
    s.up.set(|b| b.reply_override = None);
    let (status, _) = post(&s.g, "/v1/messages", &s.key, &body, &[]).await;
    assert_eq!(status, 200);
    let sent = s.up.requests().last().cloned().unwrap().body;
    assert_eq!(sent["messages"][3], json!({"role": "tool", "tool_call_id": "call_1", "content": "hi there"}));

    // Streamed through the mock: Anthropic's events in order, usage at the end.
    let mut body = claude_code_body(true);
    body["model"] = json!("mock-chat");
    let (status, text) = post(&s.g, "/v1/messages", &s.key, &body, &[]).await;
    assert_eq!(status, 200, "{text}");
    let evs = events(&text);
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..2], ["message_start", "content_block_start"]);
    assert!(names.ends_with(&["content_block_stop", "message_delta", "message_stop"]), "{names:?}");
    let streamed: String = evs.iter().filter_map(|(_, d)| d["delta"]["text"].as_str()).collect();
    assert_eq!(streamed, "[mock mock-chat] say hi");
    let last = &evs[evs.len() - 2].1;
    assert_eq!(last["delta"]["stop_reason"], "end_turn");
    assert!(last["usage"]["output_tokens"].as_u64().unwrap() > 0);

    // count_tokens: an estimate for a deployment that cannot count.
    let (status, text) = post(&s.g, "/v1/messages/count_tokens", &s.key, &body, &[]).await;
    assert_eq!(status, 200, "{text}");
    let n = serde_json::from_str::<Value>(&text).unwrap()["input_tokens"].as_u64().unwrap();
    assert!((10..2000).contains(&n), "{n}");
}

#[tokio::test]
async fn messages_errors_are_in_anthropic_shape() {
    let s = setup().await;
    let shape = |status: u16, text: &str, kind: &str| {
        let v: Value = serde_json::from_str(text).unwrap_or_else(|_| panic!("not JSON: {text}"));
        assert_eq!(v["type"], "error", "{text}");
        assert_eq!(v["error"]["type"], kind, "{status}: {text}");
        v["error"]["message"].as_str().unwrap_or_default().to_string()
    };
    let mut body = claude_code_body(true);
    let (st, text) = post(&s.g, "/v1/messages", "sk-wrong", &body, &[]).await;
    assert_eq!(st, 401);
    shape(st, &text, "authentication_error");
    body["model"] = json!("no-such-model");
    let (st, text) = post(&s.g, "/v1/messages", &s.key, &body, &[]).await;
    assert_eq!(st, 404);
    shape(st, &text, "not_found_error");
    let other = s.g.key(json!({"team_id": "other"})).await;
    body["model"] = json!("claude-opus-5-5");
    let (st, text) = post(&s.g, "/v1/messages", &other, &body, &[]).await;
    assert_eq!(st, 403);
    shape(st, &text, "permission_error");
    let poor = s.g.key(json!({"team_id": "coders", "max_budget": 0.000001})).await;
    let (st, text) = post(&s.g, "/v1/messages", &poor, &body, &[]).await;
    assert_eq!(st, 429);
    assert_eq!(shape(st, &text, "rate_limit_error"), "Budget exceeded");
    body["model"] = json!("dead");
    let (st, text) = post(&s.g, "/v1/messages", &s.key, &body, &[]).await;
    assert_eq!(st, 502);
    shape(st, &text, "api_error");
    s.ant.set_fallback(Canned::error(529, "overloaded_error", "Overloaded"));
    body["model"] = json!("claude-opus-5-5");
    let (st, text) = post(&s.g, "/v1/messages", &s.key, &body, &[]).await;
    assert_eq!(st, 503);
    shape(st, &text, "overloaded_error");
    let (st, text) = post(&s.g, "/v1/messages", &s.key, &json!({"model": "mock-chat"}), &[]).await;
    assert_eq!(st, 400);
    shape(st, &text, "invalid_request_error");
}

#[tokio::test]
async fn responses_pass_through_to_openai_and_translate_for_the_mock() {
    let s = setup().await;
    let body = json!({
        "model": "gpt-5-codex", "stream": true, "store": false, "include": ["reasoning.encrypted_content"],
        "reasoning": {"summary": "auto"}, "prompt_cache_key": "pk", "tool_choice": "auto", "parallel_tool_calls": true,
        "input": [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "be careful"}]},
                  {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "say hi"}]}],
        "tools": [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}, {"type": "web_search"}],
        "max_output_tokens": 1000
    });
    let codex = [("user-agent", "codex_exec/0.169.0 (Debian 12)"), ("session-id", "codex-sess")];
    let r = client().post(s.g.path("/v1/responses")).bearer_auth(&s.key).json(&body);
    let r = codex.iter().fold(r, |r, (k, v)| r.header(*k, *v)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    let evs = events(&text);
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.contains(&"response.x_unknown_event"), "unknown event types pass: {names:?}");
    assert_eq!(names.last(), Some(&"response.completed"));
    assert_eq!(evs.last().unwrap().1["response"]["model"], "gpt-5-codex");
    let sent = s.up.requests().last().cloned().unwrap();
    let mut expected = body.clone();
    expected["model"] = json!("up-codex");
    assert_eq!(sent.body, expected, "passed through unchanged but for model");

    // Plain.
    let mut plain = body.clone();
    plain["stream"] = json!(false);
    let r = client().post(s.g.path("/v1/responses")).bearer_auth(&s.key).json(&plain).send().await.unwrap();
    let reply: Value = r.json().await.unwrap();
    assert_eq!((reply["model"].as_str(), reply["x_upstream_field"].as_str()), (Some("gpt-5-codex"), Some("kept")));

    // Translated for the mock, streamed.
    let mut mock = body.clone();
    mock["model"] = json!("mock-chat");
    let r = client().post(s.g.path("/v1/responses")).bearer_auth(&s.key).json(&mock).send().await.unwrap();
    let text = r.text().await.unwrap();
    let evs = events(&text);
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..3], ["response.created", "response.in_progress", "response.output_item.added"]);
    assert_eq!(names.last(), Some(&"response.completed"));
    let done = &evs.last().unwrap().1["response"];
    assert_eq!(done["output"][0]["content"][0]["text"], "[mock mock-chat] say hi");
    assert!(done["usage"]["input_tokens"].as_u64().unwrap() > 0);

    let records = spend(&s.g, 3).await;
    let codex_records: Vec<&Value> = records.iter().filter(|r| r["client"] == "codex_exec").collect();
    assert_eq!(codex_records.len(), 1);
    assert_eq!(codex_records[0]["session_id"], "codex-sess");
    let passed: Vec<&Value> = records.iter().filter(|r| r["model"] == "gpt-5-codex").collect();
    for r in passed {
        assert_eq!(
            (r["prompt_tokens"].as_i64(), r["completion_tokens"].as_i64(), r["api"].as_str()),
            (Some(10), Some(5), Some("responses"))
        );
    }

    // Stored responses (`store: false` above keeps none): fetched from the deployment that answered them;
    // continued there; refused by one that stores none.
    let mut kept = plain.clone();
    kept["store"] = json!(true);
    let r = client().post(s.g.path("/v1/responses")).bearer_auth(&s.key).json(&kept).send().await.unwrap();
    let id = r.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string();
    let r = client().get(s.g.path(&format!("/v1/responses/{id}"))).bearer_auth(&s.key).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["model"], "gpt-5-codex");
    let r = client().get(s.g.path("/v1/responses/resp_unknown")).bearer_auth(&s.key).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let mut chained = plain.clone();
    chained["previous_response_id"] = json!(id);
    chained["input"] = json!("and then?");
    let r = client().post(s.g.path("/v1/responses")).bearer_auth(&s.key).json(&chained).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(s.up.requests().last().unwrap().body["previous_response_id"], json!(id));
    let mut chained = mock.clone();
    chained["previous_response_id"] = json!(id);
    let r = client().post(s.g.path("/v1/responses")).bearer_auth(&s.key).json(&chained).send().await.unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["param"], "previous_response_id");

    // A WebSocket upgrade is refused at once, so Codex falls back to HTTP.
    let r = client()
        .get(s.g.path("/v1/responses"))
        .bearer_auth(&s.key)
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 426);
}

#[tokio::test]
async fn embeddings_pass_through_and_the_mock_answers_vectors() {
    let s = setup().await;
    let body = json!({"model": "embed", "input": ["a", "b"], "encoding_format": "float"});
    let r = client().post(s.g.path("/v1/embeddings")).bearer_auth(&s.key).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let reply: Value = r.json().await.unwrap();
    assert_eq!(reply["data"].as_array().map(Vec::len), Some(2));
    assert_eq!(reply["model"], "embed");
    let mut expected = body.clone();
    expected["model"] = json!("up-embed");
    assert_eq!(s.up.requests().last().unwrap().body, expected);
    let r = client()
        .post(s.g.path("/embeddings"))
        .bearer_auth(&s.key)
        .json(&json!({"model": "mock-embed", "input": "hello"}))
        .send()
        .await
        .unwrap();
    let a: Value = r.json().await.unwrap();
    assert_eq!(a["data"][0]["embedding"].as_array().map(Vec::len), Some(16));
    let records = spend(&s.g, 2).await;
    let passed = records.iter().find(|r| r["model"] == "embed").unwrap();
    assert_eq!((passed["prompt_tokens"].as_i64(), passed["completion_tokens"].as_i64()), (Some(10), Some(0)));
    assert_eq!(passed["api"], "embeddings");
    // Anthropic serves no embeddings: a clear 400.
    let r = client()
        .post(s.g.path("/v1/embeddings"))
        .bearer_auth(&s.key)
        .json(&json!({"model": "claude-x", "input": "hello"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}

#[tokio::test]
async fn responses_and_embeddings_errors_are_in_openai_shape() {
    let s = setup().await;
    let other = s.g.key(json!({"team_id": "other"})).await;
    let poor = s.g.key(json!({"team_id": "coders", "max_budget": 0.000001})).await;
    s.up.set(|b| b.fail_next = std::iter::repeat_n((503, "upstream overloaded".to_string()), 8).collect());
    for path in ["/v1/responses", "/v1/embeddings"] {
        let body = |model: &str| json!({"model": model, "input": "hi"});
        let cases: [(&str, Value, u16, &str); 6] = [
            ("sk-wrong", body("gpt-5-codex"), 401, "authentication_error"),
            (&other, body("gpt-5-codex"), 403, "team_model_access_denied"),
            (&s.key, body("no-such-model"), 404, "model_not_found"),
            (&poor, body("gpt-5-codex"), 429, "budget_exceeded"),
            (&s.key, body("dead"), 502, "upstream_unreachable"),
            (&s.key, body(if path.ends_with("responses") { "gpt-5-codex" } else { "embed" }), 503, "api_error"),
        ];
        for (key, body, want, kind) in cases {
            let r = client().post(s.g.path(path)).bearer_auth(key).json(&body).send().await.unwrap();
            let status = r.status().as_u16();
            let got: Value = r.json().await.unwrap();
            assert_eq!((status, got["error"]["type"].as_str()), (want, Some(kind)), "{path} {body}: {got}");
            if want == 429 {
                assert_eq!(
                    (got["error"]["message"].as_str(), got["error"]["code"].as_str()),
                    (Some("Budget exceeded"), Some("insufficient_quota"))
                );
            }
        }
    }
    // Wildcard aliases are listed as written.
    let models =
        client().get(s.g.path("/v1/models")).bearer_auth(&s.key).send().await.unwrap().json::<Value>().await.unwrap();
    let ids: Vec<&str> = models["data"].as_array().unwrap().iter().filter_map(|m| m["id"].as_str()).collect();
    assert!(ids.contains(&"claude-*") && ids.contains(&"gpt-5-codex"), "{ids:?}");
}
