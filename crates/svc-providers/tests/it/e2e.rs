//! End to end: the real Anthropic provider against the svc-testkit fake server over 127.0.0.1, checking
//! what the golden tests do not: the headers and path of every call, that a streamed answer reassembles to
//! the non-streamed one, probes, a wrong key, timeouts and refused connections.
//!
//! What it does not do: compare translations field by field (the golden tests do).

use crate::support::{collect, deployment, deployment_with, error_json, fake, request, within, KEY, MODEL};
use serde_json::{json, Value};
use std::time::Duration;
use svc_testkit::anthropic::{Canned, FakeAnthropic};

/// A reply with text and two tool calls, as the Messages API would send it.
fn tool_message() -> Value {
    json!({
        "id": "msg_01E2E",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [
            { "type": "text", "text": "Let me check the weather in both cities for you." },
            { "type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": { "city": "Paris", "unit": "celsius" } },
            { "type": "tool_use", "id": "toolu_01B", "name": "get_weather", "input": { "city": "Tokyo, \"JP\"", "days": [1, 2] } }
        ],
        "stop_reason": "tool_use",
        "stop_sequence": null,
        "usage": { "input_tokens": 120, "cache_read_input_tokens": 30, "output_tokens": 64 }
    })
}

fn body(stream: bool) -> Value {
    json!({
        "model": MODEL,
        "messages": [{ "role": "user", "content": "Weather in Paris and Tokyo?" }],
        "tools": [{ "type": "function", "function": { "name": "get_weather", "parameters": { "type": "object" } } }],
        "stream": stream,
        "stream_options": { "include_usage": true },
    })
}

/// The message of a completion rebuilt from stream chunks: content, tool calls, finish reason, usage.
fn reassemble(chunks: &[Value]) -> Value {
    let mut content = String::new();
    let mut calls: Vec<Value> = Vec::new();
    let mut finish = Value::Null;
    let mut usage = Value::Null;
    for chunk in chunks {
        if chunk.get("usage").is_some_and(|u| !u.is_null()) {
            usage = chunk["usage"].clone();
        }
        let Some(choice) = chunk["choices"].get(0) else {
            continue;
        };
        content.push_str(choice["delta"]["content"].as_str().unwrap_or_default());
        if !choice["finish_reason"].is_null() {
            finish = choice["finish_reason"].clone();
        }
        for call in choice["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let i = call["index"].as_u64().unwrap() as usize;
            if i == calls.len() {
                calls.push(json!({ "id": call["id"], "type": call["type"], "function": { "name": call["function"]["name"], "arguments": "" } }));
            }
            let args = calls[i]["function"]["arguments"].as_str().unwrap().to_string()
                + call["function"]["arguments"].as_str().unwrap_or_default();
            calls[i]["function"]["arguments"] = json!(args);
        }
    }
    json!({ "content": content, "tool_calls": calls, "finish_reason": finish, "usage": usage })
}

fn assert_anthropic_headers(fake: &FakeAnthropic, method: &str, path: &str) {
    for r in fake.requests() {
        assert_eq!((r.method.as_str(), r.path.as_str()), (method, path));
        assert_eq!(r.headers.get("x-api-key").map(String::as_str), Some(KEY));
        assert_eq!(r.headers.get("anthropic-version").map(String::as_str), Some("2023-06-01"));
        assert!(!r.headers.contains_key("authorization"), "no bearer token is sent to anthropic");
        if method == "POST" {
            assert_eq!(r.headers.get("content-type").map(String::as_str), Some("application/json"));
        }
    }
}

#[tokio::test]
async fn streamed_and_plain_answers_agree_and_carry_the_headers() {
    let fake = fake().await;
    fake.push(Canned::Message(tool_message()));
    fake.push(Canned::Message(tool_message()));
    let d = deployment(&fake);

    let reply = within(d.chat(request(&body(false)))).await.unwrap().into_object().unwrap();
    let stream = within(d.chat_stream(request(&body(true)))).await.unwrap();
    let (chunks, error) = collect(stream).await;
    assert!(error.is_none(), "{error:?}");

    assert_anthropic_headers(&fake, "POST", "/v1/messages");
    let sent: Vec<Value> = fake.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(sent.len(), 2);
    assert!(sent[0].get("stream").is_none());
    assert_eq!(sent[1]["stream"], true);
    assert_eq!(sent[1].get("stream_options"), None, "stream_options is not an Anthropic field");

    let choice = &reply["choices"][0];
    let streamed = reassemble(&chunks);
    assert_eq!(streamed["content"], choice["message"]["content"]);
    assert_eq!(streamed["tool_calls"], choice["message"]["tool_calls"]);
    assert_eq!(streamed["finish_reason"], "tool_calls");
    assert_eq!(streamed["finish_reason"], choice["finish_reason"]);
    assert_eq!(streamed["usage"], reply["usage"]);
    assert_eq!(reply["usage"]["prompt_tokens"], 150);
    for call in streamed["tool_calls"].as_array().unwrap() {
        let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        assert!(args.is_object());
    }
    assert!(chunks
        .iter()
        .all(|c| c["id"] == "msg_01E2E" && c["object"] == "chat.completion.chunk" && c["model"] == MODEL));
}

#[tokio::test]
async fn probe_lists_models_and_a_wrong_key_is_a_401() {
    let fake = fake().await;
    within(deployment(&fake).probe()).await.unwrap();
    assert_eq!(fake.requests().len(), 1);
    assert_anthropic_headers(&fake, "GET", "/v1/models");

    let wrong = deployment_with(fake.base_url(), Some("sk-ant-wrong"), Duration::from_secs(5));
    let expect = json!({
        "variant": "status", "status": 401, "message": "invalid x-api-key", "kind": "authentication_error",
        "param": null, "retry_after": null,
    });
    assert_eq!(error_json(&within(wrong.probe()).await.unwrap_err()), expect);
    let req = request(&body(false));
    assert_eq!(error_json(&within(wrong.chat(req)).await.unwrap_err()), expect);
}

#[tokio::test]
async fn no_key_sends_no_key_header() {
    let fake = within(FakeAnthropic::start(None)).await.unwrap();
    let d = deployment_with(fake.base_url(), None, Duration::from_secs(5));
    within(d.chat(request(&body(false)))).await.unwrap();
    let headers = &fake.requests()[0].headers;
    assert!(!headers.contains_key("x-api-key"));
    assert_eq!(headers.get("anthropic-version").map(String::as_str), Some("2023-06-01"));
}

#[tokio::test]
async fn slow_upstreams_time_out_and_refused_connections_are_unreachable() {
    let fake = fake().await;
    let slow = || Canned::Delayed(Duration::from_secs(3), Box::new(Canned::Message(tool_message())));
    fake.push(slow());
    fake.push(slow());
    let d = deployment_with(fake.base_url(), Some(KEY), Duration::from_millis(200));
    let e = within(d.chat(request(&body(false)))).await.unwrap_err();
    assert_eq!(error_json(&e), json!({ "variant": "timeout", "after_ms": 200 }));
    let e = within(d.chat_stream(request(&body(true)))).await.err().unwrap();
    assert_eq!(error_json(&e), json!({ "variant": "timeout", "after_ms": 200 }));

    // A port that was just free: nothing listens there any more.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let d = deployment_with(&base, Some(KEY), Duration::from_secs(5));
    let e = within(d.chat(request(&body(false)))).await.unwrap_err();
    assert_eq!(error_json(&e)["variant"], "unreachable");
    let e = within(d.probe()).await.unwrap_err();
    assert_eq!(error_json(&e)["variant"], "unreachable");
}
