//! One accepted connection: hyper serves it, and a watchdog closes it when the client is too slow or idle.
//!
//! hyper's own `header_read_timeout` cannot serve here: its timer starts as soon as a connection is idle
//! (hyper 1.12, `proto/h1/conn.rs`: an idle connection polls for the next head at once, which arms the timer),
//! so it bounds the idle time between keep-alive requests too, and a 10 s header bound would close idle
//! connections after 10 s whatever `keep_alive_timeout_seconds` says. The watchdog keeps the two apart:
//!
//! | State | Closed after |
//! |---|---|
//! | opened, or a request's headers arriving (bytes came in, no request began) | `header_read_timeout` |
//! | idle between requests (nothing came in since the last response) | `keep_alive_timeout` |
//! | answering requests | never (streams may run long) |
//!
//! The request path only counts (three relaxed atomic additions a request: bytes read, requests begun and
//! ended); it never reads a clock, takes a lock or wakes the watchdog. The watchdog looks at the counters
//! every tick (a quarter of the shorter timeout) and adds up how long the connection has stayed in one state,
//! so a deadline is kept to within a tick: a connection is closed after at least its timeout and at most a
//! tick more. At shutdown a connection that has sent nothing since it opened or since its last response is
//! closed at once; the others finish what they are doing (hyper then closes them), within the deadlines above
//! and the shutdown deadline. What this module does not do: bound a slow request *body* (the handlers read
//! it) or write any bytes itself (`io.rs` replaces hyper's own error answers).

use super::io::Watched;
use super::tls::OverTls;
use super::Limits;
use crate::App;
use axum::body::Body;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Duration;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// What a connection has done, counted by the request path and read by the watchdog.
#[derive(Debug, Default)]
pub(super) struct Activity {
    /// Reads that brought bytes.
    reads: AtomicU64,
    /// Requests handed to the router.
    begun: AtomicU64,
    /// Requests whose response body is done with.
    ended: AtomicU64,
}

/// One look at the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    reads: u64,
    begun: u64,
    ended: u64,
}

impl Activity {
    /// Bytes came in.
    pub(super) fn bytes_read(&self) {
        self.reads.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether no request is being answered (hyper writes nothing of its own then but an error answer).
    pub(super) fn awaiting_request(&self) -> bool {
        let seen = self.seen();
        seen.begun == seen.ended
    }

    /// A request reached the router; it is answered until the guard drops.
    fn begin(self: &Arc<Self>) -> RequestGuard {
        self.begun.fetch_add(1, Ordering::Relaxed);
        RequestGuard(self.clone())
    }

    fn seen(&self) -> Seen {
        // `ended` first: a request that ends between the two loads is then seen as still answered.
        let ended = self.ended.load(Ordering::Relaxed);
        Seen { reads: self.reads.load(Ordering::Relaxed), begun: self.begun.load(Ordering::Relaxed), ended }
    }
}

/// What the watchdog has seen of a connection, tick after tick.
#[derive(Debug)]
struct Watch {
    last: Seen,
    /// Time spent in the current state, counted in whole ticks since it was first seen.
    waited: Duration,
    /// Whether the current state is waiting for a request's headers (else idle after a response).
    reading: bool,
    header_read: Duration,
    keep_alive: Duration,
    tick: Duration,
}

/// What the watchdog decides at a tick.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Keep,
    /// Too slow to send a request, or idle too long.
    Close,
}

impl Watch {
    fn new(limits: &Limits) -> Watch {
        let shorter = limits.header_read_timeout.min(limits.keep_alive_timeout);
        Watch {
            last: Seen { reads: 0, begun: 0, ended: 0 },
            waited: Duration::ZERO,
            reading: true,
            header_read: limits.header_read_timeout,
            keep_alive: limits.keep_alive_timeout,
            tick: (shorter / 4).max(Duration::from_millis(10)),
        }
    }

    /// One tick: the counters now, against those of the last tick.
    fn tick(&mut self, now: Seen) -> Verdict {
        let last = std::mem::replace(&mut self.last, now);
        if now.begun != now.ended {
            // Answering: no deadline.
            self.waited = Duration::ZERO;
            self.reading = false;
            return Verdict::Keep;
        }
        if now.ended != last.ended || now.begun != last.begun {
            // A response ended since the last tick: idle from about now.
            self.waited = Duration::ZERO;
            self.reading = false;
            return Verdict::Keep;
        }
        if now.reads != last.reads && !self.reading {
            // The first bytes of a new request: its headers are due from about now.
            self.reading = true;
            self.waited = Duration::ZERO;
            return Verdict::Keep;
        }
        self.waited += self.tick;
        let limit = if self.reading { self.header_read } else { self.keep_alive };
        if self.waited >= limit {
            Verdict::Close
        } else {
            Verdict::Keep
        }
    }

    /// Whether nothing has come in since the connection opened or since its last response (as of the last
    /// tick).
    fn silent(&self, now: Seen) -> bool {
        now.begun == now.ended && now.reads == self.last.reads && !(self.reading && self.last.reads > 0)
    }
}

/// Held from a request's arrival at the router until its response body is done with.
struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.ended.fetch_add(1, Ordering::Relaxed);
    }
}

/// A response body that keeps its request counted as answered until it is done with.
struct Tracked {
    body: Body,
    _guard: RequestGuard,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// How a connection is told to stop: `drain` finishes the requests under way and closes, `close` closes now.
#[derive(Clone)]
pub(super) struct Stop {
    pub drain: CancellationToken,
    pub close: CancellationToken,
}

/// Serves one connection until it ends, times out or is told to close: over TLS when `tls` is given (the
/// handshake first, within `header_read_timeout`). `_permit` is its place among `max_connections`, given back
/// when this returns.
pub(super) async fn serve(
    tcp: TcpStream,
    tls: Option<Arc<TlsAcceptor>>,
    app: App,
    http: auto::Builder<TokioExecutor>,
    limits: Limits,
    stop: Stop,
    _permit: OwnedSemaphorePermit,
) {
    let Some(acceptor) = tls else {
        return serve_stream(tcp, false, app, http, limits, stop).await;
    };
    let handshake = tokio::time::timeout(limits.header_read_timeout, acceptor.accept(tcp));
    let stream = tokio::select! {
        shaken = handshake => match shaken {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!("TLS handshake not done within server.header_read_timeout_seconds");
                return;
            }
        },
        () = stop.drain.cancelled() => return,
    };
    serve_stream(stream, true, app, http, limits, stop).await;
}

/// Serves one connection's stream (plain or TLS; `over_tls` marks its requests).
async fn serve_stream<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    tcp: S,
    over_tls: bool,
    app: App,
    http: auto::Builder<TokioExecutor>,
    limits: Limits,
    stop: Stop,
) {
    let activity = Arc::new(Activity::default());
    let io = TokioIo::new(Watched::new(tcp, activity.clone()));
    let requests = activity.clone();
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        let guard = requests.begin();
        let app = app.clone();
        if over_tls {
            req.extensions_mut().insert(OverTls);
        }
        async move {
            let response = app.handle(req.map(Body::new)).await;
            Ok::<_, Infallible>(response.map(|body| Tracked { body, _guard: guard }))
        }
    });
    let conn = http.serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    let mut watch = Watch::new(&limits);
    let mut ticks = tokio::time::interval(watch.tick);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.reset();
    let mut draining = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            _ = ticks.tick() => {
                if watch.tick(activity.seen()) == Verdict::Close {
                    tracing::debug!("closing a connection that was too slow to send a request, or idle too long");
                    return;
                }
            }
            () = stop.drain.cancelled(), if !draining => {
                if watch.silent(activity.seen()) {
                    return;
                }
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
            () = stop.close.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch() -> Watch {
        let limits = Limits {
            header_read_timeout: Duration::from_secs(8),
            keep_alive_timeout: Duration::from_secs(60),
            max_connections: 1,
            shutdown_timeout: Duration::from_secs(30),
        };
        Watch::new(&limits)
    }

    /// Ticks `n` times with the same counters; returns the tick that closed, if any.
    fn ticks(w: &mut Watch, seen: Seen, n: u32) -> Option<u32> {
        (1..=n).find(|_| w.tick(seen) == Verdict::Close)
    }

    #[test]
    fn deadlines_follow_the_connections_state() {
        let a = Activity::default();
        let mut w = watch();
        assert_eq!(w.tick, Duration::from_secs(2));
        // Opened, nothing sent: the header timeout (4 ticks of 2 s), counted from the opening.
        assert_eq!(ticks(&mut w, a.seen(), 10), Some(4));
        // The first request's bytes do not move its deadline: it counts from the opening.
        let (a, mut w) = (Activity::default(), watch());
        a.bytes_read();
        assert_eq!(w.tick(a.seen()), Verdict::Keep);
        assert_eq!(ticks(&mut w, a.seen(), 10), Some(3));
        // Answering: never closed, however long it takes.
        let (a, mut w) = (Arc::new(Activity::default()), watch());
        a.bytes_read();
        let guard = a.begin();
        assert!(!a.awaiting_request());
        assert_eq!(ticks(&mut w, a.seen(), 100), None);
        // Idle after the response: the keep-alive timeout (30 ticks), not the header one.
        drop(guard);
        assert!(a.awaiting_request());
        assert_eq!(w.tick(a.seen()), Verdict::Keep, "the response ended: idle from here");
        assert!(w.silent(a.seen()));
        assert_eq!(ticks(&mut w, a.seen(), 29), None);
        assert_eq!(w.tick(a.seen()), Verdict::Close);
        // A slow client sending a byte every tick is still closed after the header timeout.
        let (a, mut w) = (Activity::default(), watch());
        let closed = (1..=10).find(|_| {
            a.bytes_read();
            w.tick(a.seen()) == Verdict::Close
        });
        assert_eq!(closed, Some(4));
        // A new request after an idle spell: its headers are due from the tick that sees its first bytes.
        let (a, mut w) = (Arc::new(Activity::default()), watch());
        drop(a.begin());
        assert_eq!(w.tick(a.seen()), Verdict::Keep);
        assert_eq!(ticks(&mut w, a.seen(), 5), None);
        a.bytes_read();
        assert_eq!(w.tick(a.seen()), Verdict::Keep);
        assert!(!w.silent(a.seen()));
        assert_eq!(ticks(&mut w, a.seen(), 10), Some(4));
    }
}
