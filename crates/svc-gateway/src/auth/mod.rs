//! Authentication (the README's Authentication section): every route but the health probes passes through
//! [`authenticate`], which resolves `Authorization: Bearer <key>` (or `x-api-key`, for Anthropic clients) to a
//! [`Principal`] or answers 401. Secrets are compared as SHA-256 digests; the master key in constant time. Failed
//! authentications are limited per client address (svc-limits' `rate::AuthFailures`, the address read by
//! `client.rs`): past the limit they are answered 429, and so are the master key and a key this node does not
//! hold, while a valid virtual key is never slowed.

pub mod client;

use crate::error::ApiError;
use crate::ui::session::Sessions;
use axum::extract::Request;
use axum::http::{header, Extensions, HeaderMap, HeaderName, Uri};
use axum::response::{IntoResponse, Response};
use client::Origin;
use std::borrow::Cow;
use std::sync::Arc;
use subtle::ConstantTimeEq;
use svc_config::IpBlock;
use svc_keys::Principal;
use svc_keys::{hash_secret, KeyCache, KeyHash, VirtualKey};
use svc_limits::rate::AuthFailures;
use svc_store::Store;

/// What authentication reads: the keys, the master key's digest, the store (for keys this node has not heard
/// of yet), the limit of failed authentications and the dashboard's sessions.
pub struct AuthState {
    /// Virtual keys by hash.
    pub(crate) keys: Arc<KeyCache>,
    /// SHA-256 of the master key, compared in constant time.
    pub(crate) master_hash: Option<KeyHash>,
    /// Where keys this node has not heard of are looked up.
    pub(crate) store: Store,
    /// Failed authentications per client address.
    pub(crate) failures: AuthFailures,
    /// The proxies whose `X-Forwarded-For` names the client (`server.trusted_proxies`).
    pub(crate) trusted: Vec<IpBlock>,
    /// Signed-in dashboard browsers.
    pub(crate) sessions: Sessions,
}

impl AuthState {
    /// The answer to a failed authentication from `from`: its own `refusal` (401) while the client's address is
    /// within its limit of failures, else 429.
    pub(crate) fn failed(&self, from: &Origin<'_>, refusal: ApiError) -> ApiError {
        match self.failures.failed(|| from.client_ip(&self.trusted)) {
            Ok(()) => refusal,
            Err(limited) => limited.into(),
        }
    }

    /// 429 while the client's address of `from` is past its limit of failures; takes nothing from it.
    pub(crate) fn refuse_if_limited(&self, from: &Origin<'_>) -> Result<(), ApiError> {
        Ok(self.failures.refuse_if_limited(|| from.client_ip(&self.trusted))?)
    }

    /// Whether `digest` is the master key's (compared in constant time).
    pub(crate) fn is_master(&self, digest: &KeyHash) -> bool {
        self.master_hash.as_ref().is_some_and(|m| same_hash(digest, m))
    }
}

/// Whether two key hashes are equal, compared in constant time (a weak master key's hash must not leak byte by
/// byte): as four 64-bit words, one optimization barrier each, where `ct_eq` on the bytes took one a byte (about
/// 430 instructions a request, with the master key set).
pub(crate) fn same_hash(a: &KeyHash, b: &KeyHash) -> bool {
    let words = |h: &KeyHash| {
        let mut words = [0u64; 4];
        for (word, bytes) in words.iter_mut().zip(h.chunks_exact(8)) {
            *word = u64::from_le_bytes(bytes.try_into().unwrap_or([0; 8]));
        }
        words
    };
    bool::from(words(a).ct_eq(&words(b)))
}

/// Where Anthropic clients put their key.
const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
/// Where Gemini clients put their key.
const X_GOOG_API_KEY: HeaderName = HeaderName::from_static("x-goog-api-key");
/// The presented secret, or the 401 to answer: `Authorization: Bearer`, `x-api-key`, `x-goog-api-key`, or on
/// the Gemini API's paths the `key` query parameter, in that order.
fn presented<'a>(headers: &'a HeaderMap, uri: &'a Uri) -> Result<Cow<'a, str>, ApiError> {
    if let Some(v) = headers.get(header::AUTHORIZATION) {
        let v = v
            .to_str()
            .map_err(|_| ApiError::unauthorized("Malformed API Key passed in. Ensure Key has `Bearer ` prefix."))?;
        let token = v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")).map(str::trim);
        return match token {
            Some(t) if !t.is_empty() => Ok(Cow::Borrowed(t)),
            _ => Err(ApiError::unauthorized("Malformed API Key passed in. Ensure Key has `Bearer ` prefix.")),
        };
    }
    for name in [&X_API_KEY, &X_GOOG_API_KEY] {
        if let Some(v) = headers.get(name) {
            return v
                .to_str()
                .ok()
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(Cow::Borrowed)
                .ok_or_else(|| ApiError::unauthorized(format!("Malformed API key in `{name}`.")));
        }
    }
    if svc_front::gemini::is_gemini_path(uri.path()) {
        let key = form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()).find(|(k, _)| k == "key");
        if let Some((_, key)) = key.filter(|(_, v)| !v.trim().is_empty()) {
            return Ok(Cow::Owned(key.trim().to_string()));
        }
    }
    Err(ApiError::unauthorized("No api key passed in."))
}

/// Resolves a request's headers to a principal. A failure counts against the request's client address
/// (its `RequestId`, in `extensions`, has the peer), which may turn its 401 into a 429; a valid virtual key
/// takes nothing from it.
pub async fn resolve(
    state: &AuthState,
    headers: &HeaderMap,
    uri: &Uri,
    extensions: &Extensions,
) -> Result<Principal, ApiError> {
    let from = Origin::new(headers, extensions);
    let secret = presented(headers, uri).map_err(|e| state.failed(&from, e))?;
    let digest = hash_secret(&secret[..]);
    if state.is_master(&digest) {
        // An operator chose it, so it can be guessed: a limited address may not present it either.
        state.refuse_if_limited(&from)?;
        return Ok(Principal::Master);
    }
    let key = match state.keys.get(&digest) {
        Some(key) => key,
        None => {
            // Before the store is asked: its lookups are rate-limited for the whole process, and a limited
            // address must not use them up.
            state.refuse_if_limited(&from)?;
            let found = state.keys.resolve(&digest, &state.store).await;
            found.ok_or_else(|| state.failed(&from, ApiError::unauthorized("Invalid API key.")))?
        }
    };
    usable(&key).map_err(|e| state.failed(&from, e))?;
    Ok(Principal::Key(key))
}

/// The virtual key with hash `digest` when it may be used: `unknown()` when there is none, 401 when it is
/// revoked or expired. (The dashboard's sign-in, which has a limit of its own.)
pub(crate) async fn live_key(
    state: &AuthState,
    digest: &KeyHash,
    unknown: impl FnOnce() -> ApiError,
) -> Result<Arc<VirtualKey>, ApiError> {
    let key = state.keys.resolve(digest, &state.store).await.ok_or_else(unknown)?;
    usable(&key)?;
    Ok(key)
}

/// 401 for a revoked (blocked) or expired key.
fn usable(key: &VirtualKey) -> Result<(), ApiError> {
    if key.revoked {
        return Err(ApiError::unauthorized("This API key has been revoked."));
    }
    if key.expires.is_some_and(|e| e <= chrono::Utc::now()) {
        return Err(ApiError::unauthorized("Expired key."));
    }
    Ok(())
}

/// Puts the [`Principal`] in the request extensions or answers 401 (429 past the limit of failed
/// authentications). A request without a key may carry a dashboard session cookie instead (and then, to change
/// anything, its CSRF token: `ui::session`); the session path is not limited.
pub async fn authenticate<S>(state: Arc<AuthState>, mut req: Request, next: S) -> Response
where
    S: tower::Service<Request, Response = Response, Error = std::convert::Infallible>,
{
    let resolved = match crate::ui::session::principal(&state.sessions, &state.keys, req.method(), req.headers()) {
        Some(by_session) => by_session,
        None => resolve(&state, req.headers(), req.uri(), req.extensions()).await,
    };
    match resolved {
        Ok(p) => {
            req.extensions_mut().insert(p);
            crate::answer(next, req).await
        }
        Err(e) => e.into_response(),
    }
}

/// The layer that runs [`authenticate`] before the routes it wraps. (axum's `from_fn` boxes the route again
/// and makes a service of it for every request.)
#[derive(Clone)]
pub struct Authenticate(pub Arc<AuthState>);

impl<S> tower::Layer<S> for Authenticate {
    type Service = Authenticated<S>;
    fn layer(&self, inner: S) -> Authenticated<S> {
        Authenticated { state: self.0.clone(), inner }
    }
}

/// A route behind [`Authenticate`].
#[derive(Clone)]
pub struct Authenticated<S> {
    state: Arc<AuthState>,
    inner: S,
}

impl<S> tower::Service<Request> for Authenticated<S>
where
    S: tower::Service<Request, Response = Response, Error = std::convert::Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = crate::Answering;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        // Routes are always ready (axum's `Route`); `oneshot` checks the clone it calls.
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> crate::Answering {
        let (state, inner) = (self.state.clone(), self.inner.clone());
        Box::pin(async move { Ok(authenticate(state, req, inner).await) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_the_same_only_when_every_byte_is() {
        let a = svc_keys::hash_secret("sk-svc-one");
        assert!(same_hash(&a, &{ a }));
        assert!(!same_hash(&a, &svc_keys::hash_secret("sk-svc-two")));
        for at in [0, 7, 8, 15, 16, 24, 31] {
            let mut b = a;
            b[at] ^= 1;
            assert!(!same_hash(&a, &b), "byte {at}");
        }
    }
}
