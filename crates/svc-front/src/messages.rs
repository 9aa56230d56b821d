//! The Anthropic Messages front end (`POST /v1/messages`): a Messages request becomes the pipeline's
//! chat-completions request, and a chat completion becomes a Messages reply.
//!
//! | Messages | chat completions | |
//! |---|---|---|
//! | `system` (a string or text blocks), `role: "system"` entries inside `messages` | `system` messages, where they stood | |
//! | `user` / `assistant` text blocks | text content parts | |
//! | `image` blocks (`base64` or `url` source) | `image_url` parts (a `data:` URL for base64) | |
//! | `tool_result` blocks | `tool` messages, before the rest of that user turn | `is_error` is noted in the text |
//! | `tool_use` blocks | assistant `tool_calls` (`input` as JSON text) | |
//! | `tools` (custom tools with `input_schema`) | `function` tools | server tools dropped |
//! | `tool_choice` `auto` / `any` / `tool` / `none`, `disable_parallel_tool_use` | `auto` / `required` / a named function / `none`, `parallel_tool_calls: false` | |
//! | `stop_sequences`, `max_tokens`, `temperature`, `top_p`, `stream` | `stop`, `max_tokens`, `temperature`, `top_p`, `stream` | |
//! | `thinking`, `redacted_thinking` and other blocks, `cache_control`, `context_management`, `output_config`, `metadata`, `top_k`, `defer_loading`, … | | dropped with a debug log |
//!
//! Replies: text → a `text` block, `tool_calls` → `tool_use` blocks; `finish_reason` stop → `end_turn`,
//! length → `max_tokens`, tool_calls → `tool_use`, content_filter → `refusal`; usage in Anthropic's names.

use serde_json::{json, Map, Value};
use svc_providers::RequestError;

/// The chat-completions body of a Messages request.
pub fn to_chat(body: &[u8]) -> Result<(Map<String, Value>, super::Unseen), RequestError> {
    let (req, model) = super::object_with_model(body)?;
    let mut out = Map::new();
    out.insert("model".into(), Value::String(model));
    let mut messages = Vec::new();
    if let Some(system) = req.get("system") {
        let text = text_of(system);
        if !text.is_empty() {
            messages.push(json!({"role": "system", "content": text}));
        }
    }
    let Some(Value::Array(turns)) = req.get("messages") else {
        return Err(crate::bad("`messages` must be an array", Some("messages".into())));
    };
    for (i, turn) in turns.iter().enumerate() {
        let role = turn.get("role").and_then(Value::as_str).ok_or_else(|| {
            crate::bad(format!("`messages[{i}].role` must be a string"), Some(format!("messages[{i}]")))
        })?;
        let content = turn.get("content").unwrap_or(&Value::Null);
        match role {
            "system" => messages.push(json!({"role": "system", "content": text_of(content)})),
            "user" => user_turn(content, &mut messages),
            "assistant" => messages.push(assistant_turn(content)),
            other => {
                return Err(crate::bad(
                    format!("`messages[{i}].role` must be `user` or `assistant`, not `{other}`"),
                    Some(format!("messages[{i}].role")),
                ))
            }
        }
    }
    if messages.is_empty() {
        return Err(crate::bad("`messages` must not be empty", Some("messages".into())));
    }
    out.insert("messages".into(), Value::Array(messages));
    for (from, to) in [("max_tokens", "max_tokens"), ("temperature", "temperature"), ("top_p", "top_p")] {
        if let Some(v) = req.get(from).filter(|v| !v.is_null()) {
            out.insert(to.into(), v.clone());
        }
    }
    if let Some(v) = req.get("stream").filter(|v| !v.is_null()) {
        out.insert("stream".into(), v.clone());
    }
    if let Some(Value::Array(stops)) = req.get("stop_sequences") {
        if !stops.is_empty() {
            out.insert("stop".into(), Value::Array(stops.clone()));
        }
    }
    if let Some(Value::Array(tools)) = req.get("tools") {
        let functions: Vec<Value> = tools.iter().filter_map(function_tool).collect();
        if !functions.is_empty() {
            out.insert("tools".into(), Value::Array(functions));
        }
    }
    if let Some(choice) = req.get("tool_choice") {
        tool_choice(choice, &mut out);
    }
    for dropped in ["thinking", "context_management", "output_config", "metadata", "top_k", "service_tier", "container"]
    {
        if req.contains_key(dropped) {
            tracing::debug!(field = dropped, "a Messages field with no chat-completions counterpart was dropped");
        }
    }
    Ok((out, super::Unseen::of(&req, body)))
}

/// The text of a `system` value or a message's content: a string, or its text blocks joined by blank lines.
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| match b {
                Value::String(s) => Some(s.as_str()),
                _ => b.get("text").and_then(Value::as_str),
            })
            .collect::<Vec<_>>()
            .join("\n\n"),
        _ => String::new(),
    }
}

/// A user turn: its `tool_result` blocks become `tool` messages first, the rest one user message.
fn user_turn(content: &Value, out: &mut Vec<Value>) {
    let blocks = match content {
        Value::String(s) => {
            out.push(json!({"role": "user", "content": s}));
            return;
        }
        Value::Array(blocks) => blocks,
        _ => return,
    };
    let mut parts = Vec::new();
    for b in blocks {
        match b.get("type").and_then(Value::as_str) {
            Some("tool_result") => {
                let mut text = b.get("content").map(text_of).unwrap_or_default();
                if b.get("is_error").and_then(Value::as_bool) == Some(true) {
                    text = format!("[tool error] {text}");
                }
                let id = b.get("tool_use_id").cloned().unwrap_or(Value::Null);
                out.push(json!({"role": "tool", "tool_call_id": id, "content": text}));
                // Images a tool returned travel in the user turn that follows.
                if let Some(Value::Array(inner)) = b.get("content") {
                    parts.extend(inner.iter().filter_map(image_part));
                }
            }
            Some("text") => {
                if let Some(t) = b.get("text").and_then(Value::as_str) {
                    parts.push(json!({"type": "text", "text": t}));
                }
            }
            Some("image") => parts.extend(image_part(b)),
            other => {
                tracing::debug!(block = ?other, "a user content block with no chat-completions counterpart was dropped")
            }
        }
    }
    if !parts.is_empty() {
        out.push(json!({"role": "user", "content": parts}));
    }
}

/// An `image` block as an `image_url` part.
fn image_part(b: &Value) -> Option<Value> {
    if b.get("type").and_then(Value::as_str) != Some("image") {
        return None;
    }
    let source = b.get("source")?;
    let url = match source.get("type").and_then(Value::as_str) {
        Some("base64") => format!(
            "data:{};base64,{}",
            source.get("media_type").and_then(Value::as_str).unwrap_or("image/png"),
            source.get("data").and_then(Value::as_str).unwrap_or_default()
        ),
        Some("url") => source.get("url").and_then(Value::as_str)?.to_string(),
        _ => return None,
    };
    Some(json!({"type": "image_url", "image_url": {"url": url}}))
}

/// An assistant turn: its text and its `tool_use` blocks as `tool_calls`.
fn assistant_turn(content: &Value) -> Value {
    let blocks = match content {
        Value::String(s) => return json!({"role": "assistant", "content": s}),
        Value::Array(blocks) => blocks.as_slice(),
        _ => &[],
    };
    let mut text = String::new();
    let mut calls = Vec::new();
    for b in blocks {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(b.get("text").and_then(Value::as_str).unwrap_or_default()),
            Some("tool_use") => calls.push(json!({
                "id": b.get("id").cloned().unwrap_or(Value::Null),
                "type": "function",
                "function": {
                    "name": b.get("name").cloned().unwrap_or(Value::Null),
                    "arguments": b.get("input").map(Value::to_string).unwrap_or_else(|| "{}".into()),
                },
            })),
            other => {
                tracing::debug!(block = ?other, "an assistant content block with no chat-completions counterpart was dropped")
            }
        }
    }
    let mut m = json!({"role": "assistant", "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { Value::String(text) }});
    if !calls.is_empty() {
        m["tool_calls"] = Value::Array(calls);
    }
    m
}

/// A custom tool as a `function` tool; server tools (a `type` other than `custom`) have none.
fn function_tool(t: &Value) -> Option<Value> {
    let kind = t.get("type").and_then(Value::as_str).unwrap_or("custom");
    if kind != "custom" {
        tracing::debug!(tool = kind, "an Anthropic server tool was dropped: only Anthropic can run it");
        return None;
    }
    let mut f = Map::new();
    f.insert("name".into(), t.get("name")?.clone());
    if let Some(d) = t.get("description") {
        f.insert("description".into(), d.clone());
    }
    f.insert("parameters".into(), t.get("input_schema").cloned().unwrap_or_else(|| json!({"type": "object"})));
    Some(json!({"type": "function", "function": f}))
}

/// `tool_choice` and `disable_parallel_tool_use`.
fn tool_choice(choice: &Value, out: &mut Map<String, Value>) {
    let chat = match choice.get("type").and_then(Value::as_str) {
        Some("auto") => json!("auto"),
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => {
            json!({"type": "function", "function": {"name": choice.get("name").cloned().unwrap_or(Value::Null)}})
        }
        _ => return,
    };
    out.insert("tool_choice".into(), chat);
    if choice.get("disable_parallel_tool_use").and_then(Value::as_bool) == Some(true) {
        out.insert("parallel_tool_calls".into(), Value::Bool(false));
    }
}

/// Anthropic's `stop_reason` for a chat `finish_reason`.
pub fn stop_reason(finish: Option<&str>) -> &'static str {
    match finish {
        Some("length") => "max_tokens",
        Some("tool_calls") | Some("function_call") => "tool_use",
        Some("content_filter") => "refusal",
        _ => "end_turn",
    }
}

/// A new message id.
pub fn message_id() -> String {
    format!("msg_{}", uuid::Uuid::new_v4().simple())
}

/// Arguments text as a tool input object (`{}` when the model wrote something that is not a JSON object).
pub fn tool_input(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({}),
    }
}

/// A chat completion (already metered, `model` the alias) as a Messages reply.
pub fn from_completion(body: &Map<String, Value>) -> Map<String, Value> {
    let choice = body.get("choices").and_then(|c| c.get(0));
    let message = choice.and_then(|c| c.get("message"));
    let mut content = Vec::new();
    if let Some(text) = message.and_then(|m| m.get("content")).and_then(Value::as_str).filter(|t| !t.is_empty()) {
        content.push(json!({"type": "text", "text": text}));
    }
    if let Some(Value::Array(calls)) = message.and_then(|m| m.get("tool_calls")) {
        for c in calls {
            let f = c.get("function");
            let args = f.and_then(|f| f.get("arguments")).and_then(Value::as_str).unwrap_or("{}");
            content.push(json!({
                "type": "tool_use",
                "id": c.get("id").cloned().unwrap_or(Value::Null),
                "name": f.and_then(|f| f.get("name")).cloned().unwrap_or(Value::Null),
                "input": tool_input(args),
            }));
        }
    }
    let usage = body.get("usage");
    let count = |k: &str| usage.and_then(|u| u.get(k)).and_then(Value::as_u64).unwrap_or(0);
    let out = json!({
        "id": message_id(),
        "type": "message",
        "role": "assistant",
        "model": body.get("model").cloned().unwrap_or(Value::Null),
        "content": content,
        "stop_reason": stop_reason(choice.and_then(|c| c.get("finish_reason")).and_then(Value::as_str)),
        "stop_sequence": Value::Null,
        "usage": {"input_tokens": count("prompt_tokens"), "output_tokens": count("completion_tokens")},
    });
    match out {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// The Anthropic error `type` of one of the gateway's own statuses: Anthropic's table, except that the gateway's
/// 503 is its own overload (an upstream's bare 503 is an `api_error` there).
fn error_type(status: u16) -> &'static str {
    match status {
        503 => "overloaded_error",
        other => svc_providers::anthropic_error_type(other),
    }
}

/// An error in Anthropic's shape: `{"type":"error","error":{"type","message"}}`.
pub fn error_body(status: u16, message: &str) -> Value {
    json!({"type": "error", "error": {"type": error_type(status), "message": message}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(v: Value) -> Value {
        to_chat(v.to_string().as_bytes()).map(|(chat, _)| Value::Object(chat)).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn claude_code_shaped_requests_translate() {
        let out = chat(json!({
            "model": "claude-opus-5-5", "max_tokens": 128000, "stream": true,
            "system": [{"type": "text", "text": "You are Claude Code."}, {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "read hello.txt"}]},
                {"role": "system", "content": [{"type": "text", "text": "<env>cwd</env>", "cache_control": {"type": "ephemeral"}}]},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": "Reading."},
                    {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "hello.txt"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "hi there"}], "cache_control": {"type": "ephemeral"}},
                    {"type": "text", "text": "what does it say?"}]}
            ],
            "tools": [{"name": "Read", "description": "reads", "input_schema": {"type": "object"}, "defer_loading": true},
                      {"type": "web_search_20250305", "name": "web_search"}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "thinking": {"type": "adaptive"}, "context_management": {"edits": []}, "output_config": {"effort": "medium"},
            "stop_sequences": ["END"]
        }));
        assert_eq!(out["messages"][0], json!({"role": "system", "content": "You are Claude Code.\n\nBe brief."}));
        assert_eq!(out["messages"][2], json!({"role": "system", "content": "<env>cwd</env>"}));
        assert_eq!(out["messages"][3]["tool_calls"][0]["function"]["arguments"], "{\"file_path\":\"hello.txt\"}");
        assert_eq!(out["messages"][3]["content"], "Reading.");
        assert_eq!(out["messages"][4], json!({"role": "tool", "tool_call_id": "toolu_1", "content": "hi there"}));
        assert_eq!(out["messages"][5]["content"][0]["text"], "what does it say?");
        assert_eq!(out["tools"].as_array().map(Vec::len), Some(1));
        assert_eq!(out["tools"][0]["function"]["parameters"], json!({"type": "object"}));
        assert_eq!((out["tool_choice"].clone(), out["parallel_tool_calls"].clone()), (json!("required"), json!(false)));
        assert_eq!((out["max_tokens"].clone(), out["stop"].clone()), (json!(128000), json!(["END"])));
        assert!(out.get("thinking").is_none() && out.get("context_management").is_none());
    }

    #[test]
    fn bad_requests_name_the_field() {
        for (body, param) in [
            (json!({"messages": []}), "model"),
            (json!({"model": "m"}), "messages"),
            (json!({"model": "m", "messages": []}), "messages"),
            (json!({"model": "m", "messages": [{"content": "x"}]}), "messages[0]"),
        ] {
            let err = to_chat(body.to_string().as_bytes()).err().map(|e| json!(e.param));
            assert_eq!(err, Some(json!(param)), "{body}");
        }
    }

    #[test]
    fn completions_become_messages() {
        let body = json!({"model": "alias", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "ok",
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "Read", "arguments": "{\"a\":1}"}}]}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 7}});
        let m = from_completion(body.as_object().unwrap_or(&Map::new()));
        assert_eq!(
            m["content"],
            json!([{"type": "text", "text": "ok"}, {"type": "tool_use", "id": "call_1", "name": "Read", "input": {"a": 1}}])
        );
        assert_eq!((m["stop_reason"].clone(), m["usage"]["output_tokens"].clone()), (json!("tool_use"), json!(7)));
        assert_eq!(error_body(429, "Budget exceeded")["error"]["type"], "rate_limit_error");
    }
}
