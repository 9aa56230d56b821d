//! The one HTTP client of every upstream call: hyper's connections in a pool of our own (`pool.rs`), rustls
//! (Mozilla's roots, the `ring` provider) for `https`, HTTP/2 when the upstream offers it by ALPN, and the proxy
//! named by `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY` (curl's rules, read once at start by
//! hyper-util's matcher): a CONNECT tunnel for `https`, the absolute-form request line for `http`.
//!
//! Why not reqwest, which it replaces here (the event sinks and the CLI keep it): per call, reqwest parses the
//! URL again for its redirect policy (IDNA included) even when no redirect comes, copies the headers twice and
//! wraps the call in retry and redirect layers: about 35,000 instructions, a sixth of a whole request through
//! the gateway. An upstream call follows no redirect, and the gateway's pipeline is the only place that
//! retries.
//!
//! What this file does not do: bound a call in time (`http.rs` does, per deployment) or read an error body.

mod connect;
mod pool;

use ::http::header::{HeaderName, HeaderValue, CONTENT_TYPE, HOST, PROXY_AUTHORIZATION};
use ::http::{Method, Request, Response, StatusCode, Uri};
use bytes::Bytes;
use connect::Connector;
use futures::Stream;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Incoming};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::proxy::matcher::Matcher;
use pool::{Back, Origin, Pool};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// A boxed error of the transport.
pub type TransportError = Box<dyn std::error::Error + Send + Sync>;

/// How long a connection to an upstream may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The pooled client every provider shares. Cloning it shares the pool.
#[derive(Clone)]
pub struct UpstreamClient {
    pool: Arc<Pool>,
    proxies: Arc<Matcher>,
}

impl UpstreamClient {
    /// A client with the proxies of the environment.
    pub fn new() -> Result<UpstreamClient, TransportError> {
        UpstreamClient::with_proxies(Matcher::from_env())
    }

    /// A client sending through `proxies` (tests give their own).
    pub fn with_proxies(proxies: Matcher) -> Result<UpstreamClient, TransportError> {
        let tls = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())?;
        Ok(UpstreamClient::build(tls, proxies))
    }

    /// A client with the proxies of the environment that also trusts the certificates of the PEM file `ca_file`
    /// (a private CA of an upstream: `ssl_ca_file`), besides the public roots. Its own pool: a deployment that
    /// names a CA never shares connections with one that does not.
    pub fn trusting(ca_file: &std::path::Path) -> Result<UpstreamClient, String> {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
        let certs = rustls::pki_types::CertificateDer::pem_file_iter(ca_file)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("ssl_ca_file `{}`: {e}", ca_file.display()))?;
        if certs.is_empty() {
            return Err(format!("ssl_ca_file `{}`: no certificate in it (expected PEM)", ca_file.display()));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| format!("ssl_ca_file `{}`: {e}", ca_file.display()))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tls = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config);
        Ok(UpstreamClient::build(tls, Matcher::from_env()))
    }

    /// A client that trusts `roots` alone, without proxies (tests of `https` give their own authority).
    #[cfg(test)]
    fn with_roots(roots: rustls::RootCertStore) -> UpstreamClient {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap_or_else(|e| panic!("{e}"))
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tls = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config);
        UpstreamClient::build(tls, Matcher::builder().build())
    }

    fn build(
        tls: hyper_rustls::HttpsConnectorBuilder<hyper_rustls::builderstates::WantsSchemes>,
        proxies: Matcher,
    ) -> UpstreamClient {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        // `https` is the TLS layer's to handle; this connector opens the TCP connection under it.
        http.enforce_http(false);
        let proxies = Arc::new(proxies);
        let connector =
            tls.https_or_http().enable_all_versions().wrap_connector(Connector { http, proxies: proxies.clone() });
        UpstreamClient { pool: Arc::new(Pool::new(connector)), proxies }
    }

    /// `url` as an endpoint of this client; `None` when it is not an absolute URL.
    pub(crate) fn endpoint(&self, url: &str) -> Option<Endpoint> {
        let uri = url.parse::<Uri>().ok()?;
        let name = uri.host()?;
        // The port is written only when it is not the scheme's own.
        let host = match (uri.port_u16(), uri.scheme_str()) {
            (Some(80), Some("http")) | (Some(443), Some("https")) | (None, _) => HeaderValue::from_str(name),
            (Some(port), _) => HeaderValue::from_str(&format!("{name}:{port}")),
        };
        // A plain-HTTP proxy sees the request itself, so its credentials go in the request (a tunnel's go in the
        // CONNECT). The proxies are read once, at start, so this is decided once per endpoint.
        let proxy_auth = match uri.scheme() == Some(&::http::uri::Scheme::HTTP) {
            true => self.proxies.intercept(&uri).and_then(|p| p.basic_auth().cloned()),
            false => None,
        };
        Some(Endpoint { host: host.ok()?, proxy_auth, origin: self.pool.origin(&uri)?, uri })
    }

    /// Sends `call`; the answer arrives when its headers have.
    pub(crate) async fn send(&self, call: Call) -> Result<Answer, TransportError> {
        // Boxed: held inline, the pool's future (hyper's send and the wait for a connection, about 1.5 KiB)
        // would make every future above it that much larger, and each of them is copied whole when it moves.
        let (answer, back) = Box::pin(self.pool.send(&call.origin, call.req)).await?;
        Ok(Answer::new(answer, back))
    }
}

impl std::fmt::Debug for UpstreamClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The matcher's own Debug could show a proxy's credentials.
        f.write_str("UpstreamClient")
    }
}

/// A URL an upstream is called at, parsed once, with its `Host` header made once and the connections of its
/// origin at hand (made by [`UpstreamClient::endpoint`]).
#[derive(Clone)]
pub(crate) struct Endpoint {
    uri: Uri,
    host: HeaderValue,
    /// `Proxy-Authorization` for the plain-HTTP proxy that intercepts it, when that proxy has credentials.
    proxy_auth: Option<HeaderValue>,
    origin: Arc<Origin>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Endpoint({})", self.uri)
    }
}

/// One request to an upstream, built by a provider.
pub(crate) struct Call {
    req: Request<Full<Bytes>>,
    origin: Arc<Origin>,
}

impl Call {
    /// `POST` to `to` with a JSON body.
    pub(crate) fn post_json(to: &Endpoint, body: impl Into<Bytes>) -> Call {
        let mut call = Call::new(Method::POST, to, body.into());
        call.req.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        call
    }

    /// `GET` of `to`.
    pub(crate) fn get(to: &Endpoint) -> Call {
        Call::new(Method::GET, to, Bytes::new())
    }

    /// A call of `method` to `to` with `body` (none when empty).
    pub(crate) fn new(method: Method, to: &Endpoint, body: Bytes) -> Call {
        let mut req = Request::new(Full::new(body));
        *req.method_mut() = method;
        *req.uri_mut() = to.uri.clone();
        req.headers_mut().insert(HOST, to.host.clone());
        if let Some(auth) = &to.proxy_auth {
            req.headers_mut().insert(PROXY_AUTHORIZATION, auth.clone());
        }
        Call { req, origin: to.origin.clone() }
    }

    /// The method (for a signature).
    pub(crate) fn method(&self) -> &Method {
        self.req.method()
    }

    /// The URL (for a signature).
    pub(crate) fn uri(&self) -> &Uri {
        self.req.uri()
    }

    /// The headers so far (for a signature).
    pub(crate) fn headers(&self) -> &::http::HeaderMap {
        self.req.headers()
    }

    /// Adds a header (a repeated name keeps every value).
    pub(crate) fn header(mut self, name: HeaderName, value: HeaderValue) -> Call {
        self.req.headers_mut().append(name, value);
        self
    }
}

/// An upstream's answer: its status and headers, and its body still to read. Its connection goes back to the
/// pool when the body has been read to its end.
pub struct Answer {
    head: ::http::response::Parts,
    body: Pieces,
}

impl Answer {
    fn new(answer: Response<Incoming>, back: Option<Back>) -> Answer {
        let (head, body) = answer.into_parts();
        Answer { head, body: Pieces { body, back } }
    }

    /// The status.
    pub fn status(&self) -> StatusCode {
        self.head.status
    }

    /// The headers.
    pub fn headers(&self) -> &::http::HeaderMap {
        &self.head.headers
    }

    /// The whole body, when it is at most `limit` bytes.
    pub async fn bytes(self, limit: usize) -> Result<Bytes, BodyError> {
        let Pieces { body, back } = self.body;
        let whole = match http_body_util::Limited::new(body, limit).collect().await {
            Ok(whole) => whole.to_bytes(),
            Err(e) => {
                return Err(match e.downcast::<hyper::Error>() {
                    Ok(e) => BodyError::Transport(*e),
                    Err(_) => BodyError::TooLarge(limit),
                })
            }
        };
        if let Some(back) = back {
            back.park();
        }
        Ok(whole)
    }

    /// The next piece of the body; `None` at its end.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, hyper::Error> {
        futures::StreamExt::next(&mut self.body).await.transpose()
    }

    /// The body as a stream of pieces.
    pub fn into_stream(self) -> impl Stream<Item = Result<Bytes, hyper::Error>> + Send + 'static {
        self.body
    }
}

/// Why an answer's whole body was not read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// It is longer than the limit given.
    #[error("the answer is longer than {0} bytes")]
    TooLarge(usize),
    /// The connection failed.
    #[error(transparent)]
    Transport(hyper::Error),
}

/// An answer's body as a stream of its data (trailers carry none), giving its connection back at the end.
struct Pieces {
    body: Incoming,
    back: Option<Back>,
}

impl Stream for Pieces {
    type Item = Result<Bytes, hyper::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            match std::task::ready!(Pin::new(&mut self.body).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => return Poll::Ready(Some(Ok(data))),
                    Err(_trailers) => continue,
                },
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => {
                    if let Some(back) = self.back.take() {
                        back.park();
                    }
                    return Poll::Ready(None);
                }
            }
        }
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
mod tests;
