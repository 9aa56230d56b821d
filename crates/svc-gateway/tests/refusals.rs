//! The isolation refusals in process, on each client API: a client string past its bound (the model name, the
//! session header, the `User-Agent` product) is a 400 naming it, and a stored response the key did not create
//! is a 404 as if it did not exist: in OpenAI's shape on chat completions, Responses and embeddings, in
//! Anthropic's on Messages.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use svc_gateway::{app, AppState};
use tower::ServiceExt;

const MASTER: &str = "sk-master-refusals-test";

const CONFIG: &str = "
model_list:
  - model_name: 'm-*'
    params: { model: 'mock/*' }
gateway_settings:
  health_check_interval_seconds: 0
  teams:
    - { team_id: t, models: ['m-*'] }
    - { team_id: u, models: ['m-*'] }
";

async fn state(dir: &tempfile::TempDir) -> AppState {
    let url = format!("sqlite://{}", dir.path().join("svc.db").display());
    let store = svc_store::Store::connect(&url).await.unwrap();
    let config = svc_config::load_str(CONFIG, "t.yaml", svc_config::ConfigSource::Builtin, &|_| None).unwrap();
    AppState::new(config, store, Some(MASTER)).await.unwrap()
}

/// A virtual key of `team`: its secret and id.
async fn key(state: &AppState, team: &str) -> (String, String) {
    let req = Request::post("/key/generate")
        .header(header::AUTHORIZATION, format!("Bearer {MASTER}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(json!({"team_id": team}).to_string()))
        .unwrap();
    let (status, body) = answer(state, req).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    (body["key"].as_str().unwrap().to_string(), body["key_id"].as_str().unwrap().to_string())
}

async fn answer(state: &AppState, req: Request<Body>) -> (StatusCode, Value) {
    let resp = app(state.clone()).oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// The body of a request to `path` for model `model`, in that API's shape.
fn body_for(path: &str, model: &str) -> Value {
    match path {
        "/v1/chat/completions" => json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}),
        "/v1/messages" => json!({"model": model, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}),
        "/v1/responses" => json!({"model": model, "input": "hi"}),
        _ => json!({"model": model, "input": "hi"}),
    }
}

const APIS: [&str; 4] = ["/v1/chat/completions", "/v1/messages", "/v1/responses", "/v1/embeddings"];

async fn post(state: &AppState, key: &str, path: &str, model: &str, headers: &[(&str, String)]) -> (StatusCode, Value) {
    let mut req = Request::post(path)
        .header(header::AUTHORIZATION, format!("Bearer {key}"))
        .header(header::CONTENT_TYPE, "application/json");
    for (name, value) in headers {
        req = req.header(*name, value);
    }
    answer(state, req.body(Body::from(body_for(path, model).to_string())).unwrap()).await
}

/// The error of `body` as the API of `path` writes it: (type, message, param).
fn error_of(path: &str, body: &Value) -> (String, String, Value) {
    let e = &body["error"];
    if path == "/v1/messages" {
        assert_eq!(body["type"], "error", "Anthropic's shape: {body}");
    }
    (
        e["type"].as_str().unwrap_or_default().into(),
        e["message"].as_str().unwrap_or_default().into(),
        e["param"].clone(),
    )
}

#[tokio::test]
async fn a_client_string_past_its_bound_is_a_400_naming_it_on_every_api() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(&dir).await;
    let (k, _) = key(&s, "t").await;
    let at = format!("m-{}", "x".repeat(svc_providers::MAX_MODEL_BYTES - 2));
    let over = format!("{at}x");
    for path in APIS {
        let (status, body) = post(&s, &k, path, &at, &[]).await;
        assert_eq!(status, StatusCode::OK, "{path} at the bound: {body}");
        let (status, body) = post(&s, &k, path, &over, &[]).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path} over the bound");
        let (kind, message, param) = error_of(path, &body);
        assert_eq!(kind, "invalid_request_error", "{path}");
        assert!(message.starts_with("`model` is 257 bytes long"), "{path}: {message}");
        assert!(message.len() < 200, "the name is not echoed: {message}");
        if path != "/v1/messages" {
            assert_eq!(param, "model", "{path}");
        }
        let session = "s".repeat(129);
        let (status, body) = post(&s, &k, path, "m-a", &[("x-session-id", session)]).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        let (kind, message, _) = error_of(path, &body);
        assert_eq!(kind, "invalid_request_error");
        assert!(message.starts_with("`x-session-id` is 129 bytes long; at most 128"), "{path}: {message}");
        let agent = format!("{}/1.0", "c".repeat(65));
        let (status, body) = post(&s, &k, path, "m-a", &[("user-agent", agent)]).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert!(error_of(path, &body).1.starts_with("`user-agent` is 65 bytes long"), "{path}: {body}");
    }
}

#[tokio::test]
async fn a_stored_response_of_another_key_is_a_404_as_if_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(&dir).await;
    let (mine, my_id) = key(&s, "t").await;
    let (theirs, _) = key(&s, "u").await;
    // A response of `mine`'s, as its spend record names it.
    let store = svc_store::Store::connect(&format!("sqlite://{}", dir.path().join("svc.db").display())).await.unwrap();
    let record = svc_store::SpendRecord {
        record_id: "r1".into(),
        request_id: "q1".into(),
        ts_ms: 1,
        key_id: Some(my_id),
        team_id: Some("t".into()),
        model_alias: "m-a".into(),
        upstream_model: "a".into(),
        deployment: "m-*".into(),
        prompt_tokens: 1,
        completion_tokens: 1,
        cost: 0,
        status: 200,
        latency_ms: 1,
        api: Some("responses".into()),
        response_id: Some("resp_mine".into()),
        ..Default::default()
    };
    store.insert_spend_batch(&[record]).await.unwrap();
    for (method, uri) in [
        ("GET", "/v1/responses/ID"),
        ("DELETE", "/v1/responses/ID"),
        ("GET", "/v1/responses/ID/input_items"),
        ("POST", "/v1/responses/ID/cancel"),
    ] {
        let ask = |id: &str, k: &str| {
            Request::builder()
                .method(method)
                .uri(uri.replace("ID", id))
                .header(header::AUTHORIZATION, format!("Bearer {k}"))
                .body(Body::empty())
                .unwrap()
        };
        let (status, body) = answer(&s, ask("resp_mine", &theirs)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {uri}");
        assert_eq!(
            body,
            json!({"error": {"message": "Response with id 'resp_mine' not found.", "type": "invalid_request_error",
                "param": null, "code": "404"}})
        );
        let (_, unknown) = answer(&s, ask("resp_nobody", &theirs)).await;
        assert_eq!(unknown["error"]["message"], "Response with id 'resp_nobody' not found.");
        // The creator is past the ownership check: the mock deployment keeps no responses (400, not 404).
        let (status, _) = answer(&s, ask("resp_mine", &mine)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {uri}");
    }
    let next = json!({"model": "m-a", "input": "more", "previous_response_id": "resp_mine"});
    let req = Request::post("/v1/responses")
        .header(header::AUTHORIZATION, format!("Bearer {theirs}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(next.to_string()))
        .unwrap();
    let (status, body) = answer(&s, req).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        body,
        json!({"error": {"message": "Previous response with id 'resp_mine' not found.", "type": "invalid_request_error",
            "param": "previous_response_id", "code": "previous_response_not_found"}})
    );
}
