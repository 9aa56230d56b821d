//! Dashboard sessions: signing in with the master key gives a random 32-byte session token in an `HttpOnly`,
//! `SameSite=Strict` cookie and a CSRF token the page sends back in `x-csrf-token` on every call that changes
//! something. Sessions live in this process's memory (a map behind a mutex: the dashboard is not the model
//! request path), expire after [`SESSION_TTL`] without use (sliding), and are bounded in number.
//!
//! What this file does not do: decide what a principal may do (the handlers do, as for a key) or serve pages.

use crate::error::ApiError;
use axum::http::{header, HeaderMap, Method};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use svc_keys::Principal;
use svc_keys::{KeyCache, KeyHash};

/// The session cookie's name.
pub const COOKIE: &str = "svc_session";
/// The header carrying the CSRF token.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// A session unused this long is gone (each use starts the time again).
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// At most this many sessions at once; signing in beyond it ends the session nearest its expiry.
pub const MAX_SESSIONS: usize = 1024;

/// Who a session belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Signed in with the master key: everything the master key may do.
    Master,
    /// Signed in with a virtual key: a read-only view of its own team (only `GET`s, answered as for the key).
    Team {
        /// The SHA-256 of the key's secret: the key is looked up again on every request, so revoking or
        /// rotating it ends the session.
        key: KeyHash,
        /// Its team.
        team_id: String,
    },
}

impl Role {
    /// The wire name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Role::Master => "master",
            Role::Team { .. } => "team",
        }
    }

    /// The team of a team view.
    pub fn team(&self) -> Option<&str> {
        match self {
            Role::Master => None,
            Role::Team { team_id, .. } => Some(team_id),
        }
    }
}

/// One signed-in browser.
#[derive(Debug, Clone)]
pub struct Session {
    /// Who signed in.
    pub role: Role,
    /// The token state-changing calls must echo in `x-csrf-token`.
    pub csrf: String,
    expires: Instant,
}

/// The sessions of this process and the limiter of sign-in attempts.
pub struct Sessions {
    map: Mutex<HashMap<String, Session>>,
    ttl: Duration,
    /// Sign-in attempts, all browsers together: a burst of 10, then one every 6 s, so the master key cannot be
    /// guessed through the form.
    logins: DefaultDirectRateLimiter,
}

impl Default for Sessions {
    fn default() -> Sessions {
        Sessions::with_ttl(SESSION_TTL)
    }
}

impl Sessions {
    /// Sessions that end after `ttl` without use.
    pub fn with_ttl(ttl: Duration) -> Sessions {
        let quota = Quota::per_minute(NonZeroU32::MIN.saturating_add(9)).allow_burst(NonZeroU32::MIN.saturating_add(9));
        Sessions { map: Mutex::new(HashMap::new()), ttl, logins: RateLimiter::direct(quota) }
    }

    /// Counts one sign-in attempt; 429 when there were too many lately.
    pub fn attempt(&self) -> Result<(), ApiError> {
        self.logins.check().map_err(|_| ApiError::rate_limited("too many sign-in attempts, wait a minute", 6))
    }

    /// Opens a session for `role`; returns its token and CSRF token.
    pub fn open(&self, role: Role) -> (String, Session) {
        self.open_at(role, Instant::now())
    }

    fn open_at(&self, role: Role, now: Instant) -> (String, Session) {
        let token = random_token();
        let session = Session { role, csrf: random_token(), expires: now + self.ttl };
        let mut map = self.lock();
        map.retain(|_, s| s.expires > now);
        while map.len() >= MAX_SESSIONS {
            let Some(oldest) = map.iter().min_by_key(|(_, s)| s.expires).map(|(k, _)| k.clone()) else { break };
            map.remove(&oldest);
        }
        map.insert(token.clone(), session.clone());
        (token, session)
    }

    /// The live session of `token`, its expiry pushed back; `None` when unknown or expired.
    pub fn touch(&self, token: &str) -> Option<Session> {
        self.touch_at(token, Instant::now())
    }

    fn touch_at(&self, token: &str, now: Instant) -> Option<Session> {
        let mut map = self.lock();
        match map.get_mut(token) {
            Some(s) if s.expires > now => {
                s.expires = now + self.ttl;
                Some(s.clone())
            }
            Some(_) => {
                map.remove(token);
                None
            }
            None => None,
        }
    }

    /// Ends the session of `token`.
    pub fn close(&self, token: &str) {
        self.lock().remove(token);
    }

    /// The seconds a session lasts without use (the cookie's `Max-Age`).
    pub fn ttl_secs(&self) -> u64 {
        self.ttl.as_secs()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        // A panic while holding the lock cannot leave the map half-changed (each change is one call), so a
        // poisoned lock is still a usable map.
        self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// 32 random bytes, hex.
fn random_token() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

/// The value of the session cookie among the request's cookies.
pub fn cookie_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim())
        .filter(|v| !v.is_empty())
}

/// True when the request reached the gateway over TLS. The gateway has no TLS listener of its own, so this is
/// a TLS-terminating proxy's `X-Forwarded-Proto: https`.
pub fn over_tls(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"))
}

/// The `Set-Cookie` value opening (or, with `max_age` 0, ending) a session.
pub fn set_cookie(token: &str, max_age: u64, tls: bool) -> String {
    let secure = if tls { "; Secure" } else { "" };
    format!("{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}{secure}")
}

/// The principal of a request that carries no key but a session cookie: `None` when it carries a key (the key
/// decides) or no session cookie; a 401 when the session is unknown or expired (or its virtual key revoked,
/// expired or rotated); a 403 when the method changes something and `x-csrf-token` is missing or wrong, or the
/// session is a team's read-only view.
pub fn principal(
    sessions: &Sessions,
    keys: &KeyCache,
    method: &Method,
    headers: &HeaderMap,
) -> Option<Result<Principal, ApiError>> {
    if headers.contains_key(header::AUTHORIZATION) || headers.contains_key("x-api-key") {
        return None;
    }
    let token = cookie_token(headers)?;
    let Some(session) = sessions.touch(token) else {
        return Some(Err(ApiError::unauthorized("Your dashboard session has ended; sign in again.")));
    };
    let reads = matches!(*method, Method::GET | Method::HEAD);
    if !reads && !csrf_ok(&session, headers) {
        return Some(Err(ApiError::forbidden("permission_error", "missing or wrong CSRF token")));
    }
    Some(match &session.role {
        Role::Master => Ok(Principal::Master),
        Role::Team { .. } if !reads => {
            Err(ApiError::forbidden("permission_error", "the team view of the dashboard is read-only"))
        }
        Role::Team { key, .. } => match keys.get(key) {
            Some(k) if !k.revoked && k.expires.is_none_or(|e| e > chrono::Utc::now()) => Ok(Principal::Key(k)),
            _ => {
                sessions.close(token);
                Err(ApiError::unauthorized(
                    "The key of this dashboard session was revoked, rotated or has expired; sign in again.",
                ))
            }
        },
    })
}

/// True when `x-csrf-token` equals the session's token (compared in constant time).
pub fn csrf_ok(session: &Session, headers: &HeaderMap) -> bool {
    use subtle::ConstantTimeEq;
    headers
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| bool::from(v.as_bytes().ct_eq(session.csrf.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with_cookie(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, HeaderValue::from_str(value).unwrap_or(HeaderValue::from_static("")));
        h
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        let h = with_cookie("a=1; svc_session=abc ; b=2");
        assert_eq!(cookie_token(&h), Some("abc"));
        assert_eq!(cookie_token(&with_cookie("svc_sessionx=1")), None);
        assert_eq!(cookie_token(&HeaderMap::new()), None);
    }

    #[test]
    fn sessions_expire_slide_and_close() -> anyhow::Result<()> {
        let hour = Duration::from_secs(3600);
        let sessions = Sessions::with_ttl(hour);
        let start = Instant::now();
        let (token, session) = sessions.open_at(Role::Master, start);
        assert_eq!((token.len(), session.csrf.len()), (64, 64));
        assert_ne!(token, session.csrf);
        let minute = Duration::from_secs(60);
        assert!(
            sessions.touch_at(&token, start + hour - minute).is_some(),
            "used in time: still open, and pushed back"
        );
        assert!(sessions.touch_at(&token, start + 2 * hour - 2 * minute).is_some(), "sliding expiry");
        assert!(sessions.touch_at(&token, start + 3 * hour).is_none(), "unused past its time: gone");
        assert!(sessions.touch_at(&token, start).is_none(), "and forgotten");
        let (again, _) = sessions.open(Role::Master);
        sessions.close(&again);
        assert!(sessions.touch(&again).is_none());
        Ok(())
    }

    #[test]
    fn the_number_of_sessions_is_bounded() {
        let sessions = Sessions::default();
        let (first, _) = sessions.open(Role::Master);
        for _ in 0..MAX_SESSIONS {
            sessions.open(Role::Master);
        }
        assert!(sessions.touch(&first).is_none(), "the oldest made room");
        assert_eq!(sessions.lock().len(), MAX_SESSIONS);
    }

    #[test]
    fn csrf_is_needed_for_changes_only_and_keys_need_none() {
        let sessions = Sessions::default();
        let keys = KeyCache::default();
        let (token, session) = sessions.open(Role::Master);
        let mut h = with_cookie(&format!("{COOKIE}={token}"));
        assert!(matches!(principal(&sessions, &keys, &Method::GET, &h), Some(Ok(Principal::Master))));
        let refused = principal(&sessions, &keys, &Method::POST, &h).and_then(Result::err).map(|e| e.status().as_u16());
        assert_eq!(refused, Some(403));
        h.insert(CSRF_HEADER, HeaderValue::from_str(&session.csrf).unwrap_or(HeaderValue::from_static("")));
        assert!(matches!(principal(&sessions, &keys, &Method::POST, &h), Some(Ok(Principal::Master))));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer sk-x"));
        assert!(principal(&sessions, &keys, &Method::POST, &h).is_none(), "a key decides by itself");
        let gone = principal(&sessions, &keys, &Method::GET, &with_cookie("svc_session=nope"));
        assert_eq!(gone.and_then(Result::err).map(|e| e.status().as_u16()), Some(401));
    }

    #[test]
    fn tls_comes_from_the_proxy_header() {
        let mut h = HeaderMap::new();
        assert!(!over_tls(&h));
        h.insert("x-forwarded-proto", HeaderValue::from_static("HTTPS, http"));
        assert!(over_tls(&h));
        assert!(set_cookie("t", 5, true).ends_with("; Max-Age=5; Secure"));
        assert_eq!(set_cookie("t", 5, false), "svc_session=t; HttpOnly; SameSite=Strict; Path=/; Max-Age=5");
    }
}
