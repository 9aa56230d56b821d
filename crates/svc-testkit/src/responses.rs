//! The OpenAI Responses API and embeddings of the test upstream ([`crate::upstream`]): `POST /v1/responses`
//! answers the behaviour's text as one message (or, streamed, as the events OpenAI sends for it, usage in
//! `response.completed`), `POST /v1/embeddings` a vector of 8 numbers per input with `prompt_tokens` usage.
//! Both record the request and honour `fail_next` and `delay`; a streamed response is endless with
//! `endless_event` (counted as cancelled when the client goes away).
//!
//! Responses are kept as OpenAI keeps them: each gets its own id (`resp_0001`, …), is stored unless the request
//! says `store: false`, and can be retrieved, deleted, have its input items listed and, when created with
//! `background: true` (then left `in_progress`), be cancelled. A `previous_response_id` it does not keep is
//! answered 404, as OpenAI does; one it keeps bills the chain's history (the previous response's input and
//! output) as input, before the new input.

use crate::upstream::{error, take, Behaviour, Shared, StreamGuard};
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// The responses kept, by id, and the last id given.
#[derive(Debug, Default)]
pub(crate) struct Stored {
    by_id: Mutex<HashMap<String, Kept>>,
    last: std::sync::atomic::AtomicUsize,
}

/// One kept response: the response object and the input items it was created with.
#[derive(Debug, Clone)]
struct Kept {
    response: Value,
    input: Vec<Value>,
    background: bool,
}

/// The request's `input` as items (a string is one user message).
fn items_of(req: &Value) -> Vec<Value> {
    match req.get("input") {
        Some(Value::Array(items)) => items.clone(),
        Some(Value::String(text)) => {
            vec![json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})]
        }
        _ => Vec::new(),
    }
}

/// The input a request's chain bills before its own, as OpenAI bills it: the previous response's input and
/// output (404 for a previous response not kept).
fn history(s: &Shared, req: &Value) -> Result<u64, Box<Response>> {
    let Some(previous) = req.get("previous_response_id").and_then(Value::as_str) else { return Ok(0) };
    let kept = s.stored.by_id.lock().ok().and_then(|m| m.get(previous).map(|k| k.response["usage"].clone()));
    let Some(usage) = kept else {
        return Err(Box::new(error(404, &format!("Previous response with id '{previous}' not found."))));
    };
    let count = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
    Ok(count("input_tokens") + count("output_tokens"))
}

/// `POST /v1/responses/input_tokens`: the input a Responses request would be billed (its chain's history and
/// the behaviour's prompt tokens), counted as `responses` bills it; not a call (no failure is taken, no delay).
/// Refuses the fields OpenAI's endpoint does not take (`max_output_tokens`, `stream`), as it does.
pub async fn input_tokens(State(s): State<Arc<Shared>>, body: Bytes) -> Response {
    let Ok(req) = serde_json::from_slice::<Value>(&body) else { return error(400, "invalid JSON") };
    s.counts.fetch_add(1, Ordering::Relaxed);
    if let Some(field) = ["max_output_tokens", "stream", "store"].iter().find(|f| req.get(**f).is_some()) {
        return error(400, &format!("Unknown parameter: '{field}'."));
    }
    let prompt = match s.behaviour.lock() {
        Ok(b) => b.prompt_tokens,
        Err(_) => return error(500, "poisoned"),
    };
    match history(&s, &req) {
        Ok(h) => Json(json!({"object": "response.input_tokens", "input_tokens": h + prompt})).into_response(),
        Err(resp) => *resp,
    }
}

/// `POST /v1/responses`.
pub async fn responses(State(s): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let (b, req) = match take(&s, headers, &body).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let model = req.get("model").cloned().unwrap_or(Value::Null);
    let history = match history(&s, &req) {
        Ok(h) => h,
        Err(resp) => return *resp,
    };
    let id = format!("resp_{:04}", s.stored.last.fetch_add(1, Ordering::Relaxed) + 1);
    let keep = req.get("store").and_then(Value::as_bool) != Some(false);
    let background = req.get("background").and_then(Value::as_bool) == Some(true);
    let input = history + b.prompt_tokens;
    // The output cap is honoured, as the API honours it.
    let cap = req.get("max_output_tokens").and_then(Value::as_u64).unwrap_or(u64::MAX);
    let output = b.completion_tokens.min(cap);
    let usage = b.usage_override.clone().unwrap_or_else(|| {
        json!({"input_tokens": input, "output_tokens": output,
        "total_tokens": input + output, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0}})
    });
    let part = json!({"type": "output_text", "text": b.content, "annotations": []});
    let item =
        json!({"type": "message", "id": "msg_test", "status": "completed", "role": "assistant", "content": [part]});
    let response = |status: &str, output: Value, usage: Value| {
        json!({"id": id, "object": "response", "created_at": 1_700_000_000, "status": status, "error": null,
            "model": model, "output": output, "usage": usage, "store": keep, "x_upstream_field": "kept"})
    };
    let output: Vec<Value> = b.extra_output.iter().cloned().chain(std::iter::once(item.clone())).collect();
    let done = if background {
        response("in_progress", json!([]), Value::Null)
    } else {
        response("completed", Value::Array(output.clone()), usage.clone())
    };
    if keep {
        if let Ok(mut m) = s.stored.by_id.lock() {
            m.insert(id.clone(), Kept { response: done.clone(), input: items_of(&req), background });
        }
    }
    if background || !req.get("stream").and_then(Value::as_bool).unwrap_or(false) {
        return Json(done).into_response();
    }
    if let Some(event) = b.endless_event.clone() {
        let created = json!({"type": "response.created", "response": response("in_progress", json!([]), Value::Null)});
        return endless(s, created, event, b.chunk_delay);
    }
    let created = response("in_progress", json!([]), Value::Null);
    streamed(&b, created, item, response("completed", Value::Array(output), usage))
}

/// The events OpenAI streams for one message `item` (`b.content` in `b.chunks` deltas) between the
/// `created` and `completed` responses, with an event type no client knows (clients must skip it).
fn streamed(b: &Behaviour, created: Value, item: Value, completed: Value) -> Response {
    let mut events = vec![
        ("response.created", json!({"response": created})),
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
    events.push(("response.completed", json!({"response": completed})));
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

/// A stream of `created`, then `event` again and again, `gap` apart, until the client goes away.
fn endless(s: Arc<Shared>, created: Value, event: Value, gap: std::time::Duration) -> Response {
    let sse = |data: &Value| {
        let kind = data.get("type").and_then(Value::as_str).unwrap_or("message");
        Bytes::from(format!("event: {kind}\ndata: {data}\n\n"))
    };
    let (first, repeat) = (sse(&created), sse(&event));
    let guard = StreamGuard { shared: s, finished: false };
    let body = futures::stream::unfold((Some(first), repeat, guard), move |(first, repeat, guard)| async move {
        if let Some(first) = first {
            return Some((Ok::<Bytes, std::io::Error>(first), (None, repeat, guard)));
        }
        if !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
        Some((Ok(repeat.clone()), (None, repeat, guard)))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| error(500, "cannot build response"))
}

/// The kept response `id`.
fn kept(s: &Shared, id: &str) -> Option<Kept> {
    s.stored.by_id.lock().ok().and_then(|m| m.get(id).cloned())
}

/// OpenAI's 404 for a response it does not keep.
fn not_kept(id: &str) -> Response {
    error(404, &format!("Response with id '{id}' not found."))
}

/// `GET /v1/responses/{id}`.
pub async fn retrieve(State(s): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    match kept(&s, &id) {
        Some(k) => Json(k.response).into_response(),
        None => not_kept(&id),
    }
}

/// `DELETE /v1/responses/{id}`.
pub async fn delete(State(s): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    let removed = s.stored.by_id.lock().ok().and_then(|mut m| m.remove(&id));
    match removed {
        Some(_) => Json(json!({"id": id, "object": "response.deleted", "deleted": true})).into_response(),
        None => not_kept(&id),
    }
}

/// `GET /v1/responses/{id}/input_items`.
pub async fn input_items(State(s): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    match kept(&s, &id) {
        Some(k) => {
            let (first, last) =
                (k.input.first().and_then(|i| i.get("id")).cloned(), k.input.last().and_then(|i| i.get("id")).cloned());
            Json(json!({"object": "list", "data": k.input, "first_id": first, "last_id": last, "has_more": false}))
                .into_response()
        }
        None => not_kept(&id),
    }
}

/// `POST /v1/responses/{id}/cancel`: only a background response can be cancelled.
pub async fn cancel(State(s): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    let Ok(mut m) = s.stored.by_id.lock() else { return error(500, "poisoned") };
    match m.get_mut(&id) {
        Some(k) if k.background => {
            k.response["status"] = json!("cancelled");
            Json(k.response.clone()).into_response()
        }
        Some(_) => error(400, "Only responses created with background=true can be cancelled."),
        None => not_kept(&id),
    }
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
