//! Every status code of issue 2, with the OpenAI-shaped body.

use crate::harness::*;
use serde_json::{json, Value};
use std::time::Duration;
use svc_testkit::upstream::Upstream;

fn assert_error(body: &Value, kind: &str) {
    let e = &body["error"];
    assert!(e["message"].is_string(), "{body}");
    assert_eq!(e["type"], kind, "{body}");
    assert!(e.get("param").is_some() && e.get("code").is_some(), "{body}");
}

#[tokio::test]
async fn authentication_errors_are_401() {
    let up = Upstream::start().await.unwrap();
    let g = Gateway::start(&config_for(&up.base_url, "")).await;
    let c = client();
    let url = g.path("/v1/chat/completions");
    let body = chat("openai/gpt-4.1-mini");
    let cases: Vec<(Option<(&str, String)>, &str)> = vec![
        (None, "No api key passed in."),
        (Some(("authorization", "Basic abc".into())), "Malformed API Key passed in. Ensure Key has `Bearer ` prefix."),
        (Some(("authorization", "Bearer sk-svc-unknownunknownunknownunknownunknown".into())), "Invalid API key."),
        (Some(("x-api-key", "nope".into())), "Invalid API key."),
    ];
    for (header, message) in cases {
        let mut rb = c.post(&url).json(&body);
        if let Some((k, v)) = header {
            rb = rb.header(k, v);
        }
        let r = rb.send().await.unwrap();
        assert_eq!(r.status(), 401);
        assert!(r.headers().contains_key("x-request-id"));
        let j: Value = r.json().await.unwrap();
        assert_error(&j, "authentication_error");
        assert_eq!(j["error"]["message"], message);
    }
    // x-api-key works for a valid key (Anthropic clients).
    let key = g.key(json!({"team_id": "executor"})).await;
    let r = c.post(&url).header("x-api-key", &key).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    // Health needs no key.
    let r = c.get(g.path("/health")).send().await.unwrap();
    assert_eq!((r.status().as_u16(), r.json::<Value>().await.unwrap()), (200, json!({"status": "healthy"})));
    assert_eq!(c.get(g.path("/health/liveliness")).send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn access_and_request_errors() {
    let up = Upstream::start().await.unwrap();
    let g = Gateway::start(&config_for(&up.base_url, "  max_request_body_bytes: 2048\n")).await;
    let key = g.key(json!({"team_id": "executor", "key_alias": "exec"})).await;
    // 403: alias exists but the team may not use it.
    let (s, _, b) = post_chat(&g, &key, &chat("anthropic/claude-opus-4-1")).await;
    assert_eq!(s, 403);
    assert_error(&b, "team_model_access_denied");
    // 404: no such alias.
    let (s, _, b) = post_chat(&g, &key, &chat("openai/gpt-5")).await;
    assert_eq!(s, 404);
    assert_eq!(
        b,
        json!({"error": {"message": "The model `openai/gpt-5` does not exist.", "type": "model_not_found", "param": "model", "code": "model_not_found"}})
    );
    // 403: a virtual key on an admin route.
    let r = client().get(g.path("/key/list")).bearer_auth(&key).send().await.unwrap();
    assert_eq!(r.status(), 403);
    // 400: malformed JSON, missing and invalid fields, each naming the field.
    let c = client();
    let raw = |body: &'static str| {
        c.post(g.path("/v1/chat/completions"))
            .bearer_auth(&key)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let r = raw("{not json").await.unwrap();
    assert_eq!(r.status(), 400);
    assert_error(&r.json().await.unwrap(), "invalid_request_error");
    for (body, param) in [
        (r#"{"messages":[{"role":"user","content":"x"}]}"#, "model"),
        (r#"{"model":"openai/gpt-4.1-mini"}"#, "messages"),
        (r#"{"model":"openai/gpt-4.1-mini","messages":"hi"}"#, "messages"),
        (r#"{"model":"openai/gpt-4.1-mini","messages":[{"role":"user"}],"max_tokens":"ten"}"#, "max_tokens"),
    ] {
        let r = raw(body).await.unwrap();
        assert_eq!(r.status(), 400, "{body}");
        let j: Value = r.json().await.unwrap();
        assert_eq!(j["error"]["param"], param, "{j}");
    }
    // 413: a body over the configured limit.
    let big = json!({"model": "openai/gpt-4.1-mini", "messages": [{"role": "user", "content": "x".repeat(4096)}]});
    let (s, _, b) = post_chat(&g, &key, &big).await;
    assert_eq!(s, 413);
    assert_error(&b, "request_too_large");
    // Unknown route: 404 in the same shape.
    let r = client().get(g.path("/v1/nope")).bearer_auth(&key).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_error(&r.json().await.unwrap(), "not_found_error");
    assert_eq!(up.requests().len(), 0, "nothing invalid reached the upstream");
}

#[tokio::test]
async fn upstream_failures_map_to_502_504_and_pass_through() {
    let up = Upstream::start().await.unwrap();
    // A port with nothing listening: bind, note, drop.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let g = Gateway::start(&config_with(&up.base_url, &format!("http://{dead}/v1"), "")).await;
    // gpt-4.1-nano now points at the dead port.
    let (s, h, b) = post_chat(&g, MASTER, &chat("openai/gpt-4.1-nano")).await;
    assert_eq!(s, 502, "{b}");
    assert_error(&b, "upstream_unreachable");
    assert_eq!(h["x-svc-model-id"], "openai/gpt-4.1-nano");
    // Readiness is 503 and names the unreachable deployment.
    let r = client().get(g.path("/health/readiness")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    let report: Value = r.json().await.unwrap();
    let bad: Vec<&Value> = report["providers"].as_array().unwrap().iter().filter(|p| p["ready"] == false).collect();
    assert_eq!(bad.len(), 1, "{report}");
    assert_eq!(bad[0]["deployment"], "openai/gpt-4.1-nano");
    assert!(bad[0]["error"].as_str().unwrap().contains("unreachable"));
    // 504: slower than timeout_seconds (2).
    up.set(|b| b.delay = Duration::from_secs(3));
    let (s, _, b) = post_chat(&g, MASTER, &chat("openai/gpt-4.1-mini")).await;
    assert_eq!(s, 504, "{b}");
    assert_error(&b, "upstream_timeout");
    // An upstream HTTP error passes its status and message through.
    up.set(|b| {
        b.delay = Duration::ZERO;
        b.fail_next.push_back((429, "slow down".into()));
        b.fail_next.push_back((400, "bad temperature".into()));
    });
    let (s, _, b) = post_chat(&g, MASTER, &chat("openai/gpt-4.1-mini")).await;
    assert_eq!((s, b["error"]["message"].as_str()), (429, Some("slow down")));
    let (s, _, b) = post_chat(&g, MASTER, &chat("openai/gpt-4.1-mini")).await;
    assert_eq!((s, b["error"]["message"].as_str()), (400, Some("bad temperature")));
    // A 401 or 403 refuses the gateway's own credentials: a 502 that says whose they are, in each API's shape,
    // not to be retried, without the provider's words (they may quote the gateway's key).
    up.set(|b| {
        b.fail_next.push_back((401, "Incorrect API key provided: sk-proj-****abcd".into()));
        b.fail_next.push_back((403, "Your key may not use this model".into()));
    });
    let (s, h, b) = post_chat(&g, MASTER, &chat("openai/gpt-4.1-mini")).await;
    assert_eq!(s, 502, "{b}");
    assert_error(&b, "upstream_auth_error");
    assert_eq!(b["error"]["code"], "upstream_credentials_refused");
    assert_eq!(h["x-should-retry"], "false");
    let message = b["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("refused the gateway's credentials for deployment `openai/gpt-4.1-mini`"), "{message}");
    assert!(message.contains("not your key") && !message.contains("sk-proj"), "{message}");
    let messages =
        json!({"model": "openai/gpt-4.1-mini", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]});
    let r = client().post(g.path("/v1/messages")).header("x-api-key", MASTER).json(&messages).send().await.unwrap();
    assert_eq!(r.status(), 502);
    let b: Value = r.json().await.unwrap();
    assert_eq!((b["type"].as_str(), b["error"]["type"].as_str()), (Some("error"), Some("api_error")), "{b}");
    assert!(b["error"]["message"].as_str().unwrap_or_default().contains("gateway's credentials"), "{b}");
}

#[tokio::test]
async fn overload_is_503_with_retry_after() {
    let up = Upstream::start().await.unwrap();
    up.set(|b| b.hold_stream = true);
    let g = Gateway::start(&config_for(&up.base_url, "  max_in_flight: 1\n")).await;
    let mut body = chat("openai/gpt-4.1-mini");
    body["stream"] = json!(true);
    let held = client().post(g.path("/v1/chat/completions")).bearer_auth(MASTER).json(&body).send().await.unwrap();
    assert_eq!(held.status(), 200);
    let (s, h, b) = post_chat(&g, MASTER, &chat("openai/gpt-4.1-mini")).await;
    assert_eq!(s, 503, "{b}");
    assert_eq!(h["retry-after"], "1");
    assert_error(&b, "overloaded_error");
    up.release();
    let text = held.text().await.unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"));
    // The place is free again.
    let (s, _, _) = post_chat(&g, MASTER, &chat("openai/gpt-4.1-mini")).await;
    assert_eq!(s, 200);
}

/// Requests hyper answers by itself, before any handler runs, still get the OpenAI shape.
#[tokio::test]
async fn unreadable_requests_get_json_errors() {
    let up = Upstream::start().await.unwrap();
    let g = Gateway::start(&config_for(&up.base_url, "")).await;
    let many_headers: Vec<u8> = [
        b"GET /health HTTP/1.1\r\nHost: svc\r\n".to_vec(),
        (0..120).flat_map(|i| format!("X-Header-{i}: v\r\n").into_bytes()).collect(),
        b"\r\n".to_vec(),
    ]
    .concat();
    let long_uri = format!("GET /{} HTTP/1.1\r\nHost: svc\r\n\r\n", "a".repeat(70_000)).into_bytes();
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"GARBAGE\r\n\r\n".to_vec(), 400, "invalid_request_error"),
        (b"GET /health HTTP/1.1\r\nHost: svc\r\nNo colon here\r\n\r\n".to_vec(), 400, "invalid_request_error"),
        (
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: svc\r\nContent-Length: ten\r\n\r\n".to_vec(),
            400,
            "invalid_request_error",
        ),
        (many_headers, 431, "request_headers_too_large"),
        (long_uri, 414, "uri_too_long"),
    ];
    for (request, status, kind) in cases {
        let r = crate::raw::exchange(g.addr(), &request).await;
        let shown = String::from_utf8_lossy(&request[..request.len().min(60)]).into_owned();
        assert_eq!(r.status, status, "{shown}");
        assert_eq!(r.header("content-type"), Some("application/json"), "{shown}");
        assert!(r.header("x-request-id").is_some(), "{shown}");
        let body = r.json();
        assert_error(&body, kind);
        assert_eq!(body["error"]["code"], status.to_string(), "{shown}");
    }
    // The server goes on answering.
    assert_eq!(crate::raw::exchange(g.addr(), b"GET /health HTTP/1.1\r\nHost: svc\r\n\r\n").await.status, 200);
}
