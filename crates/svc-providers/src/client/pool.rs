//! The upstream connections kept open between calls, per origin (scheme and authority): a stack of idle
//! HTTP/1.1 connections, and at most one HTTP/2 connection that every call shares, when the upstream chose
//! HTTP/2 by ALPN.
//!
//! Why not hyper-util's pooled client, which it replaces: per call that client hashed its pool key with SipHash
//! three times, took two locks, and spawned a task to wait for the connection to be free again; about 11,500
//! instructions, measured, where this costs about 1,000. Its newer composable pool is still experimental.
//!
//! - An HTTP/1.1 connection goes back on the stack when its answer's body has been read to the end ([`Back`]).
//!   An answer dropped before its end goes back only if hyper finds the message's end in what it has already
//!   read (as after a stream's `[DONE]`); otherwise hyper closes the connection.
//! - A call takes the connection used last (the one least likely to have been closed by the upstream) and waits
//!   until hyper says it is free. A connection the upstream closed while idle is dropped and the next tried; a
//!   request one of them never sent goes again on the next, or on a new connection.
//! - Idle HTTP/1.1 connections are dropped after [`IDLE_TIMEOUT`], by a task that runs while an origin has any;
//!   at most [`MAX_IDLE`] are kept per origin. The shared HTTP/2 connection stays until the upstream closes it.
//!
//! What this file does not do: open the connection (`connect.rs`) or bound a call in time (the caller does).

use super::connect::Connector;
use super::TransportError;
use ::http::uri::{Authority, Scheme};
use ::http::{Request, Response, Uri};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::Connection;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;
use tokio::time::Instant;
use tower::Service;

/// How long an unused connection is kept.
pub(super) const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Unused HTTP/1.1 connections kept per origin.
pub(super) const MAX_IDLE: usize = 256;

/// The body every call sends.
type CallBody = Full<Bytes>;

/// Every origin's connections, and how to open new ones.
pub(super) struct Pool {
    connector: HttpsConnector<Connector>,
    /// The origins called, from the configuration: a handful, so a list.
    origins: Mutex<Vec<Arc<Origin>>>,
}

/// One scheme and authority, and its open connections.
pub(super) struct Origin {
    /// `scheme://authority/`: what the connector is given.
    target: Uri,
    idle: Mutex<Idle>,
}

#[derive(Default)]
struct Idle {
    /// Oldest first; a call takes the last.
    http1: Vec<Parked>,
    http2: Option<http2::SendRequest<CallBody>>,
    /// Whether a task is dropping expired connections.
    reaping: bool,
}

/// An idle HTTP/1.1 connection.
struct Parked {
    conn: Http1,
    since: Instant,
}

/// An HTTP/1.1 connection's sending half.
pub(super) struct Http1 {
    sender: http1::SendRequest<CallBody>,
    /// Whether it goes to a plain-HTTP proxy, which is sent the whole URL.
    proxied: bool,
}

/// A connection a call is sent on.
enum Sender {
    Http1(Http1),
    Http2(http2::SendRequest<CallBody>),
}

/// What a send gave back: the answer, or the request when it was never sent.
enum Sent {
    Answer(Response<Incoming>, Option<Back>),
    Unsent(Request<CallBody>, TransportError),
    Failed(TransportError),
}

/// The HTTP/1.1 connection an answer came on, to go back to its origin once the body is read to its end.
pub(super) struct Back {
    origin: Arc<Origin>,
    conn: Option<Http1>,
}

impl Back {
    /// The body was read to its end: the connection can carry the next call.
    pub(super) fn park(mut self) {
        if let Some(conn) = self.conn.take() {
            self.origin.park(conn);
        }
    }
}

impl Drop for Back {
    /// The answer was dropped before its end was read (a stream's reader stops at `data: [DONE]`, before the
    /// body's last chunk). hyper reads on what it already has: when that ends the message, the connection is
    /// free and goes back; when more was still to come, hyper closes it. Until it has decided, a task waits.
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else { return };
        if conn.sender.is_ready() {
            self.origin.park(conn);
            return;
        }
        if conn.sender.is_closed() {
            return;
        }
        let origin = self.origin.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if conn.sender.ready().await.is_ok() {
                    origin.park(conn);
                }
            });
        }
    }
}

impl Pool {
    pub(super) fn new(connector: HttpsConnector<Connector>) -> Pool {
        Pool { connector, origins: Mutex::new(Vec::new()) }
    }

    /// The origin of `uri` (made on first use); `None` when `uri` has no scheme or authority.
    pub(super) fn origin(&self, uri: &Uri) -> Option<Arc<Origin>> {
        let (scheme, authority) = (uri.scheme()?, uri.authority()?);
        let mut origins = self.origins.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(o) = origins.iter().find(|o| o.is(scheme, authority)) {
            return Some(o.clone());
        }
        let target = Uri::builder().scheme(scheme.clone()).authority(authority.clone()).path_and_query("/").build();
        let origin = Arc::new(Origin { target: target.ok()?, idle: Mutex::default() });
        origins.push(origin.clone());
        Some(origin)
    }

    /// Sends `req` to `origin`: on an idle connection when one is free, else on a new one. The answer comes with
    /// its connection's way back when that is an HTTP/1.1 one.
    pub(super) async fn send(
        &self,
        origin: &Arc<Origin>,
        mut req: Request<CallBody>,
    ) -> Result<(Response<Incoming>, Option<Back>), TransportError> {
        while let Some(sender) = origin.checkout().await {
            match sender.send(origin, req).await {
                Sent::Answer(answer, back) => return Ok((answer, back)),
                Sent::Unsent(unsent, e) => {
                    tracing::debug!(error = %e, "an idle upstream connection could not carry a request; trying another");
                    req = unsent;
                }
                Sent::Failed(e) => return Err(e),
            }
        }
        // Boxed: opening a connection (TLS and HTTP/2 handshakes included) is a large future, which every caller's
        // future would otherwise hold and copy on each move, a new connection or not (about 45,000 instructions a
        // call, measured).
        let sender = Box::pin(self.connect(origin)).await?;
        match sender.send(origin, req).await {
            Sent::Answer(answer, back) => Ok((answer, back)),
            Sent::Unsent(_, e) | Sent::Failed(e) => Err(e),
        }
    }

    /// Opens a new connection to `origin` and starts its task (bare: it ends when the connection closes, which
    /// its last sender's drop or the upstream does; shutdown does not wait for upstream connections).
    #[allow(clippy::disallowed_methods)]
    async fn connect(&self, origin: &Arc<Origin>) -> Result<Sender, TransportError> {
        let io = self.connector.clone().call(origin.target.clone()).await?;
        let connected = io.connected();
        if connected.is_negotiated_h2() {
            let (sender, conn) =
                http2::Builder::new(TokioExecutor::new()).timer(TokioTimer::new()).handshake(io).await?;
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, "upstream HTTP/2 connection ended");
                }
            });
            origin.idle().http2 = Some(sender.clone());
            return Ok(Sender::Http2(sender));
        }
        let (sender, conn) = http1::handshake(io).await?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream connection ended");
            }
        });
        Ok(Sender::Http1(Http1 { sender, proxied: connected.is_proxied() }))
    }
}

impl Origin {
    fn is(&self, scheme: &Scheme, authority: &Authority) -> bool {
        self.target.scheme() == Some(scheme) && self.target.authority() == Some(authority)
    }

    /// How many idle HTTP/1.1 connections it keeps.
    #[cfg(test)]
    pub(super) fn idle_http1(&self) -> usize {
        self.idle().http1.len()
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Idle> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A free connection: the shared HTTP/2 one, or the HTTP/1.1 one used last that is still open.
    async fn checkout(&self) -> Option<Sender> {
        loop {
            let parked = {
                let mut idle = self.idle();
                if let Some(shared) = &idle.http2 {
                    if !shared.is_closed() {
                        return Some(Sender::Http2(shared.clone()));
                    }
                    idle.http2 = None;
                }
                idle.http1.pop()?
            };
            let mut conn = parked.conn;
            if parked.since.elapsed() >= IDLE_TIMEOUT || conn.sender.is_closed() {
                continue;
            }
            // Free at once when its last answer was read to the end; an error when the upstream closed it.
            if conn.sender.ready().await.is_ok() {
                return Some(Sender::Http1(conn));
            }
        }
    }

    /// Keeps `conn` for the next call (unless [`MAX_IDLE`] are kept already).
    fn park(self: &Arc<Origin>, conn: Http1) {
        let mut idle = self.idle();
        if idle.http1.len() >= MAX_IDLE || conn.sender.is_closed() {
            return;
        }
        idle.http1.push(Parked { conn, since: Instant::now() });
        if !idle.reaping {
            idle.reaping = true;
            // Bare: the reaper holds the pool weakly and ends with it.
            #[allow(clippy::disallowed_methods)]
            tokio::spawn(reap(Arc::downgrade(self)));
        }
    }
}

/// Drops `origin`'s expired and closed connections, every third of [`IDLE_TIMEOUT`], until it has none idle.
async fn reap(origin: Weak<Origin>) {
    loop {
        tokio::time::sleep(IDLE_TIMEOUT / 3).await;
        let Some(origin) = origin.upgrade() else { return };
        let mut idle = origin.idle();
        idle.http1.retain(|p| p.since.elapsed() < IDLE_TIMEOUT && !p.conn.sender.is_closed());
        if idle.http1.is_empty() {
            idle.reaping = false;
            return;
        }
    }
}

impl Sender {
    /// Sends `req`, written as this connection needs: HTTP/1.1 names only the path to an upstream and the whole
    /// URL to a plain-HTTP proxy; HTTP/2 takes the whole URL. A request it never sent comes back as it was given.
    async fn send(self, origin: &Arc<Origin>, mut req: Request<CallBody>) -> Sent {
        let whole = req.uri().clone();
        let (result, http1) = match self {
            Sender::Http2(mut sender) => (sender.try_send_request(req).await, None),
            Sender::Http1(mut conn) => {
                if !conn.proxied {
                    *req.uri_mut() = origin_form(&whole);
                }
                (conn.sender.try_send_request(req).await, Some(conn))
            }
        };
        match result {
            Ok(answer) => Sent::Answer(answer, http1.map(|conn| Back { origin: origin.clone(), conn: Some(conn) })),
            Err(mut e) => match e.take_message() {
                Some(mut req) => {
                    if http1.is_none() {
                        // The shared HTTP/2 connection cannot take calls any more: the next opens a new one.
                        origin.idle().http2 = None;
                    }
                    *req.uri_mut() = whole;
                    Sent::Unsent(req, e.into_error().into())
                }
                None => Sent::Failed(e.into_error().into()),
            },
        }
    }
}

/// The path and query of `uri` alone (`/` when it has none).
fn origin_form(uri: &Uri) -> Uri {
    uri.path_and_query().map(|p| Uri::from(p.clone())).unwrap_or_else(|| Uri::from_static("/"))
}
