//! The svc HTTP gateway: the OpenAI-compatible API (spec 4), authentication (spec 5), the admin API and
//! the request pipeline. [`app`] builds the router; [`serve`] runs it until shutdown.
//!
//! What this crate does not do: talk a provider's wire protocol (svc-providers), parse the config file
//! (svc-config) or run SQL (svc-store).

pub mod auth;
pub mod error;
pub mod handlers;
pub mod observe;
pub mod pipeline;
mod reload;
mod routes;
mod server;
pub use reload::{reload, reload_file, Overrides, ReloadError, Reloaded};
pub use server::tls::{acceptor as tls_acceptor, OverTls, TlsError};
pub mod spend;
pub mod state;
pub mod ui;

pub use error::ApiError;
pub use state::{AppState, StateError};

use axum::extract::Request;
use axum::http::{HeaderValue, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use error::LoggedError;
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The request id, its arrival time and the address of the TCP peer it came from (`None` for a request handed
/// to the router in process without one), in the request extensions of every request. (The peer rides here
/// rather than in an extension of its own: each extension inserted costs a request about 300 instructions, and
/// only a failed authentication reads it.)
#[derive(Debug, Clone)]
pub struct RequestId(pub Arc<str>, pub Instant, pub Option<IpAddr>);

/// The router with every route, and the request context around it. An unknown path is a 404 and a known
/// path asked with a method it does not take a 405 (with `allow`), both in the OpenAI error shape.
pub fn app(state: AppState) -> App {
    let router = routes::table(&state)
        .method_not_allowed_fallback(|method: Method, uri: Uri| async move {
            ApiError::method_not_allowed(method.as_str(), uri.path()).into_response()
        })
        .fallback(|| async { ApiError::not_found("not_found_error", "no such route").into_response() })
        .with_state(state.clone());
    App { router, state, peer: None }
}

/// What the server serves: the router with [`request_context`] around it, from outside. (As a router layer it
/// was applied to each route, and every request went through two more boxed services and futures.) In-process
/// tests drive it as a tower service.
#[derive(Clone)]
pub struct App {
    router: Router,
    state: AppState,
    peer: Option<IpAddr>,
}

impl App {
    /// The app serving one connection from `peer` (the accept loop makes one per connection), whose requests
    /// carry that address in their [`RequestId`].
    pub fn with_peer(self, peer: IpAddr) -> App {
        App { peer: Some(peer), ..self }
    }

    /// Answers `req`.
    pub async fn handle(self, req: Request) -> Response {
        request_context(&self.state, req, self.router, self.peer).await
    }
}

/// What `service` answers to `req`: the router and its routes always answer (their errors are responses too).
pub(crate) async fn answer<S>(service: S, req: Request) -> Response
where
    S: tower::Service<Request, Response = Response, Error = Infallible>,
{
    match tower::ServiceExt::oneshot(service, req).await {
        Ok(resp) => resp,
        Err(never) => match never {},
    }
}

/// The future of a service that always answers (the router's error answers are responses too).
pub(crate) type Answering = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response, Infallible>> + Send>>;

impl tower::Service<Request> for App {
    type Response = Response;
    type Error = Infallible;
    type Future = Answering;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Answering {
        let app = self.clone();
        Box::pin(async move { Ok(app.handle(req).await) })
    }
}

/// Gives every request an id (the client's `x-request-id` when it is sane, else a new UUID) and every
/// response `x-request-id` and `x-svc-overhead-duration-ms` (time in the gateway minus time waiting for the
/// upstream); logs 5xx answers once; writes the request line of every request the pipeline does not; counts
/// model requests and their errors for `GET /gateway/stats`.
async fn request_context(state: &AppState, mut req: Request, router: Router, peer: Option<IpAddr>) -> Response {
    let started = Instant::now();
    let model_request = ui::stats::is_model_request(req.method(), req.uri().path());
    let id: Arc<str> = req
        .headers()
        .get(&pipeline::REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(Arc::from)
        .unwrap_or_else(|| pipeline::with_id_text(uuid::Uuid::new_v4(), |id| Arc::from(id)));
    req.extensions_mut().insert(RequestId(id.clone(), started, peer));
    let shape = svc_front::ErrorShape::of_path(req.uri().path());
    let method = req.method().clone();
    let uri = req.uri().clone();
    let mut resp = answer(router, req).await;
    let logged = resp.extensions().get::<observe::Logged>().copied();
    if logged.is_none() {
        observe::log_other(&id, method.as_str(), uri.path(), resp.status().as_u16(), started.elapsed());
    }
    if model_request {
        state.edge.requests.record(resp.status());
    }
    if shape != svc_front::ErrorShape::OpenAi {
        resp = error::in_shape(resp, shape);
    }
    let wait = logged.map_or(Duration::ZERO, |l| l.upstream_wait);
    let overhead = started.elapsed().saturating_sub(wait);
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&id) {
        h.insert(pipeline::REQUEST_ID_HEADER, v);
    }
    if let Ok(v) = HeaderValue::from_bytes(&milliseconds(overhead)) {
        h.insert(pipeline::OVERHEAD_HEADER, v);
    }
    if let Some(LoggedError(message)) = resp.extensions().get::<LoggedError>() {
        tracing::error!(request_id = %id, status = resp.status().as_u16(), %message, "request failed");
    }
    resp
}

/// `d` in milliseconds with three decimals (`12.345`), written without float formatting.
fn milliseconds(d: Duration) -> Vec<u8> {
    let micros = d.as_micros();
    let mut out = Vec::with_capacity(24);
    out.extend_from_slice(itoa::Buffer::new().format(micros / 1000).as_bytes());
    let frac = (micros % 1000) as u16;
    out.extend_from_slice(&[b'.', b'0' + (frac / 100) as u8, b'0' + (frac / 10 % 10) as u8, b'0' + (frac % 10) as u8]);
    out
}

/// Serves `state` (built by [`AppState::serving`], which registered the node) on `listener` (over TLS with
/// `tls`, made by [`tls_acceptor`] from `server.tls`) until `shutdown` resolves (see `server` for the limits on what clients may hold), then waits for the requests under way (at
/// most `server.shutdown_timeout_seconds`), and for the settlement tasks and spend writer to finish.
pub async fn serve(
    state: AppState,
    listener: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let pipeline = state.pipeline();
    let metrics = match &pipeline.config.server.metrics_address {
        Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot listen on server.metrics_address {addr}: {e}"))
        })?),
        None => None,
    };
    let tasks = pipeline.tasks.clone();
    let stop = state.edge.shutdown.clone();
    spawn_key_watch(state.clone(), &tasks, stop.clone());
    let node = pipeline.node.clone();
    node.spawn(pipeline.events.clone(), &tasks, stop.clone());
    pipeline.budgets.spawn_upkeep(&tasks, stop.clone());
    spawn_auth_sweeper(state.clone(), &tasks, stop.clone());
    if let Some(rates) = pipeline.rates.fleet() {
        rates.clone().spawn(pipeline.config.fleet.heartbeat, &tasks, stop.clone());
    }
    // Not the budgets themselves: shutdown waits for their announcer, which ends when they are dropped.
    let slices = pipeline.budgets.leases().map(|_| (pipeline.store.clone(), pipeline.config.fleet.node.clone()));
    if let Some(listener) = metrics {
        spawn_metrics_listener(state.clone(), listener, stop.clone(), &tasks)?;
    }
    let limits = server::Limits::from_config(&pipeline.config.server);
    drop(pipeline);
    let acceptor = state.edge.live.tls.clone();
    acceptor.store(tls.map(Arc::new));
    let result = server::run(app(state), listener, limits, acceptor, shutdown).await;
    stop.cancel();
    node.stop().await;
    tasks.close();
    tasks.wait().await;
    // Every spend record is written now: this node's budget slices return to the fleet.
    if let Some((store, node)) = slices {
        svc_limits::budgets::Leases::stop(&store, &node).await;
    }
    result
}

/// Drops the stale addresses of the failed-authentication limit every minute until shutdown, so that a table
/// an attack filled empties once the attack is over.
fn spawn_auth_sweeper(
    state: AppState,
    tasks: &tokio_util::task::TaskTracker,
    stop: tokio_util::sync::CancellationToken,
) {
    tasks.spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(60));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => state.auth.failures.sweep(),
            }
        }
    });
}

/// Serves `GET /metrics` without a key on `server.metrics_address` until shutdown.
fn spawn_metrics_listener(
    state: AppState,
    listener: tokio::net::TcpListener,
    stop: tokio_util::sync::CancellationToken,
    tasks: &tokio_util::task::TaskTracker,
) -> std::io::Result<()> {
    let local = listener.local_addr()?;
    tracing::info!("metrics (no key) on http://{local}/metrics");
    tasks.spawn(async move {
        let app = handlers::metrics::metrics_router(state);
        if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await {
            tracing::warn!(error = %e, "the metrics listener stopped");
        }
    });
    Ok(())
}

/// Keeps the key cache and the teams current until shutdown (svc-keys' [`svc_keys::watch`]), on the task tracker.
fn spawn_key_watch(state: AppState, tasks: &tokio_util::task::TaskTracker, stop: tokio_util::sync::CancellationToken) {
    tasks.spawn(async move {
        let waits = || {
            svc_events::RetryPolicy::OUTBOX.with_delays(Duration::from_millis(200), Duration::from_secs(10)).delays()
        };
        let store = state.store();
        tokio::select! {
            () = stop.cancelled() => {}
            () = svc_keys::watch(&store, waits, || refresh_from_store(&state)) => {}
        }
    });
}

/// Applies what other processes changed in the store: teams made or changed at runtime, and the keys (the rate
/// limits forget the keys that are gone).
async fn refresh_from_store(state: &AppState) {
    if let Err(e) = reload::teams::refresh(state, false).await {
        tracing::warn!(error = %e, "cannot refresh the teams from the store");
    }
    let pipeline = state.pipeline();
    match state.auth.keys.refresh(&pipeline.store, false).await {
        Ok(true) => pipeline.rates.retain_keys(&state.auth.keys.ids()),
        Ok(false) => {}
        Err(e) => tracing::warn!(error = %e, "cannot refresh virtual keys from the store"),
    }
}

#[cfg(test)]
mod tests {
    use super::milliseconds;
    use std::time::Duration;

    #[test]
    fn overhead_is_written_in_milliseconds_with_three_decimals() {
        for (micros, text) in
            [(0, "0.000"), (7, "0.007"), (12_345, "12.345"), (1_005, "1.005"), (90_000_120, "90000.120")]
        {
            assert_eq!(milliseconds(Duration::from_micros(micros)), text.as_bytes(), "{micros} µs");
        }
        assert_eq!(milliseconds(Duration::from_nanos(1_999)), b"0.001", "truncated to the microsecond");
    }
}
