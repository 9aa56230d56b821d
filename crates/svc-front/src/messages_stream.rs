//! Chat-completion chunks as an Anthropic Messages event stream, in Anthropic's order: `message_start`,
//! then per content block `content_block_start`, its deltas (`text_delta`, `input_json_delta`),
//! `content_block_stop`, then `message_delta` (stop reason and usage) and `message_stop`. Block indexes
//! count from 0 in the order blocks open; a text block and each tool call are blocks of their own.

use super::messages::{error_body, message_id, stop_reason};
use super::sse;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use svc_budget::Usage;

/// The block open now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    None,
    Text,
    /// A tool call, by its chat index.
    Tool(u64),
}

/// State of one translated stream.
#[derive(Debug)]
pub struct MessagesStream {
    model: Value,
    started: bool,
    open: Open,
    /// The next block's index.
    next_index: u64,
    finish: Option<String>,
}

impl MessagesStream {
    /// A stream answering under `alias`.
    pub fn new(alias: &str) -> MessagesStream {
        MessagesStream {
            model: Value::String(alias.to_string()),
            started: false,
            open: Open::None,
            next_index: 0,
            finish: None,
        }
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        let message = json!({
            "id": message_id(), "type": "message", "role": "assistant", "model": self.model, "content": [],
            "stop_reason": Value::Null, "stop_sequence": Value::Null,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        });
        sse::write_json(out, "message_start", &json!({"type": "message_start", "message": message}));
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        if self.open != Open::None {
            let index = self.next_index - 1;
            sse::write_json(out, "content_block_stop", &json!({"type": "content_block_stop", "index": index}));
            self.open = Open::None;
        }
    }

    fn open(&mut self, out: &mut Vec<u8>, open: Open, block: Value) -> u64 {
        self.close(out);
        let index = self.next_index;
        self.next_index += 1;
        self.open = open;
        sse::write_json(
            out,
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
        );
        index
    }

    /// The events of one chat chunk (the usage chunk gives none: usage comes with [`Self::done`]).
    pub fn chunk(&mut self, chunk: &Map<String, Value>) -> Option<Bytes> {
        let mut out = Vec::new();
        self.start(&mut out);
        let choice = chunk.get("choices").and_then(|c| c.get(0));
        let delta = choice.and_then(|c| c.get("delta"));
        if let Some(text) = delta.and_then(|d| d.get("content")).and_then(Value::as_str).filter(|t| !t.is_empty()) {
            if self.open != Open::Text {
                self.open(&mut out, Open::Text, json!({"type": "text", "text": ""}));
            }
            let index = self.next_index - 1;
            let d =
                json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}});
            sse::write_json(&mut out, "content_block_delta", &d);
        }
        if let Some(Value::Array(calls)) = delta.and_then(|d| d.get("tool_calls")) {
            for call in calls {
                let at = call.get("index").and_then(Value::as_u64).unwrap_or(0);
                let f = call.get("function");
                if self.open != Open::Tool(at) {
                    let block = json!({
                        "type": "tool_use",
                        "id": call.get("id").cloned().unwrap_or_else(|| Value::String(format!("toolu_{at}"))),
                        "name": f.and_then(|f| f.get("name")).cloned().unwrap_or(Value::Null),
                        "input": {},
                    });
                    self.open(&mut out, Open::Tool(at), block);
                }
                if let Some(args) = f.and_then(|f| f.get("arguments")).and_then(Value::as_str).filter(|a| !a.is_empty())
                {
                    let index = self.next_index - 1;
                    let d = json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": args}});
                    sse::write_json(&mut out, "content_block_delta", &d);
                }
            }
        }
        if let Some(f) = choice.and_then(|c| c.get("finish_reason")).and_then(Value::as_str) {
            self.finish = Some(f.to_string());
        }
        (!out.is_empty()).then(|| Bytes::from(out))
    }

    fn end(&mut self, usage: Usage, reason: &str) -> Bytes {
        let mut out = Vec::new();
        self.start(&mut out);
        self.close(&mut out);
        let delta = json!({
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": Value::Null},
            "usage": {"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens},
        });
        sse::write_json(&mut out, "message_delta", &delta);
        sse::write_json(&mut out, "message_stop", &json!({"type": "message_stop"}));
        Bytes::from(out)
    }

    /// The end of a finished stream, with what was charged.
    pub fn done(&mut self, usage: Usage) -> Bytes {
        let reason = stop_reason(self.finish.as_deref());
        self.end(usage, reason)
    }

    /// The end of a stream cut at its completion cap.
    pub fn cut(&mut self, usage: Usage) -> Bytes {
        self.end(usage, "max_tokens")
    }

    /// An `error` event ending a stream that failed mid-way.
    pub fn error(&mut self, err: &crate::Fault<'_>) -> Bytes {
        let mut out = Vec::new();
        sse::write_json(&mut out, "error", &error_body(err.status, err.message));
        Bytes::from(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    /// The `event:` lines of a byte stream.
    fn kinds(bytes: &[u8]) -> Vec<String> {
        String::from_utf8_lossy(bytes).lines().filter_map(|l| l.strip_prefix("event: ").map(String::from)).collect()
    }

    #[test]
    fn text_then_tool_calls_in_anthropic_order() {
        let mut s = MessagesStream::new("claude-x");
        let mut all = Vec::new();
        for c in [
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "Hel"}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "lo"}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_a", "function": {"name": "Read", "arguments": ""}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\":"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}),
        ] {
            all.extend_from_slice(&s.chunk(&obj(c)).unwrap_or_default());
        }
        all.extend_from_slice(&s.done(Usage { prompt_tokens: 3, completion_tokens: 4, ..Usage::default() }));
        assert_eq!(
            kinds(&all),
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
        let data = crate::sse::data_of(&all);
        assert_eq!(data[5]["index"], 1);
        assert_eq!(data[5]["content_block"], json!({"type": "tool_use", "id": "call_a", "name": "Read", "input": {}}));
        assert_eq!(data[7]["delta"]["partial_json"], "1}");
        assert_eq!(data[9]["delta"]["stop_reason"], "tool_use");
        assert_eq!(data[9]["usage"]["output_tokens"], 4);
    }

    #[test]
    fn an_empty_stream_still_has_a_message() {
        let mut s = MessagesStream::new("m");
        let end = s.cut(Usage { prompt_tokens: 1, completion_tokens: 2, ..Usage::default() });
        assert_eq!(kinds(&end), ["message_start", "message_delta", "message_stop"]);
        assert!(String::from_utf8_lossy(&end).contains("max_tokens"));
    }
}
