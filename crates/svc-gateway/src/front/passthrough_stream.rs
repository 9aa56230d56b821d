//! A passed-through stream: each upstream event is forwarded as the upstream wrote it, parsed only where the
//! gateway acts on it. The events that carry the model (`message_start`, the `response.*` lifecycle events)
//! get the client's name in it, spliced into their text; usage is read from `message_start` and
//! `message_delta` (Messages) or `response.completed` / `response.incomplete` (Responses); the text of
//! content deltas is counted for the stream's cap. Every other event, unknown types included, passes as bytes.

use super::passthrough::{count, messages_usage, reply_usage, write_fields, Fields};
use super::responses::{new_id, response, usage};
use super::{sse, Api};
use crate::error::ApiError;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Value};
use std::borrow::Cow;
use svc_budget::Usage;
use svc_providers::passthrough::RawEvent;
use svc_providers::usage::Reported;

/// State of a passed-through stream.
#[derive(Debug)]
pub struct PassStream {
    api: Api,
    alias: Value,
    /// `alias` as JSON text, spliced into events.
    alias_json: Vec<u8>,
    /// The input side of the usage from `message_start`.
    prompt: Option<Result<Usage, String>>,
    reported: Option<Reported>,
    /// The index of a Messages content block started and not stopped.
    open_block: Option<u64>,
    /// A Responses stream's id (from `response.created`), until the caller takes it.
    response_id: Option<String>,
}

/// The parts of a delta event the gateway counts.
#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    delta: Option<DeltaBody<'a>>,
    #[serde(default)]
    index: Option<u64>,
}

/// A delta is a text (Responses) or an object of texts (Messages).
#[derive(Deserialize)]
#[serde(untagged)]
enum DeltaBody<'a> {
    Text(#[serde(borrow)] Cow<'a, str>),
    Parts {
        #[serde(borrow, default)]
        text: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        partial_json: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        thinking: Option<Cow<'a, str>>,
    },
}

impl PassStream {
    /// A stream answering under `alias`.
    pub fn new(api: Api, alias: &str) -> PassStream {
        PassStream {
            api,
            alias: Value::String(alias.to_string()),
            alias_json: serde_json::to_vec(alias).unwrap_or_else(|_| b"null".to_vec()),
            prompt: None,
            reported: None,
            open_block: None,
            response_id: None,
        }
    }

    /// A Responses stream's id, once `response.created` gave it (then `None` again): the response it stores.
    pub fn take_response_id(&mut self) -> Option<String> {
        self.response_id.take()
    }

    /// What the upstream reported so far.
    pub fn reported(&self) -> Option<Reported> {
        self.reported.clone()
    }

    /// One event: the bytes for the client and the generated tokens it carries (plain estimate).
    pub fn event(&mut self, ev: RawEvent) -> (Option<Bytes>, u64) {
        let kind: Cow<'_, str> =
            if ev.event.is_empty() { Cow::Owned(type_of(&ev.data)) } else { Cow::Borrowed(&ev.event) };
        let mut generated = 0u64;
        let rewritten = match kind.as_ref() {
            "message_start" => self.nested(&ev.data, "message", |s, inner| {
                s.prompt = Some(messages_usage(field(inner, "usage").as_ref(), 0));
            }),
            "message_delta" => {
                let v: Value = serde_json::from_str(&ev.data).unwrap_or(Value::Null);
                let u = v.get("usage");
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
                None
            }
            "content_block_start" => {
                self.open_block = serde_json::from_str::<Delta<'_>>(&ev.data).ok().and_then(|d| d.index);
                None
            }
            "content_block_stop" => {
                self.open_block = None;
                None
            }
            "content_block_delta" | "response.output_text.delta" | "response.function_call_arguments.delta" => {
                if let Ok(Delta { delta: Some(d), .. }) = serde_json::from_str::<Delta<'_>>(&ev.data) {
                    let texts: [Option<&str>; 3] = match &d {
                        DeltaBody::Text(t) => [Some(t), None, None],
                        DeltaBody::Parts { text, partial_json, thinking } => {
                            [text.as_deref(), partial_json.as_deref(), thinking.as_deref()]
                        }
                    };
                    for t in texts.into_iter().flatten() {
                        generated = generated.saturating_add(svc_providers::estimate::text_tokens(t));
                    }
                }
                None
            }
            k @ ("response.created"
            | "response.in_progress"
            | "response.completed"
            | "response.incomplete"
            | "response.failed") => {
                let record = k == "response.created";
                let ends = k == "response.completed" || k == "response.incomplete";
                self.nested(&ev.data, "response", |s, inner| {
                    if record && s.api == Api::Responses {
                        if let Some(Value::String(id)) = field(inner, "id") {
                            s.response_id = Some(id);
                        }
                    }
                    if ends {
                        s.reported = Some(reply_usage(s.api, field(inner, "usage").as_ref()));
                    }
                })
            }
            _ => None,
        };
        let data = rewritten.as_deref().unwrap_or(ev.data.as_bytes());
        let mut out = Vec::with_capacity(data.len() + ev.event.len() + 16);
        sse::write(&mut out, &ev.event, data);
        (Some(Bytes::from(out)), generated)
    }

    /// `data` with the client's name as `<outer>.model`, after `look` has seen `<outer>`'s fields; `None` when
    /// `data` is not an object holding an `outer` object (it is then forwarded as it is).
    fn nested(
        &mut self,
        data: &str,
        outer: &str,
        look: impl FnOnce(&mut Self, &[(Cow<'_, str>, &serde_json::value::RawValue)]),
    ) -> Option<Vec<u8>> {
        let Fields(top) = serde_json::from_str(data).ok()?;
        let raw = top.iter().find(|(k, _)| k == outer)?.1;
        let Fields(inner) = serde_json::from_str(raw.get()).ok()?;
        look(self, &inner);
        let alias = &self.alias_json;
        let rewritten = write_fields(&inner, |k| (k == "model").then_some(Cow::Borrowed(&alias[..])));
        Some(write_fields(&top, |k| (k == outer).then_some(Cow::Borrowed(&rewritten[..]))))
    }

    /// The end of a stream cut at its completion cap (the upstream's own end was not forwarded).
    pub fn cut(&mut self, charged: Usage) -> Bytes {
        let mut out = Vec::new();
        match self.api {
            Api::Messages => {
                if let Some(index) = self.open_block.take() {
                    let stop = json!({"type": "content_block_stop", "index": index});
                    sse::write_json(&mut out, "content_block_stop", &stop);
                }
                let delta = json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": null},
                    "usage": {"input_tokens": charged.prompt_tokens, "output_tokens": charged.completion_tokens}});
                sse::write_json(&mut out, "message_delta", &delta);
                sse::write_json(&mut out, "message_stop", &json!({"type": "message_stop"}));
            }
            Api::Chat | Api::Responses | Api::Embeddings => {
                let u = usage(charged.prompt_tokens, charged.completion_tokens);
                let now = chrono::Utc::now().timestamp();
                let r = response(&new_id("resp"), &self.alias, now, "incomplete", Vec::new(), u);
                let incomplete = json!({"type": "response.incomplete", "response": r});
                sse::write_json(&mut out, "response.incomplete", &incomplete);
            }
        }
        Bytes::from(out)
    }

    /// The error event ending a stream that failed mid-way.
    pub fn error(&mut self, err: &ApiError) -> Bytes {
        match self.api {
            Api::Messages => sse::json("error", &super::messages::error_body(err.status().as_u16(), err.message())),
            Api::Chat | Api::Responses | Api::Embeddings => {
                let now = chrono::Utc::now().timestamp();
                let mut r = response(&new_id("resp"), &self.alias, now, "failed", Vec::new(), Value::Null);
                r["error"] = json!({"code": err.kind(), "message": err.message()});
                sse::json("response.failed", &json!({"type": "response.failed", "response": r}))
            }
        }
    }
}

/// One field of raw fields, parsed.
fn field(fields: &[(Cow<'_, str>, &serde_json::value::RawValue)], key: &str) -> Option<Value> {
    fields.iter().find(|(k, _)| k == key).and_then(|(_, v)| serde_json::from_str(v.get()).ok())
}

/// The `type` of an event's data (for streams that name no events).
fn type_of(data: &str) -> String {
    #[derive(Deserialize)]
    struct Typed {
        #[serde(rename = "type")]
        kind: Option<String>,
    }
    serde_json::from_str::<Typed>(data).ok().and_then(|t| t.kind).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, data: Value) -> RawEvent {
        RawEvent { event: event.into(), data: data.to_string() }
    }

    #[test]
    fn messages_streams_are_forwarded_and_metered_with_cache_tokens() {
        let mut s = PassStream::new(Api::Messages, "claude-x");
        let (start, _) = s.event(ev("message_start", json!({"type": "message_start", "message": {"id": "m", "model": "up", "usage": {
            "input_tokens": 10, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 1000, "output_tokens": 1}}})));
        let start = String::from_utf8_lossy(&start.unwrap_or_default()).into_owned();
        assert!(start.starts_with("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"claude-x\""), "{start}");
        let delta =
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "abcdefgh"}});
        let (bytes, generated) = s.event(ev("content_block_delta", delta.clone()));
        assert_eq!(generated, 2);
        assert_eq!(
            bytes.unwrap_or_default(),
            Bytes::from(format!("event: content_block_delta\ndata: {delta}\n\n")),
            "as written"
        );
        s.event(ev(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 42}}),
        ));
        let want =
            Usage { prompt_tokens: 1110, completion_tokens: 42, cache_creation_tokens: 100, cache_read_tokens: 1000 };
        assert_eq!(s.reported(), Some(Reported::Counts(want)));
        let (unknown, _) = s.event(RawEvent { event: "brand_new".into(), data: "not json\nat all".into() });
        assert_eq!(
            unknown.unwrap_or_default(),
            Bytes::from_static(b"event: brand_new\ndata: not json\ndata: at all\n\n")
        );
    }

    #[test]
    fn responses_streams_rename_the_model_and_read_usage() {
        let mut s = PassStream::new(Api::Responses, "gpt-5-codex");
        let (created, _) = s.event(ev(
            "response.created",
            json!({"type": "response.created", "response": {"id": "resp_1", "model": "up"}}),
        ));
        assert!(String::from_utf8_lossy(&created.unwrap_or_default()).contains(r#""model":"gpt-5-codex""#));
        let (_, generated) =
            s.event(ev("response.output_text.delta", json!({"type": "response.output_text.delta", "delta": "abcd"})));
        assert_eq!(generated, 1);
        s.event(ev(
            "response.completed",
            json!({"type": "response.completed", "response": {"id": "resp_1", "model": "up",
            "usage": {"input_tokens": 3, "output_tokens": 4, "input_tokens_details": {"cached_tokens": 2}}}}),
        ));
        let want = Usage { prompt_tokens: 3, completion_tokens: 4, cache_creation_tokens: 0, cache_read_tokens: 2 };
        assert_eq!(s.reported(), Some(Reported::Counts(want)));
    }
}
