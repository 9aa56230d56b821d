//! The one HTTP client of every upstream call: hyper-util's pooled client, rustls (Mozilla's roots, the `ring`
//! provider) for `https`, HTTP/2 when the upstream offers it by ALPN, and the proxy named by `HTTPS_PROXY`,
//! `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY` (curl's rules, read once at start by hyper-util's matcher): a
//! CONNECT tunnel for `https`, the absolute-form request line for `http`.
//!
//! Why not reqwest, which it replaces here (the event sinks and the CLI keep it): per call, reqwest parses the
//! URL again for its redirect policy (IDNA included) even when no redirect comes, copies the headers twice and
//! wraps the call in retry and redirect layers: about 35,000 instructions, a sixth of a whole request through
//! the gateway. An upstream call follows no redirect, and the gateway's pipeline is the only place that
//! retries.
//!
//! What this file does not do: bound a call in time (`http.rs` does, per deployment) or read an error body.

use ::http::header::{HeaderName, HeaderValue, CONTENT_TYPE, HOST, PROXY_AUTHORIZATION};
use ::http::{Method, Request, Response, StatusCode, Uri};
use bytes::Bytes;
use futures::Stream;
use http_body_util::{BodyDataStream, BodyExt, Full};
use hyper::body::Incoming;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;
use tower::Service;

/// A boxed error of the transport.
pub type TransportError = Box<dyn std::error::Error + Send + Sync>;

/// How long a connection to an upstream may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an unused pooled connection is kept.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Unused connections kept per upstream host.
const MAX_IDLE_PER_HOST: usize = 256;

/// The pooled client every provider shares. Cloning it shares the pool.
#[derive(Clone)]
pub struct UpstreamClient {
    pool: hyper_util::client::legacy::Client<HttpsConnector<Connector>, Full<Bytes>>,
    proxies: Arc<Matcher>,
}

impl UpstreamClient {
    /// A client with the proxies of the environment.
    pub fn new() -> Result<UpstreamClient, TransportError> {
        UpstreamClient::with_proxies(Matcher::from_env())
    }

    /// A client sending through `proxies` (tests give their own).
    pub fn with_proxies(proxies: Matcher) -> Result<UpstreamClient, TransportError> {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        // `https` is the TLS layer's to handle; this connector opens the TCP connection under it.
        http.enforce_http(false);
        let proxies = Arc::new(proxies);
        let tls = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())?
            .https_or_http()
            .enable_all_versions()
            .wrap_connector(Connector { http, proxies: proxies.clone() });
        let pool = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_idle_timeout(IDLE_TIMEOUT)
            .pool_max_idle_per_host(MAX_IDLE_PER_HOST)
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .build(tls);
        Ok(UpstreamClient { pool, proxies })
    }

    /// Sends `call`; the answer arrives when its headers have.
    pub(crate) async fn send(&self, call: Call) -> Result<Answer, TransportError> {
        let mut req = call.0;
        // A plain-HTTP proxy sees the request itself, so its credentials go in the request (a tunnel's go in
        // the CONNECT).
        if req.uri().scheme() == Some(&::http::uri::Scheme::HTTP) {
            if let Some(auth) = self.proxies.intercept(req.uri()).as_ref().and_then(|p| p.basic_auth().cloned()) {
                req.headers_mut().insert(PROXY_AUTHORIZATION, auth);
            }
        }
        Ok(Answer(self.pool.request(req).await?))
    }
}

impl std::fmt::Debug for UpstreamClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The matcher's own Debug could show a proxy's credentials.
        f.write_str("UpstreamClient")
    }
}

/// A URL an upstream is called at, parsed once, with its `Host` header made once (the pooled client would
/// otherwise format it for every request).
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    uri: Uri,
    host: HeaderValue,
}

impl Endpoint {
    /// `url` parsed; `None` when it is not an absolute URL.
    pub(crate) fn parse(url: &str) -> Option<Endpoint> {
        let uri = url.parse::<Uri>().ok()?;
        let name = uri.host()?;
        // The port is written only when it is not the scheme's own, as the pooled client writes it.
        let host = match (uri.port_u16(), uri.scheme_str()) {
            (Some(80), Some("http")) | (Some(443), Some("https")) | (None, _) => HeaderValue::from_str(name),
            (Some(port), _) => HeaderValue::from_str(&format!("{name}:{port}")),
        };
        Some(Endpoint { host: host.ok()?, uri })
    }
}

/// One request to an upstream, built by a provider.
pub(crate) struct Call(Request<Full<Bytes>>);

impl Call {
    /// `POST` to `to` with a JSON body.
    pub(crate) fn post_json(to: &Endpoint, body: impl Into<Bytes>) -> Call {
        let mut call = Call::new(Method::POST, to, body.into());
        call.0.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        call
    }

    /// `GET` of `to`.
    pub(crate) fn get(to: &Endpoint) -> Call {
        Call::new(Method::GET, to, Bytes::new())
    }

    fn new(method: Method, to: &Endpoint, body: Bytes) -> Call {
        let mut req = Request::new(Full::new(body));
        *req.method_mut() = method;
        *req.uri_mut() = to.uri.clone();
        req.headers_mut().insert(HOST, to.host.clone());
        Call(req)
    }

    /// Adds a header (a repeated name keeps every value).
    pub(crate) fn header(mut self, name: HeaderName, value: HeaderValue) -> Call {
        self.0.headers_mut().append(name, value);
        self
    }
}

/// An upstream's answer: its status and headers, and its body still to read.
pub struct Answer(Response<Incoming>);

impl Answer {
    /// The status.
    pub fn status(&self) -> StatusCode {
        self.0.status()
    }

    /// The headers.
    pub fn headers(&self) -> &::http::HeaderMap {
        self.0.headers()
    }

    /// The whole body.
    pub async fn bytes(self) -> Result<Bytes, hyper::Error> {
        Ok(self.0.into_body().collect().await?.to_bytes())
    }

    /// The next piece of the body; `None` at its end.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, hyper::Error> {
        while let Some(frame) = self.0.body_mut().frame().await {
            // Trailers carry no body bytes.
            if let Ok(data) = frame?.into_data() {
                return Ok(Some(data));
            }
        }
        Ok(None)
    }

    /// The body as a stream of pieces.
    pub fn into_stream(self) -> impl Stream<Item = Result<Bytes, hyper::Error>> + Send + 'static {
        BodyDataStream::new(self.0.into_body())
    }
}

/// Opens the TCP connection for a destination: to it, or through the proxy that intercepts it.
#[derive(Clone)]
pub struct Connector {
    http: HttpConnector,
    proxies: Arc<Matcher>,
}

impl Service<Uri> for Connector {
    type Response = Conn;
    type Error = TransportError;
    type Future = Pin<Box<dyn Future<Output = Result<Conn, TransportError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), TransportError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let mut http = self.http.clone();
        let proxy = self.proxies.intercept(&dst);
        Box::pin(async move {
            let tunnel = dst.scheme() == Some(&::http::uri::Scheme::HTTPS);
            match proxy {
                None => Ok(Conn { io: http.call(dst).await?, via_proxy: false }),
                Some(proxy) if tunnel => {
                    let mut tunnel = Tunnel::new(proxy.uri().clone(), http);
                    if let Some(auth) = proxy.basic_auth() {
                        tunnel = tunnel.with_auth(auth.clone());
                    }
                    // The TLS layer above speaks through the tunnel to the destination itself.
                    Ok(Conn { io: tunnel.call(dst).await?, via_proxy: false })
                }
                Some(proxy) => Ok(Conn { io: http.call(proxy.uri().clone()).await?, via_proxy: true }),
            }
        })
    }
}

/// A TCP connection, marked when it goes to a plain-HTTP proxy (requests on it then name the whole URL).
pub struct Conn {
    io: TokioIo<TcpStream>,
    via_proxy: bool,
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        self.io.connected().proxy(self.via_proxy)
    }
}

impl Read for Conn {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: ReadBufCursor<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl Write for Conn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
}

/// Whether a transport error is a timeout (of the connection's opening, or of the operating system's).
pub(crate) fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(s) = source {
        if s.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut) {
            return true;
        }
        source = s.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::Endpoint;

    #[test]
    fn the_host_header_names_the_port_only_when_it_is_not_the_schemes_own() {
        for (url, host) in [
            ("http://127.0.0.1:8080/v1/chat/completions", "127.0.0.1:8080"),
            ("https://api.openai.com/v1/models", "api.openai.com"),
            ("http://upstream:80/v1", "upstream"),
            ("https://upstream:443/v1", "upstream"),
            ("https://upstream:80/v1", "upstream:80"),
            ("http://[::1]:9000/v1", "[::1]:9000"),
        ] {
            let endpoint = Endpoint::parse(url).unwrap_or_else(|| panic!("{url}"));
            assert_eq!(endpoint.host, host, "{url}");
            assert_eq!(endpoint.uri, url);
        }
        assert!(Endpoint::parse("not a url").is_none());
        assert!(Endpoint::parse("/v1/no-host").is_none());
    }
}
