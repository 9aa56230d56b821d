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

/// The end of a complete server-sent-events stream of chat-completion chunks.
const DONE: &[u8] = b"data: [DONE]";

/// Where to send, with what: cheap to clone (everything inside is shared).
#[derive(Clone)]
pub struct Target {
    client: Client<HttpConnector, Full<Bytes>>,
    uri: Uri,
    auth: Option<HeaderValue>,
    body: Bytes,
    stream: bool,
    timeout: Duration,
}

impl Target {
    /// A target at `url` (`http://` only) with bearer `key` (none when empty) and the request `body`.
    /// `stream` checks that each body ends with `data: [DONE]`. A request taking longer than `timeout`
    /// counts as failed.
    pub fn new(url: &str, key: &str, body: Bytes, stream: bool, timeout: Duration) -> anyhow::Result<Target> {
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
        Ok(Target { client, uri, auth, body, stream, timeout })
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
        let req = req.body(Full::new(self.body.clone()))?;
        let resp = self.client.request(req).await?;
        let status_ok = resp.status().is_success();
        let mut body = resp.into_body();
        let mut ttfb = None;
        // The last bytes seen, enough to recognise `data: [DONE]` split across frames.
        let mut tail: Vec<u8> = Vec::with_capacity(64);
        while let Some(frame) = body.frame().await {
            let frame = frame?;
            let Some(data) = frame.data_ref() else { continue };
            if data.is_empty() {
                continue;
            }
            if ttfb.is_none() {
                ttfb = Some(origin.elapsed());
            }
            if self.stream {
                tail.extend_from_slice(&data[data.len().saturating_sub(32)..]);
                if tail.len() > 32 {
                    tail.drain(..tail.len() - 32);
                }
            }
        }
        let total = origin.elapsed();
        let complete = !self.stream || tail.windows(DONE.len()).any(|w| w == DONE);
        Ok(Sample { ttfb: ttfb.unwrap_or(total), total, ok: status_ok && complete })
    }
}
