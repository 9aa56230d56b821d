//! Gemini answers as chat completions: a whole `GenerateContentResponse`, and each event of a stream as a chunk.

use crate::{Chunk, ProviderError};
use serde_json::{json, Map, Value};

/// What a candidate's parts hold, in chat terms.
#[derive(Default)]
struct Read {
    text: String,
    thought: String,
    calls: Vec<Value>,
}

/// The parts of the first candidate; each function call gets an id (the part's own, else one made of
/// `call_` and its number in the answer, from `first_call`).
fn read(answer: &Value, first_call: usize) -> Read {
    let mut read = Read::default();
    let parts =
        answer.get("candidates").and_then(|c| c.get(0)).and_then(|c| c.get("content")).and_then(|c| c.get("parts"));
    for p in parts.and_then(Value::as_array).into_iter().flatten() {
        if let Some(call) = p.get("functionCall") {
            let n = first_call + read.calls.len();
            let id = call.get("id").and_then(Value::as_str).map_or_else(|| format!("call_{n}"), str::to_string);
            let args = call.get("args").filter(|a| !a.is_null()).map_or_else(|| "{}".to_string(), Value::to_string);
            let name = call.get("name").cloned().unwrap_or(Value::Null);
            read.calls.push(json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}));
        } else if let Some(t) = p.get("text").and_then(Value::as_str) {
            let into = if p.get("thought").and_then(Value::as_bool) == Some(true) {
                &mut read.thought
            } else {
                &mut read.text
            };
            into.push_str(t);
        }
    }
    read
}

/// The chat `finish_reason` of the first candidate's `finishReason`, when it has one.
fn finish(answer: &Value, calls: bool) -> Option<&'static str> {
    let reason = answer.get("candidates")?.get(0)?.get("finishReason")?.as_str()?;
    Some(match reason {
        "MAX_TOKENS" => "length",
        "STOP" | "FINISH_REASON_UNSPECIFIED" if calls => "tool_calls",
        "STOP" | "FINISH_REASON_UNSPECIFIED" => "stop",
        _ => "content_filter",
    })
}

/// The chat `usage` of a `usageMetadata` (thinking is output; `None` without one).
fn usage(answer: &Value) -> Option<Value> {
    let u = answer.get("usageMetadata")?;
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    let prompt = n("promptTokenCount").saturating_add(n("toolUsePromptTokenCount"));
    let completion = n("candidatesTokenCount").saturating_add(n("thoughtsTokenCount"));
    Some(json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt.saturating_add(completion),
        "prompt_tokens_details": {"cached_tokens": n("cachedContentTokenCount")},
        "completion_tokens_details": {"reasoning_tokens": n("thoughtsTokenCount")},
    }))
}

/// A whole answer as a chat completion; an answer with no candidate at all (a blocked prompt) says why.
pub(super) fn to_chat_completion(answer: &Value, model: &str, created: i64) -> Result<Map<String, Value>, String> {
    if answer.get("candidates").and_then(Value::as_array).is_none_or(Vec::is_empty) {
        let why = answer.get("promptFeedback").map_or_else(|| "no candidates".to_string(), Value::to_string);
        return Err(format!("the answer has no candidate: {why}"));
    }
    let Read { text, thought, calls } = read(answer, 0);
    let mut message = json!({"role": "assistant", "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { json!(text) }});
    if !thought.is_empty() {
        message["reasoning_content"] = json!(thought);
    }
    let finish = finish(answer, !calls.is_empty()).unwrap_or("stop");
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    let mut out = Map::new();
    out.insert("id".into(), answer.get("responseId").cloned().unwrap_or_else(|| json!("gemini")));
    out.insert("object".into(), json!("chat.completion"));
    out.insert("created".into(), json!(created));
    out.insert("model".into(), json!(model));
    out.insert("choices".into(), json!([{"index": 0, "message": message, "finish_reason": finish}]));
    if let Some(u) = usage(answer) {
        out.insert("usage".into(), u);
    }
    Ok(out)
}

/// A translated stream's state: the ids it gives and the function calls so far.
pub(super) struct StreamState {
    deployment: String,
    model: String,
    created: i64,
    calls: usize,
}

impl StreamState {
    pub(super) fn new(deployment: &str, model: &str, created: i64) -> StreamState {
        StreamState { deployment: deployment.to_string(), model: model.to_string(), created, calls: 0 }
    }

    /// One event's data as a chunk (with `usage` when the event has counts: each event's are the totals so
    /// far); an error object ends the stream with its error.
    pub(super) fn chunk(&mut self, data: &str) -> Result<Chunk, ProviderError> {
        let answer: Value = serde_json::from_str(data).map_err(|e| ProviderError::BadResponse {
            deployment: self.deployment.clone(),
            detail: format!("a stream event is not JSON: {e}"),
        })?;
        if answer.get("error").is_some() {
            return Err(super::error::stream_error(&self.deployment, &answer));
        }
        let Read { text, thought, calls } = read(&answer, self.calls);
        let mut delta = Map::new();
        if !text.is_empty() {
            delta.insert("content".into(), json!(text));
        }
        if !thought.is_empty() {
            delta.insert("reasoning_content".into(), json!(thought));
        }
        let finish = finish(&answer, self.calls + calls.len() > 0);
        if !calls.is_empty() {
            let first = self.calls;
            self.calls += calls.len();
            let indexed = calls.into_iter().enumerate().map(|(i, mut c)| {
                c["index"] = json!(first + i);
                c
            });
            delta.insert("tool_calls".into(), Value::Array(indexed.collect()));
        }
        let mut chunk = Map::new();
        chunk.insert("id".into(), answer.get("responseId").cloned().unwrap_or_else(|| json!("gemini")));
        chunk.insert("object".into(), json!("chat.completion.chunk"));
        chunk.insert("created".into(), json!(self.created));
        chunk.insert("model".into(), json!(self.model));
        chunk.insert("choices".into(), json!([{"index": 0, "delta": delta, "finish_reason": finish}]));
        if let Some(u) = usage(&answer) {
            chunk.insert("usage".into(), u);
        }
        Ok(Chunk::from(chunk))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_become_completions_with_thinking_billed_as_output() {
        let answer = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "hm", "thought": true}, {"text": "Reading."},
            {"functionCall": {"name": "read", "args": {"p": "a"}}}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "thoughtsTokenCount": 3, "cachedContentTokenCount": 4},
            "responseId": "r1"});
        let out = Value::Object(to_chat_completion(&answer, "gemini-x", 1).unwrap_or_default());
        let message = &out["choices"][0]["message"];
        assert_eq!(
            (message["content"].clone(), message["reasoning_content"].clone()),
            (json!("Reading."), json!("hm"))
        );
        assert_eq!(message["tool_calls"][0]["function"], json!({"name": "read", "arguments": "{\"p\":\"a\"}"}));
        assert_eq!(out["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(
            (out["usage"]["prompt_tokens"].clone(), out["usage"]["completion_tokens"].clone()),
            (json!(10), json!(8))
        );
        assert_eq!(out["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
        assert!(to_chat_completion(&json!({"promptFeedback": {"blockReason": "SAFETY"}}), "g", 1).is_err());
    }

    #[test]
    fn stream_events_become_chunks_and_errors_end_them() {
        let mut s = StreamState::new("d", "g", 1);
        let c = s.chunk(r#"{"candidates":[{"content":{"parts":[{"text":"Hi"}]}}]}"#).map(|c| c.map().clone());
        assert_eq!(c.ok().map(|c| c["choices"][0]["delta"]["content"].clone()), Some(json!("Hi")));
        let last = s
            .chunk(r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f","args":{}}}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":2,"candidatesTokenCount":1}}"#)
            .map(|c| c.map().clone())
            .unwrap_or_default();
        assert_eq!(last["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
        assert_eq!(last["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(last["usage"]["completion_tokens"], 1);
        let err = s.chunk(r#"{"error":{"code":429,"message":"slow down","status":"RESOURCE_EXHAUSTED"}}"#).err();
        assert!(matches!(err, Some(ProviderError::Status { status: 429, .. })), "{err:?}");
    }
}
