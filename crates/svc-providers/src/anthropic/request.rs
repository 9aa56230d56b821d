//! OpenAI chat-completions request → Anthropic Messages API request (the body of `POST /v1/messages`).
//!
//! What this file owns: the message list (system hoisting, same-role merging, content parts, tool calls and
//! tool results), sampling fields, tools and `tool_choice`, and the decision for every other field: dropped
//! with a debug log when dropping it keeps the meaning, [`ProviderError::Unsupported`] naming the field when it
//! does not. The table of those decisions is in the docs of `anthropic/mod.rs`.
//!
//! What it does not do: HTTP, headers, or any check the upstream makes itself (value ranges such as a
//! `temperature` above 1 are forwarded and the upstream's 400 comes back to the client).

use crate::chat_parts::{self, part_text, unsupported};
use crate::{ChatRequest, ProviderError};
use serde_json::{json, Map, Value};

/// Builds the Messages API body for `req`. `stream` sets the upstream's `stream` flag, whatever the body says.
pub(super) fn to_messages_request(
    req: &ChatRequest,
    default_max_tokens: u32,
    stream: bool,
) -> Result<Map<String, Value>, ProviderError> {
    let (system, messages) = convert_messages(req.messages())?;
    let mut out = Map::new();
    out.insert("model".into(), Value::String(req.model().to_string()));
    if !system.is_empty() {
        out.insert("system".into(), Value::String(system.join("\n\n")));
    }
    out.insert("messages".into(), Value::Array(messages));
    // The Messages API requires `max_tokens`; OpenAI's is optional.
    let max_tokens = req.max_tokens().unwrap_or(u64::from(default_max_tokens));
    out.insert("max_tokens".into(), json!(max_tokens));
    for (key, value) in req.body() {
        if !value.is_null() {
            field(&mut out, key, value)?;
        }
    }
    if out.contains_key("tools") {
        let choice = req.field("tool_choice");
        let parallel = req.field("parallel_tool_calls");
        if let Some(choice) = convert_tool_choice(choice, parallel)? {
            out.insert("tool_choice".into(), choice);
        }
    } else if req.field("tool_choice").is_some_and(|c| !c.is_null()) {
        tracing::debug!(field = "tool_choice", "anthropic: dropped `tool_choice` without `tools`");
    }
    if stream {
        out.insert("stream".into(), Value::Bool(true));
    }
    Ok(out)
}

/// One field of the chat body other than the messages and `max_tokens`: copied, converted, left to the gateway,
/// dropped (with a debug log) or refused with [`ProviderError::Unsupported`] naming it.
fn field(out: &mut Map<String, Value>, key: &str, value: &Value) -> Result<(), ProviderError> {
    match key {
        // Handled above or below, or the gateway's own business.
        "model"
        | "messages"
        | "max_tokens"
        | "max_completion_tokens"
        | "stream"
        | "stream_options"
        | "tool_choice"
        | "parallel_tool_calls" => {}
        // `top_k` is not OpenAI's, but clients used to LiteLLM send it for Anthropic models.
        "temperature" | "top_p" | "top_k" => {
            out.insert(key.to_owned(), value.clone());
        }
        "stop" => {
            let stops = chat_parts::stop_sequences(value)?;
            if !stops.is_empty() {
                out.insert("stop_sequences".into(), json!(stops));
            }
        }
        "user" => {
            let Some(user) = value.as_str() else {
                return Err(unsupported("`user` must be a string", "user"));
            };
            out.insert("metadata".into(), json!({ "user_id": user }));
        }
        "tools" => {
            let tools = convert_tools(value)?;
            if !tools.is_empty() {
                out.insert("tools".into(), Value::Array(tools));
            }
        }
        "n" => {
            if value.as_u64() != Some(1) {
                let msg = "`n` other than 1 is not supported by anthropic deployments: send one request per choice";
                return Err(unsupported(msg, "n"));
            }
        }
        "logprobs" => {
            if value.as_bool() == Some(true) {
                let msg = "`logprobs` is not supported by anthropic deployments: remove it";
                return Err(unsupported(msg, "logprobs"));
            }
        }
        "functions" | "function_call" => {
            let msg = format!("legacy `{key}` is not supported by anthropic deployments: use `tools`");
            return Err(unsupported(msg, key));
        }
        "modalities" if value.as_array().is_some_and(|m| m.iter().any(|m| m == "audio")) => {
            let msg = "audio output is not supported by anthropic deployments: remove `audio` from `modalities`";
            return Err(unsupported(msg, "modalities"));
        }
        "response_format" if value.get("type").and_then(Value::as_str) == Some("text") => {}
        _ => {
            tracing::debug!(field = %key, "anthropic: dropped a field the messages api cannot express")
        }
    }
    Ok(())
}

/// One Anthropic turn being built; consecutive turns of one role are merged into it.
struct Turn {
    role: &'static str,
    blocks: Vec<Value>,
}

impl Turn {
    fn into_value(mut self) -> Value {
        // Messages API: in a user turn answering tool calls, the `tool_result` blocks come before any other
        // content. The sort is stable, so each group keeps the client's order.
        if self.role == "user" {
            self.blocks.sort_by_key(|b| b.get("type").and_then(Value::as_str) != Some("tool_result"));
        }
        json!({ "role": self.role, "content": self.blocks })
    }
}

/// Splits the OpenAI messages into the `system` texts (system and developer messages, wherever they stand)
/// and the Anthropic turns: `tool` messages become `tool_result` blocks of a user turn, and consecutive turns
/// of one role are merged, since the Messages API wants user and assistant to alternate.
fn convert_messages(messages: &[Value]) -> Result<(Vec<String>, Vec<Value>), ProviderError> {
    let mut system = Vec::new();
    let mut turns: Vec<Turn> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        let (role, blocks) = match role {
            "system" | "developer" => {
                system.extend(system_texts(m, i)?);
                continue;
            }
            "user" => ("user", user_blocks(m, i)?),
            "assistant" => ("assistant", assistant_blocks(m, i)?),
            "tool" => ("user", vec![tool_result(m, i)?]),
            other => {
                let msg = format!("role `{other}` is not supported by anthropic deployments");
                return Err(unsupported(msg, format!("messages[{i}].role")));
            }
        };
        if m.get("name").is_some() {
            tracing::debug!(index = i, "anthropic: dropped a message `name`");
        }
        if blocks.is_empty() {
            tracing::debug!(index = i, "anthropic: dropped a message with no content");
            continue;
        }
        match turns.last_mut() {
            Some(last) if last.role == role => last.blocks.extend(blocks),
            _ => turns.push(Turn { role, blocks }),
        }
    }
    Ok((system, turns.into_iter().map(Turn::into_value).collect()))
}

/// The texts of a system or developer message.
fn system_texts(m: &Value, i: usize) -> Result<Vec<String>, ProviderError> {
    let param = format!("messages[{i}].content");
    match m.get("content") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) if s.is_empty() => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(parts)) => parts
            .iter()
            .enumerate()
            .map(|(j, p)| match part_text(p) {
                Some(t) => Ok(t.to_string()),
                None => {
                    let msg = "system and developer messages may only hold text parts";
                    Err(unsupported(msg, format!("{param}[{j}]")))
                }
            })
            .collect(),
        Some(_) => Err(unsupported(format!("`{param}` must be a string or an array"), param)),
    }
}

/// The blocks of a user message: text and image parts.
fn user_blocks(m: &Value, i: usize) -> Result<Vec<Value>, ProviderError> {
    let param = format!("messages[{i}].content");
    match m.get("content") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(text_block(s).into_iter().collect()),
        Some(Value::Array(parts)) => {
            let mut blocks = Vec::with_capacity(parts.len());
            for (j, p) in parts.iter().enumerate() {
                let kind = p.get("type").and_then(Value::as_str).unwrap_or_default();
                match kind {
                    "text" => blocks.extend(part_text(p).and_then(text_block)),
                    "image_url" => blocks.push(image_block(p, &format!("{param}[{j}]"))?),
                    other => {
                        let msg = format!("content part type `{other}` is not supported by anthropic deployments");
                        return Err(unsupported(msg, format!("{param}[{j}]")));
                    }
                }
            }
            Ok(blocks)
        }
        Some(_) => Err(unsupported(format!("`{param}` must be a string or an array"), param)),
    }
}

/// The blocks of an assistant message: its text, then one `tool_use` block per tool call.
fn assistant_blocks(m: &Value, i: usize) -> Result<Vec<Value>, ProviderError> {
    let mut blocks = Vec::new();
    match m.get("content") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => blocks.extend(text_block(s)),
        Some(Value::Array(parts)) => {
            // Text parts are kept; `refusal` parts have no Anthropic form and are dropped.
            blocks.extend(parts.iter().filter_map(part_text).filter_map(text_block));
        }
        Some(_) => {
            let param = format!("messages[{i}].content");
            return Err(unsupported(format!("`{param}` must be a string or an array"), param));
        }
    }
    if m.get("function_call").is_some_and(|f| !f.is_null()) {
        let msg = "legacy `function_call` is not supported by anthropic deployments: use `tool_calls`";
        return Err(unsupported(msg, format!("messages[{i}].function_call")));
    }
    let calls = match m.get("tool_calls") {
        None | Some(Value::Null) => return Ok(blocks),
        Some(Value::Array(calls)) => calls,
        Some(_) => {
            let param = format!("messages[{i}].tool_calls");
            return Err(unsupported(format!("`{param}` must be an array"), param));
        }
    };
    for (j, call) in calls.iter().enumerate() {
        let call = chat_parts::tool_call(call, &format!("messages[{i}].tool_calls[{j}]"))?;
        blocks.push(json!({ "type": "tool_use", "id": call.id, "name": call.name, "input": call.input }));
    }
    Ok(blocks)
}

/// A `tool` message as a `tool_result` block (for a user turn).
fn tool_result(m: &Value, i: usize) -> Result<Value, ProviderError> {
    let Some(id) = m.get("tool_call_id").and_then(Value::as_str) else {
        let param = format!("messages[{i}].tool_call_id");
        return Err(unsupported(format!("`{param}` is required"), param));
    };
    let mut block = json!({ "type": "tool_result", "tool_use_id": id });
    let content = match m.get("content") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()).filter(|s| !s.is_empty()).map(Value::String),
        Some(Value::Array(parts)) => {
            let blocks: Vec<Value> = parts.iter().filter_map(part_text).filter_map(text_block).collect();
            Some(Value::Array(blocks)).filter(|b| b.as_array().is_some_and(|b| !b.is_empty()))
        }
        Some(_) => {
            let param = format!("messages[{i}].content");
            return Err(unsupported(format!("`{param}` must be a string or an array"), param));
        }
    };
    // `content` is optional on a tool result, and an empty text block would be rejected.
    if let (Some(content), Value::Object(b)) = (content, &mut block) {
        b.insert("content".into(), content);
    }
    Ok(block)
}

/// A text block, or none for empty text (the Messages API rejects empty text blocks).
fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({ "type": "text", "text": text }))
}

/// An `image_url` part as an image block; `detail` has no Anthropic form and is dropped.
fn image_block(part: &Value, param: &str) -> Result<Value, ProviderError> {
    let Some(url) = chat_parts::image_url(part) else {
        return Err(unsupported(format!("`{param}.image_url.url` is required"), param));
    };
    match image_source(url) {
        Some(source) => Ok(json!({ "type": "image", "source": source })),
        None => {
            let msg = format!("`{param}.image_url.url` is a data URL that is not `data:<media type>;base64,…`");
            Err(unsupported(msg, format!("{param}.image_url.url")))
        }
    }
}

/// The image `source` for a URL: a base64 source for a `data:<media type>;base64,<data>` URL, a `url` source
/// otherwise; `None` for a data URL in any other encoding.
fn image_source(url: &str) -> Option<Value> {
    if !url.starts_with("data:") {
        return Some(json!({ "type": "url", "url": url }));
    }
    let (media_type, data) = chat_parts::base64_data_url(url)?;
    Some(json!({ "type": "base64", "media_type": media_type, "data": data }))
}

/// Function tools as Anthropic tools; `strict` has no Anthropic form and is dropped.
fn convert_tools(value: &Value) -> Result<Vec<Value>, ProviderError> {
    let tools = chat_parts::function_tools(value, "anthropic")?;
    let tool = |t: chat_parts::FunctionTool<'_>| {
        let mut out = Map::new();
        out.insert("name".into(), json!(t.name));
        if let Some(d) = t.description {
            out.insert("description".into(), json!(d));
        }
        out.insert("input_schema".into(), t.schema);
        Value::Object(out)
    };
    Ok(tools.into_iter().map(tool).collect())
}

/// `tool_choice` and `parallel_tool_calls` as Anthropic's `tool_choice`: auto → auto, none → none,
/// required → any, a named function → tool; `parallel_tool_calls: false` → `disable_parallel_tool_use`
/// (which `none` does not take).
fn convert_tool_choice(choice: Option<&Value>, parallel: Option<&Value>) -> Result<Option<Value>, ProviderError> {
    let disable_parallel = parallel.and_then(Value::as_bool) == Some(false);
    let invalid = || {
        let msg =
            "`tool_choice` must be `auto`, `none`, `required` or {\"type\":\"function\",\"function\":{\"name\":…}}";
        unsupported(msg, "tool_choice")
    };
    let mut out = match choice {
        None | Some(Value::Null) if disable_parallel => json!({ "type": "auto" }),
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => match s.as_str() {
            "auto" => json!({ "type": "auto" }),
            "none" => return Ok(Some(json!({ "type": "none" }))),
            "required" => json!({ "type": "any" }),
            _ => return Err(invalid()),
        },
        Some(obj) => {
            let is_function = obj.get("type").and_then(Value::as_str) == Some("function");
            let name = obj.get("function").and_then(|f| f.get("name")).and_then(Value::as_str);
            match name {
                Some(name) if is_function => json!({ "type": "tool", "name": name }),
                _ => return Err(invalid()),
            }
        }
    };
    if let (true, Value::Object(o)) = (disable_parallel, &mut out) {
        o.insert("disable_parallel_tool_use".into(), Value::Bool(true));
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn image_sources() {
        let cases: &[(&str, Option<Value>)] = &[
            ("https://x.test/a.png", Some(json!({"type": "url", "url": "https://x.test/a.png"}))),
            ("data:image/png;base64,iVBO", Some(json!({"type": "base64", "media_type": "image/png", "data": "iVBO"}))),
            ("data:image/png,%89PNG", None),
            ("data:;base64,iVBO", None),
            ("data:image/png;base64", None),
        ];
        for (url, want) in cases {
            assert_eq!(&image_source(url), want, "{url}");
        }
    }

    #[test]
    fn tool_choices() {
        let named = json!({"type": "function", "function": {"name": "f"}});
        let f = json!(false);
        let cases: &[(Option<Value>, Option<&Value>, Option<Value>)] = &[
            (None, None, None),
            (None, Some(&f), Some(json!({"type": "auto", "disable_parallel_tool_use": true}))),
            (Some(json!("auto")), None, Some(json!({"type": "auto"}))),
            (Some(json!("none")), Some(&f), Some(json!({"type": "none"}))),
            (Some(json!("required")), Some(&f), Some(json!({"type": "any", "disable_parallel_tool_use": true}))),
            (Some(named), None, Some(json!({"type": "tool", "name": "f"}))),
        ];
        for (choice, parallel, want) in cases {
            assert_eq!(&convert_tool_choice(choice.as_ref(), *parallel).unwrap(), want, "{choice:?}");
        }
        assert!(convert_tool_choice(Some(&json!("sometimes")), None).is_err());
        assert!(convert_tool_choice(Some(&json!({"type": "function"})), None).is_err());
    }

    #[test]
    fn merges_turns_and_puts_tool_results_first() {
        let messages = vec![
            json!({"role": "user", "content": "a"}),
            json!({"role": "user", "content": [{"type": "text", "text": "b"}]}),
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}),
            json!({"role": "user", "content": "c"}),
            json!({"role": "tool", "tool_call_id": "t1", "content": "ok"}),
        ];
        let (system, turns) = convert_messages(&messages).unwrap();
        assert!(system.is_empty());
        assert_eq!(
            Value::Array(turns),
            json!([
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                    {"type": "text", "text": "c"}]},
            ])
        );
    }
}
