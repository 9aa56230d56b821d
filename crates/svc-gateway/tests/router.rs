//! The router in process (`svc_gateway::app` driven with `tower::ServiceExt::oneshot`): the error answers the
//! router writes without a handler's help (wrong method, unknown path, a query string that does not fit)
//! have the OpenAI shape, as every other error does, except on the Messages API, whose every error is in
//! Anthropic's shape; and the 429 of a client address past its limit of failed authentications, on every API
//! (the peer's address given as the accept loop gives it, by `App::with_peer`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use svc_gateway::{app, AppState};
use tower::ServiceExt;

const MASTER: &str = "sk-master-router-test";

const CONFIG: &str = "
model_list:
  - model_name: m
    params: { model: mock/m }
gateway_settings:
  health_check_interval_seconds: 0
  teams:
    - { team_id: t, models: [m] }
";

async fn state(dir: &tempfile::TempDir) -> AppState {
    let url = format!("sqlite://{}", dir.path().join("svc.db").display());
    let store = svc_store::Store::connect(&url).await.unwrap();
    let config = svc_config::load_str(CONFIG, "t.yaml", svc_config::ConfigSource::Builtin, &|_| None).unwrap();
    AppState::new(config, store, Some(MASTER)).await.unwrap()
}

/// Sends one request with the master key; returns the status, the `content-type` and `allow` headers and
/// the JSON body.
async fn send(state: &AppState, method: &str, uri: &str) -> (StatusCode, Option<String>, Option<String>, Value) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::AUTHORIZATION, format!("Bearer {MASTER}"))
        .body(Body::empty())
        .unwrap();
    let resp = app(state.clone()).oneshot(req).await.unwrap();
    let status = resp.status();
    let text = |name: header::HeaderName| resp.headers().get(name).map(|v| v.to_str().unwrap().to_string());
    let (content_type, allow) = (text(header::CONTENT_TYPE), text(header::ALLOW));
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| panic!("{method} {uri}: not JSON: {:?}", String::from_utf8_lossy(&bytes)));
    (status, content_type, allow, body)
}

#[tokio::test]
async fn a_known_path_with_the_wrong_method_is_a_json_405() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(&dir).await;
    for (method, uri, allow) in [
        ("POST", "/health", "GET,HEAD"),
        ("DELETE", "/v1/chat/completions", "POST"),
        ("PUT", "/v1/models", "GET,HEAD"),
        ("GET", "/key/generate", "POST"),
    ] {
        let (status, content_type, allowed, body) = send(&s, method, uri).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}");
        assert_eq!(content_type.as_deref(), Some("application/json"));
        assert_eq!(allowed.as_deref(), Some(allow), "{method} {uri}");
        assert_eq!(
            body,
            json!({"error": {
                "message": format!("`{uri}` does not take {method} (see the `allow` header)"),
                "type": "method_not_allowed", "param": null, "code": "405"
            }})
        );
    }
    let (status, content_type, _, body) = send(&s, "GET", "/v1/nowhere").await;
    assert_eq!((status, content_type.as_deref()), (StatusCode::NOT_FOUND, Some("application/json")));
    assert_eq!(body["error"]["type"], "not_found_error");
}

#[tokio::test]
async fn a_query_string_that_does_not_fit_is_a_json_400_naming_the_parameter() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(&dir).await;
    let (status, content_type, _, body) = send(&s, "GET", "/spend/logs?limit=abc").await;
    assert_eq!((status, content_type.as_deref()), (StatusCode::BAD_REQUEST, Some("application/json")));
    assert_eq!(
        body,
        json!({"error": {
            "message": "`limit` must be a whole number from 1 to 1000, not `abc`",
            "type": "invalid_request_error", "param": "limit", "code": "400"
        }})
    );
    let (status, _, _, body) = send(&s, "GET", "/v1/spend/logs?page=-&limit=5").await;
    assert_eq!((status, body["error"]["param"].as_str()), (StatusCode::BAD_REQUEST, Some("page")));
    let (status, _, _, body) = send(&s, "GET", "/key/info?key=a&key=b").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(body["error"]["message"].as_str().unwrap().contains("duplicate field `key`"), "{body}");
    // Queries that fit still work.
    let (status, _, _, body) = send(&s, "GET", "/spend/logs?limit=5&page=2").await;
    assert_eq!((status, body["limit"].clone(), body["page"].clone()), (StatusCode::OK, json!(5), json!(2)));
    let (status, _, _, body) = send(&s, "GET", "/team/info?team_id=t").await;
    assert_eq!((status, body["team_id"].as_str()), (StatusCode::OK, Some("t")));
}

/// A body field of the wrong kind is named in `param`, as a query parameter is.
#[tokio::test]
async fn a_body_field_of_the_wrong_kind_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(&dir).await;
    let req = Request::builder()
        .method("POST")
        .uri("/key/generate")
        .header(header::AUTHORIZATION, format!("Bearer {MASTER}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(r#"{"team_id": "t", "rpm_limit": "many"}"#))
        .unwrap();
    let resp = app(s).oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let body: Value = serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["error"]["param"], "rpm_limit", "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error");
}

/// POSTs `body` to `uri` with the master key in `x-api-key` (as Anthropic clients send it).
async fn post_anthropic(state: &AppState, uri: &str, key: &str, body: Value) -> (StatusCode, Value) {
    let req = Request::builder()
        .method("POST")
        .uri(uri)
        .header("x-api-key", key)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let resp = app(state.clone()).oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test]
async fn the_messages_api_answers_in_anthropic_shape() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(&dir).await;
    let hi = json!({"model": "m", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]});
    let (status, body) = post_anthropic(&s, "/v1/messages?beta=true", MASTER, hi.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!((body["type"].as_str(), body["role"].as_str()), (Some("message"), Some("assistant")));
    assert_eq!(body["content"][0]["text"], "[mock m] hi");
    let (status, body) = post_anthropic(&s, "/v1/messages/count_tokens", MASTER, hi.clone()).await;
    assert_eq!((status, body["input_tokens"].is_u64()), (StatusCode::OK, true), "{body}");
    for (uri, key, body, want, kind) in [
        ("/v1/messages", "sk-nobody", hi.clone(), StatusCode::UNAUTHORIZED, "authentication_error"),
        (
            "/messages",
            MASTER,
            json!({"model": "nope", "messages": [{"role": "user", "content": "x"}]}),
            StatusCode::NOT_FOUND,
            "not_found_error",
        ),
        (
            "/v1/messages",
            MASTER,
            json!({"model": "m", "messages": "x"}),
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
        ),
        ("/v1/messages/count_tokens", "sk-nobody", hi.clone(), StatusCode::UNAUTHORIZED, "authentication_error"),
    ] {
        let (status, got) = post_anthropic(&s, uri, key, body).await;
        assert_eq!(status, want, "{uri}: {got}");
        assert_eq!((got["type"].as_str(), got["error"]["type"].as_str()), (Some("error"), Some(kind)), "{uri}: {got}");
        assert!(got["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{got}");
    }
    // The other APIs keep OpenAI's shape.
    let (status, got) = post_anthropic(&s, "/v1/responses", "sk-nobody", json!({"model": "m", "input": "x"})).await;
    assert_eq!((status, got["error"]["type"].as_str()), (StatusCode::UNAUTHORIZED, Some("authentication_error")));
    assert!(got.get("type").is_none(), "{got}");
}

/// A state whose client addresses may fail twice, then once a minute, behind the proxies of 10.0.0.0/8.
async fn limited_state(dir: &tempfile::TempDir) -> AppState {
    let url = format!("sqlite://{}", dir.path().join("svc.db").display());
    let store = svc_store::Store::connect(&url).await.unwrap();
    let yaml = format!(
        "server:\n  auth_failures_burst: 2\n  auth_failures_per_minute: 1\n  trusted_proxies: [10.0.0.0/8]\n{CONFIG}"
    );
    let config = svc_config::load_str(&yaml, "t.yaml", svc_config::ConfigSource::Builtin, &|_| None).unwrap();
    AppState::new(config, store, Some(MASTER)).await.unwrap()
}

/// POSTs `body` to `uri` with `Authorization: Bearer key` (none when `key` is empty), from `peer` (none: in process) with `x-forwarded-for`;
/// returns the status, `Retry-After` and the JSON body.
async fn post_from(
    state: &AppState,
    peer: Option<&str>,
    forwarded: Option<&str>,
    uri: &str,
    key: &str,
    body: &Value,
) -> (StatusCode, Option<u64>, Value) {
    let mut req = Request::builder().method("POST").uri(uri).header(header::CONTENT_TYPE, "application/json");
    if !key.is_empty() {
        req = req.header(header::AUTHORIZATION, format!("Bearer {key}"));
    }
    if let Some(f) = forwarded {
        req = req.header("x-forwarded-for", f);
    }
    let req = req.body(Body::from(body.to_string())).unwrap();
    let app = match peer {
        Some(p) => app(state.clone()).with_peer(p.parse().unwrap()),
        None => app(state.clone()),
    };
    let resp = app.oneshot(req).await.unwrap();
    let status = resp.status();
    let retry = resp.headers().get(header::RETRY_AFTER).map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, retry, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// Past its limit of failed authentications an address gets 429 `rate_limit_exceeded` with `Retry-After` on
/// every API (Anthropic's `rate_limit_error` on Messages), while a valid virtual key from it is still served
/// and other addresses are not touched.
#[tokio::test]
async fn failed_authentications_past_the_limit_are_a_429_on_every_api() {
    let dir = tempfile::tempdir().unwrap();
    let s = limited_state(&dir).await;
    let generate = json!({"team_id": "t"});
    let (status, _, made) = post_from(&s, None, None, "/key/generate", MASTER, &generate).await;
    assert_eq!(status, StatusCode::OK, "{made}");
    let key = made["key"].as_str().unwrap().to_string();
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let messages = json!({"model": "m", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]});
    let responses = json!({"model": "m", "input": "hi"});
    let embeddings = json!({"model": "m", "input": "hi"});
    let peer = Some("203.0.113.9");
    for i in 0..2 {
        let (status, retry, body) = post_from(&s, peer, None, "/v1/chat/completions", "sk-wrong", &chat).await;
        assert_eq!((status, retry), (StatusCode::UNAUTHORIZED, None), "failure {i}: {body}");
    }
    let message = "Rate limit exceeded: too many failed authentications from this address";
    for (uri, body) in [("/v1/chat/completions", &chat), ("/v1/responses", &responses), ("/v1/embeddings", &embeddings)]
    {
        let (status, retry, got) = post_from(&s, peer, None, uri, "sk-wrong", body).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{uri}: {got}");
        assert!(retry.is_some_and(|r| (1..=60).contains(&r)), "{uri}: Retry-After {retry:?}");
        assert_eq!(
            got,
            json!({"error": {"message": message, "type": "rate_limit_exceeded", "param": null, "code": "429"}}),
            "{uri}"
        );
    }
    let (status, retry, got) = post_from(&s, peer, None, "/v1/messages", "sk-wrong", &messages).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{got}");
    assert!(retry.is_some_and(|r| (1..=60).contains(&r)), "Retry-After {retry:?}");
    assert_eq!(got, json!({"type": "error", "error": {"type": "rate_limit_error", "message": message}}));
    // No key at all is a failure too.
    let (status, _, _) = post_from(&s, peer, None, "/v1/chat/completions", "", &chat).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    // A valid virtual key from the limited address is served on every API.
    for (uri, body) in [
        ("/v1/chat/completions", &chat),
        ("/v1/messages", &messages),
        ("/v1/responses", &responses),
        ("/v1/embeddings", &embeddings),
    ] {
        let (status, _, got) = post_from(&s, peer, None, uri, &key, body).await;
        assert_eq!(status, StatusCode::OK, "{uri}: {got}");
    }
    // A key this node does not hold yet (written to the store by another process) is refused from the limited
    // address before the store is asked; from another address it is looked up and found, and from then on it is
    // served from the limited address too.
    let secret = svc_keys::generate_secret();
    let row = svc_store::KeyRow {
        id: "k-elsewhere".into(),
        key_hash: hex::encode(svc_keys::hash_secret(&secret)),
        key_hint: svc_keys::hint_of(&secret),
        team_id: "t".into(),
        metadata: "{}".into(),
        ..Default::default()
    };
    s.store().insert_key(&row).await.unwrap();
    let (status, _, got) = post_from(&s, peer, None, "/v1/chat/completions", &secret, &chat).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{got}");
    let (status, _, got) = post_from(&s, Some("198.51.100.1"), None, "/v1/chat/completions", &secret, &chat).await;
    assert_eq!(status, StatusCode::OK, "{got}");
    let (status, _, got) = post_from(&s, peer, None, "/v1/chat/completions", &secret, &chat).await;
    assert_eq!(status, StatusCode::OK, "{got}");
    // The master key is refused from there (it can be guessed), not from elsewhere.
    let (status, _, _) = post_from(&s, peer, None, "/key/generate", MASTER, &generate).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let (status, _, _) = post_from(&s, Some("203.0.113.10"), None, "/key/generate", MASTER, &generate).await;
    assert_eq!(status, StatusCode::OK);
    // The same /64 is one address; another /64 is another.
    for (peer, want) in
        [("2001:db8:1:2::1", 401), ("2001:db8:1:2::2", 401), ("2001:db8:1:2::3", 429), ("2001:db8:1:3::1", 401)]
    {
        let (status, _, _) = post_from(&s, Some(peer), None, "/v1/chat/completions", "sk-wrong", &chat).await;
        assert_eq!(status.as_u16(), want, "{peer}");
    }
    // Through a trusted proxy, the forwarded address counts: the limited one is refused, another is not.
    let (status, _, _) =
        post_from(&s, Some("10.0.0.2"), Some("203.0.113.9"), "/v1/chat/completions", "sk-wrong", &chat).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let (status, _, _) =
        post_from(&s, Some("10.0.0.2"), Some("198.51.100.7"), "/v1/chat/completions", "sk-wrong", &chat).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // From a peer that is not a trusted proxy, a forwarded address is ignored.
    let (status, _, _) =
        post_from(&s, Some("192.0.2.1"), Some("198.51.100.8"), "/v1/chat/completions", "sk-wrong", &chat).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}
