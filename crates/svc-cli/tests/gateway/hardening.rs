//! A misbehaving upstream or client cannot breach a budget, break a team or hold the gateway: absurd and
//! malformed usage, streams that ignore their cap or never end a line, a 200 that is an error, out-of-range
//! numbers in requests.

use crate::harness::*;
use futures::StreamExt;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::time::Duration;
use svc_testkit::upstream::Upstream;

/// The mini alias's prices in nano-units per token: 0.0000004 and 0.0000016.
const IN_NANOS: i64 = 400;
const OUT_NANOS: i64 = 1_600;

fn mini(max_tokens: u64) -> Value {
    json!({"model": "openai/gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens})
}

async fn records(g: &Gateway) -> Vec<svc_store::SpendRecord> {
    let store = g.store().await;
    let recs = store.query_spend(&Default::default(), 10_000, 0).await.unwrap();
    store.close().await;
    recs
}

/// The `data:` payloads of an SSE text.
fn events(text: &str) -> Vec<String> {
    text.split("\n\n").filter_map(|e| e.trim_start_matches('\n').strip_prefix("data: ")).map(String::from).collect()
}

/// Reads a whole SSE response, within `secs`.
async fn read_stream(r: reqwest::Response, secs: u64) -> String {
    let mut body = r.bytes_stream();
    let mut seen = String::new();
    let read = async {
        while let Some(Ok(b)) = body.next().await {
            seen.push_str(&String::from_utf8_lossy(&b));
        }
    };
    tokio::time::timeout(Duration::from_secs(secs), read).await.expect("the stream ended in time");
    seen
}

async fn stream_chat(g: &Gateway, key: &str, mut body: Value) -> reqwest::Response {
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    client().post(g.path("/v1/chat/completions")).bearer_auth(key).json(&body).send().await.unwrap()
}

#[tokio::test]
async fn absurd_usage_does_not_break_the_team_even_after_a_restart() {
    let up = Upstream::start().await.unwrap();
    up.set(|b| b.usage_override = Some(json!({"prompt_tokens": -1, "completion_tokens": 18446744073709551615u64})));
    let g = Gateway::start(&config_for(&up.base_url, "")).await;
    let key = g.key(json!({"team_id": "executor"})).await;
    let (s, _, body) = post_chat(&g, &key, &mini(100)).await;
    assert_eq!(s, 200, "{body}");
    let usage = &body["usage"];
    let (p, c) = (usage["prompt_tokens"].as_u64().unwrap(), usage["completion_tokens"].as_u64().unwrap());
    assert!(p > 0 && c <= 100, "the client sees the counts charged, not the upstream's: {usage}");
    let recs = records(&g).await;
    assert_eq!((recs[0].prompt_tokens as u64, recs[0].completion_tokens as u64), (p, c));
    // Charged its reservation: the prompt estimate it shows and the 100 completion tokens asked for.
    assert_eq!(recs[0].cost, p as i64 * IN_NANOS + 100 * OUT_NANOS);
    assert_eq!(recs[0].basis.as_deref(), Some("reservation"));
    assert!(g.log.lock().unwrap().iter().any(|l| l.contains("cannot be right")), "logged as a provider fault");
    // After a restart the team's period spend is rebuilt from the records: everything still answers.
    let dir = g.kill().await;
    let g = Gateway::start_in(dir, &config_for(&up.base_url, "")).await;
    up.set(|b| b.usage_override = None);
    assert_eq!(post_chat(&g, &key, &mini(100)).await.0, 200);
    for path in ["/team/info?team_id=executor", "/spend/logs", "/team/list"] {
        let r = client().get(g.path(path)).bearer_auth(MASTER).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    let out = svc().arg("--config").arg(&g.config).arg("spend").output().await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test]
async fn malformed_usage_is_charged_the_reservation_and_shown_as_estimated() {
    let up = Upstream::start().await.unwrap();
    let g = Gateway::start(&config_for(&up.base_url, "")).await;
    let key = g.key(json!({"team_id": "executor"})).await;
    let cases = [
        json!({}),
        json!({"prompt_tokens": -5, "completion_tokens": -7}),
        json!({"prompt_tokens": 1.5, "completion_tokens": 2.5}),
        json!({"prompt_tokens": "10", "completion_tokens": "5"}),
        json!("lots"),
    ];
    for (i, usage) in cases.iter().enumerate() {
        up.set(|b| b.usage_override = Some(usage.clone()));
        let (s, _, body) = post_chat(&g, &key, &mini(100)).await;
        assert_eq!(s, 200, "{usage}: {body}");
        let shown = &body["usage"];
        let p = shown["prompt_tokens"].as_i64().unwrap_or_else(|| panic!("{usage}: {shown}"));
        let c = shown["completion_tokens"].as_i64().unwrap();
        assert!(p > 0 && c > 0, "{usage}: estimated, never free: {shown}");
        let recs = records(&g).await;
        assert_eq!(recs.len(), 2 * i + 1, "a reply and a stream per case");
        let rec = &recs[0];
        assert_eq!((rec.prompt_tokens, rec.completion_tokens), (p, c), "{usage}: what is shown is recorded");
        assert_eq!(rec.cost, p * IN_NANOS + 100 * OUT_NANOS, "{usage}: charged its reservation");
        assert_eq!(rec.basis.as_deref(), Some("reservation"), "{usage}");
        // Streams too: the usage chunk shows what was charged.
        let r = stream_chat(&g, &key, mini(100)).await;
        let evs = events(&read_stream(r, 10).await);
        let last: Value = serde_json::from_str(&evs[evs.len() - 2]).unwrap();
        assert!(last["usage"]["prompt_tokens"].as_i64().unwrap() > 0, "{usage}: {last}");
        assert!(last["usage"]["completion_tokens"].as_i64().unwrap() > 0, "{usage}: {last}");
    }
}

#[tokio::test]
async fn a_stream_that_ignores_its_cap_is_cut_and_charged_its_reservation() {
    let up = Upstream::start().await.unwrap();
    up.set(|b| {
        b.endless = true;
        b.content = "hello there, fleet ".into();
        b.chunk_delay = Duration::from_millis(1);
    });
    let config = config_for(&up.base_url, "").replace("      budget_limit: 50\n", "      budget_limit: 5\n");
    let g = Gateway::start(&config).await;
    let key = g.key(json!({"team_id": "executor"})).await;
    let r = stream_chat(&g, &key, mini(100)).await;
    assert_eq!(r.status(), 200);
    let text = read_stream(r, 20).await;
    let evs = events(&text);
    assert_eq!(evs.last().map(String::as_str), Some("[DONE]"), "a clean end");
    let chunks: Vec<Value> = evs[..evs.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    assert!(chunks.iter().any(|c| c["choices"][0]["finish_reason"] == "length"), "{text}");
    let streamed: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert!(streamed.len() < 100 * 8, "cut near its 100-token cap, got {} bytes", streamed.len());
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(usage["completion_tokens"], 100, "{usage}");
    // Charged exactly its reservation: the prompt estimate and 100 completion tokens.
    let recs = records(&g).await;
    let prompt = usage["prompt_tokens"].as_i64().unwrap();
    assert_eq!(recs[0].cost, prompt * IN_NANOS + 100 * OUT_NANOS);
    assert_eq!((recs[0].status, recs[0].completion_tokens), (200, 100));
    // The upstream connection was dropped.
    assert!(eventually(5, || up.shared.streams_cancelled.load(Ordering::SeqCst) == 1).await);
    let info = admin_get(&g, "/team/info?team_id=executor").await;
    assert_eq!(info["budget"]["reserved"], 0.0, "{info}");
}

#[tokio::test]
async fn an_idle_or_endless_line_is_bounded_and_a_disconnect_is_noticed() {
    let up = Upstream::start().await.unwrap();
    // A 128 MB line with no newline, 64 KiB every 5 ms: cut at the event limit (64 KiB here).
    up.set(|b| {
        b.long_line = Some(128 << 20);
        b.chunk_delay = Duration::from_millis(5);
    });
    let config = config_for(&up.base_url, "").replace(
        "gateway_settings:\n",
        "gateway_settings:\n  stream_max_event_bytes: 65536\n  stream_idle_timeout_seconds: 1\n",
    );
    let g = Gateway::start(&config).await;
    let key = g.key(json!({"team_id": "executor"})).await;
    let started = std::time::Instant::now();
    let text = read_stream(stream_chat(&g, &key, mini(100)).await, 10).await;
    let evs = events(&text);
    let last: Value = serde_json::from_str(evs.last().unwrap()).unwrap();
    assert_eq!(last["error"]["code"], "502", "{text}");
    assert!(last["error"]["message"].as_str().unwrap().contains("longer than 65536"), "{last}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(eventually(5, || up.shared.streams_cancelled.load(Ordering::SeqCst) == 1).await);

    // A line that stops growing: the idle bound ends the stream.
    up.set(|b| b.long_line = Some(1000));
    let text = read_stream(stream_chat(&g, &key, mini(100)).await, 10).await;
    let last: Value = serde_json::from_str(events(&text).last().unwrap()).unwrap();
    assert_eq!(last["error"]["code"], "504", "{text}");

    // A client that goes away while a line is being read: the upstream is let go, the reservation released.
    up.set(|b| {
        b.long_line = Some(60 * 1024);
        b.chunk_delay = Duration::from_millis(300);
    });
    let mut r = stream_chat(&g, &key, mini(100)).await.bytes_stream();
    let _ = r.next().await;
    drop(r);
    assert!(eventually(5, || up.shared.streams_cancelled.load(Ordering::SeqCst) == 3).await);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !records(&g).await.iter().any(|r| r.status == 499) {
        assert!(std::time::Instant::now() < deadline, "the cut-off stream was settled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let info = admin_get(&g, "/team/info?team_id=executor").await;
    assert_eq!(info["budget"]["reserved"], 0.0, "{info}");
}

#[tokio::test]
async fn a_200_that_is_an_error_is_a_502_and_costs_nothing() {
    let up = Upstream::start().await.unwrap();
    up.set(|b| b.reply_override = Some(json!({"error": {"message": "quota exhausted", "type": "insufficient_quota"}})));
    let g = Gateway::start(&config_for(&up.base_url, "")).await;
    let key = g.key(json!({"team_id": "executor"})).await;
    let (s, _, body) = post_chat(&g, &key, &mini(100)).await;
    assert_eq!(s, 502, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("quota exhausted"), "{body}");
    assert!(body.get("usage").is_none());
    let recs = records(&g).await;
    assert_eq!((recs[0].status, recs[0].cost), (502, 0));
    up.set(|b| b.reply_override = Some(json!({"object": "chat.completion"})));
    assert_eq!(post_chat(&g, &key, &mini(100)).await.0, 502, "no choices: not a completion");
}

#[tokio::test]
async fn an_answer_longer_than_max_response_bytes_is_a_502_and_costs_nothing() {
    let up = Upstream::start().await.unwrap();
    // About 2 MiB of completion against a 1 MiB bound.
    up.set(|b| b.content = "x".repeat(2 << 20));
    let config = config_for(&up.base_url, "")
        .replace("gateway_settings:\n", "gateway_settings:\n  max_response_bytes: 1048576\n");
    let g = Gateway::start(&config).await;
    let key = g.key(json!({"team_id": "executor"})).await;
    let (s, _, body) = post_chat(&g, &key, &mini(100)).await;
    assert_eq!(s, 502, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("longer than 1048576 bytes (max_response_bytes)"), "{body}");
    let recs = records(&g).await;
    assert_eq!((recs[0].status, recs[0].cost), (502, 0));
    // Within the bound, the same upstream is answered as always.
    up.set(|b| b.content = "x".repeat(512 << 10));
    let (s, _, body) = post_chat(&g, &key, &mini(100)).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"].as_str().map(str::len), Some(512 << 10));
}

#[tokio::test]
async fn out_of_range_numbers_are_400_naming_the_field() {
    let up = Upstream::start().await.unwrap();
    let g = Gateway::start(&config_for(&up.base_url, "")).await;
    let key = g.key(json!({"team_id": "executor"})).await;
    let body = |extra: &str| -> Value {
        let text =
            format!(r#"{{"model":"openai/gpt-4.1-mini","messages":[{{"role":"user","content":"hi"}}],{extra}}}"#);
        serde_json::from_str(&text).unwrap()
    };
    for (extra, param) in [
        (r#""max_tokens":1e18"#, "max_tokens"),
        (r#""max_tokens":1000000000000000000"#, "max_tokens"),
        (r#""max_completion_tokens":99999999999"#, "max_completion_tokens"),
        (r#""n":0"#, "n"),
        (r#""n":500"#, "n"),
    ] {
        let (s, _, b) = post_chat(&g, &key, &body(extra)).await;
        assert_eq!((s, b["error"]["param"].as_str()), (400, Some(param)), "{extra}: {b}");
    }
    for (query, param) in [
        ("page=9223372036854775807", "page"),
        ("page=0", "page"),
        ("limit=abc", "limit"),
        ("limit=5000", "limit"),
        ("start=9223372036854775807", "start"),
        ("end=-99999999999999", "end"),
        ("start=yesterday", "start"),
    ] {
        let r = client().get(g.path(&format!("/spend/logs?{query}"))).bearer_auth(MASTER).send().await.unwrap();
        assert_eq!(r.status(), 400, "{query}");
        assert_eq!(r.headers()["content-type"], "application/json", "{query}");
        let b: Value = r.json().await.unwrap();
        assert_eq!(b["error"]["param"], param, "{query}: {b}");
    }
    assert_eq!(up.shared.calls.load(Ordering::SeqCst), 0, "nothing reached the upstream");
}

#[tokio::test]
async fn a_key_created_on_the_command_line_works_at_once() {
    let up = Upstream::start().await.unwrap();
    let g = Gateway::start(&config_for(&up.base_url, "")).await;
    // Several in a row: each is used the moment it is printed, before the server's next poll.
    for _ in 0..3 {
        let out =
            svc().args(["keys", "create", "--team", "executor"]).arg("--config").arg(&g.config).output().await.unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let key = String::from_utf8(out.stdout).unwrap().trim().to_string();
        let (s, _, b) = post_chat(&g, &key, &mini(10)).await;
        assert_eq!(s, 200, "{b}");
    }
    // An unknown key is still 401.
    let (s, _, _) = post_chat(&g, "sk-svc-0000000000000000000000000000000000000000", &mini(10)).await;
    assert_eq!(s, 401);
}

/// A budget webhook on `base`.
fn with_budget_webhook(base: String, hook: &svc_testkit::webhook::WebhookReceiver) -> String {
    format!(
        "{base}notifications:\n  webhooks:\n    - url: {}\n      events: ['budget.*']\n      secret: s3cret\n      timeout_seconds: 2\n",
        hook.url()
    )
}

#[tokio::test]
async fn an_agent_asking_for_128k_tokens_uses_the_budget_to_its_end() {
    let up = Upstream::start().await.unwrap();
    let hook = svc_testkit::webhook::WebhookReceiver::start().await;
    // 128,000 completion tokens at 0.0000016 are 0.2048: more than the whole team budget of 0.1.
    let config = config_for(&up.base_url, "").replace("      budget_limit: 50\n", "      budget_limit: 0.1\n");
    let g = Gateway::start(&with_budget_webhook(config, &hook)).await;
    let key = g.key(json!({"team_id": "executor"})).await;
    let (s, h, b) = post_chat(&g, &key, &mini(128_000)).await;
    assert_eq!(s, 200, "admitted with a lower cap: {b}");
    let granted: u64 = h["x-svc-budget-max-tokens"].to_str().unwrap().parse().unwrap();
    assert!((50_000..62_500).contains(&granted), "{granted}");
    let sent = up.requests().last().unwrap().body.clone();
    assert_eq!(sent["max_tokens"], granted, "the upstream was told the lower cap");
    // Spend the budget down (each answer costs 10 × 0.0000004 + 5 × 0.0000016) until even the minimum
    // useful cap (1,024 tokens) no longer fits: then 429, and the budget never went over.
    up.set(|b| b.completion_tokens = 2_000);
    let mut refused = None;
    for _ in 0..300 {
        let (s, _, b) = post_chat(&g, &key, &mini(128_000)).await;
        if s != 200 {
            refused = Some((s, b));
            break;
        }
    }
    let (s, b) = refused.expect("refused once the rest pays for fewer than 1,024 tokens");
    assert_eq!((s, b["error"]["message"].as_str()), (429, Some("Budget exceeded")), "{b}");
    let left = b["error"]["remaining"].as_f64().unwrap();
    assert!(left < 1024.0 * 0.0000016 + 0.0001, "refused only when less than the minimum was left: {b}");
    let spent: i64 = records(&g).await.iter().map(|r| r.cost).sum();
    assert!(spent <= 100_000_000, "spent {spent} nano-units of a 0.1 budget");
    let got = hook.wait_for(2, Duration::from_secs(10)).await;
    let kinds: Vec<String> = got.iter().map(|r| r.json()["event"].as_str().unwrap().to_string()).collect();
    assert_eq!(kinds, ["budget.alert", "budget.exceeded"], "the alert first, once");
    let exceeded = got[1].json();
    assert!(exceeded["data"]["requested"].as_f64().unwrap() > 0.2, "{exceeded}");
    assert!(exceeded["data"]["remaining"].as_f64().is_some(), "{exceeded}");

    // With `budget_admission: refuse`, the same request is refused outright.
    let strict = config_for(&up.base_url, "")
        .replace("      budget_limit: 50\n", "      budget_limit: 0.1\n")
        .replace("gateway_settings:\n", "gateway_settings:\n  budget_admission: refuse\n");
    let g2 = Gateway::start(&strict).await;
    let key2 = g2.key(json!({"team_id": "executor"})).await;
    assert_eq!(post_chat(&g2, &key2, &mini(128_000)).await.0, 429);
}

#[tokio::test]
async fn a_burst_sends_no_alert_after_exceeded() {
    let up = Upstream::start().await.unwrap();
    let hook = svc_testkit::webhook::WebhookReceiver::start().await;
    let config = config_for(&up.base_url, "")
        .replace("      budget_limit: 50\n", "      budget_limit: 0.0006\n")
        .replace("gateway_settings:\n", "gateway_settings:\n  budget_admission: refuse\n");
    let g = Gateway::start(&with_budget_webhook(config, &hook)).await;
    let key = g.key(json!({"team_id": "executor"})).await;
    // Each reserves about 0.0001 and costs 0.000012: the first refusals come while spend is far below 80%.
    let body = mini(50);
    let calls = (0..40).map(|_| post_chat(&g, &key, &body));
    let statuses: Vec<u16> = futures::future::join_all(calls).await.into_iter().map(|(s, _, _)| s).collect();
    assert!(statuses.contains(&429) && statuses.contains(&200), "{statuses:?}");
    // Then the rest of the budget is used: spend passes 80% after "exceeded" went out.
    while post_chat(&g, &key, &mini(5)).await.0 == 200 {}
    let got = hook.wait_for(1, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let kinds: Vec<String> = hook.received().iter().map(|r| r.json()["event"].as_str().unwrap().to_string()).collect();
    let exceeded_at = kinds.iter().position(|k| k == "budget.exceeded").unwrap_or_else(|| panic!("{got:?}"));
    assert!(!kinds[exceeded_at..].iter().any(|k| k == "budget.alert"), "an alert after exceeded: {kinds:?}");
}
