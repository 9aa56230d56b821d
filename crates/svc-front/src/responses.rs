//! The OpenAI Responses front end (`POST /v1/responses`) for deployments that do not speak it: the stateless
//! subset Codex uses becomes the pipeline's chat-completions request, and a chat completion becomes a
//! `response` object.
//!
//! | Responses | chat completions | |
//! |---|---|---|
//! | `instructions`; `developer` / `system` messages | `system` messages | |
//! | `user` / `assistant` messages of `input_text` / `output_text` parts (or a string) | text content | `input_image` → `image_url` |
//! | `function_call` items | assistant `tool_calls` (consecutive calls in one message) | |
//! | `function_call_output` items | `tool` messages | |
//! | `function` tools, `tool_choice`, `parallel_tool_calls` | the same, in chat's shape | |
//! | `max_output_tokens`, `temperature`, `top_p`, `stream` | `max_tokens`, `temperature`, `top_p`, `stream` | |
//! | `reasoning` items and fields, `web_search` and other hosted tools, `namespace` tools, `include`, `store`, `prompt_cache_key`, `text`, … | | dropped with a debug log |
//!
//! `previous_response_id` needs a stored response, which only OpenAI keeps: such a request goes to the
//! deployment that stored it, and is refused (400) by one that does not speak Responses.

use serde_json::{json, Map, Value};
use svc_providers::RequestError;

/// A Responses request read: its chat-completions body, the stored response it continues
/// (`previous_response_id`), and what it makes the provider bill beyond its body.
pub struct Read {
    /// The chat-completions body.
    pub chat: Map<String, Value>,
    /// The stored response it continues, if any.
    pub continues: Option<String>,
    /// Whether the upstream keeps the answer (`store` is not `false`: OpenAI keeps it by default).
    pub stored: bool,
    /// What it makes the provider bill beyond its body.
    pub unseen: super::Unseen,
}

/// The chat-completions body of a Responses request, and what the pipeline needs of the rest.
pub fn to_chat(body: &[u8]) -> Result<Read, RequestError> {
    let (req, model) = super::object_with_model(body)?;
    let mut out = Map::new();
    out.insert("model".into(), Value::String(model));
    let mut messages = Vec::new();
    if let Some(Value::String(i)) = req.get("instructions") {
        messages.push(json!({"role": "system", "content": i}));
    }
    match req.get("input") {
        Some(Value::String(s)) => messages.push(json!({"role": "user", "content": s})),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                input_item(item, i, &mut messages)?;
            }
        }
        _ => return Err(crate::bad("`input` must be a string or an array of items", Some("input".into()))),
    }
    if messages.is_empty() {
        return Err(crate::bad("`input` must not be empty", Some("input".into())));
    }
    out.insert("messages".into(), Value::Array(messages));
    for (from, to) in [("max_output_tokens", "max_tokens"), ("temperature", "temperature"), ("top_p", "top_p")] {
        if let Some(v) = req.get(from).filter(|v| !v.is_null()) {
            out.insert(to.into(), v.clone());
        }
    }
    for same in ["stream", "parallel_tool_calls"] {
        if let Some(v) = req.get(same).filter(|v| !v.is_null()) {
            out.insert(same.into(), v.clone());
        }
    }
    if let Some(Value::Array(tools)) = req.get("tools") {
        let functions: Vec<Value> = tools.iter().filter_map(function_tool).collect();
        if !functions.is_empty() {
            out.insert("tools".into(), Value::Array(functions));
        }
    }
    match req.get("tool_choice") {
        Some(Value::String(s)) => {
            out.insert("tool_choice".into(), Value::String(s.clone()));
        }
        Some(c @ Value::Object(_)) if c.get("type").and_then(Value::as_str) == Some("function") => {
            let name = c.get("name").cloned().unwrap_or(Value::Null);
            out.insert("tool_choice".into(), json!({"type": "function", "function": {"name": name}}));
        }
        _ => {}
    }
    for dropped in ["reasoning", "include", "store", "prompt_cache_key", "text", "client_metadata", "metadata"] {
        if req.contains_key(dropped) {
            tracing::debug!(field = dropped, "a Responses field with no chat-completions counterpart was dropped");
        }
    }
    let continues = req.get("previous_response_id").and_then(Value::as_str).filter(|id| !id.is_empty());
    let stored = req.get("store") != Some(&Value::Bool(false));
    Ok(Read { chat: out, continues: continues.map(String::from), stored, unseen: super::Unseen::of(&req, body) })
}

/// One `input` item as chat messages.
fn input_item(item: &Value, i: usize, out: &mut Vec<Value>) -> Result<(), RequestError> {
    let kind = item.get("type").and_then(Value::as_str).unwrap_or("message");
    match kind {
        "message" => {
            let role = item.get("role").and_then(Value::as_str).ok_or_else(|| {
                crate::bad(format!("`input[{i}].role` must be a string"), Some(format!("input[{i}]")))
            })?;
            let role = match role {
                "developer" | "system" => "system",
                "assistant" => "assistant",
                _ => "user",
            };
            let content = content_of(item.get("content").unwrap_or(&Value::Null), role);
            out.push(json!({"role": role, "content": content}));
        }
        "function_call" => {
            let call = json!({
                "id": item.get("call_id").cloned().unwrap_or(Value::Null),
                "type": "function",
                "function": {
                    "name": item.get("name").cloned().unwrap_or(Value::Null),
                    "arguments": item.get("arguments").cloned().unwrap_or_else(|| json!("{}")),
                },
            });
            // Consecutive calls (and the text before them) are one assistant turn.
            match out.last_mut() {
                Some(last) if last.get("role").and_then(Value::as_str) == Some("assistant") => {
                    match last.get_mut("tool_calls") {
                        Some(Value::Array(calls)) => calls.push(call),
                        _ => last["tool_calls"] = json!([call]),
                    }
                }
                _ => out.push(json!({"role": "assistant", "content": Value::Null, "tool_calls": [call]})),
            }
        }
        "function_call_output" => {
            let output = match item.get("output") {
                Some(Value::String(s)) => s.clone(),
                Some(v @ Value::Array(_)) => parts_text(v),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            let id = item.get("call_id").cloned().unwrap_or(Value::Null);
            out.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
        }
        other => {
            tracing::debug!(item = other, "a Responses input item with no chat-completions counterpart was dropped")
        }
    }
    Ok(())
}

/// The text of content parts.
fn parts_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
        }
        _ => String::new(),
    }
}

/// A message's content in chat's shape: text for system and assistant turns, parts (with images) for users.
fn content_of(content: &Value, role: &str) -> Value {
    let Value::Array(parts) = content else {
        return Value::String(parts_text(content));
    };
    if role != "user" || !parts.iter().any(|p| p.get("type").and_then(Value::as_str) == Some("input_image")) {
        return Value::String(parts_text(content));
    }
    let chat: Vec<Value> = parts
        .iter()
        .filter_map(|p| match p.get("type").and_then(Value::as_str) {
            Some("input_text") | Some("output_text") => Some(json!({"type": "text", "text": p.get("text")?})),
            Some("input_image") => Some(json!({"type": "image_url", "image_url": {"url": p.get("image_url")?}})),
            _ => None,
        })
        .collect();
    Value::Array(chat)
}

/// A `function` tool in chat's shape; hosted and namespace tools have none.
fn function_tool(t: &Value) -> Option<Value> {
    let kind = t.get("type").and_then(Value::as_str).unwrap_or_default();
    if kind != "function" {
        tracing::debug!(tool = kind, "a Responses tool that only OpenAI can run was dropped");
        return None;
    }
    let mut f = Map::new();
    f.insert("name".into(), t.get("name")?.clone());
    for k in ["description", "parameters", "strict"] {
        if let Some(v) = t.get(k).filter(|v| !v.is_null()) {
            f.insert(k.into(), v.clone());
        }
    }
    Some(json!({"type": "function", "function": f}))
}

/// A new id with `prefix`.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

/// The `usage` object of a response.
pub fn usage(input: u64, output: u64) -> Value {
    json!({
        "input_tokens": input, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input.saturating_add(output),
    })
}

/// A `response` object with `output` and `status`.
pub fn response(id: &str, model: &Value, created: i64, status: &str, output: Vec<Value>, usage: Value) -> Value {
    let incomplete = (status == "incomplete").then(|| json!({"reason": "max_output_tokens"}));
    json!({
        "id": id, "object": "response", "created_at": created, "status": status,
        "error": Value::Null, "incomplete_details": incomplete, "instructions": Value::Null,
        "model": model, "output": output, "parallel_tool_calls": true, "tool_choice": "auto", "tools": [],
        "usage": usage,
    })
}

/// A chat completion (already metered, `model` the alias) as a `response` object.
pub fn from_completion(body: &Map<String, Value>) -> Map<String, Value> {
    let choice = body.get("choices").and_then(|c| c.get(0));
    let message = choice.and_then(|c| c.get("message"));
    let mut output = Vec::new();
    if let Some(text) = message.and_then(|m| m.get("content")).and_then(Value::as_str).filter(|t| !t.is_empty()) {
        output.push(json!({
            "type": "message", "id": new_id("msg"), "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }));
    }
    if let Some(Value::Array(calls)) = message.and_then(|m| m.get("tool_calls")) {
        for c in calls {
            let f = c.get("function");
            output.push(json!({
                "type": "function_call", "id": new_id("fc"), "status": "completed",
                "call_id": c.get("id").cloned().unwrap_or(Value::Null),
                "name": f.and_then(|f| f.get("name")).cloned().unwrap_or(Value::Null),
                "arguments": f.and_then(|f| f.get("arguments")).cloned().unwrap_or_else(|| json!("{}")),
            }));
        }
    }
    let u = body.get("usage");
    let count = |k: &str| u.and_then(|u| u.get(k)).and_then(Value::as_u64).unwrap_or(0);
    let finish = choice.and_then(|c| c.get("finish_reason")).and_then(Value::as_str);
    let status = if finish == Some("length") { "incomplete" } else { "completed" };
    let model = body.get("model").cloned().unwrap_or(Value::Null);
    let created = body.get("created").and_then(Value::as_i64).unwrap_or_else(|| chrono::Utc::now().timestamp());
    let usage = usage(count("prompt_tokens"), count("completion_tokens"));
    match response(&new_id("resp"), &model, created, status, output, usage) {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(v: Value) -> Value {
        to_chat(v.to_string().as_bytes()).map(|r| Value::Object(r.chat)).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn codex_shaped_requests_translate() {
        let out = chat(json!({
            "model": "gpt-5-codex", "stream": true, "store": false, "include": ["reasoning.encrypted_content"],
            "reasoning": {"summary": "auto"}, "prompt_cache_key": "k", "tool_choice": "auto", "parallel_tool_calls": true,
            "input": [
                {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "be careful"}]},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "cat hello.txt"}]},
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "xx"},
                {"type": "function_call", "call_id": "call_1", "name": "exec_command", "arguments": "{\"cmd\":\"cat hello.txt\"}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "hi there"}
            ],
            "tools": [
                {"type": "function", "name": "exec_command", "description": "run", "parameters": {"type": "object"}, "strict": false},
                {"type": "web_search"}, {"type": "namespace", "name": "mcp", "tools": []}
            ]
        }));
        let msgs = out["messages"].as_array().cloned().unwrap_or_default();
        assert_eq!(msgs[0], json!({"role": "system", "content": "be careful"}));
        assert_eq!(msgs[1], json!({"role": "user", "content": "cat hello.txt"}));
        assert_eq!(msgs[2]["tool_calls"][0]["function"]["name"], "exec_command");
        assert_eq!(msgs[3], json!({"role": "tool", "tool_call_id": "call_1", "content": "hi there"}));
        assert_eq!(out["tools"].as_array().map(Vec::len), Some(1));
        assert_eq!((out["stream"].clone(), out["tool_choice"].clone()), (json!(true), json!("auto")));
        assert!(out.get("store").is_none() && out.get("reasoning").is_none());
    }

    #[test]
    fn only_store_false_says_the_answer_is_kept_nowhere() {
        let stored = |extra: Value| {
            let mut body = json!({"model": "m", "input": "hi"});
            if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
                b.extend(e);
            }
            to_chat(body.to_string().as_bytes()).map(|r| r.stored).unwrap_or_else(|e| panic!("{e}"))
        };
        assert!(stored(json!({})), "OpenAI keeps an answer by default");
        assert!(stored(json!({"store": true})) && stored(json!({"store": null})));
        assert!(!stored(json!({"store": false})));
    }

    #[test]
    fn completions_become_responses() {
        let body = json!({"model": "alias", "created": 5, "choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 7}});
        let r = from_completion(body.as_object().unwrap_or(&Map::new()));
        assert_eq!(r["output"][0]["type"], "function_call");
        assert_eq!(r["output"][0]["call_id"], "call_1");
        assert_eq!((r["status"].clone(), r["usage"]["total_tokens"].clone()), (json!("completed"), json!(12)));
    }
}
