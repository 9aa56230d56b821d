//! The translations without HTTP (Anthropic's, and Bedrock's stream), for the fuzz targets of `fuzz/` (re-exported as
//! `svc_providers::fuzzing`): each function is the pure core of one direction, fed exactly what the provider
//! feeds it. Compiled with the `fuzzing` feature and in this crate's tests only; not a stable API.
//!
//! What this file does not do: check the outputs (the fuzz targets do) or add behaviour of its own.

use super::{error, request, response, stream};
use crate::{ChatRequest, ChunkStream, ProviderError};
use futures::Stream;
use serde_json::{Map, Value};

/// OpenAI request body → Anthropic Messages API body, as `Anthropic::chat` builds it. `None` when the body
/// is not a chat-completions request at all (the gateway answers 400 before any provider sees it).
pub fn anthropic_request(
    body: &[u8],
    default_max_tokens: u32,
    stream: bool,
) -> Option<Result<Map<String, Value>, ProviderError>> {
    let req = ChatRequest::parse(body).ok()?;
    Some(request::to_messages_request(&req, default_max_tokens, stream))
}

/// Anthropic message → OpenAI `chat.completion` for `model`; the error says what is not the protocol.
pub fn anthropic_response(message: &Value, model: &str, created: i64) -> Result<Map<String, Value>, String> {
    response::to_chat_completion(message, model, created)
}

/// An Anthropic HTTP error body → the OpenAI-style `kind` and the message.
pub fn anthropic_error(status: u16, body: &[u8]) -> (String, String) {
    error::parse_error_body(status, body)
}

/// An Anthropic SSE body → OpenAI chunks, through the stream state machine (`include_usage` as a client's
/// `stream_options.include_usage`); an event longer than `max_event` bytes ends it.
pub fn anthropic_stream<S, B, E>(bytes: S, include_usage: bool, max_event: usize) -> ChunkStream
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let state = stream::StreamState::new("fuzz".into(), "fuzz-model".into(), 0, include_usage);
    stream::chunks(state, bytes, max_event)
}

/// Bedrock's ConverseStream bytes (AWS event-stream frames) → OpenAI chunks, as `Bedrock::chat_stream` reads
/// them; a frame longer than `max_frame` bytes ends it.
pub fn bedrock_converse_stream<S, B, E>(bytes: S, max_frame: usize) -> ChunkStream
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    crate::bedrock::converse_chunks("fuzz", "fuzz-model", bytes, max_frame)
}

/// Bedrock's InvokeModel stream of Claude (event-stream frames of base64 Messages events) → OpenAI chunks,
/// through the Messages stream state machine, as Claude on Bedrock is read.
pub fn bedrock_claude_stream<S, B, E>(bytes: S, max_frame: usize) -> ChunkStream
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let state = stream::StreamState::new("fuzz".into(), "fuzz-model".into(), 0, true);
    stream::chunks(state, crate::bedrock::messages_as_sse(bytes, max_frame), max_frame)
}
