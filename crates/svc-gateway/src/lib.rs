//! The svc HTTP gateway: the OpenAI-compatible API (spec 4), authentication (spec 5), the admin API and
//! the request pipeline. [`app`] builds the router; [`serve`] runs it until shutdown.
//!
//! What this crate does not do: talk a provider's wire protocol (svc-providers), parse the config file
//! (svc-config) or run SQL (svc-store).

pub mod admin;
pub mod auth;
pub mod budgets;
pub mod error;
pub mod events;
pub mod handlers;
pub mod health;
pub mod keys;
pub mod outbox;
pub mod pipeline;
pub mod rate;
pub mod readiness;
mod routes;
pub mod state;

pub use error::ApiError;
pub use state::{AppState, StateError};

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use error::LoggedError;
use pipeline::UpstreamWait;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The request id and arrival time, in the request extensions of every request.
#[derive(Debug, Clone)]
pub struct RequestId(pub Arc<str>, pub Instant);

/// The router with every route and the request-context middleware.
pub fn app(state: AppState) -> Router {
    routes::table(&state)
        .fallback(|| async { ApiError::not_found("not_found_error", "no such route").into_response() })
        .layer(axum::middleware::from_fn(request_context))
        .with_state(state)
}

/// Gives every request an id (the client's `x-request-id` when it is sane, else a new UUID) and every
/// response `x-request-id` and `x-svc-overhead-duration-ms` (time in the gateway minus time waiting for the
/// upstream); logs 5xx answers once.
async fn request_context(mut req: Request, next: Next) -> Response {
    let started = Instant::now();
    let id: Arc<str> = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(Arc::from)
        .unwrap_or_else(|| Arc::from(uuid::Uuid::new_v4().to_string()));
    req.extensions_mut().insert(RequestId(id.clone(), started));
    let mut resp = next.run(req).await;
    let wait = resp.extensions().get::<UpstreamWait>().map(|w| w.0).unwrap_or(Duration::ZERO);
    let overhead = started.elapsed().saturating_sub(wait);
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&id) {
        h.insert("x-request-id", v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("{:.3}", overhead.as_secs_f64() * 1000.0)) {
        h.insert("x-svc-overhead-duration-ms", v);
    }
    if let Some(LoggedError(message)) = resp.extensions().get::<LoggedError>() {
        tracing::error!(request_id = %id, status = resp.status().as_u16(), %message, "request failed");
    }
    resp
}

/// Serves `state` on `listener` until `shutdown` resolves, then waits for streams in flight and for the
/// settlement tasks and spend writer to finish.
pub async fn serve(
    state: AppState,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let poller = spawn_key_poller(state.clone());
    let tasks = state.tasks.clone();
    let stop = state.shutdown.clone();
    let router = app(state);
    // Nagle's algorithm would hold a stream's last small write (`[DONE]`) until the client's delayed ACK, about
    // 40 ms: every accepted connection gets TCP_NODELAY.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let result = axum::serve(listener, router).with_graceful_shutdown(shutdown).await;
    poller.abort();
    stop.cancel();
    tasks.close();
    tasks.wait().await;
    result
}

/// Notices key changes made by other processes (CLI, other nodes) within a second.
fn spawn_key_poller(state: AppState) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = state.keys.refresh(&state.store, false).await {
                tracing::warn!(error = %e, "cannot refresh virtual keys from the store");
            }
        }
    })
}
