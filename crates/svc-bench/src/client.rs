//! The HTTP side: one hyper 1 client (hyper-util's legacy client, HTTP/1.1, keep-alive pool,
//! `TCP_NODELAY`) and one request timed to its first body byte and to its end.
//!
//! hyper rather than a convenience client keeps the generator's own cost per request small, so that on the
//! core it shares with the upstream it disturbs the measurement as little as possible.

use crate::stats::Sample;
use anyhow::{bail, Context};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, Request, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::time::{Duration, Instant};

/// Where to send, with what: cheap to clone (everything inside is shared).
#[derive(Clone)]
pub struct Target {
    client: Client<HttpConnector, Full<Bytes>>,
    uri: Uri,
    auth: Option<HeaderValue>,
    headers: Vec<(hyper::header::HeaderName, HeaderValue)>,
    body: Bytes,
    /// For a stream: what its body must contain to be complete.
    ends: Option<Bytes>,
    timeout: Duration,
}

impl Target {
    /// A target at `url` (`http://` only) with bearer `key` (none when empty) and the request `body`.
    /// For a stream, `ends` is what a complete body contains (e.g. `data: [DONE]`). A request taking longer than
    /// `timeout` counts as failed.
    pub fn new(url: &str, key: &str, body: Bytes, ends: Option<Bytes>, timeout: Duration) -> anyhow::Result<Target> {
        let uri: Uri = url.parse().with_context(|| format!("invalid URL `{url}`"))?;
        if uri.scheme_str() != Some("http") {
            bail!("only http:// targets are supported, got `{url}`");
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(usize::MAX)
            .pool_idle_timeout(Duration::from_secs(300))
            .build(connector);
        let auth = if key.is_empty() {
            None
        } else {
            Some(HeaderValue::from_str(&format!("Bearer {key}")).context("the key is not a valid header value")?)
        };
        Ok(Target { client, uri, auth, headers: Vec::new(), body, ends, timeout })
    }

    /// Adds request headers given as `Name: value`.
    pub fn with_headers(mut self, headers: &[String]) -> anyhow::Result<Target> {
        for h in headers {
            let (name, value) = h.split_once(':').with_context(|| format!("`{h}` is not `Name: value`"))?;
            let name = hyper::header::HeaderName::from_bytes(name.trim().as_bytes())
                .with_context(|| format!("`{name}` is not a header name"))?;
            let value =
                HeaderValue::from_str(value.trim()).with_context(|| format!("`{value}` is not a header value"))?;
            self.headers.push((name, value));
        }
        Ok(self)
    }

    /// Sends one request and reads its body to the end. Times are measured from `origin`: the moment the
    /// request was due (open loop) or sent (closed loop). Transport errors and timeouts give a failed sample.
    pub async fn send(&self, origin: Instant) -> Sample {
        match tokio::time::timeout(self.timeout, self.exchange(origin)).await {
            Ok(Ok(sample)) => sample,
            Ok(Err(_)) | Err(_) => {
                let total = origin.elapsed();
                Sample { ttfb: total, total, ok: false }
            }
        }
    }

    async fn exchange(&self, origin: Instant) -> Result<Sample, Box<dyn std::error::Error + Send + Sync>> {
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(self.uri.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(auth) = &self.auth {
            req = req.header(AUTHORIZATION, auth.clone());
        }
        for (name, value) in &self.headers {
            req = req.header(name.clone(), value.clone());
        }
        let req = req.body(Full::new(self.body.clone()))?;
        let resp = self.client.request(req).await?;
        let status_ok = resp.status().is_success();
        let mut body = resp.into_body();
        let mut ttfb = None;
        // The end marker, searched in each frame with the last bytes of the one before (it may be split).
        let mut tail: Vec<u8> = Vec::with_capacity(64);
        let mut complete = self.ends.is_none();
        while let Some(frame) = body.frame().await {
            let frame = frame?;
            let Some(data) = frame.data_ref() else { continue };
            if data.is_empty() {
                continue;
            }
            if ttfb.is_none() {
                ttfb = Some(origin.elapsed());
            }
            if let Some(end) = self.ends.as_ref().filter(|_| !complete) {
                tail.extend_from_slice(data);
                complete = tail.windows(end.len()).any(|w| w == &end[..]);
                let keep = end.len().saturating_sub(1);
                if tail.len() > keep {
                    tail.drain(..tail.len() - keep);
                }
            }
        }
        let total = origin.elapsed();
        Ok(Sample { ttfb: ttfb.unwrap_or(total), total, ok: status_ok && complete })
    }
}
