//! Anthropic Messages API stream → OpenAI `chat.completion.chunk` stream. The SSE framing is
//! [`crate::sse::events`]; the translation is one state machine, [`StreamState`], fed one event at a
//! time:
//!
//! 1. `message_start`: remember the message id and input tokens; emit the role chunk.
//! 2. `content_block_start`: a `tool_use` block gets the next OpenAI tool-call index and emits a tool-call
//!    delta with its id and name; a text block emits its initial text, if any.
//! 3. `content_block_delta`: `text_delta` → content delta; `input_json_delta` → arguments fragment of the
//!    block's tool call. `content_block_stop` emits nothing.
//!
//!    Output with no chat-completions form (thinking blocks and their signatures, citations, server tool
//!    calls, a block or delta type not known today) is not sent but still counted: each such start or delta
//!    yields a count-only chunk ([`crate::Chunk::count_only`]) of its generated tokens
//!    ([`crate::generated`]: every string of a delta but its type; a block's as given whole, a server tool's
//!    result left out), so the gateway cuts a stream of nothing else at its cap, and a stream cut short is
//!    charged for it too.
//! 4. `message_delta`: remember the output tokens; its `stop_reason` emits the final chunk.
//! 5. `message_stop`: emit the usage chunk (when the request asked for it) and end.
//! 6. `error`, an unparseable event, a broken or truncated body: emit the usage chunk (when asked) with what
//!    was counted, then the error, and end. Anthropic counts output tokens only in `message_delta`, so a
//!    stream cut before it reports at least the conservative estimate of what was streamed
//!    ([`crate::estimate::conservative`]): what the upstream generated (sent to the client or only counted) is
//!    charged, not the 1 of `message_start`.
//!
//! `ping` and unknown event types are skipped (unknown ones with a debug log).
//! What this file does not do: the `[DONE]` marker (the gateway writes it) or any timeout.

use super::error::stream_error;
use super::response::{finish_reason, Usage};
use crate::generated::{self, Rule};
use crate::sse::{truncate, SseError};
use crate::{Chunk, ChunkStream, ProviderError};
use futures::{Stream, StreamExt};
use serde_json::{json, Value};
use std::collections::VecDeque;

/// Translates an Anthropic SSE body into OpenAI chunks, feeding `state` one event at a time. An event longer
/// than `max_event` bytes ends the stream with an error.
pub(super) fn chunks<S, B, E>(state: StreamState, bytes: S, max_event: usize) -> ChunkStream
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let events = Box::pin(crate::sse::events(bytes, max_event));
    Box::pin(futures::stream::unfold((events, state), |(mut events, mut state)| async move {
        loop {
            if let Some(item) = state.out.pop_front() {
                return Some((item, (events, state)));
            }
            if state.done {
                return None;
            }
            match events.next().await {
                Some(Ok(event)) => state.on_event(&event.event, &event.data),
                Some(Err(e @ SseError::TooLong(_))) => state.bad(&e.to_string()),
                Some(Err(SseError::Transport(detail))) => state.on_broken(&detail),
                None => state.on_broken("stream ended before `message_stop`"),
            }
        }
    }))
}

/// What a content block index stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Text,
    /// A tool call, with its OpenAI index (counting tool calls only).
    Tool(u64),
    /// Thinking and other blocks with no chat-completions form.
    Skipped,
}

/// The whole state of one stream's translation.
#[derive(Debug)]
pub(super) struct StreamState {
    deployment: String,
    model: String,
    created: i64,
    include_usage: bool,
    /// The message id (from `message_start`), used as every chunk's id.
    id: String,
    usage: Usage,
    /// Content blocks seen so far, by their Anthropic index.
    blocks: Vec<(u64, Block)>,
    tool_calls: u64,
    /// Conservative token estimate of the output streamed so far (sent or only counted), for a cut stream.
    streamed_tokens: u64,
    /// Whether a `message_delta` reported the output count.
    output_counted: bool,
    finish_sent: bool,
    /// Chunks and errors translated but not yet taken.
    out: VecDeque<Result<Chunk, ProviderError>>,
    /// No more events are read once set.
    done: bool,
}

impl StreamState {
    /// A new translation for `model`; `include_usage` asks for the usage chunk.
    pub(super) fn new(deployment: String, model: String, created: i64, include_usage: bool) -> StreamState {
        StreamState {
            deployment,
            model,
            created,
            include_usage,
            id: String::new(),
            usage: Usage::default(),
            blocks: Vec::new(),
            tool_calls: 0,
            streamed_tokens: 0,
            output_counted: false,
            finish_sent: false,
            out: VecDeque::new(),
            done: false,
        }
    }

    /// Feeds one SSE event. The event name is Anthropic's `event:` line; when it is missing (the SSE default
    /// `message`), the `type` of the data names the event.
    fn on_event(&mut self, name: &str, data: &str) {
        if data.trim().is_empty() {
            return;
        }
        let Ok(event @ Value::Object(_)) = serde_json::from_str::<Value>(data) else {
            let detail = format!("unparseable `{name}` stream event: {}", truncate(data, 200));
            return self.fail(ProviderError::BadResponse { deployment: self.deployment.clone(), detail });
        };
        let name = match name {
            "" | "message" => event.get("type").and_then(Value::as_str).unwrap_or_default(),
            named => named,
        };
        match name {
            "message_start" => {
                let message = event.get("message");
                self.id = message.and_then(|m| m.get("id")).and_then(Value::as_str).unwrap_or_default().to_string();
                self.usage.update(message.and_then(|m| m.get("usage")));
                self.push(json!({ "role": "assistant", "content": "" }), Value::Null);
            }
            "content_block_start" => self.on_block_start(&event),
            "content_block_delta" => self.on_block_delta(&event),
            "message_delta" => {
                let usage = event.get("usage");
                self.output_counted |= usage.is_some_and(|u| u.get("output_tokens").is_some());
                self.usage.update(usage);
                let stop = event.get("delta").and_then(|d| d.get("stop_reason")).and_then(Value::as_str);
                if stop.is_some() {
                    self.push_finish(stop);
                }
            }
            "message_stop" => {
                if !self.finish_sent {
                    self.push_finish(None);
                }
                self.push_usage();
                self.done = true;
            }
            "content_block_stop" | "ping" => {}
            "error" => {
                let err = stream_error(&self.deployment, &event);
                self.fail(err);
            }
            other => tracing::debug!(event = %other, "anthropic: skipped an unknown stream event"),
        }
    }

    fn on_block_start(&mut self, event: &Value) {
        let Some(index) = event.get("index").and_then(Value::as_u64) else {
            return self.bad("`content_block_start` without an `index`");
        };
        let block = event.get("content_block");
        let kind = match block.and_then(|b| b.get("type")).and_then(Value::as_str).unwrap_or_default() {
            "text" => {
                let text = block.and_then(|b| b.get("text")).and_then(Value::as_str).unwrap_or_default();
                if !text.is_empty() {
                    self.count(text);
                    self.push(json!({ "content": text }), Value::Null);
                }
                Block::Text
            }
            "tool_use" => {
                let tool_index = self.tool_calls;
                self.tool_calls += 1;
                let text = |k: &str| block.and_then(|b| b.get(k)).and_then(Value::as_str).unwrap_or_default();
                // The input is normally `{}` here and arrives as JSON fragments; a non-empty one is whole.
                let arguments = match block.and_then(|b| b.get("input")) {
                    Some(Value::Object(input)) if !input.is_empty() => Value::Object(input.clone()).to_string(),
                    _ => String::new(),
                };
                self.count(text("name"));
                self.count(&arguments);
                let call = json!({
                    "index": tool_index, "id": text("id"), "type": "function",
                    "function": { "name": text("name"), "arguments": arguments },
                });
                self.push(json!({ "tool_calls": [call] }), Value::Null);
                Block::Tool(tool_index)
            }
            other => {
                tracing::debug!(block = %other, "anthropic: skipped a stream content block with no chat form");
                self.unsent(block.map_or(0, |b| generated::value_tokens(b, Rule::Whole)));
                Block::Skipped
            }
        };
        self.blocks.push((index, kind));
    }

    fn on_block_delta(&mut self, event: &Value) {
        let index = event.get("index").and_then(Value::as_u64);
        let Some(block) = self.blocks.iter().rev().find(|(i, _)| Some(*i) == index).map(|(_, b)| *b) else {
            return self.bad("`content_block_delta` for a block that was not started");
        };
        let delta = event.get("delta");
        let text = |k: &str| delta.and_then(|d| d.get(k)).and_then(Value::as_str).unwrap_or_default();
        match (block, delta.and_then(|d| d.get("type")).and_then(Value::as_str).unwrap_or_default()) {
            (Block::Text, "text_delta") => {
                let t = text("text");
                if !t.is_empty() {
                    self.count(t);
                    self.push(json!({ "content": t }), Value::Null);
                }
            }
            (Block::Tool(tool_index), "input_json_delta") => {
                let fragment = text("partial_json");
                if !fragment.is_empty() {
                    self.count(fragment);
                    let call = json!({ "index": tool_index, "function": { "arguments": fragment } });
                    self.push(json!({ "tool_calls": [call] }), Value::Null);
                }
            }
            (block, kind) => {
                if block != Block::Skipped {
                    tracing::debug!(delta = %kind, "anthropic: skipped a stream delta with no chat form");
                }
                self.unsent(delta.map_or(0, |d| generated::value_tokens(d, Rule::Delta)));
            }
        }
    }

    /// The stream ended or broke before `message_stop`.
    fn on_broken(&mut self, detail: &str) {
        let detail = format!("stream broken: {detail}");
        self.fail(ProviderError::Unreachable { deployment: self.deployment.clone(), detail });
    }

    fn bad(&mut self, detail: &str) {
        let detail = detail.to_string();
        self.fail(ProviderError::BadResponse { deployment: self.deployment.clone(), detail });
    }

    /// Ends the stream with `err`, after the usage counted so far (spec: a stream cut short is still charged).
    fn fail(&mut self, err: ProviderError) {
        tracing::debug!(deployment = %self.deployment, error = %err, "anthropic: stream ended with an error");
        if !self.output_counted {
            self.usage.raise_output(self.streamed_tokens);
        }
        self.push_usage();
        self.out.push_back(Err(err));
        self.done = true;
    }

    fn count(&mut self, streamed: &str) {
        self.streamed_tokens = self.streamed_tokens.saturating_add(crate::estimate::conservative(streamed));
    }

    /// Output with no chat form, of `tokens` (plain estimate): counted for the cap and the charge, not sent.
    fn unsent(&mut self, tokens: u64) {
        if tokens > 0 {
            self.streamed_tokens = self.streamed_tokens.saturating_add(tokens.saturating_mul(2));
            self.out.push_back(Ok(Chunk::count_only(tokens)));
        }
    }

    fn push_finish(&mut self, stop_reason: Option<&str>) {
        self.finish_sent = true;
        self.push(json!({}), json!(finish_reason(stop_reason)));
    }

    fn push(&mut self, delta: Value, finish: Value) {
        let choices = json!([{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish }]);
        let usage = self.include_usage.then_some(Value::Null);
        self.out.push_back(Ok(self.chunk(choices, usage)));
    }

    /// The usage chunk, when asked for and the upstream reported counts (without them the gateway charges its
    /// estimate and writes the usage chunk itself).
    fn push_usage(&mut self) {
        if self.include_usage {
            let usage = self.usage.to_openai();
            if !usage.is_null() {
                self.out.push_back(Ok(self.chunk(json!([]), Some(usage))));
            }
        }
    }

    fn chunk(&self, choices: Value, usage: Option<Value>) -> Chunk {
        Chunk::translated(&self.id, self.created, &self.model, choices, usage)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::Map;

    fn feed(include_usage: bool, events: &[(&str, Value)]) -> Vec<Result<Map<String, Value>, ProviderError>> {
        let mut s = StreamState::new("d".into(), "m".into(), 0, include_usage);
        for (name, data) in events {
            s.on_event(name, &data.to_string());
        }
        s.out.into_iter().map(|r| r.map(Chunk::into_map)).collect()
    }

    #[test]
    fn output_with_no_chat_form_is_counted_not_sent() {
        let mut s = StreamState::new("d".into(), "m".into(), 0, true);
        let start =
            |index: u64, block: Value| json!({"type": "content_block_start", "index": index, "content_block": block});
        let delta = |index: u64, delta: Value| json!({"type": "content_block_delta", "index": index, "delta": delta});
        // "abcdefgh" is 2 tokens, "abcd" 1.
        let events = [
            json!({"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 3, "output_tokens": 1}}}),
            start(0, json!({"type": "thinking", "thinking": "", "signature": ""})),
            delta(0, json!({"type": "thinking_delta", "thinking": "abcdefgh"})),
            delta(0, json!({"type": "signature_delta", "signature": "abcdefgh"})),
            start(1, json!({"type": "text", "text": ""})),
            delta(1, json!({"type": "text_delta", "text": "abcd"})),
            delta(
                1,
                json!({"type": "citations_delta", "citation": {"type": "char_location", "cited_text": "abcdefgh"}}),
            ),
            start(2, json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "abcd", "input": {}})),
            delta(2, json!({"type": "input_json_delta", "partial_json": "abcdefgh"})),
            start(
                3,
                json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [{"title": "abcdefgh"}]}),
            ),
            start(4, json!({"type": "x_new", "x_text": "abcdefgh"})),
            delta(4, json!({"type": "x_new_delta", "x_text": "abcdefgh"})),
            start(5, json!({"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}})),
            delta(5, json!({"type": "x_new_delta", "partial": "abcd"})),
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ];
        for e in &events {
            s.on_event("", &e.to_string());
        }
        let out: Vec<_> = s.out.into_iter().collect();
        let counts: Vec<u64> =
            out.iter().flatten().filter(|c| c.is_count_only()).map(Chunk::generated_tokens).collect();
        // Thinking, signature, citation, server tool name, its input, a new block, its delta, a new delta of a
        // tool call; the search results count nothing.
        assert_eq!(counts, [2, 2, 2, 1, 2, 2, 2, 1]);
        let sent: Vec<Map<String, Value>> =
            out.iter().flatten().filter(|c| !c.is_count_only()).map(|c| c.map().clone()).collect();
        let text = serde_json::to_string(&sent).unwrap();
        assert!(!text.contains("abcdefgh"), "nothing of it is sent: {text}");
        assert!(sent.iter().all(|c| c["object"] == "chat.completion.chunk"));
        // Cut short by the error: charged the conservative estimate of everything streamed, sent or not
        // ("abcd" of text, "f" of the tool call, and the 14 tokens above, twice).
        let usage = &sent.last().unwrap()["usage"];
        assert_eq!(usage["completion_tokens"], 2 * (1 + 1 + 14), "{usage}");
        assert!(matches!(out.last(), Some(Err(ProviderError::Status { .. }))), "{:?}", out.last());
    }

    #[test]
    fn tool_call_indices_count_only_tool_blocks() {
        let out = feed(
            false,
            &[
                (
                    "message_start",
                    json!({"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 3}}}),
                ),
                ("content_block_start", json!({"index": 0, "content_block": {"type": "text", "text": ""}})),
                (
                    "content_block_start",
                    json!({"index": 1, "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {}}}),
                ),
                (
                    "content_block_delta",
                    json!({"index": 1, "delta": {"type": "input_json_delta", "partial_json": "{}"}}),
                ),
            ],
        );
        let chunks: Vec<_> = out.into_iter().map(Result::unwrap).collect();
        assert_eq!(chunks.len(), 3);
        assert_eq!(chunks[1]["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
        assert_eq!(chunks[2]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"], "{}");
        assert!(chunks.iter().all(|c| !c.contains_key("usage")));
    }

    #[test]
    fn the_type_names_an_unnamed_event_and_bad_data_ends_with_usage_first() {
        let out = feed(
            true,
            &[
                ("message", json!({"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 3}}})),
                ("content_block_delta", json!({"index": 9, "delta": {"type": "text_delta", "text": "x"}})),
            ],
        );
        assert_eq!(out.len(), 3);
        assert_eq!(out[1].as_ref().unwrap()["usage"]["prompt_tokens"], 3);
        assert!(matches!(out[2], Err(ProviderError::BadResponse { .. })));
    }
}
