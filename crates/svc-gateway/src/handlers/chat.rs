//! The model endpoints: `POST /chat/completions` (spec 4.1), `POST /messages` (Anthropic Messages) and
//! `POST /responses` (OpenAI Responses). Each reads its body, turns it into the pipeline's request by its
//! front end (`crate::front`) and runs the one pipeline.

use crate::error::ApiError;
use crate::handlers::read_body;
use crate::observe::{Attempts, Logged, Refusal, RequestLine};
use crate::pipeline::{self, Inbound, Pipeline};
use crate::state::AppState;
use crate::RequestId;
use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, HeaderName};
use axum::response::{IntoResponse, Response};
use axum::routing::{post, MethodRouter};
use std::sync::Arc;
use svc_budget::{Money, Usage};
use svc_front::{Api, Caller};
use svc_keys::Principal;
use svc_providers::passthrough::{Forwarded, Raw, Wire};
use svc_routing::Route;

/// The route of a model endpoint (`POST`) that takes requests in `api`: chat completions, Anthropic Messages
/// (`?beta=true` is accepted and changes nothing), OpenAI Responses or embeddings.
pub fn endpoint(api: Api) -> MethodRouter<AppState> {
    post(
        move |State(state): State<Arc<Pipeline>>,
              Extension(principal): Extension<Principal>,
              Extension(id): Extension<RequestId>,
              headers: HeaderMap,
              body: Body| async move { run(state, principal, id, &headers, body, api, None).await },
    )
}

/// Runs one model request that came in by `api`; a Gemini request's model and whether it streams come from its
/// path (`gemini`). A request refused before any upstream call (400, 403, 404, 413, 429, 503) gets its request
/// line and metrics here; one that reached a deployment gets them when it settles.
pub(crate) async fn run(
    state: Arc<Pipeline>,
    principal: Principal,
    id: RequestId,
    headers: &HeaderMap,
    body: Body,
    api: Api,
    gemini: Option<(&str, bool)>,
) -> Response {
    let RequestId(request_id, started, _) = id;
    // A caller header past its bound is refused, after the request line has what could be read.
    let (caller, refused) = match Caller::from_headers(headers) {
        Ok(c) => (c, None),
        Err(e) => (Caller::default(), Some(ApiError::from(e))),
    };
    let mut inbound = Inbound { api, caller, headers: api_headers(headers) };
    let mut alias = String::new();
    let result: Result<Response, ApiError> = async {
        if let Some(e) = refused {
            return Err(e);
        }
        let mut bytes = read_body(body, state.config.server.max_request_body_bytes).await?;
        if let Some((model, stream)) = gemini {
            bytes = svc_front::gemini::with_path_fields(&bytes, model, stream)?.into();
            if inbound.caller.session.is_none() {
                inbound.caller.session = svc_front::gemini::session_of(&bytes);
            }
        }
        pipeline::handle(&state, principal.clone(), request_id.to_string(), &bytes, started, &inbound, &mut alias).await
    }
    .await;
    result.unwrap_or_else(|e| {
        let line = RequestLine {
            request_id: &request_id,
            api,
            principal: Some(&principal),
            caller: Some(&inbound.caller),
            alias: &alias,
            alias_label: state.models.configured(&alias).unwrap_or(""),
            deployment: "",
            provider: "",
            status: e.status().as_u16(),
            usage: Usage::default(),
            cost: Money::ZERO,
            latency: started.elapsed(),
            first_byte: None,
            attempts: Attempts::default(),
            refusal: Refusal::of(e.kind()),
        };
        line.record(&state.metrics);
        let mut resp = e.into_response();
        resp.extensions_mut().insert(Logged::default());
        resp
    })
}

/// `POST /messages/count_tokens`: passed through to the alias's first Anthropic deployment; for others the
/// prompt's tokens by the gateway's plain estimate. The alias must exist and be allowed to the caller, as for a
/// call, and each call counts against the key's and its team's `rpm_limit` as a call does (no tokens: it is
/// sent upstream with the gateway's own key, so it must not be a way around the limit); counting is free (no
/// budget is reserved or charged). A revoked (blocked) key never gets here: authentication answers 401.
pub async fn count_tokens(
    State(state): State<Arc<Pipeline>>,
    Extension(principal): Extension<Principal>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let bytes = read_body(body, state.config.server.max_request_body_bytes).await?;
    let (chat, _) = svc_front::messages::to_chat(&bytes)?;
    let req = svc_providers::ChatRequest::from_body(chat);
    let alias = req.model();
    let estimate = || Ok(serde_json::json!({ "input_tokens": svc_providers::estimate::prompt_tokens_plain(&req) }));
    let native = |route: &Route| {
        let body = svc_front::passthrough::prepare(Api::Messages, &bytes, &route.upstream_model(alias), None)?;
        Ok(body)
    };
    count(&state, &principal, &headers, alias, Wire::CountTokens, native, estimate).await
}

/// A token count (free: nothing reserved or charged) of a request for `alias`, which the caller must be allowed
/// to use; it counts against the key's and its team's `rpm_limit` as a call does. The alias's first deployment
/// counts it when it speaks `wire` (`native` gives the body to send it, as that deployment takes it), else the
/// gateway's `estimate` answers.
pub(crate) async fn count(
    state: &Pipeline,
    principal: &Principal,
    headers: &HeaderMap,
    alias: &str,
    wire: Wire,
    native: impl FnOnce(&Route) -> Result<bytes::Bytes, ApiError>,
    estimate: impl FnOnce() -> Result<serde_json::Value, ApiError>,
) -> Result<Response, ApiError> {
    pipeline::access::check(&state.models, &state.config, principal, alias)?;
    state.rates.admit(principal, &state.config, 0).await?;
    let plan = state.models.plan(alias, state.events.as_ref());
    let Some(route) = plan.as_ref().and_then(|p| p.candidates().first()).filter(|r| r.deployment.speaks(wire)) else {
        return Ok(axum::Json(estimate()?).into_response());
    };
    let forwarded = Forwarded { body: native(route)?, stream: false, headers: api_headers(headers) };
    let timeout = route.deployment.timeout;
    match tokio::time::timeout(timeout, route.deployment.forward(wire, forwarded)).await {
        Ok(Ok(Raw::Reply(answer))) => {
            let json = [(axum::http::header::CONTENT_TYPE, "application/json")];
            Ok((json, bytes::Bytes::copy_from_slice(answer.bytes())).into_response())
        }
        Ok(Ok(Raw::Stream(_))) => Err(ApiError::internal("the token count answered with a stream")),
        Ok(Err(e)) => Err(ApiError::from(e)),
        Err(_) => Err(ApiError::upstream_timeout(format!("the token count took longer than {} s", timeout.as_secs()))),
    }
}

/// The client's API headers passed through to an upstream that speaks its API.
pub(crate) fn api_headers(headers: &HeaderMap) -> Vec<(HeaderName, axum::http::HeaderValue)> {
    // Names made at compile time: a look-up by `&str` parses the name every time.
    const NAMES: [HeaderName; 2] =
        [HeaderName::from_static("anthropic-version"), HeaderName::from_static("anthropic-beta")];
    NAMES.iter().filter_map(|name| Some((name.clone(), headers.get(name)?.clone()))).collect()
}

/// `GET /responses` (a WebSocket upgrade, as current Codex versions try first): 426, so the client falls back
/// to HTTP at once.
pub async fn responses_upgrade() -> Response {
    let err = ApiError::upgrade_required("the gateway serves the Responses API over HTTP POST only, not WebSocket");
    let mut resp = err.into_response();
    resp.headers_mut().insert(axum::http::header::UPGRADE, axum::http::HeaderValue::from_static("HTTP/1.1"));
    resp
}
