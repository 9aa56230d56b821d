//! OpenAI chat-completions request → Anthropic Messages API request (the body of `POST /v1/messages`).
//!
//! What this file owns: the message list (system hoisting, same-role merging, content parts, tool calls and
//! tool results), sampling fields, tools and `tool_choice`, and the decision for every other field: dropped
//! with a debug log when dropping it keeps the meaning, [`ProviderError::Unsupported`] naming the field when it
//! does not. The table of those decisions is in the docs of `anthropic/mod.rs`.
//!
//! What it does not do: HTTP, headers, or any check the upstream makes itself (value ranges such as a
//! `temperature` above 1 are forwarded and the upstream's 400 comes back to the client).

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
            if let Some(stops) = stop_sequences(value)? {
                out.insert("stop_sequences".into(), stops);
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
        let param = format!("messages[{i}].tool_calls[{j}]");
        let id = call.get("id").and_then(Value::as_str);
        let function = call.get("function");
        let name = function.and_then(|f| f.get("name")).and_then(Value::as_str);
        let (Some(id), Some(name)) = (id, name) else {
            let msg = format!("`{param}` needs an `id` and a `function.name`");
            return Err(unsupported(msg, param));
        };
        let input = match function.and_then(|f| f.get("arguments")) {
            None | Some(Value::Null) => Some(json!({})),
            Some(Value::String(s)) => tool_arguments_to_input(s),
            Some(other) => Some(other.clone()).filter(Value::is_object),
        };
        let Some(input) = input else {
            let param = format!("{param}.function.arguments");
            let msg = format!("`{param}` must be a JSON object encoded as a string");
            return Err(unsupported(msg, param));
        };
        blocks.push(json!({ "type": "tool_use", "id": id, "name": name, "input": input }));
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

/// The text of a `{"type":"text","text":…}` part.
fn part_text(part: &Value) -> Option<&str> {
    (part.get("type").and_then(Value::as_str) == Some("text"))
        .then(|| part.get("text").and_then(Value::as_str))
        .flatten()
}

/// A text block, or none for empty text (the Messages API rejects empty text blocks).
fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({ "type": "text", "text": text }))
}

/// An `image_url` part as an image block; `detail` has no Anthropic form and is dropped.
fn image_block(part: &Value, param: &str) -> Result<Value, ProviderError> {
    let image = part.get("image_url");
    let url = image.and_then(|i| i.get("url")).or(image).and_then(Value::as_str);
    let Some(url) = url else {
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
    let Some(rest) = url.strip_prefix("data:") else {
        return Some(json!({ "type": "url", "url": url }));
    };
    let (meta, data) = rest.split_once(',')?;
    let media_type = meta.strip_suffix(";base64").filter(|m| !m.is_empty())?;
    Some(json!({ "type": "base64", "media_type": media_type, "data": data }))
}

/// Tool-call `arguments` (a JSON string) as a `tool_use` input, which must be an object; empty arguments are
/// the empty object. `None` when the string is not a JSON object.
fn tool_arguments_to_input(arguments: &str) -> Option<Value> {
    if arguments.trim().is_empty() {
        return Some(json!({}));
    }
    serde_json::from_str::<Value>(arguments).ok().filter(Value::is_object)
}

/// `stop` (a string or an array of strings) as `stop_sequences`; `None` when there is none.
fn stop_sequences(value: &Value) -> Result<Option<Value>, ProviderError> {
    let stops: Vec<&str> = match value {
        Value::String(s) => vec![s.as_str()],
        Value::Array(items) => {
            let strings: Option<Vec<&str>> = items.iter().map(Value::as_str).collect();
            strings.ok_or_else(|| unsupported("`stop` must be a string or an array of strings", "stop"))?
        }
        _ => return Err(unsupported("`stop` must be a string or an array of strings", "stop")),
    };
    let stops: Vec<&str> = stops.into_iter().filter(|s| !s.is_empty()).collect();
    Ok((!stops.is_empty()).then(|| json!(stops)))
}

/// Function tools as Anthropic tools; `strict` has no Anthropic form and is dropped.
fn convert_tools(value: &Value) -> Result<Vec<Value>, ProviderError> {
    let Some(tools) = value.as_array() else {
        return Err(unsupported("`tools` must be an array", "tools"));
    };
    let mut out = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        let param = format!("tools[{i}]");
        if tool.get("type").and_then(Value::as_str) != Some("function") {
            let msg = format!("`{param}`: only `function` tools are supported by anthropic deployments");
            return Err(unsupported(msg, param));
        }
        let function = tool.get("function");
        let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str) else {
            let param = format!("{param}.function.name");
            return Err(unsupported(format!("`{param}` is required"), param));
        };
        let mut t = Map::new();
        t.insert("name".into(), json!(name));
        if let Some(d) = function.and_then(|f| f.get("description")).and_then(Value::as_str) {
            t.insert("description".into(), json!(d));
        }
        // A function without `parameters` takes no arguments; `input_schema` is required upstream.
        let schema = function
            .and_then(|f| f.get("parameters"))
            .filter(|p| p.is_object())
            .cloned()
            .unwrap_or_else(|| json!({ "type": "object", "properties": {} }));
        t.insert("input_schema".into(), schema);
        out.push(Value::Object(t));
    }
    Ok(out)
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

fn unsupported(message: impl Into<String>, param: impl Into<String>) -> ProviderError {
    ProviderError::Unsupported { message: message.into(), param: Some(param.into()) }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn tool_arguments_must_be_an_object() {
        let cases: &[(&str, Option<Value>)] = &[
            ("", Some(json!({}))),
            ("  ", Some(json!({}))),
            (r#"{"city":"Paris"}"#, Some(json!({"city": "Paris"}))),
            (r#"{"city":"Par"#, None),
            ("[1,2]", None),
            ("42", None),
        ];
        for (args, want) in cases {
            assert_eq!(&tool_arguments_to_input(args), want, "{args:?}");
        }
    }

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
    fn stops() {
        assert_eq!(stop_sequences(&json!("END")).unwrap(), Some(json!(["END"])));
        assert_eq!(stop_sequences(&json!(["a", "", "b"])).unwrap(), Some(json!(["a", "b"])));
        assert_eq!(stop_sequences(&json!([])).unwrap(), None);
        assert!(stop_sequences(&json!([1])).is_err());
        assert!(stop_sequences(&json!(3)).is_err());
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
