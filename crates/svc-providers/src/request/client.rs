//! A chat-completions body as the client sent it: read only as deep as the gateway acts (its top-level fields,
//! each message's `role` and content parts' `type`), changed only where the gateway changes it (`model`, the
//! completion cap, `stream_options`), and written back as the client's bytes with those fields spliced in. The
//! whole body is parsed into a map only for a consumer that needs it (a translation to another API, the mock).
//!
//! Parsing every body into a map, then writing it out again, cost a third of the JSON work of a request: a map
//! per object (with a hash of every key), a string per key and value, and all of it written again.

use super::{bad, scan, Facts, RequestError, Scalars};
use crate::raw::{self, Jiter, Peek};
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
    /// Of those, files and documents: input the provider reads from a file or a URL, which the gateway cannot
    /// count (a PDF's pages, a file by id).
    pub documents: u64,
}

/// A content part that carries media, in any client API's words (chat's, Messages', Responses').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Media {
    /// An image or audio clip, counted by the estimate's media allowance.
    Inline,
    /// A file or a document: input read from it cannot be counted from the request.
    Document,
}

impl Media {
    /// The media a content part of type `kind` carries, if any.
    pub fn of(kind: &str) -> Option<Media> {
        match kind {
            "image_url" | "input_audio" | "image" | "input_image" => Some(Media::Inline),
            "file" | "document" | "input_file" => Some(Media::Document),
            _ => None,
        }
    }
}

/// What the checks and the estimate read of `messages`, in the same pass as the body's top-level fields: the
/// estimate's parts, and the first message that is not an object with a string `role`.
#[derive(Default)]
struct Messages {
    parts: PromptParts,
    refused: Option<u64>,
}

impl Messages {
    /// Reads the array at `json` (the body is `text`): each message's fields the gateway acts on (`role`,
    /// `content`; their last occurrence, as a parsed map keeps them), its text counted for the estimate.
    /// `None` when the JSON is bad.
    fn read<'j>(text: &'j str, json: &mut Jiter<'j>) -> Option<Messages> {
        let mut m = Messages::default();
        let mut next = json.known_array().ok()?;
        while let Some(peek) = next {
            let i = m.parts.messages;
            m.parts.messages += 1;
            let start = json.current_index();
            let media = match peek {
                Peek::Object => message(text, json)?,
                _ => {
                    json.known_skip(peek).ok()?;
                    None
                }
            };
            match media {
                Some((media, documents)) if m.refused.is_none() => {
                    let message = text.get(start..json.current_index()).unwrap_or_default();
                    m.parts.json_tokens = m.parts.json_tokens.saturating_add(scan::json_tokens(message));
                    m.parts.media = m.parts.media.saturating_add(media);
                    m.parts.documents = m.parts.documents.saturating_add(documents);
                }
                Some(_) => {}
                None => m.refused = m.refused.or(Some(i)),
            }
            next = json.array_step().ok()?;
        }
        Some(m)
    }
}

/// The fields of an object the gateway reads: a message's `role` and `content`, a content part's `type`.
#[derive(PartialEq, Eq)]
enum Field {
    Role,
    Content,
    Type,
    Other,
}

/// The next key of the object at `json` (in `text`); `first` for its first. `None` when the JSON is bad;
/// `Some(None)` at the object's end.
fn next_key<'j>(text: &'j str, json: &mut Jiter<'j>, first: bool) -> Option<Option<Field>> {
    let Some(name) = raw::next_key(text, json, first)? else { return Some(None) };
    let field = if name.is(text, "role") {
        Field::Role
    } else if name.is(text, "content") {
        Field::Content
    } else if name.is(text, "type") {
        Field::Type
    } else {
        Field::Other
    };
    Some(Some(field))
}

/// A message (an object, at `json`): `Some(media parts)` when its `role` is a string, else `None`. The outer
/// `None`: the JSON is bad.
fn message<'j>(text: &'j str, json: &mut Jiter<'j>) -> Option<Option<(u64, u64)>> {
    let (mut role, mut media) = (false, (0, 0));
    let mut key = next_key(text, json, true)?;
    while let Some(field) = key {
        let peek = json.peek().ok()?;
        match field {
            Field::Role => {
                role = peek == Peek::String;
                json.known_skip(peek).ok()?;
            }
            Field::Content if peek == Peek::Array => media = media_parts(text, json)?,
            Field::Content => {
                media = (0, 0);
                json.known_skip(peek).ok()?;
            }
            _ => json.known_skip(peek).ok()?,
        }
        key = next_key(text, json, false)?;
    }
    Some(role.then_some(media))
}

/// The parts of a message's `content` (an array, at `json`) whose `type` is a string naming a media type, and of
/// them the documents.
fn media_parts<'j>(text: &'j str, json: &mut Jiter<'j>) -> Option<(u64, u64)> {
    let (mut media, mut documents) = (0, 0);
    let mut next = json.known_array().ok()?;
    while let Some(peek) = next {
        if peek != Peek::Object {
            json.known_skip(peek).ok()?;
        } else {
            // The part's last `type` decides.
            let mut kind = None;
            let mut key = next_key(text, json, true)?;
            while let Some(field) = key {
                match json.peek().ok()? {
                    Peek::String if field == Field::Type => kind = Media::of(json.known_str().ok()?),
                    peek => {
                        if field == Field::Type {
                            kind = None;
                        }
                        json.known_skip(peek).ok()?;
                    }
                }
                key = next_key(text, json, false)?;
            }
            media += u64::from(kind.is_some());
            documents += u64::from(kind == Some(Media::Document));
        }
        next = json.array_step().ok()?;
    }
    Some((media, documents))
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
        let text = std::str::from_utf8(bytes).ok()?;
        // `messages` is read in the same pass; a repeated one counts as its last occurrence.
        let mut messages = Messages::default();
        let object = raw::Object::read(text, |name, json, peek| {
            if peek == Peek::Array && name.is(text, "messages") {
                messages = Messages::read(text, json)?;
                Some(())
            } else {
                json.known_skip(peek).ok()
            }
        })?;
        let body = ClientBody { object, model: String::new(), edits: Edits::default(), parsed: OnceLock::new() };
        Some(body.check(messages))
    }

    /// The raw text of field `key` (its last occurrence, as a parsed map keeps).
    fn raw(&self, key: &str) -> Option<&str> {
        self.object.get(key)
    }

    /// The checks of [`super::ChatRequest::check`], in its order and with its messages, on the raw fields.
    fn check(mut self, messages: Messages) -> Result<(ClientBody, Facts), RequestError> {
        let model = self.object.value("model");
        super::model_name(model.as_ref())?;
        if let Some(Value::String(m)) = model {
            self.model = m;
        }
        let mut parts = messages.parts;
        match self.raw("messages") {
            Some(t) if t.starts_with('[') => {
                if let Some(i) = messages.refused {
                    return Err(bad(
                        format!("`messages[{i}]` must be an object with a string `role`"),
                        &format!("messages[{i}]"),
                    ));
                }
                if parts.messages == 0 {
                    return Err(bad("`messages` must not be empty", "messages"));
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
            "{ \"model\" : \"up\", \"messages\":[ {\"role\":\"user\",\"content\":\"hi\"} ],\n \"top_p\": 0.10, \
                    \"stream\": true, \"stream_options\": {\"x\":1,\"include_usage\":true}, \"max_tokens\": 1024 }"
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
