//! A Bedrock Converse answer, and each ConverseStream event, as chat completions.
//!
//! | Converse | chat completions |
//! |---|---|
//! | `output.message.content` `text` blocks | `message.content` (null when the answer only calls tools) |
//! | `reasoningContent.reasoningText.text` | `message.reasoning_content` (signatures and redacted reasoning dropped) |
//! | `toolUse` blocks | `message.tool_calls` (`id` the `toolUseId`, `arguments` the `input` as JSON text) |
//! | `stopReason` end_turn, stop_sequence | `finish_reason` stop (also when unknown or missing) |
//! | `stopReason` tool_use | `finish_reason` tool_calls |
//! | `stopReason` max_tokens, model_context_window_exceeded | `finish_reason` length |
//! | `stopReason` guardrail_intervened, content_filtered | `finish_reason` content_filter |
//! | `usage.inputTokens` + `cacheReadInputTokens` + `cacheWriteInputTokens` | `usage.prompt_tokens` (Bedrock's input count leaves the cache out, as Anthropic's does) |
//! | `usage.outputTokens` | `usage.completion_tokens` (`total_tokens` the sum) |
//! | `usage.cacheReadInputTokens` | `usage.prompt_tokens_details.cached_tokens` |
//! | `usage.cacheWriteInputTokens` | `usage.cache_creation_input_tokens` (LiteLLM's name, as the Anthropic translation reports it and [`crate::usage::read`] prices it) |
//! | (no id) | `id` `bedrock-<uuid>`, one per answer or stream |
//!
//! A stream, one event at a time ([`StreamState::chunk`]): `messageStart` → the role chunk; `contentBlockStart`
//! of a `toolUse` → a tool-call delta with its id and name (the next tool-call index); `contentBlockDelta` →
//! a `content`, `reasoning_content` or tool-call `arguments` delta; `messageStop` → the finish chunk;
//! `metadata` → the usage chunk (`choices: []`, see [`crate::Chunk::is_usage_only`]; the gateway drops it
//! when the client did not ask for usage). `contentBlockStop`, signatures and unknown events give no chunk.
//!
//! What this file does not do: HTTP, the event-stream framing, or exception frames (the caller reads them
//! from the frame's headers).

use crate::{Chunk, ProviderError};
use serde_json::{json, Map, Value};

/// A new answer or stream id: Converse gives none.
fn new_id() -> String {
    format!("bedrock-{}", uuid::Uuid::new_v4().simple())
}

/// The chat `finish_reason` of a Converse `stopReason`.
fn finish_reason(stop_reason: Option<&str>) -> &'static str {
    match stop_reason {
        Some("end_turn" | "stop_sequence") | None => "stop",
        Some("tool_use") => "tool_calls",
        Some("max_tokens" | "model_context_window_exceeded") => "length",
        Some("guardrail_intervened" | "content_filtered") => "content_filter",
        Some(other) => {
            tracing::debug!(stop_reason = %other, "bedrock: unknown stop reason read as `stop`");
            "stop"
        }
    }
}

/// The chat `usage` of a Converse `usage` object; `None` when it lacks the input or output count (the gateway
/// then charges its estimate). A count that is not a whole number from zero gives counts of `null` with the
/// reason, so the gateway charges its estimate instead of a made-up zero (as the Anthropic translation does).
/// Sums saturate: a wrapped sum would bill almost nothing.
fn usage(u: &Value) -> Option<Value> {
    let mut malformed = None;
    let mut count = |key: &str| match u.get(key) {
        None | Some(Value::Null) => None,
        Some(v) => {
            let n = v.as_u64();
            if n.is_none() {
                malformed = Some(format!("`usage.{key}` is not a whole number from 0: {v}"));
            }
            n
        }
    };
    let (input, output) = (count("inputTokens"), count("outputTokens"));
    let (read, write) = (count("cacheReadInputTokens").unwrap_or(0), count("cacheWriteInputTokens").unwrap_or(0));
    if let Some(reason) = malformed {
        return Some(json!({ "prompt_tokens": null, "completion_tokens": null, "malformed": reason }));
    }
    let prompt = input?.saturating_add(read).saturating_add(write);
    let output = output?;
    let mut usage = json!({
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": prompt.saturating_add(output),
        "prompt_tokens_details": { "cached_tokens": read },
    });
    if let (true, Value::Object(fields)) = (write > 0, &mut usage) {
        fields.insert("cache_creation_input_tokens".into(), json!(write));
    }
    Some(usage)
}

/// What an answer's content blocks hold, in chat terms.
#[derive(Default)]
struct Read {
    text: String,
    reasoning: String,
    calls: Vec<Value>,
}

/// The text, reasoning text and tool calls of Converse content blocks; other blocks are dropped.
fn read(blocks: &[Value]) -> Read {
    let mut read = Read::default();
    for block in blocks {
        if let Some(t) = block.get("text").and_then(Value::as_str) {
            read.text.push_str(t);
        } else if let Some(call) = block.get("toolUse") {
            let text = |k: &str| call.get(k).and_then(Value::as_str).unwrap_or_default();
            let input = call.get("input").filter(|i| !i.is_null()).map_or_else(|| "{}".to_string(), Value::to_string);
            read.calls.push(json!({
                "id": text("toolUseId"), "type": "function",
                "function": { "name": text("name"), "arguments": input },
            }));
        } else if let Some(reasoning) = block.get("reasoningContent") {
            let text = reasoning.get("reasoningText").and_then(|r| r.get("text")).and_then(Value::as_str);
            read.reasoning.push_str(text.unwrap_or_default());
        } else {
            tracing::debug!("bedrock: dropped a content block with no chat form");
        }
    }
    read
}

/// A whole Converse answer as a `chat.completion` for `model`, created at `created`. The error says what
/// of the protocol is missing.
pub(super) fn to_chat_completion(answer: &Value, model: &str, created: i64) -> Result<Map<String, Value>, String> {
    let Some(output) = answer.get("output").and_then(|o| o.get("message")) else {
        return Err("the answer has no `output.message`".into());
    };
    let Some(blocks) = output.get("content").and_then(Value::as_array) else {
        return Err("the answer has no `output.message.content` array".into());
    };
    let Read { text, reasoning, calls } = read(blocks);
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    // OpenAI: `content` is null when the assistant only calls tools.
    let content = if text.is_empty() && !calls.is_empty() { Value::Null } else { Value::String(text) };
    message.insert("content".into(), content);
    if !reasoning.is_empty() {
        message.insert("reasoning_content".into(), Value::String(reasoning));
    }
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    let finish = finish_reason(answer.get("stopReason").and_then(Value::as_str));
    let mut out = Map::new();
    out.insert("id".into(), json!(new_id()));
    out.insert("object".into(), json!("chat.completion"));
    out.insert("created".into(), json!(created));
    out.insert("model".into(), json!(model));
    out.insert(
        "choices".into(),
        json!([{ "index": 0, "message": message, "logprobs": null, "finish_reason": finish }]),
    );
    if let Some(u) = answer.get("usage").and_then(usage) {
        out.insert("usage".into(), u);
    }
    Ok(out)
}

/// A translated stream's state: its id, and the tool calls started so far.
#[derive(Debug)]
pub(super) struct StreamState {
    deployment: String,
    model: String,
    created: i64,
    /// Every chunk's id.
    id: String,
    /// The tool calls started so far: `(contentBlockIndex, tool-call index)`.
    calls: Vec<(u64, u64)>,
}

impl StreamState {
    /// A new translation of a stream from `deployment`, its chunks naming `model` and created at `created`.
    pub(super) fn new(deployment: &str, model: &str, created: i64) -> StreamState {
        StreamState {
            deployment: deployment.to_string(),
            model: model.to_string(),
            created,
            id: new_id(),
            calls: Vec::new(),
        }
    }

    /// One ConverseStream event: `event_type` is the frame's `:event-type` header (messageStart,
    /// contentBlockStart, contentBlockDelta, contentBlockStop, messageStop, metadata), `payload` its JSON
    /// payload. `Ok(None)` for an event that gives no chunk (contentBlockStop, a signature, unknown types); a
    /// payload that is not a JSON object, or a tool-call delta of a block never started, is an error.
    pub(super) fn chunk(&mut self, event_type: &str, payload: &[u8]) -> Result<Option<Chunk>, ProviderError> {
        let event = match serde_json::from_slice::<Value>(payload) {
            Ok(event @ Value::Object(_)) => event,
            Ok(_) => return Err(self.bad(format!("the `{event_type}` event is not a JSON object"))),
            Err(e) => return Err(self.bad(format!("the `{event_type}` event is not JSON: {e}"))),
        };
        let index = event.get("contentBlockIndex").and_then(Value::as_u64);
        Ok(match event_type {
            "messageStart" => Some(self.delta(json!({ "role": "assistant", "content": "" }), Value::Null)),
            "contentBlockStart" => {
                event.get("start").and_then(|s| s.get("toolUse")).map(|call| self.start(call, index))
            }
            "contentBlockDelta" => match event.get("delta") {
                Some(delta) => self.on_delta(delta, index)?,
                None => None,
            },
            "messageStop" => {
                let finish = finish_reason(event.get("stopReason").and_then(Value::as_str));
                Some(self.delta(json!({}), json!(finish)))
            }
            "metadata" => event.get("usage").and_then(usage).map(|u| self.chunk_of(json!([]), Some(u))),
            "contentBlockStop" => None,
            other => {
                tracing::debug!(event = %other, "bedrock: skipped an unknown stream event");
                None
            }
        })
    }

    /// A `toolUse` block started at `index`: a tool-call delta with its id, name and no arguments yet.
    fn start(&mut self, call: &Value, index: Option<u64>) -> Chunk {
        let tool_index = self.calls.len() as u64;
        self.calls.push((index.unwrap_or(tool_index), tool_index));
        let text = |k: &str| call.get(k).and_then(Value::as_str).unwrap_or_default();
        let call = json!({
            "index": tool_index, "id": text("toolUseId"), "type": "function",
            "function": { "name": text("name"), "arguments": "" },
        });
        self.delta(json!({ "tool_calls": [call] }), Value::Null)
    }

    /// A `contentBlockDelta`'s `delta` of block `index`: text, reasoning text, or a fragment of a tool call's
    /// input (of the call that block started); `None` for an empty one, a signature or a kind not known today.
    fn on_delta(&mut self, delta: &Value, index: Option<u64>) -> Result<Option<Chunk>, ProviderError> {
        if let Some(text) = delta.get("text").and_then(Value::as_str) {
            return Ok((!text.is_empty()).then(|| self.delta(json!({ "content": text }), Value::Null)));
        }
        if let Some(fragment) = delta.get("toolUse").and_then(|t| t.get("input")).and_then(Value::as_str) {
            let call = self.calls.iter().rev().find(|(block, _)| Some(*block) == index);
            let Some(&(_, tool_index)) = call else {
                return Err(self.bad("a tool-call `contentBlockDelta` of a block that was not started".into()));
            };
            let call = json!({ "index": tool_index, "function": { "arguments": fragment } });
            return Ok((!fragment.is_empty()).then(|| self.delta(json!({ "tool_calls": [call] }), Value::Null)));
        }
        let reasoning = delta.get("reasoningContent").and_then(|r| r.get("text")).and_then(Value::as_str);
        if let Some(text) = reasoning.filter(|t| !t.is_empty()) {
            return Ok(Some(self.delta(json!({ "reasoning_content": text }), Value::Null)));
        }
        if delta.get("reasoningContent").is_none() {
            tracing::debug!("bedrock: skipped a stream delta with no chat form");
        }
        Ok(None)
    }

    /// A [`ProviderError::BadResponse`] of this stream's deployment.
    fn bad(&self, detail: String) -> ProviderError {
        ProviderError::BadResponse { deployment: self.deployment.clone(), detail }
    }

    /// A chunk of one choice with `delta` and `finish` (a reason, or null).
    fn delta(&self, delta: Value, finish: Value) -> Chunk {
        let choices = json!([{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish }]);
        self.chunk_of(choices, None)
    }

    /// A chunk of `choices`, with `usage` when given.
    fn chunk_of(&self, choices: Value, usage: Option<Value>) -> Chunk {
        Chunk::translated(&self.id, self.created, &self.model, choices, usage)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn answers_become_completions_with_cache_tokens_in_the_prompt() {
        let answer = json!({
            "output": {"message": {"role": "assistant", "content": [
                {"reasoningContent": {"reasoningText": {"text": "hm", "signature": "sig"}}},
                {"text": "Reading."},
                {"toolUse": {"toolUseId": "t1", "name": "read", "input": {"p": "a"}}}]}},
            "stopReason": "tool_use",
            "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15, "cacheReadInputTokens": 2, "cacheWriteInputTokens": 3},
            "metrics": {"latencyMs": 100}});
        let out = Value::Object(to_chat_completion(&answer, "claude", 7).unwrap());
        assert!(out["id"].as_str().unwrap().starts_with("bedrock-"), "{}", out["id"]);
        assert_eq!(
            (&out["object"], &out["created"], &out["model"]),
            (&json!("chat.completion"), &json!(7), &json!("claude"))
        );
        assert_eq!(
            out["choices"][0],
            json!({"index": 0, "logprobs": null, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "Reading.", "reasoning_content": "hm",
                "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "read", "arguments": "{\"p\":\"a\"}"}}]}})
        );
        assert_eq!(
            out["usage"],
            json!({"prompt_tokens": 15, "completion_tokens": 5, "total_tokens": 20,
                "prompt_tokens_details": {"cached_tokens": 2}, "cache_creation_input_tokens": 3})
        );
        let priced = crate::usage::read(Some(&out["usage"]));
        let crate::usage::Reported::Counts(u) = priced else { panic!("{priced:?}") };
        assert_eq!((u.prompt_tokens, u.cache_read_tokens, u.cache_creation_tokens), (15, 2, 3));
    }

    #[test]
    fn tool_only_answers_have_null_content_and_missing_parts_are_errors() {
        let answer = json!({"output": {"message": {"role": "assistant", "content": [
            {"toolUse": {"toolUseId": "t1", "name": "f", "input": {}}}]}}, "stopReason": "tool_use"});
        let out = Value::Object(to_chat_completion(&answer, "m", 0).unwrap());
        assert_eq!(out["choices"][0]["message"]["content"], Value::Null);
        assert!(out.get("usage").is_none(), "no usage reported: none made up");
        assert!(to_chat_completion(&json!({"stopReason": "end_turn"}), "m", 0).unwrap_err().contains("output.message"));
        assert!(to_chat_completion(&json!({"output": {"message": {}}}), "m", 0).is_err());
        let bad = json!({"output": {"message": {"content": [{"text": ""}]}}, "usage": {"inputTokens": -1, "outputTokens": 2}});
        let out = Value::Object(to_chat_completion(&bad, "m", 0).unwrap());
        assert!(out["usage"]["prompt_tokens"].is_null() && out["usage"]["malformed"].is_string(), "{}", out["usage"]);
        assert_eq!(out["choices"][0]["message"]["content"], "");
    }

    #[test]
    fn finish_reasons() {
        for (reason, want) in [
            (Some("end_turn"), "stop"),
            (Some("stop_sequence"), "stop"),
            (Some("tool_use"), "tool_calls"),
            (Some("max_tokens"), "length"),
            (Some("model_context_window_exceeded"), "length"),
            (Some("guardrail_intervened"), "content_filter"),
            (Some("content_filtered"), "content_filter"),
            (Some("something_new"), "stop"),
            (None, "stop"),
        ] {
            assert_eq!(finish_reason(reason), want, "{reason:?}");
        }
    }

    #[test]
    fn a_stream_of_events_becomes_chunks() {
        let mut s = StreamState::new("d", "claude", 3);
        let events = [
            ("messageStart", json!({"role": "assistant"})),
            ("contentBlockDelta", json!({"delta": {"reasoningContent": {"text": "hm"}}, "contentBlockIndex": 0})),
            ("contentBlockDelta", json!({"delta": {"reasoningContent": {"signature": "sig"}}, "contentBlockIndex": 0})),
            ("contentBlockStop", json!({"contentBlockIndex": 0})),
            ("contentBlockDelta", json!({"delta": {"text": "Hel"}, "contentBlockIndex": 1})),
            ("contentBlockDelta", json!({"delta": {"text": "lo"}, "contentBlockIndex": 1})),
            ("contentBlockStop", json!({"contentBlockIndex": 1})),
            (
                "contentBlockStart",
                json!({"start": {"toolUse": {"toolUseId": "t1", "name": "f"}}, "contentBlockIndex": 2}),
            ),
            ("contentBlockDelta", json!({"delta": {"toolUse": {"input": "{\"a\":"}}, "contentBlockIndex": 2})),
            ("contentBlockDelta", json!({"delta": {"toolUse": {"input": "1}"}}, "contentBlockIndex": 2})),
            ("contentBlockStop", json!({"contentBlockIndex": 2})),
            ("messageStop", json!({"stopReason": "tool_use"})),
            (
                "metadata",
                json!({"usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15, "cacheReadInputTokens": 4},
                "metrics": {"latencyMs": 100}}),
            ),
        ];
        let mut chunks = Vec::new();
        for (event_type, payload) in &events {
            if let Some(c) = s.chunk(event_type, payload.to_string().as_bytes()).unwrap() {
                chunks.push(c);
            }
        }
        let maps: Vec<Map<String, Value>> = chunks.iter().map(|c| c.map().clone()).collect();
        let deltas: Vec<Value> =
            maps.iter().map(|c| c["choices"].get(0).map_or(Value::Null, |c| c["delta"].clone())).collect();
        assert_eq!(
            deltas,
            [
                json!({"role": "assistant", "content": ""}),
                json!({"reasoning_content": "hm"}),
                json!({"content": "Hel"}),
                json!({"content": "lo"}),
                json!({"tool_calls": [{"index": 0, "id": "t1", "type": "function", "function": {"name": "f", "arguments": ""}}]}),
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\":"}}]}),
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
                json!({}),
                Value::Null,
            ]
        );
        let finishes: Vec<&Value> =
            maps.iter().filter_map(|c| c["choices"].get(0)).map(|c| &c["finish_reason"]).collect();
        assert_eq!(finishes.iter().filter(|f| !f.is_null()).collect::<Vec<_>>(), [&&json!("tool_calls")]);
        assert!(maps.iter().all(|c| c["id"] == maps[0]["id"]
            && c["object"] == "chat.completion.chunk"
            && c["created"] == 3
            && c["model"] == "claude"));
        let last = chunks.last().unwrap();
        assert!(last.is_usage_only() && chunks[..chunks.len() - 1].iter().all(|c| !c.is_usage_only()));
        assert_eq!(
            maps.last().unwrap()["usage"],
            json!({"prompt_tokens": 14, "completion_tokens": 5, "total_tokens": 19, "prompt_tokens_details": {"cached_tokens": 4}})
        );
    }

    #[test]
    fn tool_call_indexes_count_tool_blocks_only_and_bad_events_are_errors() {
        let mut s = StreamState::new("d", "m", 0);
        let mut feed = |event_type: &str, payload: Value| s.chunk(event_type, payload.to_string().as_bytes());
        let start =
            |id: &str, at: u64| json!({"start": {"toolUse": {"toolUseId": id, "name": "f"}}, "contentBlockIndex": at});
        let input = |at: u64| json!({"delta": {"toolUse": {"input": "{}"}}, "contentBlockIndex": at});
        let index = |c: Option<Chunk>| c.unwrap().map()["choices"][0]["delta"]["tool_calls"][0]["index"].clone();
        assert!(feed("contentBlockDelta", json!({"delta": {"text": "a"}, "contentBlockIndex": 0})).unwrap().is_some());
        assert_eq!(index(feed("contentBlockStart", start("t1", 1)).unwrap()), 0);
        assert_eq!(index(feed("contentBlockStart", start("t2", 2)).unwrap()), 1);
        assert_eq!(index(feed("contentBlockDelta", input(1)).unwrap()), 0);
        assert_eq!(index(feed("contentBlockDelta", input(2)).unwrap()), 1);
        assert!(feed("somethingNew", json!({})).unwrap().is_none());
        assert!(feed("metadata", json!({"metrics": {"latencyMs": 1}})).unwrap().is_none(), "no usage, no chunk");
        assert!(matches!(feed("contentBlockDelta", input(7)), Err(ProviderError::BadResponse { .. })));
        assert!(matches!(s.chunk("messageStop", b"{\"stopRea"), Err(ProviderError::BadResponse { .. })));
        assert!(matches!(s.chunk("messageStop", b"[]"), Err(ProviderError::BadResponse { .. })));
    }
}
