//! Chat-completion chunks as Gemini's stream (`streamGenerateContent?alt=sse`): one unnamed `data:` event per
//! chunk that adds output, each a `GenerateContentResponse` holding that piece (text, or a thought with
//! `thought: true`). Function calls arrive in pieces in chat chunks and whole in Gemini's: they are gathered and
//! sent in the last event, with `finishReason` and the `usageMetadata` charged.

use super::gemini::{error_body, finish_reason, function_call_part, usage_metadata};
use super::sse;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use svc_budget::Usage;

/// A function call being gathered, by its chat index.
#[derive(Debug)]
struct Call {
    index: u64,
    id: Value,
    name: Value,
    arguments: String,
}

/// State of one translated stream.
#[derive(Debug)]
pub struct GeminiStream {
    model: Value,
    id: Value,
    calls: Vec<Call>,
    finish: Option<String>,
    /// Of the completion tokens, those the upstream said were thinking.
    reasoning: u64,
}

impl GeminiStream {
    /// A stream answering under `alias`.
    pub fn new(alias: &str) -> GeminiStream {
        GeminiStream {
            model: Value::String(alias.to_string()),
            id: Value::String(format!("svc-{}", uuid::Uuid::new_v4().simple())),
            calls: Vec::new(),
            finish: None,
            reasoning: 0,
        }
    }

    fn event(&self, out: &mut Vec<u8>, parts: Vec<Value>, end: Option<(&str, Usage)>) {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        let mut response = Map::new();
        if let Some((reason, _)) = end {
            candidate["finishReason"] = json!(reason);
        }
        response.insert("candidates".into(), json!([candidate]));
        if let Some((_, usage)) = end {
            let u =
                usage_metadata(usage.prompt_tokens, usage.completion_tokens, usage.cache_read_tokens, self.reasoning);
            response.insert("usageMetadata".into(), u);
        }
        response.insert("modelVersion".into(), self.model.clone());
        response.insert("responseId".into(), self.id.clone());
        sse::write_json(out, "", &response);
    }

    /// The event of one chat chunk, when it adds text (tool calls are gathered for the last event).
    pub fn chunk(&mut self, chunk: &Map<String, Value>) -> Option<Bytes> {
        if let Some(reasoning) = chunk
            .get("usage")
            .and_then(|u| u.get("completion_tokens_details"))
            .and_then(|d| d.get("reasoning_tokens"))
            .and_then(Value::as_u64)
        {
            self.reasoning = reasoning;
        }
        let choice = chunk.get("choices").and_then(|c| c.get(0));
        let delta = choice.and_then(|c| c.get("delta"));
        let text = |key: &str| delta.and_then(|d| d.get(key)).and_then(Value::as_str).filter(|t| !t.is_empty());
        let mut parts = Vec::new();
        if let Some(thought) = text("reasoning_content") {
            parts.push(json!({"text": thought, "thought": true}));
        }
        if let Some(t) = text("content") {
            parts.push(json!({"text": t}));
        }
        for piece in delta.and_then(|d| d.get("tool_calls")).and_then(Value::as_array).into_iter().flatten() {
            let index = piece.get("index").and_then(Value::as_u64).unwrap_or(0);
            let f = piece.get("function");
            if !self.calls.iter().any(|c| c.index == index) {
                self.calls.push(Call { index, id: Value::Null, name: Value::Null, arguments: String::new() });
            }
            let Some(call) = self.calls.iter_mut().find(|c| c.index == index) else { continue };
            if let Some(id) = piece.get("id").filter(|id| !id.is_null()) {
                call.id = id.clone();
            }
            if let Some(name) = f.and_then(|f| f.get("name")).filter(|n| !n.is_null()) {
                call.name = name.clone();
            }
            if let Some(args) = f.and_then(|f| f.get("arguments")).and_then(Value::as_str) {
                call.arguments.push_str(args);
            }
        }
        if let Some(f) = choice.and_then(|c| c.get("finish_reason")).and_then(Value::as_str) {
            self.finish = Some(f.to_string());
        }
        if parts.is_empty() {
            return None;
        }
        let mut out = Vec::new();
        self.event(&mut out, parts, None);
        Some(Bytes::from(out))
    }

    fn end(&mut self, usage: Usage, reason: &str) -> Bytes {
        let mut parts: Vec<Value> = std::mem::take(&mut self.calls)
            .iter()
            .map(|c| function_call_part(&c.id, &c.name, if c.arguments.is_empty() { "{}" } else { &c.arguments }))
            .collect();
        if parts.is_empty() {
            parts.push(json!({"text": ""}));
        }
        let mut out = Vec::new();
        self.event(&mut out, parts, Some((reason, usage)));
        Bytes::from(out)
    }

    /// The last event of a finished stream, with what was charged.
    pub fn done(&mut self, usage: Usage) -> Bytes {
        let reason = finish_reason(self.finish.as_deref());
        self.end(usage, reason)
    }

    /// The last event of a stream cut at its completion cap.
    pub fn cut(&mut self, usage: Usage) -> Bytes {
        self.end(usage, "MAX_TOKENS")
    }

    /// The error ending a stream that failed mid-way, in Google's shape.
    pub fn error(&mut self, err: &crate::Fault<'_>) -> Bytes {
        sse::json("", &error_body(err))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::data_of as events;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn text_streams_piece_by_piece_and_calls_come_whole_at_the_end() {
        let mut s = GeminiStream::new("gemini-x");
        let mut all = Vec::new();
        for c in [
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
            json!({"choices": [{"index": 0, "delta": {"reasoning_content": "hm"}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "Reading."}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_a", "function": {"name": "read_file", "arguments": "{\"file_path\":"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"/tmp/a\"}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 12, "completion_tokens_details": {"reasoning_tokens": 5}}}),
        ] {
            all.extend_from_slice(&s.chunk(&obj(c)).unwrap_or_default());
        }
        all.extend_from_slice(&s.done(Usage { prompt_tokens: 30, completion_tokens: 12, ..Usage::default() }));
        let ev = events(&all);
        assert_eq!(ev.len(), 3, "{ev:?}");
        assert_eq!(ev[0]["candidates"][0]["content"]["parts"], json!([{"text": "hm", "thought": true}]));
        assert_eq!(ev[1]["candidates"][0]["content"]["parts"][0]["text"], "Reading.");
        assert_eq!(ev[1]["modelVersion"], "gemini-x");
        let last = &ev[2];
        assert_eq!(
            last["candidates"][0]["content"]["parts"],
            json!([{"functionCall": {"id": "call_a", "name": "read_file", "args": {"file_path": "/tmp/a"}}}])
        );
        assert_eq!(last["candidates"][0]["finishReason"], "STOP");
        assert_eq!(
            last["usageMetadata"],
            json!({"promptTokenCount": 30, "candidatesTokenCount": 7, "thoughtsTokenCount": 5, "totalTokenCount": 42})
        );
        assert!(!String::from_utf8_lossy(&all).contains("event:"), "Gemini's events are unnamed");
    }

    #[test]
    fn a_cut_stream_ends_at_max_tokens_and_errors_are_googles() {
        let mut s = GeminiStream::new("g");
        let end = events(&s.cut(Usage { prompt_tokens: 1, completion_tokens: 2, ..Usage::default() }));
        assert_eq!(end[0]["candidates"][0]["finishReason"], "MAX_TOKENS");
        let fault = crate::Fault { status: 502, code: "upstream_unreachable", message: "gone", retry_after: None };
        let err = events(&s.error(&fault));
        assert_eq!(err[0]["error"]["status"], "UNAVAILABLE");
    }
}
