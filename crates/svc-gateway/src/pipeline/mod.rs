//! The chat-completions request path, one stage per module:
//!
//! 1. `auth` (middleware, before this): the key → a `Principal`, or 401.
//! 2. [`admission::enter`]: a place among `max_in_flight` requests, or 503 + `Retry-After`.
//! 3. `ChatRequest::parse`: a valid body, or 400 naming the field.
//! 4. [`access::check`]: the alias exists (404) and the caller may use it (403).
//! 5. [`routing`]: the plan: the alias's deployments in rotation, fewest in flight first, then its fallbacks'.
//! 6. [`admission::admit`]: rate limits, and the worst-case cost on the dearest deployment of the plan reserved
//!    in the team's and key's budgets (429 `Budget exceeded` / `rate_limit_exceeded`).
//! 7. [`upstream`]: the provider call; the alias becomes the upstream id on the way out and comes back in
//!    `model`; streams are forwarded chunk by chunk. A failed attempt (connect error, timeout, 408, 429, 5xx)
//!    is retried along the plan within `num_retries` and the first deployment's `timeout_seconds`, counted
//!    from the request's arrival; a stream is retried only while nothing of it reached the client (the
//!    gateway waits for the upstream's first chunk before answering), never after.
//! 8. [`settlement`]: cost from usage, the spend record group-committed before the response completes.
//!
//! Every attempt's outcome goes to its deployment's health (`crate::health`).

pub mod access;
pub mod admission;
pub mod routing;
pub mod settlement;
pub mod upstream;

use crate::auth::Principal;
use crate::error::ApiError;
use crate::health::Outcome;
use crate::state::AppState;
use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use routing::{Failure, InFlight, Route};
use settlement::Settle;
use std::sync::Arc;
use std::time::{Duration, Instant};
use svc_budget::{Money, Usage};
use svc_providers::{ChatRequest, ChunkStream, ProviderError, Reply};

/// Time spent waiting for the upstream, so the overhead header can subtract it.
#[derive(Debug, Clone, Copy)]
pub struct UpstreamWait(pub Duration);

/// The deployment that served a request (`x-svc-model-id`).
pub const MODEL_ID_HEADER: &str = "x-svc-model-id";

/// What a successful attempt got.
enum Answer {
    Reply(Reply),
    Stream(ChunkStream),
}

/// Runs a chat completion through every stage.
pub async fn handle(
    state: &AppState,
    principal: Principal,
    request_id: String,
    body: &Bytes,
    started: Instant,
) -> Result<Response, ApiError> {
    let ticket = admission::enter(state)?;
    let mut req = ChatRequest::parse(body)?;
    let alias = req.model().to_string();
    access::check(state, &principal, &alias)?;
    let mut plan = state
        .models
        .plan(&alias)
        .filter(|p| !p.candidates().is_empty())
        .ok_or_else(|| ApiError::not_found("model_not_found", format!("The model `{alias}` does not exist.")))?;
    let prompt_estimate = upstream::estimate_prompt(&req);
    let stream = req.stream();
    let client_wants_usage = req.wants_stream_usage();
    if stream {
        req.force_stream_usage();
    }
    // Prices may differ between deployments: holding the dearest worst case keeps every attempt, retry or
    // fallback, within what was reserved, so a team still never spends more than its limit.
    let amount =
        plan.candidates().iter().map(|r| admission::worst_case(r, &req, prompt_estimate)).max().unwrap_or(Money::ZERO);
    let reservation = admission::admit(state, &principal, amount, prompt_estimate).await?;
    let deadline = plan.candidates().first().map(|r| started + r.deployment.timeout).unwrap_or(started);

    let mut first = Some(req);
    let mut waited = Duration::ZERO;
    let mut last: Option<(Arc<Route>, ProviderError)> = None;
    while let Some(attempt) = plan.next_attempt() {
        if attempt.repeat > 0 {
            let pause = routing::backoff(attempt.repeat - 1);
            if Instant::now() + pause >= deadline {
                break;
            }
            tokio::time::sleep(pause).await;
            waited += pause;
        }
        let within = deadline.saturating_duration_since(Instant::now());
        if within.is_zero() {
            break;
        }
        // The parsed body is used once; a retry parses the client's bytes again (only retries pay for it).
        let mut req = match first.take() {
            Some(r) => r,
            None => reparse(body, stream)?,
        };
        let route = attempt.route.clone();
        req.set_model(&route.deployment.upstream_model);
        let mut in_flight = InFlight::new(route.clone());
        let t0 = Instant::now();
        let result = if stream {
            open_stream(&route, req, within).await.map(Answer::Stream)
        } else {
            call(&route, req, within).await.map(Answer::Reply)
        };
        let took = t0.elapsed();
        waited += took;
        let answer = match result {
            Ok(answer) => answer,
            Err(e) => {
                match routing::classify(&e) {
                    Failure::Final => {
                        last = Some((route, e));
                        break;
                    }
                    Failure::RateLimited => plan.exclude(&attempt),
                    Failure::Fault => {}
                }
                route.record(Outcome::Failed, state.events.as_ref());
                tracing::warn!(%request_id, deployment = %route.deployment.id, error = %e, "upstream attempt failed");
                last = Some((route, e));
                continue;
            }
        };
        let model_id = model_id(&route);
        let served = serving(&route, &alias);
        // Everything settlement needs, whichever way the answer came.
        let settle = move |in_flight| Settle {
            state: state.clone(),
            principal,
            route: served,
            request_id,
            started,
            ticket,
            in_flight,
            reservation,
        };
        let mut response = match answer {
            Answer::Reply(reply) => {
                route.record(Outcome::Answered(took), state.events.as_ref());
                let settle = settle(in_flight);
                let bytes = upstream::reply(settle, prompt_estimate, reply.body).await?;
                let mut resp = Response::new(Body::from(bytes));
                resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                resp
            }
            Answer::Stream(chunks) => {
                in_flight.watch_stream(took, state.events.clone());
                let settle = settle(in_flight);
                let body = upstream::stream_body(settle, chunks, client_wants_usage, prompt_estimate);
                let mut resp = Response::new(body);
                let h = resp.headers_mut();
                h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
                h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
                h.insert("x-accel-buffering", HeaderValue::from_static("no"));
                resp
            }
        };
        *response.status_mut() = StatusCode::OK;
        response.headers_mut().insert(MODEL_ID_HEADER, model_id);
        response.extensions_mut().insert(UpstreamWait(waited));
        return Ok(response);
    }

    // No attempt succeeded: answer the last error, naming the deployment that gave it (or, when the time was
    // up before any attempt, the first deployment of the plan).
    let (route, err) = match (last, plan.candidates().first()) {
        (Some((route, e)), _) => (route, e),
        (None, Some(route)) => {
            let e = ProviderError::Timeout { deployment: route.deployment.id.clone(), after: started.elapsed() };
            (route.clone(), e)
        }
        (None, None) => return Err(ApiError::internal("no deployment to route to")),
    };
    let err = ApiError::from(err);
    let served = serving(&route, &alias);
    let model_id = model_id(&route);
    let in_flight = InFlight::new(route);
    let settle =
        Settle { state: state.clone(), principal, route: served, request_id, started, ticket, in_flight, reservation };
    Ok(fail(settle, err, model_id, waited).await)
}

/// The route to settle and answer with: a fallback answers under the alias the client asked for.
fn serving(route: &Arc<Route>, alias: &str) -> Arc<Route> {
    if route.alias == alias {
        route.clone()
    } else {
        Arc::new(route.serving_as(alias))
    }
}

/// The client's body again, for a retry.
fn reparse(body: &Bytes, stream: bool) -> Result<ChatRequest, ApiError> {
    let mut req = ChatRequest::parse(body)?;
    if stream {
        req.force_stream_usage();
    }
    Ok(req)
}

/// `x-svc-model-id` of a deployment.
fn model_id(route: &Route) -> HeaderValue {
    HeaderValue::from_str(&route.deployment.id).unwrap_or(HeaderValue::from_static("unknown"))
}

/// The timeout error of an attempt cut short by the request's deadline: it names the deployment's own
/// `timeout_seconds` when the deadline was (nearly) all of it.
fn deadline_passed(route: &Route, within: Duration) -> ProviderError {
    let timeout = route.deployment.timeout;
    let after = if within + Duration::from_millis(100) >= timeout { timeout } else { within };
    ProviderError::Timeout { deployment: route.deployment.id.clone(), after }
}

/// A non-streaming attempt, bounded by `within`.
async fn call(route: &Route, req: ChatRequest, within: Duration) -> Result<Reply, ProviderError> {
    match tokio::time::timeout(within, route.deployment.chat(req)).await {
        Ok(result) => result,
        Err(_) => Err(deadline_passed(route, within)),
    }
}

/// A streaming attempt: the upstream's headers and its first chunk, bounded by `within`. A stream that fails
/// before its first chunk is an error like any other (nothing reached the client, so it may be retried); the
/// first chunk is put back in front of the rest.
async fn open_stream(route: &Route, req: ChatRequest, within: Duration) -> Result<ChunkStream, ProviderError> {
    let open = async {
        let mut chunks = route.deployment.chat_stream(req).await?;
        match chunks.next().await {
            Some(Ok(first)) => {
                Ok(Box::pin(futures::stream::once(async move { Ok(first) }).chain(chunks)) as ChunkStream)
            }
            Some(Err(e)) => Err(e),
            None => Ok(chunks),
        }
    };
    match tokio::time::timeout(within, open).await {
        Ok(result) => result,
        Err(_) => Err(deadline_passed(route, within)),
    }
}

/// Settles a failed upstream call (no tokens) and answers its error, still naming the deployment.
async fn fail(settle: Settle, err: ApiError, model_id: HeaderValue, wait: Duration) -> Response {
    settle.finish(Usage::default(), err.status.as_u16()).await;
    let mut resp = axum::response::IntoResponse::into_response(err);
    resp.headers_mut().insert(MODEL_ID_HEADER, model_id);
    resp.extensions_mut().insert(UpstreamWait(wait));
    resp
}
