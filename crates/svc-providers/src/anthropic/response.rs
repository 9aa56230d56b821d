//! Anthropic Messages API response → OpenAI `chat.completion`: text blocks become `message.content`,
//! `tool_use` blocks `message.tool_calls`, `stop_reason` the `finish_reason`, and the usage (cache tokens
//! included in the prompt tokens) `usage`. [`Usage`] and [`finish_reason`] are shared with the stream.
//!
//! What this file does not do: HTTP or error bodies (see `error.rs`), or surface thinking blocks and
//! server-tool blocks, which have no chat-completions form and are dropped with a debug log.

use serde_json::{json, Map, Value};

/// Token counts as the Messages API reports them. A count never reported stays `None`; a count that is not
/// a whole number from zero marks the usage malformed, so the gateway charges its own estimate instead of a
/// made-up zero.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Usage {
    input: Option<u64>,
    cache_creation: u64,
    /// Of `cache_creation`, the tokens written for an hour (`cache_creation.ephemeral_1h_input_tokens`).
    cache_creation_1h: u64,
    cache_read: u64,
    output: Option<u64>,
    /// Server-side web searches (`server_tool_use.web_search_requests`).
    web_searches: u64,
    malformed: Option<String>,
}

impl Usage {
    /// Takes the counts present in an Anthropic `usage` object, keeping the others. In a stream,
    /// `message_start` carries the input counts and `message_delta` the cumulative output count.
    pub(super) fn update(&mut self, usage: Option<&Value>) {
        let Some(usage) = usage else { return };
        let mut count = |path: &[&str]| {
            let found = path.iter().try_fold(usage, |v, key| v.get(key));
            match found {
                None | Some(Value::Null) => None,
                Some(v) => {
                    let n = v.as_u64();
                    if n.is_none() {
                        self.malformed = Some(format!("`usage.{}` is not a whole number from 0: {v}", path.join(".")));
                    }
                    n
                }
            }
        };
        let (input, cache_creation, cache_read, output) = (
            count(&["input_tokens"]),
            count(&["cache_creation_input_tokens"]),
            count(&["cache_read_input_tokens"]),
            count(&["output_tokens"]),
        );
        let hour = count(&["cache_creation", "ephemeral_1h_input_tokens"]);
        let searches = count(&["server_tool_use", "web_search_requests"]);
        self.input = input.or(self.input);
        self.cache_creation = cache_creation.unwrap_or(self.cache_creation);
        self.cache_creation_1h = hour.unwrap_or(self.cache_creation_1h);
        self.cache_read = cache_read.unwrap_or(self.cache_read);
        self.output = output.or(self.output);
        self.web_searches = searches.unwrap_or(self.web_searches);
    }

    /// Raises the output count to at least `tokens` (an estimate for a stream cut before its count came);
    /// an input count never reported is taken as 0 (the stream failed before the upstream counted it).
    pub(super) fn raise_output(&mut self, tokens: u64) {
        self.output = Some(self.output.unwrap_or(0).max(tokens));
        self.input.get_or_insert(0);
    }

    /// The OpenAI `usage` object. Anthropic's `input_tokens` excludes the tokens written to or read from
    /// the prompt cache; OpenAI's `prompt_tokens` counts every prompt token, so they are added back (the sums
    /// saturate: a wrapped sum would bill almost nothing). `null`
    /// when the upstream never reported its counts; counts of `null` with the reason when they were
    /// malformed (the gateway then charges its estimate).
    pub(super) fn to_openai(&self) -> Value {
        if let Some(reason) = &self.malformed {
            return json!({ "prompt_tokens": null, "completion_tokens": null, "malformed": reason });
        }
        let (Some(input), Some(output)) = (self.input, self.output) else {
            return Value::Null;
        };
        let prompt = input.saturating_add(self.cache_creation).saturating_add(self.cache_read);
        let mut usage = json!({
            "prompt_tokens": prompt,
            "completion_tokens": output,
            "total_tokens": prompt.saturating_add(output),
            "prompt_tokens_details": { "cached_tokens": self.cache_read },
        });
        // What chat completions has no field for, in LiteLLM's names: what was written to the prompt cache (and
        // of it, for an hour) and the server-side web searches, each billed at its own price.
        if let Value::Object(u) = &mut usage {
            if self.cache_creation > 0 {
                u.insert("cache_creation_input_tokens".into(), json!(self.cache_creation));
            }
            if self.cache_creation_1h > 0 {
                u.insert("cache_creation_1h_input_tokens".into(), json!(self.cache_creation_1h));
            }
            if self.web_searches > 0 {
                u.insert("server_tool_use".into(), json!({ "web_search_requests": self.web_searches }));
            }
        }
        usage
    }
}

/// The OpenAI `finish_reason` of an Anthropic `stop_reason`.
pub(super) fn finish_reason(stop_reason: Option<&str>) -> &'static str {
    match stop_reason {
        Some("end_turn" | "stop_sequence" | "pause_turn") | None => "stop",
        Some("max_tokens" | "model_context_window_exceeded") => "length",
        Some("tool_use") => "tool_calls",
        Some("refusal") => "content_filter",
        Some(other) => {
            tracing::debug!(stop_reason = %other, "anthropic: unknown stop reason read as `stop`");
            "stop"
        }
    }
}

/// Translates a Messages API response into a `chat.completion` for `model`, created at `created`.
/// The error is a description of what is not the protocol.
pub(super) fn to_chat_completion(msg: &Value, model: &str, created: i64) -> Result<Map<String, Value>, String> {
    if msg.get("type").and_then(Value::as_str) != Some("message") {
        return Err("response is not a `message` object".into());
    }
    let Some(blocks) = msg.get("content").and_then(Value::as_array) else {
        return Err("response has no `content` array".into());
    };
    let id = msg.get("id").and_then(Value::as_str).unwrap_or_default();
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in blocks {
        match block.get("type").and_then(Value::as_str).unwrap_or_default() {
            "text" => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or_default()),
            "tool_use" => {
                let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
                tool_calls.push(json!({
                    "id": block.get("id").and_then(Value::as_str).unwrap_or_default(),
                    "type": "function",
                    "function": {
                        "name": block.get("name").and_then(Value::as_str).unwrap_or_default(),
                        "arguments": input.to_string(),
                    },
                }));
            }
            other => {
                tracing::debug!(block = %other, "anthropic: dropped a content block with no chat form")
            }
        }
    }
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    // OpenAI: `content` is null when the assistant only calls tools.
    let content = if text.is_empty() && !tool_calls.is_empty() { Value::Null } else { Value::String(text) };
    message.insert("content".into(), content);
    if !tool_calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(tool_calls));
    }
    let mut usage = Usage::default();
    usage.update(msg.get("usage"));
    let finish = finish_reason(msg.get("stop_reason").and_then(Value::as_str));
    let body = json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{ "index": 0, "message": message, "logprobs": null, "finish_reason": finish }],
        "usage": usage.to_openai(),
    });
    match body {
        Value::Object(m) => Ok(m),
        _ => Err("internal: completion is not an object".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finish_reasons() {
        let cases = [
            (Some("end_turn"), "stop"),
            (Some("stop_sequence"), "stop"),
            (Some("max_tokens"), "length"),
            (Some("tool_use"), "tool_calls"),
            (Some("refusal"), "content_filter"),
            (Some("something_new"), "stop"),
            (None, "stop"),
        ];
        for (reason, want) in cases {
            assert_eq!(finish_reason(reason), want, "{reason:?}");
        }
    }

    #[test]
    fn usage_adds_cache_tokens_to_the_prompt_and_keeps_missing_counts() {
        let mut u = Usage::default();
        u.update(Some(&json!({"input_tokens": 10, "cache_creation_input_tokens": 5, "cache_read_input_tokens": 20,
            "output_tokens": 1, "cache_creation": {"ephemeral_5m_input_tokens": 3, "ephemeral_1h_input_tokens": 2},
            "server_tool_use": {"web_search_requests": 4}})));
        u.update(Some(&json!({"output_tokens": 7})));
        assert_eq!(
            u.to_openai(),
            json!({"prompt_tokens": 35, "completion_tokens": 7, "total_tokens": 42, "prompt_tokens_details": {"cached_tokens": 20},
                "cache_creation_input_tokens": 5, "cache_creation_1h_input_tokens": 2, "server_tool_use": {"web_search_requests": 4}})
        );
    }

    /// Counts near `u64::MAX` saturate instead of overflowing (a panic in debug builds, a wrap to a tiny
    /// prompt count in release ones).
    #[test]
    fn huge_counts_saturate() {
        let mut u = Usage::default();
        u.update(Some(&json!({"input_tokens": u64::MAX, "cache_read_input_tokens": 1, "output_tokens": 2})));
        let openai = u.to_openai();
        assert_eq!(
            (openai["prompt_tokens"].as_u64(), openai["total_tokens"].as_u64()),
            (Some(u64::MAX), Some(u64::MAX))
        );
        assert_eq!(openai["completion_tokens"], 2);
    }

    #[test]
    fn missing_or_malformed_counts_are_not_zero() {
        let mut u = Usage::default();
        assert_eq!(u.to_openai(), Value::Null);
        u.update(Some(&json!({"input_tokens": 10})));
        assert_eq!(u.to_openai(), Value::Null, "no output count yet");
        u.update(Some(&json!({"output_tokens": -3})));
        let v = u.to_openai();
        assert!(v["prompt_tokens"].is_null() && v["malformed"].is_string(), "{v}");
    }

    #[test]
    fn rejects_what_is_not_a_message() {
        assert!(to_chat_completion(&json!({"type": "error"}), "m", 0).is_err());
        assert!(to_chat_completion(&json!({"type": "message"}), "m", 0).is_err());
    }
}
