//! Pass-through of a client API to a deployment that speaks it (Messages → `anthropic/`, Responses →
//! `openai/`): the client's body with only `model` rewritten and the output cap lowered ([`prepare`]), and the
//! upstream's answer metered where it states its usage ([`reply_usage`], [`PassStream`]) and forwarded with
//! the name the client asked for in `model`.
//!
//! Usage: Messages `message_start` (input, cache-creation and cache-read tokens) and `message_delta`
//! (output tokens, cumulative); Responses `response.completed` (`usage.input_tokens`, `output_tokens`).
//! Prompt tokens charged = input + cache creation + cache read.

use super::Api;
use crate::error::ApiError;
use crate::pipeline::routing::Route;
use crate::pipeline::stored::ResponseHomes;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use svc_budget::Usage;
use svc_providers::usage::Reported;

/// The field holding the output cap in each API.
fn cap_field(api: Api) -> &'static str {
    match api {
        Api::Responses => "max_output_tokens",
        Api::Chat | Api::Messages | Api::Embeddings => "max_tokens",
    }
}

/// The body to send upstream: the client's, with `model` set to `upstream_model` and the output cap lowered
/// to `cap` when the client asked for more (or set to it when the client asked for none).
pub fn prepare(api: Api, raw: &[u8], upstream_model: &str, cap: Option<u64>) -> Result<Bytes, ApiError> {
    let mut body: Map<String, Value> = serde_json::from_slice(raw)
        .map_err(|e| ApiError::bad_request(format!("request body is not a JSON object: {e}"), None))?;
    body.insert("model".into(), Value::String(upstream_model.to_string()));
    if let Some(cap) = cap.filter(|_| api != Api::Embeddings) {
        let field = cap_field(api);
        if body.get(field).and_then(Value::as_u64).is_none_or(|asked| asked > cap) {
            body.insert(field.into(), Value::from(cap));
        }
    }
    serde_json::to_vec(&body).map(Bytes::from).map_err(|_| ApiError::internal("cannot encode the request"))
}

/// A whole number of `obj[key]`, when it is one.
fn count(obj: Option<&Value>, key: &str) -> Result<u64, String> {
    match obj.and_then(|o| o.get(key)) {
        None | Some(Value::Null) => Ok(0),
        Some(v) => v.as_u64().ok_or_else(|| format!("`usage.{key}` is not a whole number from 0")),
    }
}

/// Prompt tokens of a Messages `usage`: input + cache creation + cache read.
fn messages_prompt(u: Option<&Value>) -> Result<u64, String> {
    let mut total = 0u64;
    for k in ["input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"] {
        total = total.saturating_add(count(u, k)?);
    }
    Ok(total)
}

/// A Messages `usage` (input, cache-creation and cache-read tokens) with `completion_tokens`.
fn messages_usage(u: Option<&Value>, completion_tokens: u64) -> Result<Usage, String> {
    Ok(Usage {
        prompt_tokens: messages_prompt(u)?,
        completion_tokens,
        cache_creation_tokens: count(u, "cache_creation_input_tokens")?,
        cache_read_tokens: count(u, "cache_read_input_tokens")?,
    })
}

/// What a passed-through reply says it used.
pub fn reply_usage(api: Api, body: &Map<String, Value>) -> Reported {
    let Some(u) = body.get("usage").filter(|u| !u.is_null()) else { return Reported::Missing };
    let read = || -> Result<Usage, String> {
        Ok(match api {
            Api::Messages => messages_usage(Some(u), count(Some(u), "output_tokens")?)?,
            Api::Embeddings | Api::Chat => {
                Usage { prompt_tokens: count(Some(u), "prompt_tokens")?, completion_tokens: 0, ..Usage::default() }
            }
            Api::Responses => Usage {
                prompt_tokens: count(Some(u), "input_tokens")?,
                completion_tokens: count(Some(u), "output_tokens")?,
                cache_creation_tokens: 0,
                cache_read_tokens: count(u.get("input_tokens_details"), "cached_tokens")?,
            },
        })
    };
    match read() {
        Ok(usage) => Reported::Counts(usage),
        Err(why) => Reported::Malformed(why),
    }
}

/// State of a passed-through stream: forwards each event as it came (with the client's name in `model`),
/// watching for usage and counting the generated text.
#[derive(Debug)]
pub struct PassStream {
    api: Api,
    alias: Value,
    /// The input side of the usage from `message_start`.
    prompt: Option<Result<Usage, String>>,
    reported: Option<Reported>,
    /// The index of a Messages content block started and not stopped.
    open_block: Option<u64>,
    /// Where a Responses stream's id is remembered, with the deployment that answered it.
    homes: Option<(Arc<ResponseHomes>, Arc<Route>)>,
}

impl PassStream {
    /// A stream answering under `alias`.
    pub fn new(api: Api, alias: &str) -> PassStream {
        PassStream {
            api,
            alias: Value::String(alias.to_string()),
            prompt: None,
            reported: None,
            open_block: None,
            homes: None,
        }
    }

    /// Remembers the stream's response id (from `response.created`) as answered by `route`.
    pub fn remember_in(&mut self, homes: Arc<ResponseHomes>, route: Arc<Route>) {
        self.homes = Some((homes, route));
    }

    /// What the upstream reported so far.
    pub fn reported(&self) -> Option<Reported> {
        self.reported.clone()
    }

    /// One event: the bytes for the client and the generated tokens it carries (plain estimate).
    pub fn event(&mut self, mut ev: Map<String, Value>) -> (Option<Bytes>, u64) {
        let kind = ev.get("type").and_then(Value::as_str).unwrap_or_default().to_string();
        let mut generated = 0u64;
        let mut count_text = |v: Option<&Value>| {
            if let Some(t) = v.and_then(Value::as_str) {
                generated = generated.saturating_add(svc_providers::estimate::text_tokens(t));
            }
        };
        match kind.as_str() {
            "message_start" => {
                if let Some(Value::Object(m)) = ev.get_mut("message") {
                    m.insert("model".into(), self.alias.clone());
                    self.prompt = Some(messages_usage(m.get("usage"), 0));
                }
            }
            "message_delta" => {
                let u = ev.get("usage");
                // Newer streams repeat the input counts here; older ones gave them in `message_start` only.
                let input = match (u.and_then(|u| u.get("input_tokens")).is_some(), &self.prompt) {
                    (true, _) => messages_usage(u, 0),
                    (false, Some(p)) => p.clone(),
                    (false, None) => Ok(Usage::default()),
                };
                self.reported = Some(match (input, count(u, "output_tokens")) {
                    (Ok(input), Ok(completion_tokens)) => Reported::Counts(Usage { completion_tokens, ..input }),
                    (Err(e), _) | (_, Err(e)) => Reported::Malformed(e),
                });
            }
            "content_block_start" => self.open_block = ev.get("index").and_then(Value::as_u64),
            "content_block_stop" => self.open_block = None,
            "content_block_delta" => {
                let d = ev.get("delta");
                for k in ["text", "partial_json", "thinking"] {
                    count_text(d.and_then(|d| d.get(k)));
                }
            }
            "response.output_text.delta" | "response.function_call_arguments.delta" => count_text(ev.get("delta")),
            _ => {}
        }
        if kind.starts_with("response.") {
            if let Some(Value::Object(r)) = ev.get_mut("response") {
                r.insert("model".into(), self.alias.clone());
                if let (Some((homes, route)), Some(id)) = (&self.homes, r.get("id").and_then(Value::as_str)) {
                    if kind == "response.created" {
                        homes.record(id, route);
                    }
                }
                if kind == "response.completed" || kind == "response.incomplete" {
                    let body = r.clone();
                    self.reported = Some(reply_usage(self.api, &body));
                }
            }
        }
        (Some(sse_event(&kind, &Value::Object(ev))), generated)
    }

    /// The end of a stream cut at its completion cap (the upstream's own end was not forwarded).
    pub fn cut(&mut self, charged: Usage) -> Bytes {
        let mut out = Vec::new();
        match self.api {
            Api::Messages => {
                if let Some(index) = self.open_block.take() {
                    out.extend_from_slice(&sse_event(
                        "content_block_stop",
                        &json!({"type": "content_block_stop", "index": index}),
                    ));
                }
                let delta = json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": null},
                    "usage": {"input_tokens": charged.prompt_tokens, "output_tokens": charged.completion_tokens}});
                out.extend_from_slice(&sse_event("message_delta", &delta));
                out.extend_from_slice(&sse_event("message_stop", &json!({"type": "message_stop"})));
            }
            Api::Chat | Api::Responses | Api::Embeddings => {
                let usage = super::responses::usage(charged.prompt_tokens, charged.completion_tokens);
                let r = super::responses::response(
                    &super::responses::new_id("resp"),
                    &self.alias,
                    chrono::Utc::now().timestamp(),
                    "incomplete",
                    Vec::new(),
                    usage,
                );
                out.extend_from_slice(&sse_event(
                    "response.incomplete",
                    &json!({"type": "response.incomplete", "response": r}),
                ));
            }
        }
        Bytes::from(out)
    }

    /// The error event ending a stream that failed mid-way.
    pub fn error(&mut self, err: &ApiError) -> Bytes {
        match self.api {
            Api::Messages => sse_event("error", &super::messages::error_body(err.status().as_u16(), err.message())),
            Api::Chat | Api::Responses | Api::Embeddings => {
                let mut r = super::responses::response(
                    &super::responses::new_id("resp"),
                    &self.alias,
                    chrono::Utc::now().timestamp(),
                    "failed",
                    Vec::new(),
                    Value::Null,
                );
                r["error"] = json!({"code": err.kind(), "message": err.message()});
                sse_event("response.failed", &json!({"type": "response.failed", "response": r}))
            }
        }
    }
}

/// One SSE event: `event: <kind>` and its JSON data.
pub fn sse_event(kind: &str, data: &Value) -> Bytes {
    let mut out = Vec::with_capacity(128);
    if !kind.is_empty() {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(kind.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    if serde_json::to_writer(&mut out, data).is_err() {
        out.extend_from_slice(b"{}");
    }
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn only_model_and_a_larger_cap_change() {
        let raw =
            br#"{"model":"claude-opus-5-5","max_tokens":128000,"thinking":{"type":"adaptive"},"x_unknown":[1,2]}"#;
        let out = prepare(Api::Messages, raw, "claude-opus-5-5-20261101", Some(32000)).unwrap_or_default();
        assert_eq!(
            serde_json::from_slice::<Value>(&out).unwrap_or_default(),
            json!({"model":"claude-opus-5-5-20261101","max_tokens":32000,"thinking":{"type":"adaptive"},"x_unknown":[1,2]})
        );
        let out = prepare(Api::Responses, br#"{"model":"m","input":"hi"}"#, "gpt-5", None).unwrap_or_default();
        assert_eq!(serde_json::from_slice::<Value>(&out).unwrap_or_default(), json!({"model":"gpt-5","input":"hi"}));
    }

    #[test]
    fn messages_streams_are_metered_with_cache_tokens() {
        let mut s = PassStream::new(Api::Messages, "claude-x");
        let (start, _) = s.event(obj(json!({"type": "message_start", "message": {"model": "up", "usage": {
            "input_tokens": 10, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 1000, "output_tokens": 1}}})));
        assert!(String::from_utf8_lossy(&start.unwrap_or_default()).contains(r#""model":"claude-x""#));
        let (_, generated) = s.event(obj(
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "abcdefgh"}}),
        ));
        assert_eq!(generated, 2);
        s.event(obj(
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 42}}),
        ));
        let want =
            Usage { prompt_tokens: 1110, completion_tokens: 42, cache_creation_tokens: 100, cache_read_tokens: 1000 };
        assert_eq!(s.reported(), Some(Reported::Counts(want)));
        let body = obj(json!({"usage": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}}));
        assert_eq!(
            reply_usage(Api::Responses, &body),
            Reported::Counts(Usage { prompt_tokens: 3, completion_tokens: 4, ..Usage::default() })
        );
        assert!(matches!(
            reply_usage(Api::Messages, &obj(json!({"usage": {"input_tokens": -1}}))),
            Reported::Malformed(_)
        ));
    }
}
