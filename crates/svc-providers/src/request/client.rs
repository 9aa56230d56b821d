//! A chat-completions body as the client sent it: read only as deep as the gateway acts (its top-level fields,
//! each message's `role` and content parts' `type`), changed only where the gateway changes it (`model`, the
//! completion cap, `stream_options`), and written back as the client's bytes with those fields spliced in. The
//! whole body is parsed into a map only for a consumer that needs it (a translation to another API, the mock).
//!
//! Parsing every body into a map, then writing it out again, cost a third of the JSON work of a request: a map
//! per object (with a hash of every key), a string per key and value, and all of it written again.

use super::{bad, scan, Facts, RequestError, Scalars};
use crate::raw::{self, Key};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::sync::OnceLock;

/// The client's body and the gateway's changes to it.
#[derive(Debug, Clone)]
pub(super) struct ClientBody {
    /// The body, read as deep as its top-level fields.
    object: raw::Object,
    /// The client's `model`.
    model: String,
    edits: Edits,
    /// The whole body parsed, with the edits made; made on first use.
    parsed: OnceLock<Map<String, Value>>,
}

/// What the gateway changed.
#[derive(Debug, Clone, Default)]
struct Edits {
    model: Option<String>,
    /// The cap's field and value.
    cap: Option<(&'static str, u64)>,
    /// Whether `stream_options.include_usage` was set.
    stream_usage: bool,
}

/// What an estimate reads of a prompt: its messages, the tokens of the JSON of its messages and tool
/// definitions, and its media parts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PromptParts {
    /// Messages.
    pub messages: u64,
    /// [`crate::estimate::text_tokens`] of each message's and tool definition's JSON, summed.
    pub json_tokens: u64,
    /// Content parts of a media type.
    pub media: u64,
}

/// The content part types that carry media.
pub(super) fn is_media(kind: &str) -> bool {
    matches!(kind, "image_url" | "input_audio" | "file" | "image" | "document")
}

/// The fields of an object the gateway reads (a message's `role` and `content`, a content part's `type`), each
/// its last occurrence as a parsed map keeps it; every other field is skipped unread.
#[derive(Default)]
struct Picked<'a> {
    role: Option<&'a RawValue>,
    content: Option<&'a RawValue>,
    kind: Option<&'a RawValue>,
}

impl<'a> Picked<'a> {
    /// `raw` read as an object; `None` when it is not one.
    fn of(raw: &'a RawValue) -> Option<Picked<'a>> {
        serde_json::from_str(raw.get()).ok()
    }
}

impl<'de> Deserialize<'de> for Picked<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Picked<'de>, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Picked<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Picked<'de>, A::Error> {
                let mut picked = Picked::default();
                while let Some(Key(key)) = map.next_key()? {
                    let slot = match &*key {
                        "role" => &mut picked.role,
                        "content" => &mut picked.content,
                        "type" => &mut picked.kind,
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                            continue;
                        }
                    };
                    *slot = Some(map.next_value()?);
                }
                Ok(picked)
            }
        }
        d.deserialize_map(Visit)
    }
}

impl ClientBody {
    /// Reads and checks `bytes`; `None` when they are not a JSON object (the caller reports that as the full
    /// parse words it).
    pub(super) fn read(bytes: &[u8]) -> Option<Result<(ClientBody, Facts), RequestError>> {
        // What the full parse would refuse (a number out of range, nesting too deep, a bad escape) is refused
        // here too: by the raw reading itself for a plain body, by the full parse's checks (`Valid`) otherwise.
        if !scan::plain(bytes) {
            serde_json::from_slice::<scan::Valid>(bytes).ok()?;
        }
        let object = raw::Object::parse(bytes).ok()?;
        let body = ClientBody { object, model: String::new(), edits: Edits::default(), parsed: OnceLock::new() };
        Some(body.check())
    }

    /// The raw text of field `key` (its last occurrence, as a parsed map keeps).
    fn raw(&self, key: &str) -> Option<&str> {
        self.object.get(key)
    }

    /// The checks of [`super::ChatRequest::check`], in its order and with its messages, on the raw fields.
    fn check(mut self) -> Result<(ClientBody, Facts), RequestError> {
        match self.object.value("model") {
            Some(Value::String(m)) if !m.is_empty() => self.model = m,
            Some(_) => return Err(bad("`model` must be a non-empty string", "model")),
            None => return Err(bad("missing required field `model`", "model")),
        }
        let mut parts = PromptParts::default();
        match self.raw("messages") {
            Some(t) if t.starts_with('[') => {
                let messages: Vec<&RawValue> = serde_json::from_str(t).unwrap_or_default();
                if messages.is_empty() {
                    return Err(bad("`messages` must not be empty", "messages"));
                }
                parts.messages = messages.len() as u64;
                for (i, m) in messages.iter().enumerate() {
                    let picked = Picked::of(m).filter(|h| h.role.is_some_and(|r| r.get().starts_with('"')));
                    let Some(picked) = picked else {
                        return Err(bad(
                            format!("`messages[{i}]` must be an object with a string `role`"),
                            &format!("messages[{i}]"),
                        ));
                    };
                    parts.json_tokens = parts.json_tokens.saturating_add(scan::json_tokens(m.get()));
                    parts.media = parts.media.saturating_add(media_parts(picked.content));
                }
                for field in ["tools", "functions", "response_format"] {
                    if let Some(t) = self.raw(field) {
                        parts.json_tokens = parts.json_tokens.saturating_add(scan::json_tokens(t));
                    }
                }
            }
            Some(_) => return Err(bad("`messages` must be an array", "messages")),
            None => return Err(bad("missing required field `messages`", "messages")),
        }
        let scalars = Scalars::of(|key| self.object.value(key).map(Cow::Owned));
        scalars.check()?;
        let facts = scalars.facts(parts);
        Ok((self, facts))
    }

    /// `model` now (the upstream id once the gateway set it).
    pub(super) fn model(&self) -> &str {
        self.edits.model.as_deref().unwrap_or(&self.model)
    }

    /// The whole body, parsed on first use, with the gateway's changes.
    pub(super) fn parsed(&self) -> &Map<String, Value> {
        self.parsed.get_or_init(|| {
            let mut map = match serde_json::from_slice::<Value>(self.object.bytes()) {
                Ok(Value::Object(map)) => map,
                // Read once already as an object: this cannot happen.
                _ => Map::new(),
            };
            if let Some(m) = &self.edits.model {
                super::set_model(&mut map, m);
            }
            if let Some((field, tokens)) = self.edits.cap {
                map.insert(field.into(), Value::from(tokens));
            }
            if self.edits.stream_usage {
                super::force_stream_usage(&mut map);
            }
            map
        })
    }

    pub(super) fn set_model(&mut self, upstream: &str) {
        if let Some(map) = self.parsed.get_mut() {
            super::set_model(map, upstream);
        }
        self.edits.model = Some(upstream.to_string());
    }

    /// Whether the client set `max_completion_tokens` (not null).
    pub(super) fn has_max_completion_tokens(&self) -> bool {
        self.edits.cap.is_some_and(|(f, _)| f == "max_completion_tokens")
            || self.raw("max_completion_tokens").is_some_and(|t| t != "null")
    }

    pub(super) fn cap(&mut self, field: &'static str, tokens: u64) {
        if let Some(map) = self.parsed.get_mut() {
            map.insert(field.into(), Value::from(tokens));
        }
        self.edits.cap = Some((field, tokens));
    }

    pub(super) fn force_stream_usage(&mut self) {
        if let Some(map) = self.parsed.get_mut() {
            super::force_stream_usage(map);
        }
        self.edits.stream_usage = true;
    }

    /// The body to send: the client's bytes with the changed fields written in place (a field the client did
    /// not send added at the end).
    pub(super) fn to_json(&self) -> Vec<u8> {
        let model = self.edits.model.as_ref().and_then(|m| serde_json::to_vec(m).ok());
        let cap = self.edits.cap.map(|(field, tokens)| (field, tokens.to_string().into_bytes()));
        let options = self.edits.stream_usage.then(|| {
            let mut options = match self.object.value("stream_options") {
                Some(Value::Object(o)) => o,
                _ => Map::new(),
            };
            options.insert("include_usage".into(), Value::Bool(true));
            serde_json::to_vec(&options).unwrap_or_else(|_| b"{\"include_usage\":true}".to_vec())
        });
        let mut set: Vec<(&str, &[u8])> = Vec::with_capacity(3);
        if let Some(m) = &model {
            set.push(("model", m));
        }
        if let Some((field, text)) = &cap {
            set.push((field, text));
        }
        if let Some(o) = &options {
            set.push(("stream_options", o));
        }
        self.object.write_with(&set)
    }
}

/// Media parts in a message's `content` (when it is a list of parts).
fn media_parts(content: Option<&RawValue>) -> u64 {
    let Some(c) = content.filter(|c| c.get().starts_with('[')) else { return 0 };
    let list: Vec<&RawValue> = serde_json::from_str(c.get()).unwrap_or_default();
    let kinds = list.iter().filter_map(|p| Picked::of(p)?.kind);
    kinds.filter(|k| serde_json::from_str::<Key>(k.get()).is_ok_and(|k| is_media(&k.0))).count() as u64
}

#[cfg(test)]
mod tests {
    use super::super::ChatRequest;
    use serde_json::{json, Map, Value};

    fn client(body: &str) -> ChatRequest {
        ChatRequest::parse(body.as_bytes()).unwrap_or_else(|e| panic!("{e}: {body}"))
    }

    fn parsed(body: &str) -> ChatRequest {
        let map: Map<String, Value> = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}"));
        ChatRequest::check(map).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_clients_bytes_are_sent_with_only_the_changed_fields_written() {
        let body =
            "{ \"model\" : \"alias\", \"messages\":[ {\"role\":\"user\",\"content\":\"hi\"} ],\n \"top_p\": 0.10, \
                    \"stream\": true, \"stream_options\": {\"x\": 1}, \"max_tokens\": 9000 }";
        let mut r = client(body);
        r.set_model("up");
        r.cap_completion_tokens(1024);
        r.force_stream_usage();
        let out = String::from_utf8(r.to_json().unwrap_or_default()).unwrap_or_default();
        assert_eq!(
            out,
            "{\"model\":\"up\",\"messages\":[ {\"role\":\"user\",\"content\":\"hi\"} ],\"top_p\":0.10,\"stream\":true,\
             \"stream_options\":{\"x\":1,\"include_usage\":true},\"max_tokens\":1024}"
        );
        // Fields the client did not send are added at the end; the parsed body agrees with the bytes.
        let mut r = client(r#"{"model":"a","messages":[{"role":"user"}],"max_completion_tokens":null,"stream":true}"#);
        r.cap_completion_tokens(64);
        r.force_stream_usage();
        let out: Value = serde_json::from_slice(&r.to_json().unwrap_or_default()).unwrap_or_default();
        assert_eq!(
            out,
            json!({"model":"a","messages":[{"role":"user"}],"max_completion_tokens":null,"stream":true,
            "max_tokens":64,"stream_options":{"include_usage":true}})
        );
        assert_eq!(Value::Object(r.body().clone()), out);
        assert_eq!((r.max_tokens(), r.wants_stream_usage()), (Some(64), true));
    }

    #[test]
    fn a_repeated_field_reads_as_its_last_occurrence_and_is_replaced_everywhere() {
        let mut r = client(r#"{"model":"a","messages":[{"role":"user"}],"model":"b","n":2}"#);
        assert_eq!((r.model(), r.choices()), ("b", 2));
        r.set_model("up");
        let out = String::from_utf8(r.to_json().unwrap_or_default()).unwrap_or_default();
        assert_eq!(out, r#"{"model":"up","messages":[{"role":"user"}],"model":"up","n":2}"#);
        assert_eq!(r.body()["model"], "up");
        // Inside a message too, the last occurrence counts, as in a parsed map.
        assert!(ChatRequest::parse(br#"{"model":"a","messages":[{"role":1,"role":"user"}]}"#).is_ok());
        assert!(ChatRequest::parse(br#"{"model":"a","messages":[{"role":"user","role":1}]}"#).is_err());
    }

    #[test]
    fn the_estimate_reads_the_bytes_as_it_reads_the_parsed_body() {
        let bodies = [
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
            "{\"model\":\"m\",\n  \"messages\": [ {\"role\": \"system\", \"content\": \"be \\u00e9 \\\"terse\\\"\\n\"},\n \
             {\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"日本語\"},{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}},\
             {\"type\":\"input_audio\"},{\"type\":7}]},{\"role\":\"tool\",\"content\":null,\"n\":[1.0,1e2,-0.5,123456789012345678901]}],\
             \"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"b\":1,\"a\":2}}}],\
             \"response_format\":{\"type\":\"json_object\"},\"functions\":[]}",
        ];
        for body in bodies {
            let (c, p) = (client(body), parsed(body));
            assert_eq!(c.prompt_parts(), p.prompt_parts(), "{body}");
            assert_eq!(crate::estimate::prompt_tokens(&c), crate::estimate::prompt_tokens(&p));
        }
        assert_eq!(client(bodies[1]).prompt_parts().media, 2);
    }

    #[test]
    fn bodies_the_full_parse_refuses_are_refused() {
        let deep =
            format!(r#"{{"model":"m","messages":[{{"role":"user","x":{}{}}}]}}"#, "[".repeat(200), "]".repeat(200));
        for body in [
            r#"{"model":"m","messages":[{"role":"user","content":1e400}]}"#.to_string(),
            r#"{"model":"m","messages":[{"role":"user"}],"extra":{"x":-1e999}}"#.to_string(),
            deep,
            r#"{"model":"m","messages":[{"role":"user"}]} trailing"#.to_string(),
            "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\\ud800\"}]}".to_string(),
        ] {
            let full = serde_json::from_str::<Value>(&body).is_ok();
            assert_eq!(ChatRequest::parse(body.as_bytes()).is_ok(), full, "{body}");
        }
    }
}
