//! Budgets usable to their last part, through the real binary: agent-shaped requests (a large system prompt and
//! tools, a completion cap of 32,000 or the model's own) are reserved loosely while the budget has room, and in
//! the last stretch bounded by the provider's exact input count (Anthropic `count_tokens`, OpenAI
//! `responses/input_tokens`) with the completion capped to what is left, so the first refusal comes only once
//! the budget is spent to within a call. No budget's recorded spend ever passes its limit.

use crate::harness::*;
use serde_json::{json, Value};
use svc_testkit::anthropic::{Canned, FakeAnthropic};
use svc_testkit::upstream::Upstream;

fn config(anthropic: &str, openai: &str) -> String {
    format!(
        "server:\n  host: 127.0.0.1\n  port: 0\n\
model_list:
  - model_name: claude
    params:
      model: anthropic/claude-up
      api_base: {anthropic}
      api_key: ant-secret
      max_output_tokens: 32000
      max_input_tokens: 200000
      input_cost_per_token: 0.000003
      output_cost_per_token: 0.000015
  - model_name: gpt
    params:
      model: openai/up-gpt
      api_base: {openai}
      max_output_tokens: 128000
      max_input_tokens: 400000
      input_cost_per_token: 0.000002
      output_cost_per_token: 0.000008
gateway_settings:
  teams:
    - team_id: t
"
    )
}

/// What the agents send before their own words: a system prompt and tool definitions of about 60 KB.
fn agent_text(kb: usize) -> String {
    "You are an agent working in a repository; read files with the tools before you edit them. ".repeat(kb * 11)
}

fn agent_tools() -> Vec<Value> {
    (0..20)
        .map(|i| {
            json!({"name": format!("tool_{i}"), "description": agent_text(1),
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}})
        })
        .collect()
}

/// The test upstreams (the OpenAI one billing `prompt` input and `completion` output tokens a call) and a gateway
/// in front of them.
async fn rig(prompt: u64, completion: u64) -> (FakeAnthropic, Upstream, Gateway) {
    let ant = FakeAnthropic::start(Some("ant-secret")).await.unwrap();
    let up = Upstream::start().await.unwrap();
    up.set(|b| {
        b.prompt_tokens = prompt;
        b.completion_tokens = completion;
    });
    let g = Gateway::start(&config(ant.base_url(), &up.base_url)).await;
    (ant, up, g)
}

/// Calls `path` with `body` on a fresh key of budget `limit` (nano-units) until the first refusal, which must
/// say the budget is exceeded; the recorded spend is then within the limit and at least 95 % of it. Returns how
/// many calls were admitted.
async fn spend_to_the_last_part(g: &Gateway, path: &str, body: &Value, limit: i64) -> usize {
    let key = g.key(json!({"team_id": "t", "max_budget": limit as f64 / 1e9})).await;
    let (admitted, refusal) = spend_down(g, &key, path, body).await;
    assert!(refusal.contains("Budget exceeded"), "{refusal}");
    let total = spent(g, admitted).await;
    assert!(total <= limit, "never past the limit: {total} of {limit}");
    assert!(total * 100 >= limit * 95, "spent {total} of {limit} ({admitted} calls) before the first refusal");
    println!(
        "spent {:.2} % of the budget in {admitted} calls before the first refusal",
        total as f64 * 100.0 / limit as f64
    );
    admitted
}

/// Calls until the first refusal (at most 40); returns (calls admitted, the refusal's body).
async fn spend_down(g: &Gateway, key: &str, path: &str, body: &Value) -> (usize, String) {
    let most = 40;
    for n in 0..most {
        let r = client().post(g.path(path)).bearer_auth(key).json(body).send().await.unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        match status {
            200 => continue,
            429 => return (n, text),
            other => panic!("call {n}: {other} {text}"),
        }
    }
    panic!("no refusal in {most} calls");
}

/// The key's recorded spend (nano-units), once `n` records are written.
async fn spent(g: &Gateway, n: usize) -> i64 {
    for _ in 0..100 {
        let rows = admin_get(g, "/spend/logs?limit=1000").await["data"].as_array().cloned().unwrap_or_default();
        if rows.len() >= n {
            return rows.iter().map(|r| r["spend_nanos"].as_i64().unwrap()).sum();
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("fewer than {n} spend records");
}

#[tokio::test]
async fn claude_code_shaped_calls_spend_a_budget_to_its_last_part() {
    let (ant, _up, g) = rig(10, 5).await;
    // Each call bills 15,000 input and 300 output tokens: 0.045 + 0.0045; the budget pays for 20 of them.
    let usage = json!({"input_tokens": 15000, "output_tokens": 300});
    let mut message = svc_testkit::anthropic::text_message("done");
    message["usage"] = usage;
    ant.set_fallback(Canned::Message(message));
    ant.set_count(15000);
    let body = json!({"model": "claude", "max_tokens": 32000, "system": agent_text(40), "tools": agent_tools(),
        "messages": [{"role": "user", "content": "fix the failing test"}]});
    assert!(body.to_string().len() > 55_000, "a Claude-Code-sized body");
    let admitted = spend_to_the_last_part(&g, "/v1/messages", &body, 20 * 49_500_000).await;
    // The exact count is asked for only where the loose bound does not fit (it holds 0.57 while room is left).
    let counts = ant.requests().iter().filter(|r| r.path.ends_with("/count_tokens")).count();
    assert!(counts > 0 && counts < admitted, "{counts} counts for {admitted} calls");
    let first_post = ant.requests().into_iter().find(|r| r.method == "POST").unwrap();
    assert_eq!(first_post.path, "/v1/messages", "the first calls fit loosely, with no count");
    let first = ant.requests().into_iter().find(|r| r.path.ends_with("/count_tokens")).unwrap();
    let mut fields: Vec<&str> = first.body.as_object().unwrap().keys().map(String::as_str).collect();
    fields.sort_unstable();
    assert_eq!(fields, ["messages", "model", "system", "tools"], "only the input is sent to be counted");
    assert_eq!(first.body["model"], "claude-up");
}

#[tokio::test]
async fn codex_shaped_calls_spend_a_budget_to_its_last_part() {
    let (_ant, up, g) = rig(8000, 300).await;
    // 8,000 × 0.000002 + 300 × 0.000008 = 0.0184 a call; the budget pays for 20.
    // Codex offers a web search too (no limit of its own: 5 searches and their results are reserved).
    let tools: Vec<Value> = (0..20)
        .map(|i| {
            json!({"type": "function", "name": format!("tool_{i}"), "description": agent_text(1),
            "parameters": {"type": "object", "properties": {}}})
        })
        .chain(std::iter::once(json!({"type": "web_search"})))
        .collect();
    let body = json!({"model": "gpt", "instructions": agent_text(20), "tools": tools, "store": false,
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]}]});
    let admitted = spend_to_the_last_part(&g, "/v1/responses", &body, 20 * 18_400_000).await;
    let counts = up.shared.counts.load(std::sync::atomic::Ordering::Relaxed);
    assert!(counts > 0 && counts <= admitted + 1, "{counts} counts for {admitted} calls");
    // The searches are turned off only where the budget no longer pays for them (here from the first call:
    // 20 calls' budget never pays for a 128,000-token cap, so each is capped, and without searches).
    let sent: Vec<Value> = up.requests().into_iter().map(|r| r.body).collect();
    assert!(sent.iter().all(|b| b["max_tool_calls"] == 0), "no search the budget does not pay for");
    let free = g.key(json!({"team_id": "t"})).await;
    let r = client().post(g.path("/v1/responses")).bearer_auth(&free).json(&body).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let last = up.requests().pop().unwrap().body;
    assert_eq!(last.get("max_tool_calls"), None, "an unbudgeted call as the client wrote it");
}

#[tokio::test]
async fn a_fresh_small_budget_admits_a_call_it_pays_for_with_a_lowered_cap() {
    let (_ant, up, g) = rig(500, 300).await;
    // A call really costs 0.001 + 0.0024; the loose bound (a 128,000-token cap) would ask 1.02.
    let key = g.key(json!({"team_id": "t", "max_budget": 0.005})).await;
    let body = json!({"model": "gpt", "input": "hi", "store": false});
    let r = client().post(g.path("/v1/responses")).bearer_auth(&key).json(&body).send().await.unwrap();
    let capped = r.headers().get("x-svc-budget-max-tokens").map(|v| v.to_str().unwrap().to_string());
    assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());
    let cap: u64 = capped.expect("admitted with a lowered cap").parse().unwrap();
    assert!((300..=500).contains(&cap), "the cap the 0.004 left after the input pays for: {cap}");
    let sent = up.requests().into_iter().find(|r| r.body.get("input").is_some()).unwrap();
    assert_eq!(sent.body["max_output_tokens"], json!(cap), "the upstream is told the cap");
}
