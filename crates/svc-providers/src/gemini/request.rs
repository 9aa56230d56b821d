//! A chat-completions request as a Gemini `GenerateContentRequest` (the table in `mod.rs`).

use crate::{ChatRequest, ProviderError};
use serde_json::{json, Map, Value};

fn unsupported(message: String, param: &str) -> ProviderError {
    ProviderError::Unsupported { message, param: Some(param.to_string()) }
}

/// The Gemini body of `req`, as bytes.
pub(super) fn to_gemini_bytes(req: &ChatRequest) -> Result<Vec<u8>, ProviderError> {
    let body = to_gemini(req)?;
    serde_json::to_vec(&body)
        .map_err(|e| ProviderError::Unsupported { message: format!("cannot encode request: {e}"), param: None })
}

/// The Gemini body of `req`.
pub(super) fn to_gemini(req: &ChatRequest) -> Result<Map<String, Value>, ProviderError> {
    let mut out = Map::new();
    let (system, contents) = contents(req.messages())?;
    if !system.is_empty() {
        out.insert("systemInstruction".into(), json!({"parts": [{"text": system.join("\n\n")}]}));
    }
    out.insert("contents".into(), Value::Array(contents));
    if let Some(Value::Array(tools)) = req.field("tools") {
        let declarations = tools.iter().enumerate().map(declaration).collect::<Result<Vec<_>, _>>()?;
        if !declarations.is_empty() {
            out.insert("tools".into(), json!([{"functionDeclarations": declarations}]));
            if let Some(config) = tool_config(req.field("tool_choice")) {
                out.insert("toolConfig".into(), json!({"functionCallingConfig": config}));
            }
        }
    }
    let config = generation_config(req);
    if !config.is_empty() {
        out.insert("generationConfig".into(), Value::Object(config));
    }
    Ok(out)
}

/// The system texts and the turns of the messages (consecutive turns of one role merged).
fn contents(messages: &[Value]) -> Result<(Vec<String>, Vec<Value>), ProviderError> {
    let mut system = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    // Tool call ids → function names, so a tool message's response is named after its call.
    let mut names: Vec<(String, String)> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        let content = m.get("content").unwrap_or(&Value::Null);
        let (turn_role, parts) = match role {
            "system" | "developer" => {
                system.push(text_of(content));
                continue;
            }
            "user" => ("user", user_parts(content, i)?),
            "assistant" => ("model", model_parts(m, content, &mut names)),
            "tool" => {
                let id = m.get("tool_call_id").and_then(Value::as_str).unwrap_or_default();
                let name = names.iter().find(|(call, _)| call == id).map_or(id, |(_, n)| n.as_str());
                ("user", vec![json!({"functionResponse": {"name": name, "response": {"output": text_of(content)}}})])
            }
            other => {
                return Err(unsupported(
                    format!("`messages[{i}].role` `{other}` has no Gemini counterpart"),
                    "messages",
                ))
            }
        };
        if parts.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == turn_role => existing.extend(parts),
            _ => turns.push((turn_role, parts)),
        }
    }
    let contents = turns.into_iter().map(|(role, parts)| json!({"role": role, "parts": parts})).collect();
    Ok((system, contents))
}

/// The text of a content value: a string, or its text parts joined.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
        }
        _ => String::new(),
    }
}

/// A user message's parts: text and images.
fn user_parts(content: &Value, i: usize) -> Result<Vec<Value>, ProviderError> {
    let parts = match content {
        Value::String(s) if s.is_empty() => return Ok(Vec::new()),
        Value::String(s) => return Ok(vec![json!({"text": s})]),
        Value::Array(parts) => parts,
        _ => return Ok(Vec::new()),
    };
    let mut out = Vec::new();
    for (j, p) in parts.iter().enumerate() {
        match p.get("type").and_then(Value::as_str) {
            Some("text") => out.push(json!({"text": p.get("text").and_then(Value::as_str).unwrap_or_default()})),
            Some("image_url") => {
                let url = p.get("image_url").and_then(|u| u.get("url").or(Some(u))).and_then(Value::as_str);
                out.push(image(url.unwrap_or_default()));
            }
            other => {
                return Err(unsupported(
                    format!("content part type `{}` has no Gemini counterpart", other.unwrap_or("?")),
                    &format!("messages[{i}].content[{j}]"),
                ))
            }
        }
    }
    Ok(out)
}

/// An image URL as a part: `inlineData` of a `data:` URL, else `fileData`.
fn image(url: &str) -> Value {
    if let Some((mime, data)) = url.strip_prefix("data:").and_then(|rest| rest.split_once(";base64,")) {
        return json!({"inlineData": {"mimeType": mime, "data": data}});
    }
    let mime = match url.rsplit('.').next().map(str::to_ascii_lowercase).as_deref() {
        Some("png") => "image/png",
        Some("gif") => "image/gif",
        Some("webp") => "image/webp",
        _ => "image/jpeg",
    };
    json!({"fileData": {"mimeType": mime, "fileUri": url}})
}

/// An assistant message's parts: its text and its tool calls (their names remembered by id).
fn model_parts(m: &Value, content: &Value, names: &mut Vec<(String, String)>) -> Vec<Value> {
    let mut parts = Vec::new();
    let text = text_of(content);
    if !text.is_empty() {
        parts.push(json!({"text": text}));
    }
    for call in m.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
        let f = call.get("function");
        let name = f.and_then(|f| f.get("name")).and_then(Value::as_str).unwrap_or_default();
        let args = f.and_then(|f| f.get("arguments")).and_then(Value::as_str).unwrap_or("{}");
        let args = serde_json::from_str::<Value>(args).ok().filter(Value::is_object).unwrap_or_else(|| json!({}));
        if let Some(id) = call.get("id").and_then(Value::as_str) {
            names.push((id.to_string(), name.to_string()));
        }
        parts.push(json!({"functionCall": {"name": name, "args": args}}));
    }
    parts
}

/// A function tool as a declaration.
fn declaration((i, tool): (usize, &Value)) -> Result<Value, ProviderError> {
    let f = match (tool.get("type").and_then(Value::as_str), tool.get("function")) {
        (Some("function") | None, Some(f)) => f,
        _ => return Err(unsupported(format!("`tools[{i}]` is not a function tool"), &format!("tools[{i}]"))),
    };
    let mut d = Map::new();
    d.insert("name".into(), f.get("name").cloned().unwrap_or(Value::Null));
    if let Some(description) = f.get("description") {
        d.insert("description".into(), description.clone());
    }
    if let Some(parameters) = f.get("parameters") {
        d.insert("parametersJsonSchema".into(), parameters.clone());
    }
    Ok(Value::Object(d))
}

/// `tool_choice` as `functionCallingConfig`.
fn tool_config(choice: Option<&Value>) -> Option<Value> {
    Some(match choice? {
        Value::String(s) if s == "auto" => json!({"mode": "AUTO"}),
        Value::String(s) if s == "none" => json!({"mode": "NONE"}),
        Value::String(s) if s == "required" => json!({"mode": "ANY"}),
        Value::Object(o) => {
            let name = o.get("function").and_then(|f| f.get("name"))?;
            json!({"mode": "ANY", "allowedFunctionNames": [name]})
        }
        _ => return None,
    })
}

/// The sampling fields as `generationConfig`.
fn generation_config(req: &ChatRequest) -> Map<String, Value> {
    let mut config = Map::new();
    if let Some(cap) = req.max_tokens() {
        config.insert("maxOutputTokens".into(), json!(cap));
    }
    for (from, to) in [
        ("temperature", "temperature"),
        ("top_p", "topP"),
        ("n", "candidateCount"),
        ("seed", "seed"),
        ("presence_penalty", "presencePenalty"),
        ("frequency_penalty", "frequencyPenalty"),
    ] {
        if let Some(v) = req.field(from).filter(|v| !v.is_null()) {
            config.insert(to.into(), v.clone());
        }
    }
    match req.field("stop") {
        Some(Value::String(s)) => {
            config.insert("stopSequences".into(), json!([s]));
        }
        Some(Value::Array(stops)) if !stops.is_empty() => {
            config.insert("stopSequences".into(), Value::Array(stops.clone()));
        }
        _ => {}
    }
    if let Some(format) = req.field("response_format") {
        match format.get("type").and_then(Value::as_str) {
            Some("json_object") => {
                config.insert("responseMimeType".into(), json!("application/json"));
            }
            Some("json_schema") => {
                config.insert("responseMimeType".into(), json!("application/json"));
                if let Some(schema) = format.get("json_schema").and_then(|s| s.get("schema")) {
                    config.insert("responseJsonSchema".into(), schema.clone());
                }
            }
            _ => {}
        }
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_requests_become_gemini_requests() {
        let req = ChatRequest::parse(
            json!({"model": "g", "max_tokens": 100, "stop": "END", "temperature": 0.5,
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": [{"type": "text", "text": "read a"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
                    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"p\":\"a\"}"}}]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "pelican"},
                    {"role": "user", "content": "and?"}
                ],
                "tools": [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}],
                "tool_choice": "required"})
            .to_string()
            .as_bytes(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let out = Value::Object(to_gemini(&req).unwrap_or_default());
        assert_eq!(out["systemInstruction"], json!({"parts": [{"text": "Be brief."}]}));
        assert_eq!(out["contents"][0]["parts"][1], json!({"inlineData": {"mimeType": "image/png", "data": "AAAA"}}));
        assert_eq!(
            out["contents"][1],
            json!({"role": "model", "parts": [{"functionCall": {"name": "read", "args": {"p": "a"}}}]})
        );
        assert_eq!(
            out["contents"][2]["parts"],
            json!([{"functionResponse": {"name": "read", "response": {"output": "pelican"}}}, {"text": "and?"}]),
            "the tool's answer and the next user text are one turn"
        );
        assert_eq!(out["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"], json!({"type": "object"}));
        assert_eq!(out["toolConfig"]["functionCallingConfig"]["mode"], "ANY");
        assert_eq!(
            out["generationConfig"],
            json!({"maxOutputTokens": 100, "temperature": 0.5, "stopSequences": ["END"]})
        );
    }
}
