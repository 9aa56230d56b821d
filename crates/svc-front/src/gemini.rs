//! The Gemini API front end (`POST /v1beta/models/{model}:generateContent`, `:streamGenerateContent`, and the
//! same under `/v1/models/`), as Gemini CLI and Google's SDKs call it: a `GenerateContentRequest` becomes the
//! pipeline's chat-completions request, and a chat completion becomes a `GenerateContentResponse`. The model
//! and the method are in the path; the gateway's handler adds them to the body as `model` and `stream` (the
//! last of each key is the one read, so a client's own `model` field cannot override the path).
//!
//! | Gemini | chat completions | |
//! |---|---|---|
//! | `systemInstruction` | a `system` message | |
//! | `contents[]` with role `user` / `model` | `user` / `assistant` messages | parts with `thought: true` dropped |
//! | `text`, `inlineData` (images), `fileData` parts | text and `image_url` parts (a `data:` URL for inline data) | |
//! | `functionCall` parts | assistant `tool_calls` (`args` as JSON text; the call's `id`, or one made from its place) | |
//! | `functionResponse` parts | `tool` messages, answering the call of the same `id`, else the earliest open call of that name | |
//! | `tools[].functionDeclarations` (`parameters` or `parametersJsonSchema`) | `function` tools (OpenAPI types lower-cased) | other tools dropped |
//! | `toolConfig.functionCallingConfig` `AUTO` / `ANY` / `NONE`, one `allowedFunctionNames` | `auto` / `required` / `none`, a named function | |
//! | `generationConfig`: `maxOutputTokens`, `temperature`, `topP`, `candidateCount`, `stopSequences`, `seed`, `presencePenalty`, `frequencyPenalty`, `responseMimeType`, `responseJsonSchema` / `responseSchema` | `max_tokens`, `temperature`, `top_p`, `n`, `stop`, `seed`, penalties, `response_format` | |
//! | `thinkingConfig`, `topK`, `safetySettings`, `labels`, … | | dropped with a debug log |
//!
//! Replies: reasoning → a part with `thought: true`, text → a `text` part, `tool_calls` → `functionCall`
//! parts; `finish_reason` stop and tool_calls → `STOP`, length → `MAX_TOKENS`, content_filter → `SAFETY`;
//! usage → `usageMetadata` (`candidatesTokenCount` without the thinking tokens, which are `thoughtsTokenCount`).

use crate::{bad, Fault, Unseen};
use serde_json::{json, Map, Value};
use svc_providers::RequestError;

/// What a Gemini path asks of its model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `:generateContent`.
    Generate,
    /// `:streamGenerateContent` (server-sent events with `?alt=sse`).
    StreamGenerate,
    /// `:countTokens`.
    CountTokens,
    /// `:embedContent`.
    Embed,
    /// `:batchEmbedContents`.
    BatchEmbed,
}

impl Method {
    /// The method named after the colon of a path's last segment.
    pub fn parse(name: &str) -> Option<Method> {
        Some(match name {
            "generateContent" => Method::Generate,
            "streamGenerateContent" => Method::StreamGenerate,
            "countTokens" => Method::CountTokens,
            "embedContent" => Method::Embed,
            "batchEmbedContents" => Method::BatchEmbed,
            _ => return None,
        })
    }
}

/// Whether `path` is one of the Gemini API's (`/v1beta/models…`, or `/v1/models/{model}:{method}`).
pub fn is_gemini_path(path: &str) -> bool {
    path.starts_with("/v1beta/models") || path.strip_prefix("/v1/models/").is_some_and(|rest| rest.contains(':'))
}

/// The model and method of a path's tail (`gemini-2.5-pro:streamGenerateContent`; a `models/` prefix, as the
/// SDKs sometimes repeat it, is dropped).
pub fn model_and_method(tail: &str) -> Option<(&str, Method)> {
    let tail = tail.strip_prefix("models/").unwrap_or(tail);
    let (model, method) = tail.rsplit_once(':')?;
    (!model.is_empty()).then_some(())?;
    Some((model, Method::parse(method)?))
}

/// The client's body with the path's `model` and whether it streams appended as fields (`{…,"model":…,
/// "stream":true}`); 400 when the body is not a JSON object's text.
pub fn with_path_fields(body: &[u8], model: &str, stream: bool) -> Result<Vec<u8>, RequestError> {
    let trimmed = body.trim_ascii();
    if !trimmed.starts_with(b"{") || !trimmed.ends_with(b"}") {
        return Err(bad("request body must be a JSON object", None));
    }
    let model = serde_json::to_vec(model).unwrap_or_else(|_| b"null".to_vec());
    let mut out = trimmed.to_vec();
    svc_providers::raw::append(&mut out, "model", &model);
    svc_providers::raw::append(&mut out, "stream", if stream { b"true" } else { b"false" });
    Ok(out)
}

/// The session of a Gemini conversation that names none (Gemini CLI sends no session id): `gemini-` and 16 hex
/// digits of the SHA-256 of its first turn, which every request of a conversation repeats as it was (Gemini
/// CLI's opens with the session's context: date, folder, workspace). Two conversations that open with the same
/// words in the same folder on the same day share it; a client that sends `x-session-id` is named by that.
pub fn session_of(body: &[u8]) -> Option<String> {
    use sha2::Digest;
    #[derive(serde::Deserialize)]
    struct First<'a> {
        #[serde(borrow)]
        contents: Vec<&'a serde_json::value::RawValue>,
    }
    let first = serde_json::from_slice::<First<'_>>(body).ok()?.contents.first().copied()?;
    let digest = sha2::Sha256::digest(first.get().as_bytes());
    Some(format!("gemini-{}", hex::encode(&digest[..8])))
}

/// The chat-completions body of a Gemini request (`model` and `stream` added by [`with_path_fields`]).
pub fn to_chat(body: &[u8]) -> Result<(Map<String, Value>, Unseen), RequestError> {
    let (req, model) = super::object_with_model(body)?;
    let mut out = Map::new();
    out.insert("model".into(), Value::String(model));
    let mut messages = Vec::new();
    if let Some(system) = req.get("systemInstruction").filter(|s| !s.is_null()) {
        let text = match system {
            Value::String(s) => s.clone(),
            other => texts(other.get("parts")).join("\n\n"),
        };
        if !text.is_empty() {
            messages.push(json!({"role": "system", "content": text}));
        }
    }
    let Some(Value::Array(contents)) = req.get("contents") else {
        return Err(bad("`contents` must be an array of turns", Some("contents".into())));
    };
    let mut calls = Calls::default();
    for (i, turn) in contents.iter().enumerate() {
        let Some(Value::Array(parts)) = turn.get("parts") else {
            return Err(bad(format!("`contents[{i}].parts` must be an array"), Some(format!("contents[{i}].parts"))));
        };
        match turn.get("role").and_then(Value::as_str).unwrap_or("user") {
            "model" => messages.push(calls.model_turn(i, parts)),
            "user" | "function" | "tool" => calls.user_turn(parts, &mut messages),
            other => {
                return Err(bad(
                    format!("`contents[{i}].role` must be `user` or `model`, not `{other}`"),
                    Some(format!("contents[{i}].role")),
                ))
            }
        }
    }
    if messages.iter().all(|m| m["role"] == "system") {
        return Err(bad("`contents` must hold at least one turn", Some("contents".into())));
    }
    out.insert("messages".into(), Value::Array(messages));
    if let Some(stream) = req.get("stream").filter(|s| s.as_bool() == Some(true)) {
        out.insert("stream".into(), stream.clone());
    }
    if let Some(Value::Array(tools)) = req.get("tools") {
        let functions: Vec<Value> = tools.iter().flat_map(function_tools).collect();
        if !functions.is_empty() {
            out.insert("tools".into(), Value::Array(functions));
        }
    }
    if let Some(config) = req.get("toolConfig").and_then(|c| c.get("functionCallingConfig")) {
        tool_choice(config, &mut out);
    }
    if let Some(Value::Object(config)) = req.get("generationConfig") {
        generation_config(config, &mut out);
    }
    for dropped in ["safetySettings", "labels", "cachedContent"] {
        if req.contains_key(dropped) {
            tracing::debug!(field = dropped, "a Gemini field with no chat-completions counterpart was dropped");
        }
    }
    Ok((out, unseen(&req)))
}

/// What a Gemini request makes the provider bill beyond its body: a `cachedContent` it keeps, files it reads.
fn unseen(req: &Map<String, Value>) -> Unseen {
    let mut u = Unseen::default();
    if req.get("cachedContent").is_some_and(|c| !c.is_null()) {
        u.uncounted = Some("a `cachedContent` the provider keeps");
    } else if parts_of(req.get("contents")).any(|p| p.get("fileData").is_some()) {
        u.uncounted = Some("a file part");
    }
    u
}

/// Every part of every turn of `contents`.
fn parts_of(contents: Option<&Value>) -> impl Iterator<Item = &Value> {
    let turns = contents.and_then(Value::as_array).into_iter().flatten();
    turns.filter_map(|t| t.get("parts").and_then(Value::as_array)).flatten()
}

/// The texts of a list of parts, thoughts left out.
fn texts(parts: Option<&Value>) -> Vec<String> {
    let parts = parts.and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    parts
        .iter()
        .filter(|p| p.get("thought").and_then(Value::as_bool) != Some(true))
        .filter_map(|p| p.get("text").and_then(Value::as_str).map(str::to_string))
        .collect()
}

/// The function calls of the conversation so far that no response has answered yet, so a `functionResponse`
/// without an `id` answers the earliest of its name.
#[derive(Default)]
struct Calls {
    open: Vec<(String, String)>,
}

impl Calls {
    /// A `model` turn: its text and function calls as an assistant message.
    fn model_turn(&mut self, turn: usize, parts: &[Value]) -> Value {
        let mut text = String::new();
        let mut tool_calls = Vec::new();
        for (j, p) in parts.iter().enumerate() {
            if p.get("thought").and_then(Value::as_bool) == Some(true) {
                continue;
            }
            if let Some(t) = p.get("text").and_then(Value::as_str) {
                text.push_str(t);
            } else if let Some(call) = p.get("functionCall") {
                let name = call.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
                let id = match call.get("id").and_then(Value::as_str) {
                    Some(id) if !id.is_empty() => id.to_string(),
                    _ => format!("call_{turn}_{j}"),
                };
                let args = call.get("args").filter(|a| !a.is_null()).map_or_else(|| "{}".into(), Value::to_string);
                tool_calls.push(json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}));
                self.open.push((id, name));
            }
        }
        let content = if text.is_empty() && !tool_calls.is_empty() { Value::Null } else { Value::String(text) };
        let mut m = json!({"role": "assistant", "content": content});
        if !tool_calls.is_empty() {
            m["tool_calls"] = Value::Array(tool_calls);
        }
        m
    }

    /// A `user` turn: its function responses as `tool` messages first, the rest one user message.
    fn user_turn(&mut self, parts: &[Value], out: &mut Vec<Value>) {
        let mut content = Vec::new();
        for p in parts {
            if p.get("thought").and_then(Value::as_bool) == Some(true) {
                continue;
            }
            if let Some(r) = p.get("functionResponse") {
                let name = r.get("name").and_then(Value::as_str).unwrap_or_default();
                let id = r.get("id").and_then(Value::as_str).filter(|id| !id.is_empty());
                let at = match id {
                    Some(id) => self.open.iter().position(|(open, _)| open == id),
                    None => self.open.iter().position(|(_, n)| n == name),
                };
                let id = match (at, id) {
                    (Some(at), _) => self.open.remove(at).0,
                    (None, Some(id)) => id.to_string(),
                    (None, None) => format!("call_{name}"),
                };
                out.push(json!({"role": "tool", "tool_call_id": id, "content": response_text(r.get("response"))}));
            } else if let Some(t) = p.get("text").and_then(Value::as_str) {
                content.push(json!({"type": "text", "text": t}));
            } else if let Some(image) = image_part(p) {
                content.push(image);
            } else {
                tracing::debug!("a Gemini part with no chat-completions counterpart was dropped");
            }
        }
        if !content.is_empty() {
            out.push(json!({"role": "user", "content": content}));
        }
    }
}

/// A function response's text: its `output` (or `content`) when that is a string, else the response as JSON.
fn response_text(response: Option<&Value>) -> String {
    let Some(r) = response else { return String::new() };
    match ["output", "content", "result"].iter().find_map(|k| r.get(*k).and_then(Value::as_str)) {
        Some(text) if r.as_object().is_some_and(|o| o.len() == 1) => text.to_string(),
        _ => r.to_string(),
    }
}

/// An `inlineData` or `fileData` part as an `image_url` part (a `data:` URL for inline data).
fn image_part(p: &Value) -> Option<Value> {
    let url = if let Some(d) = p.get("inlineData") {
        let mime = d.get("mimeType").and_then(Value::as_str).unwrap_or("application/octet-stream");
        format!("data:{mime};base64,{}", d.get("data").and_then(Value::as_str).unwrap_or_default())
    } else {
        p.get("fileData")?.get("fileUri")?.as_str()?.to_string()
    };
    Some(json!({"type": "image_url", "image_url": {"url": url}}))
}

/// A `tools` entry's function declarations as `function` tools; other tools (Google Search, code execution)
/// only Google runs.
fn function_tools(tool: &Value) -> Vec<Value> {
    let Some(Value::Array(declarations)) = tool.get("functionDeclarations") else {
        tracing::debug!("a Gemini tool that only Google can run was dropped");
        return Vec::new();
    };
    declarations
        .iter()
        .filter_map(|d| {
            let mut f = Map::new();
            f.insert("name".into(), d.get("name")?.clone());
            if let Some(description) = d.get("description") {
                f.insert("description".into(), description.clone());
            }
            let parameters = match (d.get("parametersJsonSchema"), d.get("parameters")) {
                (Some(schema), _) => schema.clone(),
                (None, Some(openapi)) => lower_types(openapi),
                (None, None) => json!({"type": "object", "properties": {}}),
            };
            f.insert("parameters".into(), parameters);
            Some(json!({"type": "function", "function": f}))
        })
        .collect()
}

/// An OpenAPI schema of Gemini's (`"type": "OBJECT"`) as JSON Schema (`"type": "object"`), everywhere in it.
fn lower_types(schema: &Value) -> Value {
    match schema {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| match (k.as_str(), v) {
                    ("type", Value::String(t)) => (k.clone(), Value::String(t.to_ascii_lowercase())),
                    _ => (k.clone(), lower_types(v)),
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(lower_types).collect()),
        other => other.clone(),
    }
}

/// `toolConfig.functionCallingConfig` as `tool_choice`.
fn tool_choice(config: &Value, out: &mut Map<String, Value>) {
    let allowed = config.get("allowedFunctionNames").and_then(Value::as_array);
    let choice = match config.get("mode").and_then(Value::as_str) {
        Some("AUTO") => json!("auto"),
        Some("NONE") => json!("none"),
        Some("ANY" | "VALIDATED") => match allowed.map(Vec::as_slice) {
            Some([name]) => json!({"type": "function", "function": {"name": name}}),
            _ => json!("required"),
        },
        _ => return,
    };
    out.insert("tool_choice".into(), choice);
}

/// `generationConfig` as chat-completions fields.
fn generation_config(config: &Map<String, Value>, out: &mut Map<String, Value>) {
    for (from, to) in [
        ("maxOutputTokens", "max_tokens"),
        ("temperature", "temperature"),
        ("topP", "top_p"),
        ("candidateCount", "n"),
        ("seed", "seed"),
        ("presencePenalty", "presence_penalty"),
        ("frequencyPenalty", "frequency_penalty"),
    ] {
        if let Some(v) = config.get(from).filter(|v| !v.is_null()) {
            out.insert(to.into(), v.clone());
        }
    }
    if let Some(Value::Array(stops)) =
        config.get("stopSequences").filter(|s| s.as_array().is_some_and(|a| !a.is_empty()))
    {
        out.insert("stop".into(), Value::Array(stops.clone()));
    }
    let schema = config.get("responseJsonSchema").or_else(|| config.get("responseSchema")).filter(|s| !s.is_null());
    match (config.get("responseMimeType").and_then(Value::as_str), schema) {
        (_, Some(schema)) => {
            let schema = if config.contains_key("responseJsonSchema") { schema.clone() } else { lower_types(schema) };
            out.insert(
                "response_format".into(),
                json!({"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}),
            );
        }
        (Some("application/json"), None) => {
            out.insert("response_format".into(), json!({"type": "json_object"}));
        }
        _ => {}
    }
    for dropped in ["thinkingConfig", "topK", "responseModalities", "mediaResolution", "speechConfig"] {
        if config.contains_key(dropped) {
            tracing::debug!(
                field = dropped,
                "a generationConfig field with no chat-completions counterpart was dropped"
            );
        }
    }
}

/// Gemini's `finishReason` for a chat `finish_reason`.
pub fn finish_reason(finish: Option<&str>) -> &'static str {
    match finish {
        Some("length") => "MAX_TOKENS",
        Some("content_filter") => "SAFETY",
        _ => "STOP",
    }
}

/// `usageMetadata` of the counts charged: `reasoning` of the completion tokens were thinking.
pub fn usage_metadata(prompt: u64, completion: u64, cached: u64, reasoning: u64) -> Value {
    let thoughts = reasoning.min(completion);
    let mut u = json!({
        "promptTokenCount": prompt,
        "candidatesTokenCount": completion - thoughts,
        "totalTokenCount": prompt.saturating_add(completion),
    });
    if cached > 0 {
        u["cachedContentTokenCount"] = json!(cached);
    }
    if thoughts > 0 {
        u["thoughtsTokenCount"] = json!(thoughts);
    }
    u
}

/// A function call of a chat completion (or a stream's, gathered) as a `functionCall` part.
pub fn function_call_part(id: &Value, name: &Value, arguments: &str) -> Value {
    json!({"functionCall": {"id": id, "name": name, "args": crate::messages::tool_input(arguments)}})
}

/// A chat completion (already metered, `model` the alias) as a `GenerateContentResponse`.
pub fn from_completion(body: &Map<String, Value>) -> Map<String, Value> {
    let choice = body.get("choices").and_then(|c| c.get(0));
    let message = choice.and_then(|c| c.get("message"));
    let mut parts = Vec::new();
    let text_of = |key: &str| message.and_then(|m| m.get(key)).and_then(Value::as_str).filter(|t| !t.is_empty());
    if let Some(thought) = text_of("reasoning_content") {
        parts.push(json!({"text": thought, "thought": true}));
    }
    if let Some(text) = text_of("content") {
        parts.push(json!({"text": text}));
    }
    for c in message.and_then(|m| m.get("tool_calls")).and_then(Value::as_array).into_iter().flatten() {
        let f = c.get("function");
        let name = f.and_then(|f| f.get("name")).unwrap_or(&Value::Null);
        let args = f.and_then(|f| f.get("arguments")).and_then(Value::as_str).unwrap_or("{}");
        parts.push(function_call_part(c.get("id").unwrap_or(&Value::Null), name, args));
    }
    if parts.is_empty() {
        parts.push(json!({"text": ""}));
    }
    let usage = body.get("usage");
    let count =
        |path: &[&str]| path.iter().fold(usage, |v, k| v.and_then(|v| v.get(*k))).and_then(Value::as_u64).unwrap_or(0);
    let out = json!({
        "candidates": [{
            "content": {"role": "model", "parts": parts},
            "finishReason": finish_reason(choice.and_then(|c| c.get("finish_reason")).and_then(Value::as_str)),
            "index": 0,
        }],
        "usageMetadata": usage_metadata(
            count(&["prompt_tokens"]),
            count(&["completion_tokens"]),
            count(&["prompt_tokens_details", "cached_tokens"]),
            count(&["completion_tokens_details", "reasoning_tokens"]),
        ),
        "modelVersion": body.get("model").cloned().unwrap_or(Value::Null),
        "responseId": body.get("id").cloned().unwrap_or(Value::Null),
    });
    match out {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// Google's status name of an HTTP status.
fn status_name(status: u16) -> &'static str {
    match status {
        400 | 413 | 422 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        501 => "UNIMPLEMENTED",
        502 | 503 | 529 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        s if s >= 500 => "INTERNAL",
        _ => "FAILED_PRECONDITION",
    }
}

/// An error in Google's shape: `{"error": {"code", "message", "status", "details"}}`. A refusal with a known
/// retry time carries a `RetryInfo`: Gemini CLI stops at once when its delay is over 300 s (a budget until its
/// period resets), and waits it out before retrying when shorter (a rate limit).
pub fn error_body(fault: &Fault<'_>) -> Value {
    let mut details = Vec::new();
    if let Some(secs) = fault.retry_after {
        details.push(json!({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": format!("{secs}s")}));
    }
    json!({"error": {
        "code": fault.status,
        "message": fault.message,
        "status": status_name(fault.status),
        "details": details,
    }})
}

#[cfg(test)]
#[path = "gemini_tests.rs"]
mod tests;
