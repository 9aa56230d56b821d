//! A budgeted stream is cut at its completion cap whatever kind of output the upstream streams: every
//! Anthropic delta type (text, thinking, signature, citations, tool input, a type not known today) passed
//! through or translated to chat completions and Responses, every Responses delta type passed through, and
//! Responses output sent only whole. The client gets its API's ending for a stream at its cap, the upstream
//! stream is dropped, and the call is charged its reservation; an honest stream within its cap is never cut.

use crate::harness::*;
use futures::StreamExt;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::time::Duration;
use svc_testkit::anthropic::{Canned, FakeAnthropic, SseEvent};
use svc_testkit::upstream::Upstream;

/// The cap every request here asks for; `Meter::cut_after` cuts past 50 + 50/4 + 16 = 78 counted tokens.
const CAP: u64 = 50;
const CUT_AFTER: u64 = CAP + CAP / 4 + 16;

fn config(anthropic: &str, openai: &str) -> String {
    format!(
        "server:\n  host: 127.0.0.1\n  port: 0\n\
model_list:
  - model_name: 'claude-*'
    params:
      model: 'anthropic/claude-*-up'
      api_base: {anthropic}
      api_key: ant-secret
      input_cost_per_token: 0.000003
      output_cost_per_token: 0.000015
  - model_name: gpt-5-codex
    params:
      model: openai/up-codex
      api_base: {openai}
      api_key: upstream-secret
      input_cost_per_token: 0.000001
      output_cost_per_token: 0.000002
gateway_settings:
  teams:
    - team_id: coders
      budget_limit: 50
      models: ['claude-*', gpt-5-codex]
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
    let key = g.key(json!({"team_id": "coders"})).await;
    Setup { g, ant, up, key }
}

/// POSTs `body` to `path` and reads the whole SSE answer, within 10 s.
async fn stream(s: &Setup, path: &str, body: &Value) -> Vec<(String, Value)> {
    let r = client()
        .post(s.g.path(path))
        .bearer_auth(&s.key)
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{path} {body}");
    let mut bytes = r.bytes_stream();
    let mut text = String::new();
    let read = async {
        while let Some(Ok(b)) = bytes.next().await {
            text.push_str(&String::from_utf8_lossy(&b));
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read).await.expect("the stream ended within 10 s");
    events(&text)
}

/// The events of an SSE body: (event name, data; `[DONE]` as a string).
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

/// The spend records, once `n` are written (polled to a deadline).
async fn spend(g: &Gateway, n: usize) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let data = admin_get(g, "/spend/logs?limit=100").await["data"].as_array().cloned().unwrap_or_default();
        if data.len() >= n || tokio::time::Instant::now() >= deadline {
            return data;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn messages_body() -> Value {
    json!({"model": "claude-opus-5-5", "max_tokens": CAP, "stream": true,
        "messages": [{"role": "user", "content": "go on forever"}]})
}

fn message_start() -> SseEvent {
    SseEvent::json(
        "message_start",
        &json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
            "model": "claude-opus-5-5-up", "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 1}}}),
    )
}

/// An Anthropic stream that opens `block` and then streams `delta` in it without end.
fn endless_anthropic(block: Value, delta: Value) -> Canned {
    let start = json!({"type": "content_block_start", "index": 0, "content_block": block});
    let delta = json!({"type": "content_block_delta", "index": 0, "delta": delta});
    Canned::Endless {
        head: vec![message_start(), SseEvent::json("content_block_start", &start)],
        repeat: SseEvent::json("content_block_delta", &delta),
        gap: Duration::from_millis(1),
    }
}

/// Each Anthropic delta kind, 2 counted tokens each ("abcdefgh"), in the block it belongs to.
fn anthropic_kinds() -> Vec<(&'static str, Value, Value)> {
    let thinking = json!({"type": "thinking", "thinking": "", "signature": ""});
    let text = json!({"type": "text", "text": ""});
    vec![
        ("text_delta", text.clone(), json!({"type": "text_delta", "text": "abcdefgh"})),
        ("thinking_delta", thinking.clone(), json!({"type": "thinking_delta", "thinking": "abcdefgh"})),
        ("signature_delta", thinking, json!({"type": "signature_delta", "signature": "abcdefgh"})),
        (
            "citations_delta",
            text,
            json!({"type": "citations_delta", "citation": {"type": "char_location", "cited_text": "abcdefgh",
                "document_index": 0, "start_char_index": 0, "end_char_index": 8}}),
        ),
        (
            "input_json_delta",
            json!({"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}),
            json!({"type": "input_json_delta", "partial_json": "abcdefgh"}),
        ),
        ("x_new_delta", json!({"type": "x_new"}), json!({"type": "x_new_delta", "x_text": "abcdefgh"})),
    ]
}

/// Asserts the charge of each of the last `n` spend records: the reservation's completion tokens, status 200.
async fn charged_the_cap(g: &Gateway, n: usize) {
    let records = spend(g, n).await;
    assert_eq!(records.len(), n);
    for r in &records {
        assert_eq!((r["completion_tokens"].as_u64(), r["status"].as_u64()), (Some(CAP), Some(200)), "{r}");
    }
}

#[tokio::test]
async fn messages_passed_through_are_cut_at_the_cap_whatever_the_delta() {
    let s = setup().await;
    let kinds = anthropic_kinds();
    for (i, (kind, block, delta)) in kinds.iter().enumerate() {
        s.ant.push(endless_anthropic(block.clone(), delta.clone()));
        let evs = stream(&s, "/v1/messages", &messages_body()).await;
        let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
        let deltas = names.iter().filter(|n| **n == "content_block_delta").count() as u64;
        // 2 tokens a delta (and 1 for a tool's name as its block starts): the delta that passes the cut is not
        // sent.
        assert!((CUT_AFTER / 2 - 1..=CUT_AFTER / 2).contains(&deltas), "{kind}: cut at the cap after {deltas}");
        assert!(names.ends_with(&["content_block_stop", "message_delta", "message_stop"]), "{kind}: {names:?}");
        let end = &evs[evs.len() - 2].1;
        assert_eq!(end["delta"]["stop_reason"], "max_tokens", "{kind}: {end}");
        assert_eq!(end["usage"]["output_tokens"], CAP, "{kind}: {end}");
        assert!(
            eventually(5, || s.ant.streams_cancelled() == i + 1).await,
            "{kind}: the upstream stream was not dropped"
        );
    }
    charged_the_cap(&s.g, kinds.len()).await;
}

#[tokio::test]
async fn anthropic_output_with_no_chat_form_still_counts_in_translation() {
    let s = setup().await;
    let thinking = json!({"type": "thinking", "thinking": "", "signature": ""});
    let deltas = [
        json!({"type": "thinking_delta", "thinking": "abcdefgh"}),
        json!({"type": "signature_delta", "signature": "abcdefgh"}),
    ];
    // A chat-completions client: thinking has no chat form, nothing of it is sent, and still the cut comes.
    for (i, delta) in deltas.iter().enumerate() {
        s.ant.push(endless_anthropic(thinking.clone(), delta.clone()));
        let body = json!({"model": "claude-opus-5-5", "max_tokens": CAP, "stream": true,
            "messages": [{"role": "user", "content": "go on forever"}]});
        let evs = stream(&s, "/v1/chat/completions", &body).await;
        assert_eq!(evs.last().map(|(_, d)| d.clone()), Some(json!("[DONE]")), "{delta}: a clean end");
        let chunks: Vec<&Value> = evs.iter().map(|(_, d)| d).filter(|d| d.is_object()).collect();
        let finishes: Vec<&Value> =
            chunks.iter().map(|c| &c["choices"][0]["finish_reason"]).filter(|f| !f.is_null()).collect();
        assert_eq!(finishes, [&json!("length")], "{delta}: {chunks:?}");
        assert!(!evs.iter().any(|(_, d)| d.to_string().contains("abcdefgh")), "{delta}: thinking is not sent");
        assert!(eventually(5, || s.ant.streams_cancelled() == i + 1).await, "{delta}: upstream not dropped");
    }
    // A Responses client, translated the same way: `response.incomplete`.
    s.ant.push(endless_anthropic(thinking, deltas[0].clone()));
    let body = json!({"model": "claude-opus-5-5", "max_output_tokens": CAP, "stream": true, "input": "go on forever"});
    let evs = stream(&s, "/v1/responses", &body).await;
    let (name, last) = evs.last().unwrap();
    assert_eq!((name.as_str(), &last["response"]["status"]), ("response.incomplete", &json!("incomplete")), "{last}");
    assert_eq!(last["response"]["usage"]["output_tokens"], CAP, "{last}");
    assert!(eventually(5, || s.ant.streams_cancelled() == 3).await);
    charged_the_cap(&s.g, 3).await;
}

#[tokio::test]
async fn responses_passed_through_are_cut_at_the_cap_whatever_the_event() {
    let s = setup().await;
    let delta = |kind: &str| {
        json!({"type": kind, "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "abcdefgh",
            "obfuscation": "0123456789abcdef"})
    };
    // (event, counted tokens each): each delta kind, and an output only ever sent whole.
    let item = json!({"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": "abcdefgh".repeat(4), "annotations": []}]});
    let cases = [
        (delta("response.output_text.delta"), 2),
        (delta("response.refusal.delta"), 2),
        (delta("response.reasoning_summary_text.delta"), 2),
        (delta("response.reasoning_text.delta"), 2),
        (delta("response.function_call_arguments.delta"), 2),
        (delta("response.x_new.delta"), 2),
        (json!({"type": "response.output_item.done", "output_index": 0, "item": item}), 8),
    ];
    for (i, (event, tokens)) in cases.iter().enumerate() {
        s.up.set(|b| {
            b.endless_event = Some(event.clone());
            b.chunk_delay = Duration::from_millis(1);
        });
        let body = json!({"model": "gpt-5-codex", "max_output_tokens": CAP, "stream": true, "input": "go on forever"});
        let evs = stream(&s, "/v1/responses", &body).await;
        let kind = event["type"].as_str().unwrap();
        let forwarded = evs.iter().filter(|(n, _)| n == kind).count() as u64;
        assert_eq!(forwarded, CUT_AFTER / tokens, "{kind}: cut at the cap");
        let (name, last) = evs.last().unwrap();
        assert_eq!(name, "response.incomplete", "{kind}: {last}");
        assert_eq!(last["response"]["usage"]["output_tokens"], CAP, "{kind}: {last}");
        assert!(
            eventually(5, || s.up.shared.streams_cancelled.load(Ordering::SeqCst) == i + 1).await,
            "{kind}: the upstream stream was not dropped"
        );
    }
    charged_the_cap(&s.g, cases.len()).await;
}

/// An honest Anthropic stream of thinking, its signature and text, counted at 60 of the 78 tokens past which
/// the cut comes, and reported by the upstream at its cap of 50.
fn honest_thinking_stream() -> Canned {
    let mut events = vec![message_start()];
    let mut block = |index: u64, start: Value, deltas: Vec<Value>| {
        let start = json!({"type": "content_block_start", "index": index, "content_block": start});
        events.push(SseEvent::json("content_block_start", &start));
        for d in deltas {
            let d = json!({"type": "content_block_delta", "index": index, "delta": d});
            events.push(SseEvent::json("content_block_delta", &d));
        }
        events.push(SseEvent::json("content_block_stop", &json!({"type": "content_block_stop", "index": index})));
    };
    let piece = "abcdefgh".repeat(2); // 4 tokens
    let thinking = (0..6).map(|_| json!({"type": "thinking_delta", "thinking": piece}));
    let signature = json!({"type": "signature_delta", "signature": "EqQBCgIYAhIM".repeat(4)}); // 12 tokens
    block(0, json!({"type": "thinking", "thinking": "", "signature": ""}), thinking.chain([signature]).collect());
    block(
        1,
        json!({"type": "text", "text": ""}),
        (0..6).map(|_| json!({"type": "text_delta", "text": piece})).collect(),
    );
    events.push(SseEvent::json(
        "message_delta",
        &json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
            "usage": {"output_tokens": CAP}}),
    ));
    events.push(SseEvent::json("message_stop", &json!({"type": "message_stop"})));
    Canned::events(events)
}

#[tokio::test]
async fn honest_streams_within_the_cap_are_never_cut() {
    let s = setup().await;
    // Passed through: the upstream's own end comes.
    s.ant.push(honest_thinking_stream());
    let evs = stream(&s, "/v1/messages", &messages_body()).await;
    let end = &evs[evs.len() - 2].1;
    assert_eq!((end["delta"]["stop_reason"].as_str(), evs.len()), (Some("end_turn"), 20), "{evs:?}");
    // Translated for a chat-completions client: the text whole, finished by the upstream.
    s.ant.push(honest_thinking_stream());
    let body = json!({"model": "claude-opus-5-5", "max_tokens": CAP, "stream": true,
        "messages": [{"role": "user", "content": "think, then answer"}]});
    let evs = stream(&s, "/v1/chat/completions", &body).await;
    let chunks: Vec<&Value> = evs.iter().map(|(_, d)| d).filter(|d| d.is_object()).collect();
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(text, "abcdefgh".repeat(12));
    let finishes: Vec<&Value> =
        chunks.iter().map(|c| &c["choices"][0]["finish_reason"]).filter(|f| !f.is_null()).collect();
    assert_eq!(finishes, [&json!("stop")]);
    // Responses passed through: deltas, the finished text and the finished item all hold the same 60 tokens.
    s.up.set(|b| {
        b.content = "abcdefgh".repeat(30);
        b.chunks = 20;
    });
    let body = json!({"model": "gpt-5-codex", "max_output_tokens": CAP, "stream": true, "input": "answer"});
    let evs = stream(&s, "/v1/responses", &body).await;
    assert_eq!(evs.last().map(|(n, _)| n.as_str()), Some("response.completed"), "{evs:?}");
    // Charged what the upstreams reported, not a reservation.
    let records = spend(&s.g, 3).await;
    let completions: Vec<Option<u64>> = records.iter().map(|r| r["completion_tokens"].as_u64()).collect();
    assert_eq!(completions, [Some(5), Some(CAP), Some(CAP)], "{records:?}");
    assert_eq!((s.ant.streams_cancelled(), s.up.shared.streams_cancelled.load(Ordering::SeqCst)), (0, 0));
}
