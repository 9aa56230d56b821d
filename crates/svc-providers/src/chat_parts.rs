//! Reading a chat-completions request's parts the same way for every translation (Anthropic Messages, Bedrock's
//! Converse): text parts, image URLs and base64 data URLs, assistant tool calls with their arguments as an object,
//! `stop`, and function tools. Each translation writes what it reads in its own shape; the 400s for what cannot be
//! read are made here, naming the field.

use crate::ProviderError;
use serde_json::{json, Value};

/// A [`ProviderError::Unsupported`] naming `param`.
pub(crate) fn unsupported(message: impl Into<String>, param: impl Into<String>) -> ProviderError {
    ProviderError::Unsupported { message: message.into(), param: Some(param.into()) }
}

/// The text of a `{"type":"text","text":…}` part.
pub(crate) fn part_text(part: &Value) -> Option<&str> {
    (part.get("type").and_then(Value::as_str) == Some("text"))
        .then(|| part.get("text").and_then(Value::as_str))
        .flatten()
}

/// The URL of an `image_url` part (`{"image_url": {"url"}}`, or the older `{"image_url": "…"}`).
pub(crate) fn image_url(part: &Value) -> Option<&str> {
    let image = part.get("image_url");
    image.and_then(|i| i.get("url")).or(image).and_then(Value::as_str)
}

/// The media type and the data of a `data:<media type>;base64,<data>` URL; `None` for any other URL.
pub(crate) fn base64_data_url(url: &str) -> Option<(&str, &str)> {
    let (meta, data) = url.strip_prefix("data:")?.split_once(',')?;
    let media_type = meta.strip_suffix(";base64").filter(|m| !m.is_empty())?;
    Some((media_type, data))
}

/// An assistant's tool call, read.
pub(crate) struct ToolCall<'a> {
    pub id: &'a str,
    pub name: &'a str,
    /// `arguments` as the object they encode (empty arguments: the empty object).
    pub input: Value,
}

/// A `tool_calls` entry (`param` names it): its id, function name and arguments, which must be a JSON object.
pub(crate) fn tool_call<'a>(call: &'a Value, param: &str) -> Result<ToolCall<'a>, ProviderError> {
    let id = call.get("id").and_then(Value::as_str);
    let function = call.get("function");
    let name = function.and_then(|f| f.get("name")).and_then(Value::as_str);
    let (Some(id), Some(name)) = (id, name) else {
        return Err(unsupported(format!("`{param}` needs an `id` and a `function.name`"), param));
    };
    let input = match function.and_then(|f| f.get("arguments")) {
        None | Some(Value::Null) => Some(json!({})),
        Some(Value::String(s)) if s.trim().is_empty() => Some(json!({})),
        Some(Value::String(s)) => serde_json::from_str::<Value>(s).ok().filter(Value::is_object),
        Some(other) => Some(other.clone()).filter(Value::is_object),
    };
    let Some(input) = input else {
        let param = format!("{param}.function.arguments");
        return Err(unsupported(format!("`{param}` must be a JSON object encoded as a string"), param));
    };
    Ok(ToolCall { id, name, input })
}

/// `stop` (a string or an array of strings), without empty strings.
pub(crate) fn stop_sequences(value: &Value) -> Result<Vec<&str>, ProviderError> {
    let invalid = || unsupported("`stop` must be a string or an array of strings", "stop");
    let stops: Vec<&str> = match value {
        Value::String(s) => vec![s.as_str()],
        Value::Array(items) => items.iter().map(Value::as_str).collect::<Option<_>>().ok_or_else(invalid)?,
        _ => return Err(invalid()),
    };
    Ok(stops.into_iter().filter(|s| !s.is_empty()).collect())
}

/// A function tool, read.
pub(crate) struct FunctionTool<'a> {
    pub name: &'a str,
    pub description: Option<&'a str>,
    /// `parameters`, or the schema of no arguments when it is absent (the upstreams require one).
    pub schema: Value,
}

/// `tools`: function tools only (others are a 400 naming `provider`'s deployments); `strict` is not read.
pub(crate) fn function_tools<'a>(value: &'a Value, provider: &str) -> Result<Vec<FunctionTool<'a>>, ProviderError> {
    let Some(tools) = value.as_array() else {
        return Err(unsupported("`tools` must be an array", "tools"));
    };
    let mut out = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        let param = format!("tools[{i}]");
        if tool.get("type").and_then(Value::as_str) != Some("function") {
            let msg = format!("`{param}`: only `function` tools are supported by {provider} deployments");
            return Err(unsupported(msg, param));
        }
        let function = tool.get("function");
        let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str) else {
            let param = format!("{param}.function.name");
            return Err(unsupported(format!("`{param}` is required"), param));
        };
        let description = function.and_then(|f| f.get("description")).and_then(Value::as_str);
        let schema = function
            .and_then(|f| f.get("parameters"))
            .filter(|p| p.is_object())
            .cloned()
            .unwrap_or_else(|| json!({ "type": "object", "properties": {} }));
        out.push(FunctionTool { name, description, schema });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_arguments_must_be_an_object() {
        let cases: &[(Value, Option<Value>)] = &[
            (json!(""), Some(json!({}))),
            (json!("  "), Some(json!({}))),
            (Value::Null, Some(json!({}))),
            (json!(r#"{"city":"Paris"}"#), Some(json!({"city": "Paris"}))),
            (json!({"city": "Paris"}), Some(json!({"city": "Paris"}))),
            (json!(r#"{"city":"Par"#), None),
            (json!("[1,2]"), None),
            (json!("42"), None),
        ];
        for (args, want) in cases {
            let call = json!({"id": "c", "function": {"name": "f", "arguments": args}});
            let got = tool_call(&call, "messages[1].tool_calls[0]").map(|c| c.input);
            match (got, want) {
                (Ok(input), Some(want)) => assert_eq!(&input, want, "{args:?}"),
                (Err(ProviderError::Unsupported { param, .. }), None) => {
                    assert_eq!(param.as_deref(), Some("messages[1].tool_calls[0].function.arguments"), "{args:?}")
                }
                (got, _) => panic!("{args:?}: {got:?}"),
            }
        }
        assert!(tool_call(&json!({"function": {"name": "f"}}), "c").is_err());
    }

    #[test]
    fn stops_tools_and_data_urls() {
        assert_eq!(stop_sequences(&json!("END")).ok(), Some(vec!["END"]));
        assert_eq!(stop_sequences(&json!(["a", "", "b"])).ok(), Some(vec!["a", "b"]));
        assert_eq!(stop_sequences(&json!([])).ok(), Some(vec![]));
        assert!(stop_sequences(&json!([1])).is_err());
        assert!(stop_sequences(&json!(3)).is_err());
        assert_eq!(base64_data_url("data:image/png;base64,AAA"), Some(("image/png", "AAA")));
        assert_eq!(base64_data_url("data:;base64,AAA"), None);
        assert_eq!(base64_data_url("https://x/a.png"), None);
        let tools = json!([{"type": "function", "function": {"name": "f"}}]);
        let read = function_tools(&tools, "x").unwrap_or_default();
        assert_eq!((read[0].name, &read[0].schema), ("f", &json!({"type": "object", "properties": {}})));
        let err = function_tools(&json!([{"type": "web_search"}]), "bedrock").err().map(|e| e.to_string());
        assert_eq!(err.as_deref(), Some("`tools[0]`: only `function` tools are supported by bedrock deployments"));
    }
}
