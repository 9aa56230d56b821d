//! `svc-floor --port N --upstream HOST:PORT [--runtime multi|current]`: the floor of the gateway's stack
//! (issue 14). A reverse proxy made of exactly what the gateway is made of (tokio's multi-thread runtime, axum on
//! hyper's server, hyper's HTTP/1.1 client on kept-alive connections, mimalloc) and of nothing else: no key,
//! budget, JSON, spend record or log line. A request's body is read whole and sent on an idle upstream
//! connection (the one used last, as the gateway's pool does); the answer is read whole, or passed on as it
//! comes when it is a stream, whose connection goes back to the idle ones at its end. `--runtime current` runs
//! it on tokio's single-thread runtime instead (an experiment: BENCHMARKS.md).
//!
//! `bench/run.sh` times it and `bench/callgrind.sh` counts its instructions per request beside the gateway and
//! nginx: what the stack costs before the gateway does anything of its own.

// A bare stack to measure: its connections are spawned as the plainest server would.
#![allow(clippy::disallowed_methods)]

use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::serve::ListenerExt;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use tokio::net::{TcpListener, TcpStream};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The upstream and its idle connections, the one used last on top.
struct Upstream {
    addr: String,
    host: HeaderValue,
    idle: Mutex<Vec<SendRequest<Full<Bytes>>>>,
}

impl Upstream {
    /// An idle connection ready for a request, or a new one.
    async fn checkout(&self) -> anyhow::Result<SendRequest<Full<Bytes>>> {
        loop {
            let popped = self.idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
            match popped {
                Some(mut sender) => {
                    if sender.ready().await.is_ok() {
                        return Ok(sender);
                    }
                }
                None => {
                    let tcp = TcpStream::connect(&self.addr).await?;
                    tcp.set_nodelay(true)?;
                    let (sender, conn) = http1::handshake(TokioIo::new(tcp)).await?;
                    tokio::spawn(conn);
                    return Ok(sender);
                }
            }
        }
    }

    fn give_back(&self, sender: SendRequest<Full<Bytes>>) {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner).push(sender);
    }

    async fn forward(self: &Arc<Self>, req: Request) -> anyhow::Result<Response> {
        let (parts, body) = req.into_parts();
        let body = body.collect().await?.to_bytes();
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let mut out = hyper::Request::post(path).header(HOST, &self.host);
        for name in [CONTENT_TYPE, AUTHORIZATION] {
            if let Some(v) = parts.headers.get(&name) {
                out = out.header(name, v);
            }
        }
        let mut sender = self.checkout().await?;
        let answer = sender.send_request(out.body(Full::new(body))?).await?;
        let (head, incoming) = answer.into_parts();
        let stream = head.headers.get(CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        let body = if stream {
            // The connection goes back once the stream has been read to its end.
            Body::new(GivesBack { body: incoming, back: Some((Arc::clone(self), sender)) })
        } else {
            let body = Body::from(incoming.collect().await?.to_bytes());
            self.give_back(sender);
            body
        };
        let mut response = Response::new(body);
        *response.status_mut() = head.status;
        if let Some(v) = head.headers.get(CONTENT_TYPE) {
            response.headers_mut().insert(CONTENT_TYPE, v.clone());
        }
        Ok(response)
    }
}

/// A streamed answer that gives its connection back to the idle ones once read to its end.
struct GivesBack {
    body: Incoming,
    back: Option<(Arc<Upstream>, SendRequest<Full<Bytes>>)>,
}

impl HttpBody for GivesBack {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            if let Some((up, sender)) = self.back.take() {
                up.give_back(sender);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

async fn forward(State(up): State<Arc<Upstream>>, req: Request) -> Response {
    match up.forward(req).await {
        Ok(response) => response,
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}

const USAGE: &str = "usage: svc-floor --port N --upstream HOST:PORT [--runtime multi|current]";

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut port, mut upstream, mut current) = (0u16, None, false);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next()) {
            ("--port", Some(v)) => port = v.parse()?,
            ("--upstream", Some(v)) => upstream = Some(v),
            ("--runtime", Some(v)) if v == "multi" || v == "current" => current = v == "current",
            _ => anyhow::bail!(USAGE),
        }
    }
    let addr = upstream.ok_or_else(|| anyhow::anyhow!(USAGE))?;
    // The gateway's runtime (multi-thread, `TOKIO_WORKER_THREADS` workers), or tokio's single-thread one.
    let mut runtime = if current {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    runtime.enable_all().build()?.block_on(serve(port, addr))
}

async fn serve(port: u16, addr: String) -> anyhow::Result<()> {
    let up = Arc::new(Upstream { host: HeaderValue::from_str(&addr)?, addr, idle: Mutex::new(Vec::new()) });
    let app = axum::Router::new().fallback(forward).with_state(up);
    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    eprintln!("svc-floor listening on http://{}", listener.local_addr()?);
    // As the gateway: without it, a stream's last small write waits for the client's delayed ACK (40 ms).
    let listener = listener.tap_io(|tcp| drop(tcp.set_nodelay(true)));
    let stop = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        match term.as_mut() {
            Some(term) => drop(term.recv().await),
            None => drop(tokio::signal::ctrl_c().await),
        }
    };
    axum::serve(listener, app).with_graceful_shutdown(stop).await?;
    Ok(())
}
