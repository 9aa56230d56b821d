//! AWS's event-stream framing of Bedrock's streams, read by `aws-smithy-eventstream` (AWS's own decoder: the
//! prelude, both CRC32s, the typed headers): each frame is an event (`:message-type` `event`, its type in
//! `:event-type`, a JSON payload) or an exception (`exception`, its type in `:exception-type`; `error` frames
//! carry `:error-code`). A frame longer than the deployment's `max_event_bytes` ends the stream before it is
//! buffered.
//!
//! `messages_as_sse` turns InvokeModel's stream of Claude (each `chunk` event holds one Messages event, its JSON
//! base64-encoded in `bytes`) back into the Messages API's server-sent events, so the Anthropic stream reader and
//! the pass-through serve it unchanged; an exception becomes a Messages `error` event.

use aws_smithy_eventstream::frame::{DecodedFrame, MessageFrameDecoder};
use aws_smithy_types::event_stream::{HeaderValue, Message};
use base64::Engine;
use bytes::{Buf, Bytes, BytesMut};
use futures::{Stream, StreamExt};
use serde_json::Value;

/// One frame, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Frame {
    /// An event of this type, with its payload.
    Event(String, Bytes),
    /// An exception of this type (`throttlingException`…), with its payload (`{"message": …}`).
    Exception(String, Bytes),
}

/// Why a frame stream stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FrameError {
    /// The transport failed.
    #[error("stream broken: {0}")]
    Transport(String),
    /// A frame was longer than allowed.
    #[error("an event-stream frame is longer than {0} bytes")]
    TooLong(usize),
    /// A frame was not a valid event-stream frame (a bad length, a CRC mismatch, a bad header).
    #[error("not an AWS event-stream frame: {0}")]
    Invalid(String),
    /// The stream ended inside a frame.
    #[error("the stream ended inside an event-stream frame")]
    Truncated,
}

/// A header's text.
fn text(m: &Message, name: &str) -> Option<String> {
    m.headers().iter().find(|h| h.name().as_str() == name).and_then(|h| match h.value() {
        HeaderValue::String(s) => Some(s.as_str().to_string()),
        _ => None,
    })
}

/// The frame `m` is.
fn frame_of(m: Message) -> Frame {
    let kind = text(&m, ":message-type").unwrap_or_default();
    let payload = m.payload().clone();
    match kind.as_str() {
        "exception" => Frame::Exception(text(&m, ":exception-type").unwrap_or_else(|| "exception".into()), payload),
        "error" => Frame::Exception(text(&m, ":error-code").unwrap_or_else(|| "error".into()), payload),
        _ => Frame::Event(text(&m, ":event-type").unwrap_or_default(), payload),
    }
}

/// The frames of a byte stream, each at most `max_frame` bytes.
pub(crate) fn frames<S, B, E>(bytes: S, max_frame: usize) -> impl Stream<Item = Result<Frame, FrameError>> + Send
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let state = (Box::pin(bytes), BytesMut::new(), MessageFrameDecoder::new(), false);
    futures::stream::unfold(state, move |(mut bytes, mut buf, mut decoder, done)| async move {
        if done {
            return None;
        }
        loop {
            // The prelude's first four bytes are the frame's whole length: checked before it is waited for, and
            // the decoder given only whole frames (so it never holds half of one).
            if buf.len() >= 4 {
                let total = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
                if total > max_frame {
                    return Some((Err(FrameError::TooLong(max_frame)), (bytes, buf, decoder, true)));
                }
            }
            let whole = buf.len() >= 4 && buf.len() >= u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if whole {
                match decoder.decode_frame(&mut buf) {
                    Ok(DecodedFrame::Complete(m)) => return Some((Ok(frame_of(m)), (bytes, buf, decoder, false))),
                    Ok(DecodedFrame::Incomplete) => {}
                    Err(e) => return Some((Err(FrameError::Invalid(e.to_string())), (bytes, buf, decoder, true))),
                }
            }
            match bytes.next().await {
                Some(Ok(chunk)) => buf.extend_from_slice(chunk.as_ref()),
                Some(Err(e)) => return Some((Err(FrameError::Transport(e.to_string())), (bytes, buf, decoder, true))),
                None if buf.has_remaining() => return Some((Err(FrameError::Truncated), (bytes, buf, decoder, true))),
                None => return None,
            }
        }
    })
}

/// The Messages error `type` of a Bedrock exception.
pub(crate) fn messages_error_type(exception: &str) -> &'static str {
    match exception.trim_end_matches("Exception").to_ascii_lowercase().as_str() {
        "throttling" | "servicequota" => "rate_limit_error",
        "validation" => "invalid_request_error",
        "accessdenied" => "permission_error",
        "resourcenotfound" => "not_found_error",
        "serviceunavailable" | "modelnotready" => "overloaded_error",
        "modeltimeout" => "timeout_error",
        _ => "api_error",
    }
}

/// The `message` of an exception's payload.
pub(crate) fn exception_message(payload: &[u8]) -> String {
    let parsed: Value = serde_json::from_slice(payload).unwrap_or_default();
    parsed
        .get("message")
        .or_else(|| parsed.get("Message"))
        .and_then(Value::as_str)
        .map_or_else(|| String::from_utf8_lossy(payload).chars().take(500).collect(), str::to_string)
}

/// One frame of InvokeModel's stream of Claude as a server-sent event.
fn as_sse(frame: Frame) -> Result<Bytes, String> {
    match frame {
        Frame::Event(kind, payload) if kind == "chunk" => {
            #[derive(serde::Deserialize)]
            struct Chunk {
                bytes: String,
            }
            let chunk: Chunk =
                serde_json::from_slice(&payload).map_err(|_| "a `chunk` event has no `bytes`".to_string())?;
            let json = base64::engine::general_purpose::STANDARD
                .decode(chunk.bytes.as_bytes())
                .map_err(|e| format!("a `chunk` event's `bytes` is not base64: {e}"))?;
            #[derive(serde::Deserialize)]
            struct Typed<'a> {
                #[serde(borrow, rename = "type")]
                kind: std::borrow::Cow<'a, str>,
            }
            let typed: Typed<'_> =
                serde_json::from_slice(&json).map_err(|_| "a Messages event without a `type`".to_string())?;
            let mut out = Vec::with_capacity(json.len() + typed.kind.len() + 16);
            out.extend_from_slice(b"event: ");
            out.extend_from_slice(typed.kind.as_bytes());
            out.extend_from_slice(b"\ndata: ");
            out.extend_from_slice(&json);
            out.extend_from_slice(b"\n\n");
            Ok(out.into())
        }
        Frame::Event(..) => Ok(Bytes::new()),
        Frame::Exception(kind, payload) => {
            let error = serde_json::json!({"type": "error", "error": {
                "type": messages_error_type(&kind), "message": format!("{kind}: {}", exception_message(&payload))}});
            Ok(format!("event: error\ndata: {error}\n\n").into())
        }
    }
}

/// InvokeModel's event-stream of Claude as the Messages API's SSE bytes; a broken frame ends it with an error.
pub(crate) fn messages_as_sse<S, B, E>(bytes: S, max_frame: usize) -> impl Stream<Item = Result<Bytes, String>> + Send
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    // A frame holds the event base64-encoded: a third larger than the event the SSE reader is bounded to.
    frames(bytes, max_frame.saturating_mul(2)).map(|frame| match frame {
        Ok(frame) => as_sse(frame),
        Err(e) => Err(e.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_smithy_types::event_stream::Header;

    fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
        let mut m = Message::new(Bytes::copy_from_slice(payload));
        for (n, v) in headers {
            m = m.add_header(Header::new(n.to_string(), HeaderValue::String(v.to_string().into())));
        }
        let mut out = Vec::new();
        aws_smithy_eventstream::frame::write_message_to(&m, &mut out).unwrap_or_else(|e| panic!("{e}"));
        out
    }

    async fn read(bytes: Vec<u8>, piece: usize, max: usize) -> Vec<Result<Frame, FrameError>> {
        let pieces: Vec<Result<Vec<u8>, String>> = bytes.chunks(piece).map(|c| Ok(c.to_vec())).collect();
        frames(futures::stream::iter(pieces), max).collect().await
    }

    #[tokio::test]
    async fn frames_are_read_whatever_the_chunking_and_bounded() {
        let mut bytes = frame(&[(":message-type", "event"), (":event-type", "contentBlockDelta")], br#"{"a":1}"#);
        bytes.extend(frame(
            &[(":message-type", "exception"), (":exception-type", "throttlingException")],
            br#"{"message":"slow"}"#,
        ));
        for piece in [1, 7, 1000] {
            let got = read(bytes.clone(), piece, 1 << 20).await;
            assert_eq!(got.len(), 2, "piece {piece}");
            assert_eq!(got[0], Ok(Frame::Event("contentBlockDelta".into(), Bytes::from_static(br#"{"a":1}"#))));
            assert!(matches!(&got[1], Ok(Frame::Exception(t, _)) if t == "throttlingException"));
        }
        assert_eq!(read(bytes.clone(), 5, 20).await, vec![Err(FrameError::TooLong(20))]);
        let mut corrupt = bytes.clone();
        corrupt[20] ^= 0xff;
        assert!(matches!(read(corrupt, 5, 1 << 20).await.first(), Some(Err(FrameError::Invalid(_)))));
        let cut = bytes[..bytes.len() - 3].to_vec();
        assert_eq!(read(cut, 9, 1 << 20).await.last(), Some(&Err(FrameError::Truncated)));
    }

    #[tokio::test]
    async fn claude_chunks_become_messages_events() {
        let event = br#"{"type":"message_start","message":{"id":"m"}}"#;
        let b64 = base64::engine::general_purpose::STANDARD.encode(event);
        let mut bytes = frame(
            &[(":message-type", "event"), (":event-type", "chunk")],
            format!(r#"{{"bytes":"{b64}"}}"#).as_bytes(),
        );
        bytes.extend(frame(
            &[(":message-type", "exception"), (":exception-type", "modelStreamErrorException")],
            br#"{"message":"boom"}"#,
        ));
        let out: Vec<_> = messages_as_sse(futures::stream::iter([Ok::<_, String>(bytes)]), 1 << 20).collect().await;
        let text: Vec<String> =
            out.into_iter().map(|b| String::from_utf8_lossy(&b.unwrap_or_default()).into_owned()).collect();
        assert_eq!(text[0], format!("event: message_start\ndata: {}\n\n", String::from_utf8_lossy(event)));
        assert!(
            text[1].starts_with("event: error\ndata: ") && text[1].contains("modelStreamErrorException: boom"),
            "{}",
            text[1]
        );
    }
}
