//! Reading an upstream's server-sent events: [`events`] frames a byte stream into SSE events ([`frame`]: the
//! WHATWG algorithm in time linear in the bytes, whatever the chunking, each event with the bytes it was written
//! as), and ends the stream with an error as soon as one event grows past the deployment's limit, so a hostile
//! upstream can neither grow a buffer without end nor make the reader quadratic. [`json_events`] reads OpenAI
//! chunks on top of it; the pass-through and the Anthropic stream translation read its events too.

mod frame;

pub use frame::{write, Frame, Framer};

use crate::{raw, Chunk, ProviderError};
use futures::{ready, Stream};
use serde_json::{Map, Value};
use std::pin::Pin;
use std::task::{Context, Poll};

/// Why an event stream stopped before its end.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// The transport failed.
    #[error("stream broken: {0}")]
    Transport(String),
    /// One event (or the part of one read so far) grew past the limit.
    #[error("an event is longer than {0} bytes")]
    TooLong(usize),
}

impl SseError {
    /// The provider error of a stream that stopped so: an over-long event is the upstream breaking the
    /// protocol, anything else a broken transport.
    pub fn into_provider_error(self, deployment: &str) -> ProviderError {
        let deployment = deployment.to_string();
        match self {
            SseError::TooLong(_) => ProviderError::BadResponse { deployment, detail: self.to_string() },
            SseError::Transport(_) => ProviderError::Unreachable { deployment, detail: self.to_string() },
        }
    }
}

/// Frames an SSE byte stream into events. An event whose bytes exceed `max_event` ends the stream with
/// [`SseError::TooLong`]; a transport error with [`SseError::Transport`]: nothing comes after either. A block left without its closing
/// blank line at the end of the body is dropped, as the WHATWG algorithm says.
pub fn events<S, B, E>(bytes: S, max_event: usize) -> Events<S>
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    Events { bytes: Box::pin(bytes), framer: Framer::new(max_event), max_event, ended: false, failed: false }
}

/// The events of an SSE byte stream ([`events`]): a plain state machine over the framer, so that an event costs
/// no move of the state into and out of a future.
pub struct Events<S> {
    bytes: Pin<Box<S>>,
    framer: Framer,
    max_event: usize,
    /// The body ended: only the events already framed are left.
    ended: bool,
    /// An error was given: nothing more comes (every reader stops at it).
    failed: bool,
}

impl<S, B, E> Events<S>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
    E: std::fmt::Display,
{
    /// The next event with data, a failure as `deployment`'s provider error.
    pub(crate) fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
        deployment: &str,
    ) -> Poll<Option<Result<Frame, ProviderError>>> {
        loop {
            match ready!(Pin::new(&mut *self).poll_next(cx)) {
                Some(Ok(event)) if event.data.trim().is_empty() => {}
                other => return Poll::Ready(other.map(|r| r.map_err(|e| e.into_provider_error(deployment)))),
            }
        }
    }
}

impl<S, B, E> Stream for Events<S>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
    E: std::fmt::Display,
{
    type Item = Result<Frame, SseError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.failed {
            return Poll::Ready(None);
        }
        loop {
            match this.framer.next_event() {
                Some(Ok(event)) => return Poll::Ready(Some(Ok(event))),
                Some(Err(frame::TooLong)) => {
                    this.failed = true;
                    return Poll::Ready(Some(Err(SseError::TooLong(this.max_event))));
                }
                None if this.ended => return Poll::Ready(None),
                None => {}
            }
            match ready!(this.bytes.as_mut().poll_next(cx)) {
                Some(Ok(chunk)) => this.framer.feed(chunk.as_ref()),
                Some(Err(e)) => {
                    this.failed = true;
                    return Poll::Ready(Some(Err(SseError::Transport(e.to_string()))));
                }
                None => this.ended = true,
            }
        }
    }
}

/// Turns an SSE byte stream of OpenAI chunks into a stream of [`Chunk`]s, ending at `data: [DONE]` or at
/// the end of the body. An unparseable event, a chunk that is an error object (`{"error": …}`) or an event
/// longer than `max_event` bytes ends the stream with [`ProviderError::BadResponse`]; a broken transport with
/// [`ProviderError::Unreachable`].
pub fn json_events<S, B, E>(
    deployment: String,
    bytes: S,
    max_event: usize,
) -> impl Stream<Item = Result<Chunk, ProviderError>> + Send
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    JsonEvents { events: events(bytes, max_event), deployment, done: false }
}

/// The chunks of an OpenAI SSE stream ([`json_events`]).
struct JsonEvents<S> {
    events: Events<S>,
    deployment: String,
    /// `[DONE]` came, or the stream failed.
    done: bool,
}

impl<S, B, E> Stream for JsonEvents<S>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
    E: std::fmt::Display,
{
    type Item = Result<Chunk, ProviderError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        let event = match ready!(this.events.poll_data(cx, &this.deployment)) {
            Some(Ok(event)) if event.data.trim() != "[DONE]" => event,
            Some(Err(e)) => return Poll::Ready(Some(Err(e))),
            _ => {
                this.done = true;
                return Poll::Ready(None);
            }
        };
        let chunk = chunk(&this.deployment, event.data.trim());
        this.done = chunk.is_err();
        Poll::Ready(Some(chunk))
    }
}

/// One OpenAI chunk, read only as deep as its top-level fields: the gateway reads and changes a few of them and
/// passes the rest on as the upstream wrote it (`Chunk`). An error object or text that does not read is an error.
fn chunk(deployment: &str, data: &str) -> Result<Chunk, ProviderError> {
    let detail = match raw::Object::parse_str(data) {
        Ok(chunk) if chunk.get("error").is_none() => return Ok(Chunk::raw(chunk)),
        Ok(_) => {
            let m = serde_json::from_str::<Map<String, Value>>(data).unwrap_or_default();
            format!("the stream sent an error: {}", error_message(&m))
        }
        Err(_) => format!("unparseable stream event: {}", truncate(data, 200)),
    };
    Err(ProviderError::BadResponse { deployment: deployment.to_string(), detail })
}

/// The message of an OpenAI-style error object (`{"error": {"message": …}}` or `{"error": "…"}`).
pub(crate) fn error_message(body: &Map<String, Value>) -> String {
    let message = match body.get("error") {
        Some(Value::String(s)) => Some(s.as_str()),
        Some(e) => e.get("message").and_then(Value::as_str),
        None => None,
    };
    truncate(message.unwrap_or("no message"), 500).to_string()
}

/// `s`'s first `max` characters.
pub(crate) fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use futures::StreamExt;

    async fn collect(chunks: Vec<&'static str>, max_event: usize) -> Vec<Result<Map<String, Value>, ProviderError>> {
        let bytes = futures::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
        let chunks: Vec<_> = json_events("d".into(), bytes, max_event).collect().await;
        chunks.into_iter().map(|c| c.map(Chunk::into_map)).collect()
    }

    #[tokio::test]
    async fn an_over_long_line_ends_the_stream() {
        let out =
            collect(vec!["data: {\"a\":1}\n\n", "data: {\"b\":\"", "xxxxxxxxxxxxxxxxxxxx", "xxxxxxxxxxxxxxxxx"], 32)
                .await;
        assert_eq!(out.len(), 2);
        assert!(out[0].is_ok());
        assert!(matches!(&out[1], Err(ProviderError::BadResponse { detail, .. }) if detail.contains("longer than 32")));
        // Long events in short chunks are fine as long as each line fits.
        let out = collect(vec!["data: {\"a\":", "1}\n", "\n", "data: [DONE]\n\n"], 32).await;
        assert_eq!(out.len(), 1);
    }

    #[tokio::test]
    async fn nothing_comes_after_an_error() {
        // The over-long event and a good one after it in the same read: the error ends the events.
        let body = format!("data: {{\"b\":\"{}\"}}\n\ndata: {{\"c\":1}}\n\n", "x".repeat(64));
        let bytes = futures::stream::iter([Ok::<_, std::io::Error>(body.into_bytes())]);
        let out: Vec<_> = events(bytes, 32).collect().await;
        assert_eq!(out, [Err(SseError::TooLong(32))]);
        let broken = futures::stream::iter([Ok(b"data: 1\n\n".to_vec()), Err("reset"), Ok(b"data: 2\n\n".to_vec())]);
        let out: Vec<_> = events(broken, 32).map(|r| r.map(|e| e.data.to_string())).collect().await;
        assert_eq!(out, [Ok("1".to_string()), Err(SseError::Transport("reset".into()))]);
    }

    #[tokio::test]
    async fn an_error_chunk_is_an_error() {
        let out = collect(vec!["data: {\"error\":{\"message\":\"quota\"}}\n\n", "data: {\"a\":1}\n\n"], 1024).await;
        assert_eq!(out.len(), 1);
        assert!(matches!(&out[0], Err(ProviderError::BadResponse { detail, .. }) if detail.contains("quota")));
    }
}
