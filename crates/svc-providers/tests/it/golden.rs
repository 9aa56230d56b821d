//! Golden tests of the Anthropic translation, one test per direction, each running every case of
//! `tests/golden/<direction>/` through the real provider and the fake server:
//!
//! - `request/<case>.json`: an OpenAI chat body → the Anthropic body the fake server received (or, when the
//!   translation refuses, `{"error": …}` and no request at all);
//! - `response/<case>.json`: an Anthropic message served by the fake → the OpenAI completion;
//! - `stream/<case>.json`: `{"include_usage", "events": [{"event", "data"}]}` served as SSE → the OpenAI chunks
//!   and the error that ended the stream, if any; tool-call arguments must reassemble to JSON objects;
//! - `error/<case>.json`: `{"status", "body" | "raw", "retry_after"}` served as an HTTP error → the
//!   [`svc_providers::ProviderError`] of a call, the same for `chat` and `chat_stream`.
//!
//! Expected outputs are `<case>.expected.json`, compared as parsed JSON with `created` set to 0.

use crate::support::{
    check_golden, collect, deployment, error_json, fake, golden_cases, redact, request, within, MODEL,
};
use serde_json::{json, Value};
use svc_testkit::anthropic::{Canned, SseEvent};

/// Fails the test with every difference at once.
fn report(failures: Vec<String>) {
    assert!(failures.is_empty(), "{} golden case(s) failed:\n\n{}", failures.len(), failures.join("\n\n"));
}

#[tokio::test]
async fn request_translation() {
    let mut failures = Vec::new();
    for (case, input) in golden_cases("request") {
        let fake = fake().await;
        let d = deployment(&fake);
        let req = request(&input);
        let result = if req.stream() {
            match within(d.chat_stream(req)).await {
                Ok(stream) => {
                    let (_, error) = collect(stream).await;
                    assert!(error.is_none(), "request/{case}: stream failed: {error:?}");
                    Ok(())
                }
                Err(e) => Err(e),
            }
        } else {
            within(d.chat(req)).await.map(|_| ())
        };
        let recorded = fake.requests();
        let actual = match result {
            Ok(()) => {
                assert_eq!(recorded.len(), 1, "request/{case}: one upstream call");
                recorded[0].body.clone()
            }
            Err(e) => {
                assert!(recorded.is_empty(), "request/{case}: a refused request must not reach the upstream");
                json!({ "error": error_json(&e) })
            }
        };
        failures.extend(check_golden("request", &case, &actual));
    }
    report(failures);
}

#[tokio::test]
async fn response_translation() {
    let mut failures = Vec::new();
    for (case, message) in golden_cases("response") {
        let fake = fake().await;
        fake.push(Canned::Message(message));
        let req = request(&json!({ "model": MODEL, "messages": [{ "role": "user", "content": "hi" }] }));
        let reply = within(deployment(&fake).chat(req)).await.unwrap_or_else(|e| panic!("response/{case}: {e}"));
        failures.extend(check_golden("response", &case, &redact(Value::Object(reply.into_object().unwrap()))));
    }
    report(failures);
}

#[tokio::test]
async fn stream_translation() {
    let mut failures = Vec::new();
    for (case, input) in golden_cases("stream") {
        let fake = fake().await;
        let events = input["events"]
            .as_array()
            .unwrap_or_else(|| panic!("stream/{case}: `events` array"))
            .iter()
            .map(|e| {
                let name = e["event"].as_str().unwrap();
                match &e["data"] {
                    Value::String(raw) => SseEvent::raw(name, raw.as_str()),
                    data => SseEvent::json(name, data),
                }
            })
            .collect();
        fake.push(Canned::events(events));
        let mut body = json!({ "model": MODEL, "messages": [{ "role": "user", "content": "hi" }], "stream": true });
        if input["include_usage"] == json!(true) {
            body["stream_options"] = json!({ "include_usage": true });
        }
        let stream = within(deployment(&fake).chat_stream(request(&body)))
            .await
            .unwrap_or_else(|e| panic!("stream/{case}: {e}"));
        let (chunks, error) = collect(stream).await;
        check_stream_invariants(&case, &chunks, error.is_none(), input["include_usage"] == json!(true));
        let actual = json!({
            "chunks": chunks.into_iter().map(redact).collect::<Vec<_>>(),
            "error": error.as_ref().map(error_json),
        });
        failures.extend(check_golden("stream", &case, &actual));
    }
    report(failures);
}

/// What holds for every stream: the role chunk before any other delta; with usage asked, every stream (failed ones too) ends
/// with exactly one usage chunk; tool-call arguments of a finished stream reassemble to JSON objects.
fn check_stream_invariants(case: &str, chunks: &[Value], finished: bool, include_usage: bool) {
    if let Some(first) = chunks.iter().find(|c| c["choices"].get(0).is_some()) {
        assert_eq!(first["choices"][0]["delta"]["role"], "assistant", "stream/{case}: role chunk first");
    }
    let usage_chunks: Vec<&Value> = chunks.iter().filter(|c| c.get("usage").is_some_and(|u| !u.is_null())).collect();
    if include_usage {
        assert_eq!(usage_chunks.len(), 1, "stream/{case}: one usage chunk");
        assert_eq!(chunks.last(), usage_chunks.first().copied(), "stream/{case}: the usage chunk comes last");
    } else {
        assert!(usage_chunks.is_empty(), "stream/{case}: no usage chunk when not asked");
    }
    if !finished {
        return;
    }
    let mut arguments: Vec<String> = Vec::new();
    for chunk in chunks {
        for call in chunk["choices"][0]["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap() as usize;
            if index == arguments.len() {
                assert!(
                    call["id"].is_string() && call["function"]["name"].is_string(),
                    "stream/{case}: tool call head"
                );
                arguments.push(String::new());
            }
            arguments[index].push_str(call["function"]["arguments"].as_str().unwrap_or_default());
        }
    }
    for (i, args) in arguments.iter().enumerate() {
        let parsed: Result<Value, _> = serde_json::from_str(args);
        assert!(
            parsed.is_ok_and(|v| v.is_object()),
            "stream/{case}: tool call {i} arguments {args:?} are not a JSON object"
        );
    }
}

#[tokio::test]
async fn error_mapping() {
    let mut failures = Vec::new();
    for (case, input) in golden_cases("error") {
        let fake = fake().await;
        let status = input["status"].as_u64().unwrap() as u16;
        let canned = match input.get("raw").and_then(Value::as_str) {
            Some(raw) => Canned::Raw { status, content_type: "text/html".into(), body: raw.into() },
            None => Canned::Error { status, body: input["body"].clone(), retry_after: input["retry_after"].as_u64() },
        };
        fake.push(canned.clone());
        fake.push(canned);
        let d = deployment(&fake);
        let body = json!({ "model": MODEL, "messages": [{ "role": "user", "content": "hi" }] });
        let chat_error =
            within(d.chat(request(&body))).await.err().unwrap_or_else(|| panic!("error/{case}: chat succeeded"));
        let stream_error = within(d.chat_stream(request(&body)))
            .await
            .err()
            .unwrap_or_else(|| panic!("error/{case}: chat_stream succeeded"));
        let actual = error_json(&chat_error);
        assert_eq!(actual, error_json(&stream_error), "error/{case}: chat and chat_stream agree");
        failures.extend(check_golden("error", &case, &actual));
    }
    report(failures);
}
