//! A chat-completions request as a Bedrock Converse request: the body of `POST /model/{modelId}/converse`
//! (and of `/converse-stream`, the same body; the model id is in the path, not the body).
//!
//! | chat completions | Converse | |
//! |---|---|---|
//! | `system` / `developer` messages | `system` text blocks, wherever they stood | other parts: 400 |
//! | `user` / `assistant` messages | `user` / `assistant` turns, consecutive turns of one role merged | blank texts dropped; a first turn that is not `user`: 400 |
//! | `image_url` parts | `image` blocks of `bytes` (`data:image/{png,jpeg,gif,webp};base64,` URLs) | http(s) URLs, other data URLs: 400 |
//! | assistant `tool_calls` | `toolUse` blocks, `arguments` parsed to `input` | not a JSON object: 400 |
//! | `tool` messages | `toolResult` blocks (`content` text blocks) of a user turn, before its other blocks | |
//! | `max_completion_tokens` / `max_tokens` | `inferenceConfig.maxTokens`, else the deployment's default | |
//! | `temperature`, `top_p`, `stop` | `inferenceConfig.temperature`, `.topP`, `.stopSequences` | |
//! | `tools` (function) | `toolConfig.tools[].toolSpec` with `inputSchema.json` (no `parameters`: an empty object schema) | other tools: 400 |
//! | `tool_choice` auto / required / a named function | `toolConfig.toolChoice` `auto` / `any` / `tool` | |
//! | `tool_choice: "none"` | no `toolConfig`; with tool blocks in the conversation (Bedrock then requires one) the tools without `toolChoice` | |
//! | `n` > 1 | | 400 |
//! | everything else (assistant `reasoning_content`, `parallel_tool_calls`, `response_format`, `seed`, …) | dropped with a debug log | |
//!
//! What this file does not do: HTTP, signing, or any check the upstream makes itself (value ranges, the
//! number of stop sequences: the upstream's 400 comes back to the client).

use crate::chat_parts::{self, part_text, unsupported};
use crate::{ChatRequest, ProviderError};
use serde_json::{json, Map, Value};

/// The request fields this translation reads, or that are the gateway's own business (separated by spaces);
/// any other is dropped.
const READ: &str =
    "model messages max_tokens max_completion_tokens temperature top_p stop tools tool_choice n stream stream_options";

/// The 400 of a message `content` that is neither a string nor an array.
fn bad_content(i: usize) -> ProviderError {
    let param = format!("messages[{i}].content");
    unsupported(format!("`{param}` must be a string or an array"), param)
}

/// The Converse body of `req`, as bytes.
pub(super) fn to_converse_bytes(req: &ChatRequest, default_max_tokens: u32) -> Result<Vec<u8>, ProviderError> {
    let body = to_converse(req, default_max_tokens)?;
    serde_json::to_vec(&body)
        .map_err(|e| ProviderError::Unsupported { message: format!("cannot encode request: {e}"), param: None })
}

/// The Converse body of `req`; `default_max_tokens` is `maxTokens` when the request sets no cap.
pub(super) fn to_converse(req: &ChatRequest, default_max_tokens: u32) -> Result<Map<String, Value>, ProviderError> {
    if req.choices() > 1 {
        let msg = "`n` other than 1 is not supported by bedrock deployments: send one request per choice";
        return Err(unsupported(msg, "n"));
    }
    let (system, messages) = convert_messages(req.messages())?;
    let tool_blocks = messages.iter().any(has_tool_blocks);
    let mut out = Map::new();
    out.insert("messages".into(), Value::Array(messages));
    if !system.is_empty() {
        out.insert("system".into(), system.into_iter().map(|text| json!({ "text": text })).collect());
    }
    out.insert("inferenceConfig".into(), Value::Object(inference_config(req, default_max_tokens)?));
    if let Some(config) = tool_config(req, tool_blocks)? {
        out.insert("toolConfig".into(), config);
    }
    for (key, _) in req.body().iter().filter(|(k, v)| !v.is_null() && !READ.split(' ').any(|r| r == k.as_str())) {
        tracing::debug!(field = %key, "bedrock: dropped a field the converse api cannot express");
    }
    Ok(out)
}

/// One Converse turn being built; consecutive turns of one role are merged into it.
struct Turn {
    role: &'static str,
    blocks: Vec<Value>,
}

impl Turn {
    /// The turn as a Converse message; in a user turn the `toolResult` blocks come first (the sort is stable,
    /// so each group keeps the client's order).
    fn into_value(mut self) -> Value {
        if self.role == "user" {
            self.blocks.sort_by_key(|b| b.get("toolResult").is_none());
        }
        json!({ "role": self.role, "content": self.blocks })
    }
}

/// Splits the chat messages into the `system` texts (system and developer messages, wherever they stand) and
/// the Converse turns: `tool` messages become `toolResult` blocks of a user turn, and consecutive turns of one
/// role are merged, since Converse wants user and assistant to alternate, starting with user.
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
                let msg = format!("role `{other}` is not supported by bedrock deployments");
                return Err(unsupported(msg, format!("messages[{i}].role")));
            }
        };
        if blocks.is_empty() {
            tracing::debug!(index = i, "bedrock: dropped a message with no content");
            continue;
        }
        match turns.last_mut() {
            Some(last) if last.role == role => last.blocks.extend(blocks),
            _ => turns.push(Turn { role, blocks }),
        }
    }
    if turns.first().is_none_or(|t| t.role != "user") {
        let msg = "bedrock deployments need a user (or tool) message with content before any assistant message: \
                   a Converse conversation starts with a user turn";
        return Err(unsupported(msg, "messages"));
    }
    Ok((system, turns.into_iter().map(Turn::into_value).collect()))
}

/// The texts of a system or developer message (blank ones left out).
fn system_texts(m: &Value, i: usize) -> Result<Vec<String>, ProviderError> {
    let param = format!("messages[{i}].content");
    let texts = match m.get("content") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(parts)) => {
            let text = |(j, p): (usize, &Value)| {
                let msg = "system and developer messages may only hold text parts";
                part_text(p).map(str::to_string).ok_or_else(|| unsupported(msg, format!("{param}[{j}]")))
            };
            parts.iter().enumerate().map(text).collect::<Result<_, _>>()?
        }
        Some(_) => return Err(bad_content(i)),
    };
    Ok(texts.into_iter().filter(|t| !t.trim().is_empty()).collect())
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
                match p.get("type").and_then(Value::as_str).unwrap_or_default() {
                    "text" => blocks.extend(part_text(p).and_then(text_block)),
                    "image_url" => blocks.push(image_block(p, &format!("{param}[{j}]"))?),
                    other => {
                        let msg = format!("content part type `{other}` is not supported by bedrock deployments");
                        return Err(unsupported(msg, format!("{param}[{j}]")));
                    }
                }
            }
            Ok(blocks)
        }
        Some(_) => Err(bad_content(i)),
    }
}

/// The blocks of an assistant message: its text, then one `toolUse` block per tool call.
fn assistant_blocks(m: &Value, i: usize) -> Result<Vec<Value>, ProviderError> {
    let mut blocks = Vec::new();
    match m.get("content") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => blocks.extend(text_block(s)),
        // Text parts are kept; `refusal` parts have no Converse form and are dropped.
        Some(Value::Array(parts)) => blocks.extend(parts.iter().filter_map(part_text).filter_map(text_block)),
        Some(_) => return Err(bad_content(i)),
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
        blocks.push(tool_use(call, &format!("messages[{i}].tool_calls[{j}]"))?);
    }
    Ok(blocks)
}

/// A tool call as a `toolUse` block; `param` names the call.
fn tool_use(call: &Value, param: &str) -> Result<Value, ProviderError> {
    let call = chat_parts::tool_call(call, param)?;
    Ok(json!({ "toolUse": { "toolUseId": call.id, "name": call.name, "input": call.input } }))
}

/// A `tool` message as a `toolResult` block (for a user turn). Its text becomes text blocks (none when it is
/// blank: Converse refuses blank text blocks); chat completions has no error status, so none is sent.
fn tool_result(m: &Value, i: usize) -> Result<Value, ProviderError> {
    let Some(id) = m.get("tool_call_id").and_then(Value::as_str) else {
        let param = format!("messages[{i}].tool_call_id");
        return Err(unsupported(format!("`{param}` is required"), param));
    };
    let content: Vec<Value> = match m.get("content") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => text_block(s).into_iter().collect(),
        Some(Value::Array(parts)) => parts.iter().filter_map(part_text).filter_map(text_block).collect(),
        Some(_) => return Err(bad_content(i)),
    };
    Ok(json!({ "toolResult": { "toolUseId": id, "content": content } }))
}

/// A text block, or none for blank text (Converse refuses blank text blocks).
fn text_block(text: &str) -> Option<Value> {
    (!text.trim().is_empty()).then(|| json!({ "text": text }))
}

/// An `image_url` part as an image block of bytes; `detail` has no Converse form and is dropped. `param`
/// names the part.
fn image_block(part: &Value, param: &str) -> Result<Value, ProviderError> {
    let Some(url) = chat_parts::image_url(part) else {
        return Err(unsupported(format!("`{param}.image_url.url` is required"), format!("{param}.image_url")));
    };
    let param = format!("{param}.image_url.url");
    if !url.starts_with("data:") {
        let msg = format!("`{param}`: bedrock deployments take images as `data:` URLs only, not links");
        return Err(unsupported(msg, param));
    }
    match image_source(url) {
        Some((format, data)) => Ok(json!({ "image": { "format": format, "source": { "bytes": data } } })),
        None => {
            let msg = format!("`{param}` must be a `data:image/<png|jpeg|gif|webp>;base64,…` URL");
            Err(unsupported(msg, param))
        }
    }
}

/// The Converse image format and the base64 data of a `data:image/<format>;base64,<data>` URL; `None` for
/// any other URL, encoding or format.
fn image_source(url: &str) -> Option<(&'static str, &str)> {
    let (media_type, data) = chat_parts::base64_data_url(url)?;
    let format = match media_type.to_ascii_lowercase().as_str() {
        "image/png" => "png",
        "image/jpeg" | "image/jpg" => "jpeg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        _ => return None,
    };
    Some((format, data))
}

/// Whether a Converse message holds a `toolUse` or `toolResult` block.
fn has_tool_blocks(message: &Value) -> bool {
    let blocks = message.get("content").and_then(Value::as_array);
    blocks.into_iter().flatten().any(|b| b.get("toolUse").is_some() || b.get("toolResult").is_some())
}

/// `inferenceConfig`: the cap (`max_completion_tokens`, else `max_tokens`, else `default_max_tokens`),
/// `temperature`, `top_p` and `stop`.
fn inference_config(req: &ChatRequest, default_max_tokens: u32) -> Result<Map<String, Value>, ProviderError> {
    let mut config = Map::new();
    config.insert("maxTokens".into(), json!(req.max_tokens().unwrap_or(u64::from(default_max_tokens))));
    for (from, to) in [("temperature", "temperature"), ("top_p", "topP")] {
        if let Some(v) = req.field(from).filter(|v| !v.is_null()) {
            config.insert(to.into(), v.clone());
        }
    }
    if let Some(stops) = req.field("stop").filter(|v| !v.is_null()) {
        let stops = chat_parts::stop_sequences(stops)?;
        if !stops.is_empty() {
            config.insert("stopSequences".into(), json!(stops));
        }
    }
    Ok(config)
}

/// What `tool_choice` asks of Converse.
enum Choice {
    /// No `toolChoice` (Converse's default, auto).
    Unset,
    /// `none`: Converse has no such choice; the tools are withheld.
    Forbidden,
    /// This `toolChoice`.
    Given(Value),
}

/// `toolConfig`: the function tools and `tool_choice`; `None` without tools, or when `tool_choice` is
/// `none` and the conversation holds no tool blocks (`tool_blocks`), which Bedrock answers only with a
/// `toolConfig` (then the tools are sent, without `toolChoice`).
fn tool_config(req: &ChatRequest, tool_blocks: bool) -> Result<Option<Value>, ProviderError> {
    let tools = match req.field("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(tools) => convert_tools(tools)?,
    };
    let choice = req.field("tool_choice");
    if tools.is_empty() {
        if choice.is_some_and(|c| !c.is_null()) {
            tracing::debug!(field = "tool_choice", "bedrock: dropped `tool_choice` without `tools`");
        }
        return Ok(None);
    }
    Ok(match convert_tool_choice(choice)? {
        Choice::Forbidden if !tool_blocks => None,
        Choice::Unset | Choice::Forbidden => Some(json!({ "tools": tools })),
        Choice::Given(choice) => Some(json!({ "tools": tools, "toolChoice": choice })),
    })
}

/// Function tools as `toolSpec`s; `strict` has no Converse form and is dropped.
fn convert_tools(value: &Value) -> Result<Vec<Value>, ProviderError> {
    let tools = chat_parts::function_tools(value, "bedrock")?;
    let spec = |t: chat_parts::FunctionTool<'_>| {
        let mut spec = Map::new();
        spec.insert("name".into(), json!(t.name));
        if let Some(d) = t.description {
            spec.insert("description".into(), json!(d));
        }
        spec.insert("inputSchema".into(), json!({ "json": t.schema }));
        json!({ "toolSpec": spec })
    };
    Ok(tools.into_iter().map(spec).collect())
}

/// `tool_choice` as a Converse choice: auto → auto, required → any, a named function → tool, none →
/// [`Choice::Forbidden`], unset → [`Choice::Unset`].
fn convert_tool_choice(choice: Option<&Value>) -> Result<Choice, ProviderError> {
    let invalid = || {
        let msg =
            "`tool_choice` must be `auto`, `none`, `required` or {\"type\":\"function\",\"function\":{\"name\":…}}";
        unsupported(msg, "tool_choice")
    };
    Ok(match choice {
        None | Some(Value::Null) => Choice::Unset,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => Choice::Given(json!({ "auto": {} })),
            "required" => Choice::Given(json!({ "any": {} })),
            "none" => Choice::Forbidden,
            _ => return Err(invalid()),
        },
        Some(obj) => {
            let is_function = obj.get("type").and_then(Value::as_str) == Some("function");
            match obj.get("function").and_then(|f| f.get("name")).and_then(Value::as_str) {
                Some(name) if is_function => Choice::Given(json!({ "tool": { "name": name } })),
                _ => return Err(invalid()),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The Converse body of the chat body `body` (a default cap of 1000).
    fn converse(body: Value) -> Result<Value, ProviderError> {
        let req = ChatRequest::parse(body.to_string().as_bytes()).unwrap();
        to_converse(&req, 1000).map(Value::Object)
    }

    #[test]
    fn text_system_and_sampling_fields_become_converse_fields() {
        let out = converse(json!({"model": "m", "temperature": 0.5, "top_p": 0.9, "stop": "END", "seed": 7,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "developer", "content": [{"type": "text", "text": "Answer in French."}]},
            {"role": "assistant", "content": "Salut"},
            {"role": "user", "content": [{"type": "text", "text": "  "}, {"type": "text", "text": "Again"}]}
        ]}))
        .unwrap();
        assert_eq!(out["system"], json!([{"text": "Be brief."}, {"text": "Answer in French."}]));
        let turns = json!([{"role": "user", "content": [{"text": "Hi"}]}, {"role": "assistant", "content": [{"text": "Salut"}]},
            {"role": "user", "content": [{"text": "Again"}]}]);
        assert_eq!(out["messages"], turns, "blank texts dropped");
        assert_eq!(
            out["inferenceConfig"],
            json!({"maxTokens": 1000, "temperature": 0.5, "topP": 0.9, "stopSequences": ["END"]}),
            "the default cap; `seed` dropped"
        );
        assert!(out.get("toolConfig").is_none() && out.get("seed").is_none());
        let capped =
            converse(json!({"model": "m", "max_tokens": 50, "max_completion_tokens": 20, "stop": ["a", "", "b"],
            "messages": [{"role": "user", "content": "Hi"}]}))
            .unwrap();
        assert_eq!(capped["inferenceConfig"], json!({"maxTokens": 20, "stopSequences": ["a", "b"]}));
        assert!(capped.get("system").is_none());
    }

    #[test]
    fn images_are_sent_as_bytes() {
        let out = converse(json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is it?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO", "detail": "high"}},
            {"type": "image_url", "image_url": {"url": "data:image/jpg;base64,/9j/"}}]}]}))
        .unwrap();
        let blocks = json!([{"text": "What is it?"}, {"image": {"format": "png", "source": {"bytes": "iVBO"}}},
            {"image": {"format": "jpeg", "source": {"bytes": "/9j/"}}}]);
        assert_eq!(out["messages"][0]["content"], blocks);
        for (url, want) in [
            ("data:image/webp;base64,UklG", Some(("webp", "UklG"))),
            ("data:image/GIF;base64,R0lG", Some(("gif", "R0lG"))),
            ("data:image/bmp;base64,Qk0", None),
            ("data:image/png,%89PNG", None),
            ("data:image/png;base64", None),
        ] {
            assert_eq!(image_source(url), want, "{url}");
        }
    }

    #[test]
    fn tool_calls_and_their_results_round_trip() {
        let out = converse(json!({"model": "m",
            "messages": [
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {"role": "assistant", "content": "Looking.", "tool_calls": [
                    {"id": "t1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}},
                    {"id": "t2", "type": "function", "function": {"name": "weather", "arguments": ""}}]},
                {"role": "tool", "tool_call_id": "t1", "content": "sunny"},
                {"role": "tool", "tool_call_id": "t2", "content": [{"type": "text", "text": "rain"}]},
                {"role": "tool", "tool_call_id": "t3", "content": ""}
            ],
            "tools": [{"type": "function", "function": {"name": "weather", "description": "Weather now",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
                {"type": "function", "function": {"name": "clock"}}]}))
        .unwrap();
        assert_eq!(
            out["messages"][1],
            json!({"role": "assistant", "content": [
                {"text": "Looking."},
                {"toolUse": {"toolUseId": "t1", "name": "weather", "input": {"city": "Paris"}}},
                {"toolUse": {"toolUseId": "t2", "name": "weather", "input": {}}}]})
        );
        assert_eq!(
            out["messages"][2],
            json!({"role": "user", "content": [
                {"toolResult": {"toolUseId": "t1", "content": [{"text": "sunny"}]}},
                {"toolResult": {"toolUseId": "t2", "content": [{"text": "rain"}]}},
                {"toolResult": {"toolUseId": "t3", "content": []}}]}),
            "the results are one user turn"
        );
        let tools = json!({"tools": [{"toolSpec": {"name": "weather", "description": "Weather now",
            "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}}}}},
            {"toolSpec": {"name": "clock", "inputSchema": {"json": {"type": "object", "properties": {}}}}}]});
        assert_eq!(out["toolConfig"], tools, "no `tool_choice`: no `toolChoice`");
    }

    #[test]
    fn tool_choices() {
        let tools = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
        let plain = json!([{"role": "user", "content": "Hi"}]);
        let with_calls = json!([
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "tool_calls": [{"id": "t1", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "t1", "content": "ok"}
        ]);
        let config = |messages: &Value, choice: &Value| {
            let body = json!({"model": "m", "messages": messages, "tools": tools, "tool_choice": choice});
            converse(body).unwrap().get("toolConfig").cloned()
        };
        for (choice, want) in [
            (Value::Null, None),
            (json!("auto"), Some(json!({"auto": {}}))),
            (json!("required"), Some(json!({"any": {}}))),
            (json!({"type": "function", "function": {"name": "f"}}), Some(json!({"tool": {"name": "f"}}))),
        ] {
            assert_eq!(config(&plain, &choice).unwrap().get("toolChoice"), want.as_ref(), "{choice}");
        }
        assert_eq!(config(&plain, &json!("none")), None, "`none`: no tools at all");
        let kept = config(&with_calls, &json!("none")).unwrap();
        assert!(kept.get("toolChoice").is_none() && kept["tools"][0]["toolSpec"]["name"] == "f", "{kept}");
        let no_tools = converse(json!({"model": "m", "messages": plain, "tool_choice": "required"})).unwrap();
        assert!(no_tools.get("toolConfig").is_none());
    }

    #[test]
    fn same_role_turns_merge_and_tool_results_come_first() {
        let (system, turns) = convert_messages(&[
            json!({"role": "user", "content": "a"}),
            json!({"role": "system", "content": "s"}),
            json!({"role": "user", "content": [{"type": "text", "text": "b"}]}),
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}),
            json!({"role": "assistant", "content": "and"}),
            json!({"role": "user", "content": "c"}),
            json!({"role": "tool", "tool_call_id": "t1", "content": "ok"}),
            json!({"role": "assistant", "content": null}),
        ])
        .unwrap();
        assert_eq!(system, ["s"]);
        assert_eq!(
            Value::Array(turns),
            json!([
                {"role": "user", "content": [{"text": "a"}, {"text": "b"}]},
                {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1", "name": "f", "input": {}}}, {"text": "and"}]},
                {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "ok"}]}}, {"text": "c"}]}
            ])
        );
    }

    #[test]
    fn what_converse_cannot_express_is_a_400_naming_the_field() {
        let (user, system) = (json!({"role": "user", "content": "Hi"}), json!({"role": "system", "content": "s"}));
        let call = |args: &str| json!({"role": "assistant", "tool_calls": [{"id": "t", "function": {"name": "f", "arguments": args}}]});
        let image =
            |url: &str| json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]);
        let (args, url) = ("messages[1].tool_calls[0].function.arguments", "messages[0].content[0].image_url.url");
        let f = json!([{"type": "function", "function": {"name": "f"}}]);
        let cases = [
            (json!([user]), json!({"n": 2}), "n"),
            (json!([user, call("[1]")]), json!({}), args),
            (json!([user, call("{\"a\":")]), json!({}), args),
            (image("https://x.test/a.png"), json!({}), url),
            (image("data:image/tiff;base64,SUkq"), json!({}), url),
            (json!([{"role": "user", "content": [{"type": "input_audio"}]}]), json!({}), "messages[0].content[0]"),
            (json!([user]), json!({"tools": [{"type": "web_search"}]}), "tools[0]"),
            (json!([user]), json!({"tools": [{"type": "function", "function": {}}]}), "tools[0].function.name"),
            (json!([user]), json!({"tools": f, "tool_choice": "any"}), "tool_choice"),
            (json!([user]), json!({"tools": f, "tool_choice": {"type": "function"}}), "tool_choice"),
            (json!([user]), json!({"stop": [1]}), "stop"),
            (json!([{"role": "tool", "content": "x"}]), json!({}), "messages[0].tool_call_id"),
            (json!([system, {"role": "assistant", "content": "x"}]), json!({}), "messages"),
            (json!([system]), json!({}), "messages"),
            (json!([{"role": "critic", "content": "x"}]), json!({}), "messages[0].role"),
        ];
        for (messages, mut body, want) in cases {
            (body["model"], body["messages"]) = (json!("m"), messages);
            let got = match converse(body.clone()) {
                Err(ProviderError::Unsupported { param, .. }) => param,
                other => panic!("not a 400: {other:?}"),
            };
            assert_eq!(got.as_deref(), Some(want), "{body}");
        }
        let req = ChatRequest::parse(json!({"model": "m", "messages": [user]}).to_string().as_bytes()).unwrap();
        let body: Value = serde_json::from_slice(&to_converse_bytes(&req, 5).unwrap()).unwrap();
        assert_eq!(body["inferenceConfig"]["maxTokens"], 5);
        assert!(body.get("model").is_none(), "the model id is in the path");
    }
}
