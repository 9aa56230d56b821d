//! The OpenAI Responses API and embeddings of the test upstream ([`crate::upstream`]): `POST /v1/responses`
//! answers the behaviour's text as one message (or, streamed, as the events OpenAI sends for it, usage in
//! `response.completed`), `POST /v1/embeddings` a vector of 8 numbers per input with `prompt_tokens` usage.
//! Both record the request and honour `fail_next` and `delay`.

use crate::upstream::{error, take, Shared};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::sync::Arc;

/// `POST /v1/responses`.
pub async fn responses(State(s): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let (b, req) = match take(&s, headers, &body).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let model = req.get("model").cloned().unwrap_or(Value::Null);
    let usage = json!({"input_tokens": b.prompt_tokens, "output_tokens": b.completion_tokens,
        "total_tokens": b.prompt_tokens + b.completion_tokens, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0}});
    let part = json!({"type": "output_text", "text": b.content, "annotations": []});
    let item =
        json!({"type": "message", "id": "msg_test", "status": "completed", "role": "assistant", "content": [part]});
    let response = |status: &str, output: Value, usage: Value| {
        json!({"id": "resp_test", "object": "response", "created_at": 1_700_000_000, "status": status, "error": null,
            "model": model, "output": output, "usage": usage, "store": false, "x_upstream_field": "kept"})
    };
    if !req.get("stream").and_then(Value::as_bool).unwrap_or(false) {
        return Json(response("completed", json!([item]), usage)).into_response();
    }
    let mut events = vec![
        ("response.created", json!({"response": response("in_progress", json!([]), Value::Null)})),
        (
            "response.output_item.added",
            json!({"output_index": 0, "item": {"type": "message", "id": "msg_test", "status": "in_progress", "role": "assistant", "content": []}}),
        ),
        (
            "response.content_part.added",
            json!({"item_id": "msg_test", "output_index": 0, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
        ),
    ];
    let text: Vec<char> = b.content.chars().collect();
    for piece in text.chunks(text.len().div_ceil(b.chunks.max(1)).max(1)) {
        let delta: String = piece.iter().collect();
        events.push((
            "response.output_text.delta",
            json!({"item_id": "msg_test", "output_index": 0, "content_index": 0, "delta": delta}),
        ));
    }
    events.push((
        "response.output_text.done",
        json!({"item_id": "msg_test", "output_index": 0, "content_index": 0, "text": b.content}),
    ));
    events.push(("response.x_unknown_event", json!({"note": "new event types pass"})));
    events.push(("response.output_item.done", json!({"output_index": 0, "item": item})));
    events.push(("response.completed", json!({"response": response("completed", json!([item]), usage)})));
    let body: String = events
        .into_iter()
        .enumerate()
        .map(|(i, (kind, mut data))| {
            data["type"] = json!(kind);
            data["sequence_number"] = json!(i);
            format!("event: {kind}\ndata: {data}\n\n")
        })
        .collect();
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(body))
        .unwrap_or_else(|_| error(500, "cannot build response"))
}

/// `GET /v1/responses/{id}`: `resp_test` (what every answer is called) as a stored response; 404 otherwise.
pub async fn stored(axum::extract::Path(id): axum::extract::Path<String>) -> Response {
    if id != "resp_test" {
        return error(404, &format!("No response found with id '{id}'."));
    }
    Json(json!({"id": "resp_test", "object": "response", "status": "completed", "model": "up-codex", "output": []}))
        .into_response()
}

/// `POST /v1/embeddings`: a deterministic vector per input, `prompt_tokens` usage.
pub async fn embeddings(State(s): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let (b, req) = match take(&s, headers, &body).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let inputs = match req.get("input") {
        Some(Value::Array(items)) => items.len(),
        _ => 1,
    };
    let data: Vec<Value> = (0..inputs)
        .map(|i| json!({"object": "embedding", "index": i, "embedding": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, i as f64]}))
        .collect();
    Json(json!({"object": "list", "data": data, "model": req.get("model"),
        "usage": {"prompt_tokens": b.prompt_tokens, "total_tokens": b.prompt_tokens}}))
    .into_response()
}
