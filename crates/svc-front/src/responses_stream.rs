//! Chat-completion chunks as an OpenAI Responses event stream: `response.created`, `response.in_progress`,
//! then per output item `response.output_item.added`, its deltas (`response.output_text.delta` inside a
//! content part, or `response.function_call_arguments.delta`), its `….done` events and
//! `response.output_item.done`, then `response.completed` (or `response.incomplete` when cut at the cap) with
//! usage. Every event carries a `sequence_number`.

use super::responses::{new_id, response, usage};
use super::sse;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use svc_budget::Usage;

/// The output item open now.
#[derive(Debug)]
enum Item {
    Text { id: String, text: String },
    Call { id: String, call_id: Value, name: Value, arguments: String, chat_index: u64 },
}

/// State of one translated stream.
#[derive(Debug)]
pub struct ResponsesStream {
    id: String,
    model: Value,
    created: i64,
    sequence: u64,
    started: bool,
    open: Option<Item>,
    /// The finished output items.
    output: Vec<Value>,
}

impl ResponsesStream {
    /// A stream answering under `alias`.
    pub fn new(alias: &str) -> ResponsesStream {
        ResponsesStream {
            id: new_id("resp"),
            model: Value::String(alias.to_string()),
            created: chrono::Utc::now().timestamp(),
            sequence: 0,
            started: false,
            open: None,
            output: Vec::new(),
        }
    }

    fn event(&mut self, out: &mut Vec<u8>, kind: &str, mut data: Value) {
        if let Value::Object(m) = &mut data {
            m.insert("type".into(), Value::String(kind.to_string()));
            m.insert("sequence_number".into(), Value::from(self.sequence));
        }
        self.sequence += 1;
        sse::write_json(out, kind, &data);
    }

    fn snapshot(&self, status: &str, usage: Value) -> Value {
        response(&self.id, &self.model, self.created, status, self.output.clone(), usage)
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        let r = self.snapshot("in_progress", Value::Null);
        self.event(out, "response.created", json!({"response": r}));
        self.event(out, "response.in_progress", json!({"response": r}));
    }

    /// Closes the open item: its `….done` events, then `response.output_item.done`.
    fn close(&mut self, out: &mut Vec<u8>) {
        let Some(item) = self.open.take() else { return };
        let index = self.output.len();
        let done = match item {
            Item::Text { id, text } => {
                let part = json!({"type": "output_text", "text": text, "annotations": []});
                let d = json!({"item_id": id, "output_index": index, "content_index": 0, "text": text});
                self.event(out, "response.output_text.done", d);
                let d = json!({"item_id": id, "output_index": index, "content_index": 0, "part": part});
                self.event(out, "response.content_part.done", d);
                json!({"type": "message", "id": id, "status": "completed", "role": "assistant", "content": [part]})
            }
            Item::Call { id, call_id, name, arguments, .. } => {
                let d = json!({"item_id": id, "output_index": index, "arguments": arguments});
                self.event(out, "response.function_call_arguments.done", d);
                json!({"type": "function_call", "id": id, "status": "completed", "call_id": call_id, "name": name,
                    "arguments": arguments})
            }
        };
        self.event(out, "response.output_item.done", json!({"output_index": index, "item": done}));
        self.output.push(done);
    }

    /// The events of one chat chunk (the usage chunk gives none: usage comes with [`Self::done`]).
    pub fn chunk(&mut self, chunk: &Map<String, Value>) -> Option<Bytes> {
        let mut out = Vec::new();
        self.start(&mut out);
        let delta = chunk.get("choices").and_then(|c| c.get(0)).and_then(|c| c.get("delta"));
        if let Some(text) = delta.and_then(|d| d.get("content")).and_then(Value::as_str).filter(|t| !t.is_empty()) {
            self.text(&mut out, text);
        }
        if let Some(Value::Array(calls)) = delta.and_then(|d| d.get("tool_calls")) {
            for call in calls {
                self.call(&mut out, call);
            }
        }
        (!out.is_empty()).then(|| Bytes::from(out))
    }

    fn text(&mut self, out: &mut Vec<u8>, text: &str) {
        if !matches!(self.open, Some(Item::Text { .. })) {
            self.close(out);
            let id = new_id("msg");
            let index = self.output.len();
            let item =
                json!({"type": "message", "id": id, "status": "in_progress", "role": "assistant", "content": []});
            self.event(out, "response.output_item.added", json!({"output_index": index, "item": item}));
            let part = json!({"type": "output_text", "text": "", "annotations": []});
            let d = json!({"item_id": id, "output_index": index, "content_index": 0, "part": part});
            self.event(out, "response.content_part.added", d);
            self.open = Some(Item::Text { id, text: String::new() });
        }
        let index = self.output.len();
        let Some(Item::Text { id, text: all }) = &mut self.open else { return };
        all.push_str(text);
        let d = json!({"item_id": id.clone(), "output_index": index, "content_index": 0, "delta": text});
        self.event(out, "response.output_text.delta", d);
    }

    fn call(&mut self, out: &mut Vec<u8>, call: &Value) {
        let at = call.get("index").and_then(Value::as_u64).unwrap_or(0);
        let f = call.get("function");
        if !matches!(self.open, Some(Item::Call { chat_index, .. }) if chat_index == at) {
            self.close(out);
            let id = new_id("fc");
            let index = self.output.len();
            let call_id = call.get("id").cloned().unwrap_or_else(|| Value::String(new_id("call")));
            let name = f.and_then(|f| f.get("name")).cloned().unwrap_or(Value::Null);
            let item = json!({"type": "function_call", "id": id, "status": "in_progress", "call_id": call_id,
                "name": name, "arguments": ""});
            self.event(out, "response.output_item.added", json!({"output_index": index, "item": item}));
            self.open = Some(Item::Call { id, call_id, name, arguments: String::new(), chat_index: at });
        }
        let Some(args) = f.and_then(|f| f.get("arguments")).and_then(Value::as_str).filter(|a| !a.is_empty()) else {
            return;
        };
        let index = self.output.len();
        let Some(Item::Call { id, arguments, .. }) = &mut self.open else { return };
        arguments.push_str(args);
        let d = json!({"item_id": id.clone(), "output_index": index, "delta": args});
        self.event(out, "response.function_call_arguments.delta", d);
    }

    fn end(&mut self, charged: Usage, status: &str) -> Bytes {
        let mut out = Vec::new();
        self.start(&mut out);
        self.close(&mut out);
        let r = self.snapshot(status, usage(charged.prompt_tokens, charged.completion_tokens));
        let kind = if status == "completed" { "response.completed" } else { "response.incomplete" };
        self.event(&mut out, kind, json!({"response": r}));
        Bytes::from(out)
    }

    /// The end of a finished stream, with what was charged.
    pub fn done(&mut self, charged: Usage) -> Bytes {
        self.end(charged, "completed")
    }

    /// The end of a stream cut at its completion cap.
    pub fn cut(&mut self, charged: Usage) -> Bytes {
        self.end(charged, "incomplete")
    }

    /// `response.failed` ending a stream that failed mid-way.
    pub fn error(&mut self, err: &crate::Fault<'_>) -> Bytes {
        let mut out = Vec::new();
        self.start(&mut out);
        let mut r = self.snapshot("failed", Value::Null);
        r["error"] = json!({"code": err.code, "message": err.message});
        self.event(&mut out, "response.failed", json!({"response": r}));
        Bytes::from(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::data_of as events;

    #[test]
    fn text_and_a_call_in_order_with_usage() {
        let mut s = ResponsesStream::new("gpt-5-codex");
        let mut all = Vec::new();
        for c in [
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "Running"}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "exec_command", "arguments": "{\"cmd\":"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"ls\"}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        ] {
            all.extend_from_slice(&s.chunk(c.as_object().unwrap_or(&Map::new())).unwrap_or_default());
        }
        all.extend_from_slice(&s.done(Usage { prompt_tokens: 10, completion_tokens: 5, ..Usage::default() }));
        let evs = events(&all);
        let kinds: Vec<&str> = evs.iter().filter_map(|e| e["type"].as_str()).collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        let seq: Vec<u64> = evs.iter().filter_map(|e| e["sequence_number"].as_u64()).collect();
        assert_eq!(seq, (0..14).collect::<Vec<_>>());
        let done = evs.last().cloned().unwrap_or_default();
        assert_eq!(done["response"]["output"][1]["arguments"], "{\"cmd\":\"ls\"}");
        assert_eq!(done["response"]["output"][1]["call_id"], "call_1");
        assert_eq!(done["response"]["usage"]["total_tokens"], 15);
    }
}
