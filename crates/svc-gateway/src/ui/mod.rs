//! The dashboard (`/ui`): a small hand-written single-page app embedded in the binary (the files of
//! `crates/svc-gateway/ui/`), its sign-in with the master key, and the counters behind its request rates.
//!
//! 1. `GET /ui` serves the page shell; `GET /ui/<file>` its script modules, styles and icon, each with its
//!    content type, an `ETag` (a hash of the bytes, computed at first use), `Cache-Control: no-cache` (so a
//!    new binary's files are picked up at once, a 304 otherwise) and a `Content-Security-Policy` that allows
//!    nothing from outside the gateway and no inline script.
//! 2. `POST /ui/login` takes the master key and opens a session (`session.rs`): a cookie, and a CSRF token.
//! 3. Every number the pages show comes from the same admin API scripts use; `auth.rs` accepts the session
//!    cookie there in place of a key (`session::principal`).
//!
//! What this module does not do: render data on the server, or serve anything not compiled into the binary.

pub mod session;
pub mod stats;

use crate::auth::AuthState;
use crate::error::ApiError;
use crate::handlers::{parse_json, read_body};
use crate::state::AppState;
use crate::OverTls;
use axum::body::Body;
use axum::extract::{Extension, Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use session::Role;
use sha2::{Digest, Sha256};
use std::sync::{Arc, OnceLock};

/// An embedded file of the dashboard.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($path:literal, $type:expr) => {
        Asset { path: $path, content_type: $type, body: include_bytes!(concat!("../../ui/", $path)) }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file of the dashboard, by path under `/ui/`.
const ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("app.css", "text/css; charset=utf-8"),
    asset!("favicon.svg", "image/svg+xml"),
    asset!("js/app.js", JS),
    asset!("js/api.js", JS),
    asset!("js/dom.js", JS),
    asset!("js/chart.js", JS),
    asset!("js/pages/overview.js", JS),
    asset!("js/pages/keys.js", JS),
    asset!("js/pages/spend.js", JS),
    asset!("js/pages/requests.js", JS),
    asset!("js/pages/events.js", JS),
    asset!("js/pages/models.js", JS),
    asset!("js/pages/fleet.js", JS),
    asset!("js/pages/team.js", JS),
];

/// Nothing from outside the gateway, no inline script or style, no framing.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The dashboard's routes (open: the files are public, the data behind them is not).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/ui", get(index))
        .route("/ui/", get(index))
        .route("/ui/{*path}", get(file))
        .route("/ui/login", post(login))
        .route("/ui/logout", post(logout))
        .route("/ui/session", get(current))
}

/// The ETag of each asset, in [`ASSETS`] order.
fn etags() -> &'static [String] {
    static ETAGS: OnceLock<Vec<String>> = OnceLock::new();
    ETAGS.get_or_init(|| ASSETS.iter().map(|a| format!("\"{}\"", hex::encode(&Sha256::digest(a.body)[..12]))).collect())
}

async fn index(headers: HeaderMap) -> Response {
    serve("index.html", &headers)
}

async fn file(Path(path): Path<String>, headers: HeaderMap) -> Response {
    serve(&path, &headers)
}

/// Answers an embedded file (304 when the browser's copy is current), or 404.
fn serve(path: &str, headers: &HeaderMap) -> Response {
    let Some((i, asset)) = ASSETS.iter().enumerate().find(|(_, a)| a.path == path) else {
        return ApiError::not_found("not_found_error", format!("no dashboard file `{path}`")).into_response();
    };
    let etag = etags().get(i).map(String::as_str).unwrap_or_default();
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut resp = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, asset.content_type)], asset.body).into_response()
    };
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    resp
}

/// The body of `POST /ui/login`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Login {
    key: String,
}

/// `POST /ui/login` `{"key": "<master key or a virtual key>"}` → the session cookie and `{"csrf_token", "role",
/// "team_id", "expires_in"}` (a virtual key gets its team's read-only view); 401 for any other key, 429 after
/// too many attempts.
async fn login(
    State(auth): State<Arc<AuthState>>,
    tls: Option<Extension<OverTls>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let sessions = &auth.sessions;
    sessions.attempt()?;
    let bytes = read_body(body, 4096).await?;
    let req: Login = parse_json(&bytes)?;
    let digest = svc_keys::hash_secret(req.key.trim());
    let role = if auth.is_master(&digest) { Role::Master } else { team_role(&auth, digest).await? };
    let (token, session) = sessions.open(role);
    let cookie = session::set_cookie(&token, sessions.ttl_secs(), tls.is_some() || session::over_tls(&headers));
    let body = json!({"csrf_token": session.csrf, "role": session.role.as_str(), "team_id": session.role.team(),
        "expires_in": sessions.ttl_secs()});
    Ok(([(header::SET_COOKIE, cookie)], [(header::CACHE_CONTROL, "no-store")], Json(body)).into_response())
}

/// The read-only view of the team of the virtual key with this hash; 401 for anything but a live key.
async fn team_role(auth: &AuthState, digest: svc_keys::KeyHash) -> Result<Role, ApiError> {
    let wrong = || ApiError::unauthorized("That is neither the master key nor a virtual key of this gateway.");
    let key = crate::auth::live_key(auth, &digest, wrong).await?;
    Ok(Role::Team { key: digest, team_id: key.team_id.clone() })
}

/// `GET /ui/session` → who is signed in, the CSRF token (a reloaded page keeps working), the node and the currency
/// label of amounts; 401 when nobody.
async fn current(State(s): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    let session = session::cookie_token(&headers)
        .and_then(|t| s.auth.sessions.touch(t))
        .ok_or_else(|| ApiError::unauthorized("Not signed in to the dashboard."))?;
    let body = json!({"role": session.role.as_str(), "team_id": session.role.team(), "csrf_token": session.csrf,
        "node": s.pipeline().config.fleet.node, "currency": s.pipeline().config.gateway.currency});
    Ok(([(header::CACHE_CONTROL, "no-store")], Json(body)).into_response())
}

/// `POST /ui/logout` (with `x-csrf-token`) → 204, the session ended and its cookie cleared.
async fn logout(
    State(auth): State<Arc<AuthState>>,
    tls: Option<Extension<OverTls>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if let Some(token) = session::cookie_token(&headers) {
        if let Some(session) = auth.sessions.touch(token) {
            if !session::csrf_ok(&session, &headers) {
                return Err(ApiError::forbidden("permission_error", "missing or wrong CSRF token"));
            }
            auth.sessions.close(token);
        }
    }
    let cookie = session::set_cookie("", 0, tls.is_some() || session::over_tls(&headers));
    Ok((StatusCode::NO_CONTENT, [(header::SET_COOKIE, cookie)]).into_response())
}
