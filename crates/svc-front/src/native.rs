//! A Messages or Responses body read as it is: what the pipeline plans and reserves by (the model, the stream
//! flag, the completion cap, the prompt's estimate, what it makes the provider bill beyond it), without making
//! its chat-completions form. A deployment that speaks the client's API is sent the client's own body, so the
//! chat form is made only for one that does not (`Api::to_chat`, when an attempt needs it).
//!
//! The reading is one jiter pass over the top-level fields, descending only into `input` (Responses) or
//! `messages` and `system` (Messages) as deep as their items' `type`, `role`, `content` and `text`. It accepts
//! only what the translation accepts: anything it does not decide (a body the full parse refuses, an item the
//! translation refuses, a prompt that may translate to no message at all) is handed to the translation, which
//! accepts it or words the 400. A property test (`robustness.rs`) checks that whatever this reading accepts the
//! translation accepts, with the same model, stream flag, cap, continued response and unseen input.
//!
//! The estimate counts the client's prompt as the provider reads it: the JSON of each item (or message) and of
//! `instructions` / `system` and `tools`, by the rule of svc-providers' `estimate`, and the media parts in it.

use crate::{Api, Unseen};
use serde_json::Map;
use svc_providers::estimate::json_text_tokens;
use svc_providers::raw::{next_key, Jiter, Object, Peek};
use svc_providers::{Media, PromptParts, MAX_COMPLETION_TOKENS};

/// What the pipeline acts on of a request, in whichever form it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    /// The alias (or model id) asked for.
    pub model: String,
    /// Whether the client asked for a stream.
    pub stream: bool,
    /// Whether the client asked for a chat stream's usage chunk.
    pub wants_stream_usage: bool,
    /// The client's completion cap.
    pub max_tokens: Option<u64>,
    /// The choices asked for (`n`, at least 1).
    pub choices: u64,
    /// What the prompt's estimate counts.
    pub parts: PromptParts,
}

impl Reading {
    /// The reading of a chat-completions request.
    pub fn of_chat(chat: &svc_providers::ChatRequest) -> Reading {
        Reading {
            model: chat.model().to_string(),
            stream: chat.stream(),
            wants_stream_usage: chat.wants_stream_usage(),
            max_tokens: chat.max_tokens(),
            choices: chat.choices(),
            parts: chat.prompt_parts(),
        }
    }
}

/// A Messages or Responses request read natively.
#[derive(Debug)]
pub(crate) struct Native {
    pub(crate) reading: Reading,
    pub(crate) continues: Option<String>,
    pub(crate) stored: bool,
    pub(crate) unseen: Unseen,
    /// The body's top-level fields.
    pub(crate) fields: Object,
}

/// Reads a Messages or Responses body (`api`); `None` when the translation must decide.
pub(crate) fn read(api: Api, bytes: &[u8]) -> Option<Native> {
    if !svc_providers::json_parses(bytes) {
        return None;
    }
    let text = std::str::from_utf8(bytes).ok()?;
    // A repeated field counts as its last occurrence, as a parsed map keeps it.
    let (mut prompt, mut lead) = (None, Prompt::default());
    let object = Object::read(text, |name, json, peek| match api {
        Api::Responses if name.is(text, "input") => {
            prompt = Some(Prompt::input(text, json, peek)?);
            Some(())
        }
        Api::Responses if name.is(text, "instructions") => {
            lead = Prompt::instructions(text, json, peek)?;
            Some(())
        }
        Api::Messages if name.is(text, "messages") => {
            prompt = Some(Prompt::turns(text, json, peek)?);
            Some(())
        }
        Api::Messages if name.is(text, "system") => {
            lead = Prompt::system(text, json, peek)?;
            Some(())
        }
        _ => json.known_skip(peek).ok(),
    })?;
    let mut prompt = prompt?.and(lead);
    if prompt.produced == 0 {
        return None;
    }
    if let Some(tools) = object.get("tools") {
        prompt.parts.json_tokens = prompt.parts.json_tokens.saturating_add(json_text_tokens(tools));
    }
    // The few scalars read from their JSON text (`Object::get`), each as a parse to `Value` would read it, without
    // making one: five parses were about 1,600 instructions a request.
    let reading = Reading {
        model: object
            .get("model")
            .and_then(|text| serde_json::from_str::<String>(text).ok())
            .filter(|m| svc_providers::model_text(m).is_ok())?,
        stream: match object.get("stream") {
            None | Some("null" | "false") => false,
            Some("true") => true,
            Some(_) => return None,
        },
        wants_stream_usage: false,
        max_tokens: cap(&object, if api == Api::Responses { "max_output_tokens" } else { "max_tokens" })?,
        choices: 1,
        parts: prompt.parts,
    };
    let responses = api == Api::Responses;
    let continues = match object.get("previous_response_id").filter(|_| responses) {
        Some(text) => serde_json::from_str::<String>(text).ok().filter(|id| !id.is_empty()),
        None => None,
    };
    let stored = responses && object.get("store") != Some("false");
    let unseen = unseen(&object, bytes);
    Some(Native { reading, continues, stored, unseen, fields: object })
}

/// The completion cap in `field`: `Some(None)` when absent or null, `None` when it is not one the translation
/// takes (a whole number up to [`MAX_COMPLETION_TOKENS`]).
fn cap(object: &Object, field: &str) -> Option<Option<u64>> {
    match object.get(field) {
        None | Some("null") => Some(None),
        // serde_json reads a `u64` where `Value::as_u64` gives one: not from a fraction, an exponent or a string.
        Some(text) => serde_json::from_str::<u64>(text).ok().filter(|n| *n <= MAX_COMPLETION_TOKENS).map(Some),
    }
}

/// What the request makes the provider bill beyond its body ([`Unseen::of`]), reading only the fields it looks
/// at, and `tools` only when its text could name a tool that matters (or has an escape, which could spell one).
fn unseen(object: &Object, bytes: &[u8]) -> Unseen {
    use memchr::memmem::Finder;
    use std::sync::LazyLock;
    static TOOLS: LazyLock<[Finder<'static>; 4]> =
        LazyLock::new(|| [Finder::new(b"search"), Finder::new(b"mcp"), Finder::new(b"web_fetch"), Finder::new(b"\\u")]);
    let mut fields = Map::new();
    // The prompt is looked through for documents only when its bytes could name one.
    let documents = crate::unseen::may_name_a_document(bytes);
    let prompt: &[&str] = if documents { &["messages", "input"] } else { &[] };
    for &key in ["conversation", "prompt", "mcp_servers", "max_tool_calls"].iter().chain(prompt) {
        if let Some(v) = object.value(key) {
            fields.insert(key.into(), v);
        }
    }
    if let Some(tools) = object.get("tools").filter(|t| TOOLS.iter().any(|f| f.find(t.as_bytes()).is_some())) {
        if let Ok(v) = serde_json::from_str(tools) {
            fields.insert("tools".into(), v);
        }
    }
    Unseen::of_read(&fields, documents)
}

/// The prompt as read so far.
#[derive(Debug, Default, Clone, Copy)]
struct Prompt {
    parts: PromptParts,
    /// The messages the translation makes of it, at least (it refuses a request that makes none).
    produced: u64,
}

impl Prompt {
    /// This and `lead` (the instructions or system prompt) together.
    fn and(mut self, lead: Prompt) -> Prompt {
        let (p, l) = (&mut self.parts, lead.parts);
        p.messages = p.messages.saturating_add(l.messages);
        p.json_tokens = p.json_tokens.saturating_add(l.json_tokens);
        p.media = p.media.saturating_add(l.media);
        p.documents = p.documents.saturating_add(l.documents);
        self.produced = self.produced.saturating_add(lead.produced);
        self
    }

    /// One message of JSON text `raw`, which the translation makes `produced` messages of (at least).
    fn message(&mut self, raw: &str, produced: u64, (media, documents): (u64, u64)) {
        let p = &mut self.parts;
        p.messages = p.messages.saturating_add(1);
        p.json_tokens = p.json_tokens.saturating_add(json_text_tokens(raw));
        p.media = p.media.saturating_add(media);
        p.documents = p.documents.saturating_add(documents);
        self.produced = self.produced.saturating_add(produced);
    }

    /// A Responses `input`: a string (one user message) or an array of items.
    fn input<'j>(text: &'j str, json: &mut Jiter<'j>, peek: Peek) -> Option<Prompt> {
        let mut prompt = Prompt::default();
        let start = json.current_index();
        match peek {
            Peek::String => {
                json.known_skip(peek).ok()?;
                prompt.message(text.get(start..json.current_index())?, 1, (0, 0));
            }
            Peek::Array => {
                let mut next = json.known_array().ok()?;
                while let Some(peek) = next {
                    let start = json.current_index();
                    let item = Item::read(text, json, peek)?;
                    // Kept by the translation: a message with a string `role` (anything else is refused),
                    // a function call and its output; other items are dropped.
                    let produced = match item.kind {
                        Some(Kind::Message) | None if item.role.is_some() => 1,
                        Some(Kind::Message) | None => return None,
                        Some(Kind::FunctionCall) => 1,
                        Some(_) => 0,
                    };
                    prompt.message(text.get(start..json.current_index())?, produced, item.media);
                    next = json.array_step().ok()?;
                }
            }
            _ => return None,
        }
        Some(prompt)
    }

    /// Responses `instructions`: a string is a system message.
    fn instructions<'j>(text: &'j str, json: &mut Jiter<'j>, peek: Peek) -> Option<Prompt> {
        let start = json.current_index();
        json.known_skip(peek).ok()?;
        let mut prompt = Prompt::default();
        if peek == Peek::String {
            prompt.message(text.get(start..json.current_index())?, 1, (0, 0));
        }
        Some(prompt)
    }

    /// Messages `messages`: an array of turns, each an object with a `role` of `user`, `assistant` or `system`.
    fn turns<'j>(text: &'j str, json: &mut Jiter<'j>, peek: Peek) -> Option<Prompt> {
        if peek != Peek::Array {
            return None;
        }
        let mut prompt = Prompt::default();
        let mut next = json.known_array().ok()?;
        while let Some(peek) = next {
            let start = json.current_index();
            let turn = Item::read(text, json, peek)?;
            // A user turn whose content is text, or has a text block or a tool result, makes a message; others
            // may make none (the translation decides when no turn surely makes one).
            let produced = match turn.role? {
                Role::System | Role::Assistant => 1,
                Role::User => u64::from(turn.speaks),
                Role::Other => return None,
            };
            prompt.message(text.get(start..json.current_index())?, produced, turn.media);
            next = json.array_step().ok()?;
        }
        Some(prompt)
    }

    /// Messages `system`: a system message when it has text (a string, or text blocks).
    fn system<'j>(text: &'j str, json: &mut Jiter<'j>, peek: Peek) -> Option<Prompt> {
        let start = json.current_index();
        let speaks = match peek {
            Peek::String => !json.known_str().ok()?.is_empty(),
            Peek::Array => Blocks::read(text, json)?.loose_text,
            Peek::Null => {
                json.known_skip(peek).ok()?;
                return Some(Prompt::default());
            }
            _ => {
                json.known_skip(peek).ok()?;
                false
            }
        };
        let mut prompt = Prompt::default();
        prompt.message(text.get(start..json.current_index())?, u64::from(speaks), (0, 0));
        Some(prompt)
    }
}

/// What is read of an item of `input` or a turn of `messages` (each field's last occurrence).
#[derive(Default)]
struct Item {
    /// Its `type`, when a string.
    kind: Option<Kind>,
    /// Its `role`, when a string.
    role: Option<Role>,
    /// Its content is a string, or has a `text` block with a string `text` or a `tool_result` (a Messages user
    /// turn that makes a message).
    speaks: bool,
    /// Its content's media parts, and of them the documents.
    media: (u64, u64),
}

impl Item {
    /// The object at `json`; `None` when it is not one (the translation refuses it, or decides).
    fn read<'j>(text: &'j str, json: &mut Jiter<'j>, peek: Peek) -> Option<Item> {
        if peek != Peek::Object {
            return None;
        }
        let mut item = Item::default();
        let mut key = next_key(text, json, true)?;
        while let Some(name) = key {
            let peek = json.peek().ok()?;
            if name.is(text, "type") {
                item.kind = word(json, peek, Kind::of)?;
            } else if name.is(text, "role") {
                item.role = word(json, peek, Role::of)?;
            } else if name.is(text, "content") {
                (item.speaks, item.media) = match peek {
                    Peek::String => {
                        json.known_skip(peek).ok()?;
                        (true, (0, 0))
                    }
                    Peek::Array => {
                        let blocks = Blocks::read(text, json)?;
                        (blocks.text_block || blocks.tool_result, blocks.media)
                    }
                    _ => {
                        json.known_skip(peek).ok()?;
                        (false, (0, 0))
                    }
                };
            } else {
                json.known_skip(peek).ok()?;
            }
            key = next_key(text, json, false)?;
        }
        Some(item)
    }
}

/// What is read of an array of content parts (blocks).
#[derive(Default)]
struct Blocks {
    /// A part is a non-empty string, or an object with a non-empty string `text` (whatever its `type`): a
    /// Messages `system` of these has text.
    loose_text: bool,
    /// A part is a `text` block with a string `text`.
    text_block: bool,
    /// A part is a `tool_result`.
    tool_result: bool,
    /// The media parts, and of them the documents.
    media: (u64, u64),
}

impl Blocks {
    fn read<'j>(text: &'j str, json: &mut Jiter<'j>) -> Option<Blocks> {
        let mut blocks = Blocks::default();
        let mut next = json.known_array().ok()?;
        while let Some(peek) = next {
            match peek {
                Peek::String => blocks.loose_text |= !json.known_str().ok()?.is_empty(),
                Peek::Object => {
                    let (kind, text_of) = block(text, json)?;
                    blocks.loose_text |= text_of == Some(true);
                    blocks.text_block |= text_of.is_some() && kind == Some(Kind::Text);
                    blocks.tool_result |= kind == Some(Kind::ToolResult);
                    if let Some(Kind::Media(media)) = kind {
                        blocks.media.0 += 1;
                        blocks.media.1 += u64::from(media == Media::Document);
                    }
                }
                _ => json.known_skip(peek).ok()?,
            }
            next = json.array_step().ok()?;
        }
        Some(blocks)
    }
}

/// A content block's `type` and, when its `text` is a string, whether that is non-empty (last occurrences).
fn block<'j>(text: &'j str, json: &mut Jiter<'j>) -> Option<(Option<Kind>, Option<bool>)> {
    let (mut kind, mut has_text) = (None, None);
    let mut key = next_key(text, json, true)?;
    while let Some(name) = key {
        let peek = json.peek().ok()?;
        let is_type = name.is(text, "type");
        if (is_type || name.is(text, "text")) && peek == Peek::String {
            let s = json.known_str().ok()?;
            if is_type {
                kind = Some(Kind::of(s));
            } else {
                has_text = Some(!s.is_empty());
            }
        } else {
            json.known_skip(peek).ok()?;
            if is_type {
                kind = None;
            } else if name.is(text, "text") {
                has_text = None;
            }
        }
        key = next_key(text, json, false)?;
    }
    Some((kind, has_text))
}

/// The `type`s the reading tells apart (of an item, a turn's block or a content part).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Message,
    /// `function_call`, `function_call_output`.
    FunctionCall,
    Text,
    ToolResult,
    /// A part that carries media (Messages', Responses' and chat's types).
    Media(Media),
    Other,
}

impl Kind {
    fn of(kind: &str) -> Kind {
        match kind {
            "message" => Kind::Message,
            "function_call" | "function_call_output" => Kind::FunctionCall,
            "text" => Kind::Text,
            "tool_result" => Kind::ToolResult,
            _ => Media::of(kind).map_or(Kind::Other, Kind::Media),
        }
    }
}

/// A Messages turn's `role` (a Responses item needs only one that is a string).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    System,
    User,
    Assistant,
    Other,
}

impl Role {
    fn of(role: &str) -> Role {
        match role {
            "system" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            _ => Role::Other,
        }
    }
}

/// The value at `json` as `of` tells it apart, when a string; `None` when the JSON is bad.
fn word<'j, T>(json: &mut Jiter<'j>, peek: Peek, of: fn(&str) -> T) -> Option<Option<T>> {
    if peek == Peek::String {
        return Some(Some(of(json.known_str().ok()?)));
    }
    json.known_skip(peek).ok()?;
    Some(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn native(api: Api, body: Value) -> Option<Native> {
        read(api, body.to_string().as_bytes())
    }

    /// The scalars read from their text read as a parse to `Value` reads them (what this reading did before).
    #[test]
    fn scalars_read_from_their_text_read_as_values_do() {
        let long = "m".repeat(svc_providers::MAX_MODEL_BYTES + 1);
        let fits = "m".repeat(svc_providers::MAX_MODEL_BYTES);
        let cases: Vec<(&str, Value)> = vec![
            ("model", json!("")),
            ("model", json!(long)),
            ("model", json!(fits)),
            ("model", json!(7)),
            ("stream", json!(null)),
            ("stream", json!(false)),
            ("stream", json!("true")),
            ("stream", json!(1)),
            ("max_output_tokens", json!(null)),
            ("max_output_tokens", json!(0)),
            ("max_output_tokens", json!(64.0)),
            ("max_output_tokens", json!(-1)),
            ("max_output_tokens", json!(1e3)),
            ("max_output_tokens", json!("64")),
            ("max_output_tokens", json!(MAX_COMPLETION_TOKENS)),
            ("max_output_tokens", json!(MAX_COMPLETION_TOKENS + 1)),
            ("max_output_tokens", json!(u64::MAX)),
            ("previous_response_id", json!("")),
            ("previous_response_id", json!(5)),
            ("store", json!(false)),
            ("store", json!(true)),
            ("store", json!(null)),
            ("store", json!("false")),
        ];
        for (field, value) in cases {
            let mut body = json!({"model": "resp", "input": "Hi."});
            body[field] = value.clone();
            let got = native(Api::Responses, body).map(|n| {
                let r = n.reading;
                (r.model, r.stream, r.max_tokens, n.continues, n.stored)
            });
            // What the reading by `Value` gave.
            let model = match field {
                "model" => svc_providers::model_name(Some(&value)).ok().map(str::to_string),
                _ => Some("resp".to_string()),
            };
            let stream = match (field, &value) {
                ("stream", Value::Bool(b)) => Some(*b),
                ("stream", Value::Null) => Some(false),
                ("stream", _) => None,
                _ => Some(false),
            };
            let cap = match (field, &value) {
                ("max_output_tokens", Value::Null) => Some(None),
                ("max_output_tokens", v) => v.as_u64().filter(|n| *n <= MAX_COMPLETION_TOKENS).map(Some),
                _ => Some(None),
            };
            let continues = match (field, &value) {
                ("previous_response_id", Value::String(id)) if !id.is_empty() => Some(id.clone()),
                _ => None,
            };
            let stored = !(field == "store" && value == json!(false));
            let want = match (model, stream, cap) {
                (Some(model), Some(stream), Some(cap)) => Some((model, stream, cap, continues, stored)),
                _ => None,
            };
            assert_eq!(got, want, "{field}: {value}");
        }
        // Escapes in the text are read as a parse reads them.
        let text = br#"{"model":"\u0072esp","input":"Hi.","previous_response_id":"resp_\u0031"}"#;
        let n = read(Api::Responses, text).unwrap_or_else(|| panic!("read"));
        assert_eq!((n.reading.model.as_str(), n.continues.as_deref()), ("resp", Some("resp_1")));
        // Whitespace around the values is not part of them.
        let text = b"{ \"model\" : \"resp\" ,\n \"input\" : \"Hi.\" , \"stream\"\t: true ,\r\n \"store\" : false ,
            \"max_output_tokens\" : 64 , \"previous_response_id\" : \"resp_1\" }";
        let n = read(Api::Responses, text).unwrap_or_else(|| panic!("read"));
        assert_eq!((n.reading.model.as_str(), n.reading.stream, n.reading.max_tokens), ("resp", true, Some(64)));
        assert_eq!((n.continues.as_deref(), n.stored), (Some("resp_1"), false));
        // `-0` reads as a float (serde_json keeps its sign): not a cap, as `Value::as_u64` has it.
        assert_eq!(serde_json::from_str::<Value>("-0").ok().and_then(|v| v.as_u64()), None);
        assert!(read(Api::Responses, br#"{"model":"resp","input":"Hi.","max_output_tokens":-0}"#).is_none());
    }

    #[test]
    fn a_responses_body_is_read_as_it_is() {
        let body = json!({"model": "resp", "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be terse."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi."},
                {"type": "input_image", "image_url": "https://example.com/a.png"}]},
            {"type": "reasoning", "summary": []},
        ], "instructions": "Answer.", "tools": [{"type": "function", "name": "f"}],
        "max_output_tokens": 64, "stream": true, "store": false, "previous_response_id": "resp_1"});
        let n = native(Api::Responses, body.clone()).unwrap_or_else(|| panic!("read"));
        let r = &n.reading;
        assert_eq!((r.model.as_str(), r.stream, r.max_tokens, r.choices), ("resp", true, Some(64), 1));
        assert_eq!((n.continues.as_deref(), n.stored), (Some("resp_1"), false));
        // Three items and the instructions; the items', the instructions' and the tools' JSON counted.
        let texts = body["input"].as_array().into_iter().flatten().chain([&body["instructions"], &body["tools"]]);
        let tokens = texts.map(|v| svc_providers::estimate::text_tokens(&v.to_string())).sum::<u64>();
        assert_eq!(r.parts, PromptParts { messages: 4, json_tokens: tokens, media: 1, documents: 0 });
        assert!(n.unseen == Unseen::default());
    }

    #[test]
    fn a_messages_body_is_read_as_it_is() {
        let body = json!({"model": "msg", "max_tokens": 64, "system": [{"type": "text", "text": "Be terse."}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi."},
                {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}}]},
                {"role": "assistant", "content": "Hello."}]});
        let n = native(Api::Messages, body).unwrap_or_else(|| panic!("read"));
        let r = &n.reading;
        assert_eq!((r.model.as_str(), r.stream, r.max_tokens), ("msg", false, Some(64)));
        assert_eq!((r.parts.messages, r.parts.media, r.parts.documents), (3, 1, 1));
        assert_eq!((n.continues, n.stored), (None, false));
        assert_eq!(n.unseen.uncounted, Some("a file or document part"));
    }

    #[test]
    fn what_the_translation_must_decide_is_left_to_it() {
        let cases = [
            (Api::Responses, json!({"model": "m", "input": [{"type": "message", "content": "no role"}]})),
            (Api::Responses, json!({"model": "m", "input": [{"type": "reasoning"}]})),
            (Api::Responses, json!({"model": "m", "input": ["not an item"]})),
            (Api::Responses, json!({"model": "m"})),
            (Api::Responses, json!({"model": "m", "input": "hi", "max_output_tokens": -1})),
            (Api::Responses, json!({"model": "m", "input": "hi", "stream": "yes"})),
            (Api::Responses, json!({"model": "", "input": "hi"})),
            (Api::Messages, json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]})),
            (Api::Messages, json!({"model": "m", "messages": [{"role": "user", "content": [{"text": "untyped"}]}]})),
            (Api::Messages, json!({"model": "m", "messages": {"role": "user"}})),
            (Api::Messages, json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1.5})),
        ];
        for (api, body) in cases {
            assert!(native(api, body.clone()).is_none(), "{api:?} {body}");
        }
        // The full parse's limits: a number out of range, a repeated field's last occurrence.
        assert!(read(Api::Responses, br#"{"model":"m","input":"hi","x":1e999}"#).is_none());
        let last = read(Api::Responses, br#"{"model":"a","input":"first","input":[{"role":"user"}],"model":"b"}"#);
        let last = last.map(|n| (n.reading.model, n.reading.parts.json_tokens));
        assert_eq!(last, Some(("b".into(), svc_providers::estimate::text_tokens(r#"{"role":"user"}"#))));
    }

    #[test]
    fn tools_are_read_for_the_unseen_input_only_when_they_could_matter() {
        let search = json!({"model": "m", "input": "hi", "tools": [{"type": "web_search", "max_uses": 2}]});
        let n = native(Api::Responses, search).unwrap_or_else(|| panic!("read"));
        assert_eq!(n.unseen.searches, crate::Searches::AtMost(2));
        let escaped = br#"{"model":"m","input":"hi","tools":[{"type":"file_\u0073earch"}]}"#;
        let n = read(Api::Responses, escaped).unwrap_or_else(|| panic!("read"));
        assert!(n.unseen.uncounted.is_some());
    }
}
