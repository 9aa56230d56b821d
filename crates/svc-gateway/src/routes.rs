//! The route table, and nothing else. Every route requires a key (or a dashboard session) except the health
//! probes and the dashboard's files and sign-in; each API route is served at the root and under `/v1`.

use crate::auth::authenticate;
use crate::front::Api;
use crate::handlers::{admin, chat, events, fleet, health, models, outbox, spend, stats};
use crate::state::AppState;
use axum::middleware::from_fn_with_state;
use axum::routing::{get, post};
use axum::Router;

/// Routes needing a key (the auth middleware wraps them).
fn protected(state: &AppState) -> Router<AppState> {
    Router::new()
        .route("/chat/completions", chat::endpoint(Api::Chat))
        .route("/embeddings", chat::endpoint(Api::Embeddings))
        .route("/messages", chat::endpoint(Api::Messages))
        .route("/messages/count_tokens", post(chat::count_tokens))
        .route("/responses", chat::endpoint(Api::Responses).get(chat::responses_upgrade))
        .route("/responses/{id}", get(chat::stored_response))
        .route("/models", get(models::list))
        .route("/key/generate", post(admin::generate))
        .route("/key/update", post(admin::update))
        .route("/key/delete", post(admin::delete))
        .route("/key/regenerate", post(admin::regenerate))
        .route("/key/block", post(admin::block))
        .route("/key/unblock", post(admin::unblock))
        .route("/key/info", get(admin::info))
        .route("/key/list", get(admin::list))
        .route("/team/list", get(admin::teams))
        .route("/team/info", get(admin::team_info))
        .route("/spend/logs", get(spend::logs))
        .route("/events", post(events::post))
        .route("/events/recent", get(outbox::recent))
        .route("/events/destinations", get(outbox::destinations))
        .route("/events/redeliver", post(outbox::redeliver))
        .route("/gateway/stats", get(stats::stats))
        .route("/fleet/nodes", get(fleet::nodes))
        .route("/health/models", get(health::models))
        .route_layer(from_fn_with_state(state.clone(), authenticate))
}

/// Routes open to anyone (spec 5.7: the health examples carry no key).
fn open() -> Router<AppState> {
    Router::new()
        .route("/health", get(health::liveness))
        .route("/health/liveliness", get(health::liveness))
        .route("/health/liveness", get(health::liveness))
        .route("/health/readiness", get(health::readiness))
        .route("/metrics", get(crate::observe::scrape::handler))
}

/// All routes, at the root and under `/v1`.
pub fn table(state: &AppState) -> Router<AppState> {
    let api = protected(state).merge(open());
    Router::new().merge(api.clone()).nest("/v1", api).merge(crate::ui::routes())
}
