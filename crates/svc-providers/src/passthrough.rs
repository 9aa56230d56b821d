//! Pass-through: a request in the upstream's own API (Anthropic Messages to an Anthropic deployment, OpenAI
//! Responses to an OpenAI one) is sent as the client wrote it (the caller rewrites only `model` and lowers the
//! output cap), and the answer comes back as the upstream wrote it: a JSON object, or its stream of events,
//! each with its name and its data as text (not parsed here), unknown types included.
//!
//! What this file does not do: meter usage or rename the model in the answer (the gateway does both).

use crate::client::{Answer, Call, UpstreamClient};
use crate::raw::Object;
use crate::sse;
use crate::ProviderError;
use ::http::header::{HeaderName, HeaderValue};
use bytes::Bytes;
use bytestring::ByteString;
use futures::{ready, Stream};
use serde_json::{Map, Value};
use std::pin::Pin;
use std::task::{Context, Poll};

/// The native APIs a request can be passed through in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// Anthropic Messages (`POST /v1/messages`).
    Messages,
    /// OpenAI Responses (`POST /responses`).
    Responses,
    /// OpenAI embeddings (`POST /embeddings`; the mock serves it too).
    Embeddings,
    /// Anthropic token counting (`POST /v1/messages/count_tokens`).
    CountTokens,
    /// OpenAI input token counting of a Responses body (`POST /responses/input_tokens`).
    InputTokens,
    /// Google's Gemini API (`POST /v1beta/models/{model}:generateContent`, `:streamGenerateContent?alt=sse`).
    Gemini,
    /// Gemini token counting (`POST /v1beta/models/{model}:countTokens`).
    GeminiCountTokens,
}

/// What is asked of a stored Responses answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredOp {
    /// `GET /responses/{id}`.
    Retrieve,
    /// `DELETE /responses/{id}`.
    Delete,
    /// `GET /responses/{id}/input_items`.
    InputItems,
    /// `POST /responses/{id}/cancel` (a background response).
    Cancel,
}

/// A request to pass through.
#[derive(Debug, Clone)]
pub struct Forwarded {
    /// The body to send.
    pub body: Bytes,
    /// Whether the body asks for a stream.
    pub stream: bool,
    /// Client headers that belong to the API (`anthropic-version`, `anthropic-beta`), sent as given.
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

/// One server-sent event as the upstream wrote it: its name (empty when the stream names none), its data as text, and
/// its bytes, to send it on unchanged.
pub type RawEvent = sse::Frame;

/// A stream of raw events.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<RawEvent, ProviderError>> + Send>>;

/// The upstream's answer, as it wrote it.
pub enum Raw {
    /// A JSON object, as the upstream's bytes, read as deep as its top-level fields.
    Reply(Object),
    /// A stream of events.
    Stream(EventStream),
}

/// Sends a passed-through request and returns its answer: the whole reply, checked to be an answer, or the
/// stream of events (an `error` event becomes `on_error`'s error).
pub(crate) async fn exchange<F: std::future::Future<Output = ProviderError>>(
    client: &UpstreamClient,
    d: &crate::Target<'_>,
    call: Call,
    stream: bool,
    status_error: impl FnOnce(Answer) -> F,
    on_error: fn(&str, &Value) -> ProviderError,
) -> Result<Raw, ProviderError> {
    if stream {
        let answer = crate::http::open(client, d, call, status_error).await?;
        return Ok(Raw::Stream(Box::pin(raw_events(
            d.id.to_string(),
            answer.into_stream(),
            d.max_event_bytes,
            on_error,
        ))));
    }
    let answer = crate::http::fetch_object(client, d, call, status_error).await?;
    check_answer(&answer).map_err(|detail| ProviderError::BadResponse { deployment: d.id.to_string(), detail })?;
    Ok(Raw::Reply(answer))
}

/// Whether an answer is an answer rather than an error object: its `type` is not `error` and its `error`
/// (Responses objects carry `"error": null`) is null or absent. The error says what is wrong.
pub fn check_answer(answer: &Object) -> Result<(), String> {
    let is_error = answer.get("type") == Some("\"error\"") || answer.get("error").is_some_and(|e| e != "null");
    if is_error {
        let parsed: Map<String, Value> = serde_json::from_slice(answer.bytes()).unwrap_or_default();
        return Err(format!("the upstream answered 200 with an error: {}", sse::error_message(&parsed)));
    }
    Ok(())
}

/// The events of a pass-through stream, their data not parsed. An `error` event (Anthropic's way to fail a
/// stream) becomes an error (via `on_error`, with its data parsed); `[DONE]` and empty data are skipped; an
/// event over `max_event` bytes ends the stream with [`ProviderError::BadResponse`], a broken transport with
/// [`ProviderError::Unreachable`].
pub fn raw_events<S, B, E>(
    deployment: String,
    bytes: S,
    max_event: usize,
    on_error: fn(&str, &Value) -> ProviderError,
) -> impl Stream<Item = Result<RawEvent, ProviderError>> + Send
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    RawEvents { events: sse::events(bytes, max_event), deployment, on_error, done: false }
}

/// The events of a pass-through stream ([`raw_events`]).
struct RawEvents<S> {
    events: sse::Events<S>,
    deployment: String,
    on_error: fn(&str, &Value) -> ProviderError,
    /// The stream failed: nothing more comes.
    done: bool,
}

impl<S, B, E> Stream for RawEvents<S>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
    E: std::fmt::Display,
{
    type Item = Result<RawEvent, ProviderError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        while !this.done {
            let event = match ready!(this.events.poll_data(cx, &this.deployment)) {
                Some(Ok(event)) => event,
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => break,
            };
            let data = event.data.trim();
            if data == "[DONE]" {
                continue;
            }
            if event.event == "error" {
                let parsed = serde_json::from_str::<Value>(data).unwrap_or_else(|_| Value::String(data.to_string()));
                this.done = true;
                return Poll::Ready(Some(Err((this.on_error)(&this.deployment, &parsed))));
            }
            // An event named `message` is one the SSE algorithm reads as unnamed: its type is read from its data.
            let name = if event.event == "message" { ByteString::new() } else { event.event };
            return Poll::Ready(Some(Ok(RawEvent { event: name, data: event.data, raw: event.raw })));
        }
        this.done = true;
        Poll::Ready(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use serde_json::json;

    #[tokio::test]
    async fn events_keep_their_type_and_errors_end_the_stream() {
        let body = "event: message_start\ndata: {\"type\":\"message_start\",\"x\":1}\n\nevent: ping\ndata: {}\n\n\
                    event: brand_new\ndata: {\"type\":\"brand_new\"}\n\ndata: {\"type\":\"unnamed\"}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"message\":\"boom\"}}\n\n";
        let bytes = futures::stream::iter([Ok::<_, std::io::Error>(body.as_bytes().to_vec())]);
        let on_error = |d: &str, _: &Value| ProviderError::BadResponse { deployment: d.into(), detail: "boom".into() };
        let out: Vec<_> = raw_events("d".into(), bytes, 1 << 16, on_error).collect().await;
        let types: Vec<String> = out
            .iter()
            .map(|r| match r {
                Ok(ev) => ev.event.to_string(),
                Err(e) => format!("err {e}"),
            })
            .collect();
        assert_eq!(types[..4], ["message_start", "ping", "brand_new", ""], "an unnamed event stays unnamed");
        assert!(matches!(&out[0], Ok(ev) if ev.data.contains("\"x\":1")), "data kept as text");
        assert!(types[4].starts_with("err"), "{types:?}");
        let answer = |v: Value| Object::parse(v.to_string().as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        assert!(check_answer(&answer(json!({"id": "resp_1", "error": null}))).is_ok());
        assert!(Object::parse(b"[1, 2]").is_err());
        assert!(check_answer(&answer(json!({"type": "error", "error": {"message": "x"}}))).is_err());
    }
}
