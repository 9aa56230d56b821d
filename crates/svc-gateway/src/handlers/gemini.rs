//! The Gemini API's routes (`POST /v1beta/models/{model}:{method}`, and under `/v1/models/`): content
//! generation runs the one pipeline with the Gemini front end (the model and the stream from the path);
//! `countTokens` is passed through to a Gemini deployment or estimated, as `/messages/count_tokens` is;
//! `embedContent` and `batchEmbedContents` run as embeddings requests and answer in Gemini's shape.

use crate::error::ApiError;
use crate::handlers::chat::{count, run};
use crate::handlers::read_body;
use crate::pipeline::Pipeline;
use crate::RequestId;
use axum::body::Body;
use axum::extract::{Extension, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::sync::Arc;
use svc_front::gemini::{self, Method};
use svc_front::Api;
use svc_keys::Principal;
use svc_providers::passthrough::Wire;

/// `POST …/models/{model}:{method}`.
pub async fn call(
    State(state): State<Arc<Pipeline>>,
    Extension(principal): Extension<Principal>,
    Extension(id): Extension<RequestId>,
    Path(tail): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some((model, method)) = gemini::model_and_method(&tail) else {
        let message = format!("`{tail}` is not a model and a method (generateContent, streamGenerateContent, countTokens, embedContent, batchEmbedContents)");
        return ApiError::not_found("not_found_error", message).into_response();
    };
    match method {
        Method::Generate | Method::StreamGenerate => {
            let stream = method == Method::StreamGenerate;
            run(state, principal, id, &headers, body, Api::Gemini, Some((model, stream))).await
        }
        Method::CountTokens => count_tokens(&state, &principal, &headers, model, body).await.into_response(),
        Method::Embed | Method::BatchEmbed => embed(state, principal, id, &headers, model, method, body).await,
    }
}

/// `:countTokens`: passed through to the alias's first deployment when it speaks Gemini (a
/// `generateContentRequest`'s model made the deployment's), else the gateway's plain estimate of the prompt.
async fn count_tokens(
    state: &Pipeline,
    principal: &Principal,
    headers: &HeaderMap,
    alias: &str,
    body: Body,
) -> Result<Response, ApiError> {
    let bytes = read_body(body, state.config.server.max_request_body_bytes).await?;
    let request: serde_json::Map<String, Value> = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("request body is not a JSON object: {e}"), None))?;
    let estimate = || {
        // `{"contents": …}`, or a whole `generateContentRequest`.
        let inner = request.get("generateContentRequest").map_or_else(|| Value::Object(request.clone()), Value::clone);
        let chat = gemini::with_path_fields(inner.to_string().as_bytes(), alias, false)?;
        let (chat, _) = gemini::to_chat(&chat)?;
        let tokens = svc_providers::estimate::prompt_tokens_plain(&svc_providers::ChatRequest::from_body(chat));
        Ok(json!({ "totalTokens": tokens }))
    };
    let native = |route: &svc_routing::Route| {
        let mut request = request.clone();
        if let Some(Value::Object(inner)) = request.get_mut("generateContentRequest") {
            inner.insert("model".into(), Value::String(format!("models/{}", route.upstream_model(alias))));
        }
        serde_json::to_vec(&request).map(Into::into).map_err(|_| ApiError::internal("cannot encode the request"))
    };
    count(state, principal, headers, alias, Wire::GeminiCountTokens, native, estimate).await
}

/// The texts of an `embedContent` body's `content`, joined.
fn content_text(content: Option<&Value>) -> String {
    let parts = content.and_then(|c| c.get("parts")).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
}

/// `:embedContent` and `:batchEmbedContents` as one embeddings request (an input per content), answered as
/// `{"embedding": {"values"}}` or `{"embeddings": [{"values"}…]}`.
async fn embed(
    state: Arc<Pipeline>,
    principal: Principal,
    id: RequestId,
    headers: &HeaderMap,
    alias: &str,
    method: Method,
    body: Body,
) -> Response {
    let limit = state.config.server.max_request_body_bytes;
    let request: Value = match read_body(body, limit).await.map(|b| serde_json::from_slice(&b)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            return ApiError::bad_request(format!("request body is not valid JSON: {e}"), None).into_response()
        }
        Err(e) => return e.into_response(),
    };
    let (inputs, dimensions): (Vec<String>, Option<&Value>) = match method {
        Method::BatchEmbed => {
            let requests = request.get("requests").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
            let dims = requests.first().and_then(|r| r.get("outputDimensionality"));
            (requests.iter().map(|r| content_text(r.get("content"))).collect(), dims)
        }
        _ => (vec![content_text(request.get("content"))], request.get("outputDimensionality")),
    };
    let mut openai = json!({"model": alias, "input": inputs});
    if let Some(d) = dimensions {
        openai["dimensions"] = d.clone();
    }
    let body = Body::from(openai.to_string());
    let resp = run(state, principal, id, headers, body, Api::Embeddings, None).await;
    if resp.status() != StatusCode::OK {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let answer: Value = match read_body(body, usize::MAX).await.map(|b| serde_json::from_slice(&b)) {
        Ok(Ok(v)) => v,
        _ => return ApiError::internal("the embeddings answer is not JSON").into_response(),
    };
    let values: Vec<Value> = answer
        .get("data")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|d| json!({"values": d.get("embedding").cloned().unwrap_or(Value::Null)}))
        .collect();
    let out = match method {
        Method::BatchEmbed => json!({ "embeddings": values }),
        _ => json!({ "embedding": values.into_iter().next().unwrap_or(Value::Null) }),
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(out.to_string()))
}
