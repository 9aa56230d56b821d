//! Property tests: no client body and no upstream event, however malformed, makes a front end panic. Bodies
//! are arbitrary JSON trees whose keys are drawn from the names the translations look at, so the generated
//! objects reach deep into them (a `messages` that is an object, a `content` block without `type`, a tool call
//! with numbers for names, …).

use super::passthrough::prepare;
use super::passthrough_stream::{delta_tokens, PassStream};
use super::{messages, responses, Api, Encoder};
use proptest::prelude::*;
use serde_json::{Map, Value};
use svc_budget::Usage;
use svc_providers::estimate::text_tokens;
use svc_providers::generated::{self, Rule};
use svc_providers::passthrough::RawEvent;

/// Keys the translations read.
const KEYS: &[&str] = &[
    "model",
    "messages",
    "role",
    "content",
    "type",
    "text",
    "system",
    "tools",
    "tool_choice",
    "name",
    "input",
    "input_schema",
    "tool_use_id",
    "id",
    "source",
    "data",
    "media_type",
    "url",
    "max_tokens",
    "stream",
    "stop_sequences",
    "instructions",
    "call_id",
    "arguments",
    "output",
    "function",
    "choices",
    "delta",
    "tool_calls",
    "index",
    "finish_reason",
    "usage",
    "prompt_tokens",
    "completion_tokens",
    "message",
    "response",
    "partial_json",
    "disable_parallel_tool_use",
    "is_error",
    "image_url",
    "max_output_tokens",
    "parameters",
    "previous_response_id",
    "store",
    "max_tool_calls",
    "conversation",
];
/// Strings the translations compare against.
const WORDS: &[&str] = &[
    "user",
    "assistant",
    "system",
    "developer",
    "tool",
    "text",
    "image",
    "tool_use",
    "tool_result",
    "thinking",
    "message",
    "function_call",
    "function_call_output",
    "input_text",
    "output_text",
    "input_image",
    "function",
    "auto",
    "any",
    "none",
    "required",
    "base64",
    "url",
    "custom",
    "web_search",
    "length",
    "tool_calls",
    "stop",
    "",
    "m",
    "{\"a\":1}",
    "not json",
    "message_start",
    "message_delta",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "response.created",
    "response.completed",
    "response.output_text.delta",
    "error",
    "document",
    "input_file",
    "file_search",
    "web_search_20250305",
];

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (0u64..200_000).prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map(Value::Number).unwrap_or(Value::Null)),
        prop::sample::select(WORDS).prop_map(|w| Value::String(w.to_string())),
    ];
    leaf.prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..7)
                .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect::<Map<_, _>>())),
        ]
    })
}

/// A word the translations compare against (mostly), or any JSON.
fn word_or_any() -> impl Strategy<Value = Value> {
    prop_oneof![3 => prop::sample::select(WORDS).prop_map(|w| Value::String(w.to_string())), 1 => json()]
}

fn object_of(fields: Vec<(&str, Value)>) -> Value {
    Value::Object(fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

/// A content block: `type`, `text` and the like, given or not, each maybe twice.
fn block() -> impl Strategy<Value = Value> {
    let key = prop::sample::select(&["type", "text", "role", "content", "source"][..]);
    prop::collection::vec((key, word_or_any()), 0..4).prop_map(object_of)
}

/// An item of `input` or a turn of `messages`: `type`, `role` and `content` (text or blocks), given or not.
fn item() -> impl Strategy<Value = Value> {
    let content = prop_oneof![word_or_any(), prop::collection::vec(block(), 0..3).prop_map(Value::Array)];
    let field = prop_oneof![
        (prop::sample::select(&["type", "role", "text", "call_id"][..]), word_or_any()),
        (Just("content"), content),
    ];
    prop::collection::vec(field, 0..5).prop_map(object_of)
}

/// A Messages or Responses body much as agents send them: a model, a prompt of items (or not an array), a
/// `system` or `instructions`, and other fields the readings look at.
fn agent_body() -> impl Strategy<Value = Value> {
    let prompt = prop_oneof![8 => prop::collection::vec(item(), 0..4).prop_map(Value::Array), 1 => word_or_any()];
    let extra = prop::collection::vec((prop::sample::select(KEYS), word_or_any()), 0..4);
    let lead =
        prop::option::of(prop_oneof![word_or_any(), prop::collection::vec(block(), 0..3).prop_map(Value::Array)]);
    (prompt, extra, lead, any::<bool>()).prop_map(|(prompt, extra, lead, messages)| {
        let mut fields = vec![("model", Value::String("m".into()))];
        fields.extend(extra);
        fields.push((if messages { "messages" } else { "input" }, prompt));
        if let Some(lead) = lead {
            fields.push((if messages { "system" } else { "instructions" }, lead));
        }
        object_of(fields)
    })
}

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => Map::from_iter([("choices".to_string(), other)]),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn requests_never_panic(body in json()) {
        let bytes = body.to_string().into_bytes();
        for api in [Api::Chat, Api::Messages, Api::Responses, Api::Embeddings] {
            let _ = api.to_chat(&bytes);
            let _ = prepare(api, &bytes, "up", Some(10));
        }
    }

    /// What the native reading accepts, the translation accepts, and the two agree on what the pipeline acts on.
    #[test]
    fn the_native_reading_accepts_only_what_the_translation_accepts(body in agent_body()) {
        let bytes = body.to_string().into_bytes();
        for api in [Api::Messages, Api::Responses] {
            let Some(native) = crate::native::read(api, &bytes) else { continue };
            let chat = api.translate(&bytes);
            prop_assert!(chat.is_ok(), "{api:?} read natively, refused translated: {body}");
            let Ok(chat) = chat else { continue };
            let (n, t) = (&native.reading, crate::Reading::of_chat(&chat.chat));
            prop_assert_eq!((&n.model, n.stream, n.max_tokens), (&t.model, t.stream, t.max_tokens));
            prop_assert_eq!((&native.continues, native.stored), (&chat.continues, chat.stored));
            prop_assert_eq!(native.unseen, chat.unseen);
        }
    }

    #[test]
    fn replies_and_streams_never_panic(chunks in prop::collection::vec(json(), 0..8), reply in json()) {
        let _ = messages::from_completion(&object(reply.clone()));
        let _ = responses::from_completion(&object(reply));
        for api in [Api::Messages, Api::Responses] {
            let mut encoder = api.encoder("alias").unwrap_or_else(|| unreachable!("a translated API"));
            let mut pass = PassStream::new(api, "alias");
            for c in &chunks {
                let _ = encoder.chunk(object(c.clone()));
                let kind = c.get("type").and_then(Value::as_str).unwrap_or("message_start").to_string();
                let _ = pass.event(RawEvent::new(&kind, &c.to_string()));
            }
            let usage = Usage { prompt_tokens: 1, completion_tokens: 2, ..Usage::default() };
            let _ = (encoder.done(usage), encoder.cut(usage), pass.cut(usage));
            let _ = Encoder::Pass(pass).done(usage);
        }
    }

    /// A stream holds the events that give output whole unread only while their bound (their text's estimate)
    /// shows they cannot matter; the bound must never be under what reading them counts.
    #[test]
    fn an_event_never_counts_more_than_its_text(value in any_json()) {
        for text in [value.to_string(), ascii_only(&value.to_string())] {
            prop_assert_eq!(serde_json::from_str::<Value>(&text).ok(), Some(value.clone()), "{}", text);
            for rule in [Rule::Whole, Rule::Delta, Rule::Choices] {
                prop_assert!(generated::json_tokens(&text, rule) <= text_tokens(&text), "{} {:?}", text, rule);
            }
        }
    }

    /// Whether a stream is cut, and what it counts in the end, do not depend on the events held unread.
    #[test]
    fn held_events_cut_and_count_as_events_read_at_once(events in prop::collection::vec(responses_event(), 0..12),
        cut in 0u64..200) {
        let (mut held, mut read) = (PassStream::new(Api::Responses, "a").with_cut(Some(cut)),
            PassStream::new(Api::Responses, "a").with_cut(Some(0)));
        let mut never = PassStream::new(Api::Responses, "a");
        let (mut known, mut whole) = (0u64, 0u64);
        for (kind, data) in events {
            known += held.event(RawEvent::new(&kind, &data)).1;
            whole += read.event(RawEvent::new(&kind, &data)).1;
            never.event(RawEvent::new(&kind, &data));
            prop_assert!(known <= whole);
            prop_assert_eq!(known > cut, whole > cut, "cut at {}: {} known, {} in all", cut, known, whole);
        }
        prop_assert_eq!((held.generated(), never.generated()), (whole, whole));
    }

    /// A text delta read without parsing counts what parsing it counts, and any other bytes are parsed.
    #[test]
    fn a_text_delta_read_as_written_counts_as_parsed(text in any::<String>(), index in any::<u32>(),
        cut in 0usize..80, junk in any::<String>()) {
        let data = format!(r#"{{"type":"content_block_delta","index":{index},"delta":{{"type":"text_delta","text":{}}}}}"#,
            Value::String(text.clone()));
        let read = generated::text_delta_as_written(&data);
        prop_assert_eq!(read.unwrap_or_else(|| delta_tokens(&data)), delta_tokens(&data));
        prop_assert_eq!(read.is_some(), !text.chars().any(|c| c == '"' || c == '\\' || c < ' '), "escapes are parsed");
        // Cut anywhere and spliced with anything, the bytes are read or left to the parse, never misread.
        let spliced = spliced(&data, cut, &junk);
        if let Some(n) = generated::text_delta_as_written(&spliced) {
            prop_assert_eq!(n, delta_tokens(&spliced), "{}", spliced);
        }
    }

    /// A delta read as a flat object counts what parsing it counts; written as OpenAI writes it, it is not parsed.
    #[test]
    fn a_flat_delta_read_as_written_counts_as_parsed(fields in prop::collection::vec((flat_key(), flat_value()), 0..6),
        cut in 0usize..120, junk in any::<String>()) {
        let written = |s: &str| Value::String(s.to_string()).to_string();
        let data = format!("{{{}}}", fields.iter().map(|(k, v)| format!("{}:{v}", written(k))).collect::<Vec<_>>().join(","));
        let read = generated::flat_delta_as_written(&data);
        prop_assert_eq!(read.unwrap_or_else(|| delta_tokens(&data)), delta_tokens(&data), "{}", data);
        let deltas: Vec<&Value> = fields.iter().filter(|(k, _)| k == "delta").map(|(_, v)| v).collect();
        let plain = fields.iter().all(|(k, v)| !written(k).contains('\\') && match v {
            Value::String(s) => !written(s).contains('\\'),
            Value::Number(n) => n.is_u64(),
            Value::Array(items) => items.is_empty(),
            Value::Null | Value::Bool(_) => true,
            Value::Object(_) => false,
        }) && deltas.len() <= 1 && deltas.iter().all(|d| d.is_string());
        prop_assert_eq!(read.is_some(), plain, "{}", data);
        // Cut anywhere and spliced with anything, the bytes are read or left to the parse, never misread.
        let spliced = spliced(&data, cut, &junk);
        if let Some(n) = generated::flat_delta_as_written(&spliced) {
            prop_assert_eq!(n, delta_tokens(&spliced), "{}", spliced);
        }
    }

    /// A lifecycle event's inner object is located as parsing it finds it: its `model` renamed (and nothing else
    /// changed), its `id`, `usage` and `output` read; cut or spliced with anything, it reads or is left alone.
    #[test]
    fn a_lifecycle_event_is_read_as_parsed(fields in prop::collection::vec((lifecycle_key(), any_json()), 0..6),
        around in any_json(), pretty in any::<bool>(), cut in 0usize..400, junk in any::<String>()) {
        let inner = Value::Object(fields.into_iter().collect());
        let event = serde_json::json!({"type": "response.created", "response": inner, "x": around});
        let data = if pretty { serde_json::to_string_pretty(&event) } else { serde_json::to_string(&event) };
        let data = data.unwrap_or_default();
        let read = super::lifecycle::Inner::read(&data, "response");
        prop_assert!(read.is_some(), "{}", data);
        let read = read.unwrap_or_default();
        let mut want = event.clone();
        if let Some(model) = want["response"].get_mut("model") {
            *model = Value::String("alias".into());
        }
        let renamed: Value = serde_json::from_slice(&read.renamed(&data, b"\"alias\"")).unwrap_or_default();
        prop_assert_eq!(renamed, want);
        let parsed = |text: Option<&str>| text.and_then(|t| serde_json::from_str::<Value>(t).ok());
        prop_assert_eq!(parsed(read.usage()), event["response"].get("usage").cloned());
        prop_assert_eq!(parsed(read.output()), event["response"].get("output").cloned());
        prop_assert_eq!(read.id(), event["response"].get("id").and_then(Value::as_str).map(str::to_string));
        let spliced = spliced(&data, cut, &junk);
        if let (Some(read), Ok(_)) = (super::lifecycle::Inner::read(&spliced, "response"), serde_json::from_str::<Value>(&spliced)) {
            let renamed = read.renamed(&spliced, b"\"alias\"");
            prop_assert!(serde_json::from_slice::<Value>(&renamed).is_ok(), "{}", spliced);
        }
    }
}

/// `data` with `junk` put in after its `cut`-th character (at its end when it has fewer).
fn spliced(data: &str, cut: usize, junk: &str) -> String {
    let cut = data.char_indices().map(|(i, _)| i).nth(cut).unwrap_or(data.len());
    format!("{}{junk}{}", &data[..cut], &data[cut..])
}

/// The keys of a lifecycle event's inner object, and any other.
fn lifecycle_key() -> impl Strategy<Value = String> {
    const KEYS: &[&str] = &["model", "id", "usage", "output", "status", "instructions", "tools"];
    prop_oneof![4 => prop::sample::select(KEYS).prop_map(str::to_string), 1 => any::<String>()]
}

/// The keys of a Responses delta event, and any other.
fn flat_key() -> impl Strategy<Value = String> {
    const KEYS: &[&str] = &["type", "delta", "item_id", "output_index", "sequence_number", "logprobs", "obfuscation"];
    prop_oneof![2 => Just("delta".to_string()), 4 => prop::sample::select(KEYS).prop_map(str::to_string), 1 => any::<String>()]
}

/// The values of a Responses delta event's fields, and any other.
fn flat_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => prop::sample::select(WORDS).prop_map(|w| Value::String(w.to_string())),
        2 => any::<String>().prop_map(Value::String),
        3 => any::<i64>().prop_map(Value::from),
        1 => any::<f64>().prop_map(Value::from),
        1 => Just(Value::Array(Vec::new())),
        1 => Just(serde_json::json!([1, "a"])),
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        1 => Just(serde_json::json!({"type": "x", "text": "abcd"})),
    ]
}

/// Any JSON, strings of any characters.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<i64>().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
        prop::sample::select(WORDS).prop_map(|w| Value::String(w.to_string())),
        Just(Value::String("web_search_tool_result".into())),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        prop::sample::select(KEYS).prop_map(str::to_string),
                        Just("item_id".to_string()),
                        any::<String>()
                    ],
                    inner
                ),
                0..6
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// JSON text with every character past ASCII written as a `\u` escape (a surrogate pair past U+FFFF).
fn ascii_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

/// A Responses event that carries output: a delta or an event giving it whole, of any content.
fn responses_event() -> impl Strategy<Value = (String, String)> {
    const KINDS: &[&str] = &[
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.x_new.delta",
    ];
    (prop::sample::select(KINDS), any_json()).prop_map(|(kind, body)| {
        let data = match body {
            Value::Object(mut m) => {
                m.insert("type".into(), Value::String(kind.into()));
                Value::Object(m).to_string()
            }
            other => other.to_string(),
        };
        (kind.to_string(), data)
    })
}
