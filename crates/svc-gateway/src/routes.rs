//! The route table, and nothing else. Every route requires a key (or a dashboard session) except the health
//! probes and the dashboard's files and sign-in; each API route is served at the root and under `/v1`.

use crate::auth::Authenticate;
use crate::handlers::{
    admin, chat, config, events, fleet, gemini, health, models, outbox, responses, spend, stats, teams,
};
use crate::state::AppState;
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use svc_front::Api;

/// Routes needing a key (the `Authenticate` layer wraps them).
fn protected(state: &AppState) -> Router<AppState> {
    at_both(vec![
        ("/chat/completions", chat::endpoint(Api::Chat)),
        ("/embeddings", chat::endpoint(Api::Embeddings)),
        ("/messages", chat::endpoint(Api::Messages)),
        ("/messages/count_tokens", post(chat::count_tokens)),
        ("/responses", chat::endpoint(Api::Responses).get(chat::responses_upgrade)),
        ("/responses/{id}", responses::by_id()),
        ("/responses/{id}/input_items", responses::input_items()),
        ("/responses/{id}/cancel", responses::cancel()),
        ("/models", get(models::list)),
        ("/key/generate", post(admin::generate)),
        ("/key/update", post(admin::update)),
        ("/key/delete", post(admin::delete)),
        ("/key/regenerate", post(admin::regenerate)),
        ("/key/block", post(admin::block)),
        ("/key/unblock", post(admin::unblock)),
        ("/key/info", get(admin::info)),
        ("/key/list", get(admin::list)),
        ("/team/new", post(teams::new)),
        ("/team/update", post(teams::update)),
        ("/team/delete", post(teams::delete)),
        ("/team/list", get(teams::list)),
        ("/team/info", get(teams::info)),
        ("/spend/logs", get(spend::logs)),
        ("/events", post(events::post)),
        ("/events/recent", get(outbox::recent)),
        ("/events/destinations", get(outbox::destinations)),
        ("/events/redeliver", post(outbox::redeliver)),
        ("/gateway/stats", get(stats::stats)),
        ("/fleet/nodes", get(fleet::nodes)),
        ("/config/reload", post(config::reload)),
        ("/health/models", get(health::models)),
    ])
    // Google's Gemini API, at its own two prefixes.
    .route("/v1beta/models/{*call}", post(gemini::call))
    .route("/v1/models/{*call}", post(gemini::call))
    .route_layer(Authenticate(state.auth.clone()))
}

/// Routes open to anyone (spec 5.7: the health examples carry no key).
fn open() -> Router<AppState> {
    at_both(vec![
        ("/health", get(health::liveness)),
        ("/health/liveliness", get(health::liveness)),
        ("/health/liveness", get(health::liveness)),
        ("/health/readiness", get(health::readiness)),
        ("/metrics", get(crate::handlers::metrics::handler)),
    ])
}

/// A router of `routes`, each at its path and under `/v1`. Both are routes of one flat table: a nested `/v1`
/// router would rewrite every request's URI to strip the prefix (a parse and an allocation per request).
fn at_both(routes: Vec<(&str, MethodRouter<AppState>)>) -> Router<AppState> {
    routes
        .into_iter()
        .fold(Router::new(), |r, (path, method)| r.route(path, method.clone()).route(&format!("/v1{path}"), method))
}

/// All routes, at the root and under `/v1`, and the dashboard.
pub fn table(state: &AppState) -> Router<AppState> {
    Router::new().merge(protected(state)).merge(open()).merge(crate::ui::routes())
}
