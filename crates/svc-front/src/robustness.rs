//! Property tests: no client body and no upstream event, however malformed, makes a front end panic. Bodies
//! are arbitrary JSON trees whose keys are drawn from the names the translations look at, so the generated
//! objects reach deep into them (a `messages` that is an object, a `content` block without `type`, a tool call
//! with numbers for names, …).

use super::passthrough::prepare;
use super::passthrough_stream::PassStream;
use super::{messages, responses, Api, Encoder};
use proptest::prelude::*;
use serde_json::{Map, Value};
use svc_budget::Usage;
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
                let _ = pass.event(RawEvent { event: kind, data: c.to_string() });
            }
            let usage = Usage { prompt_tokens: 1, completion_tokens: 2, ..Usage::default() };
            let _ = (encoder.done(usage), encoder.cut(usage), pass.cut(usage));
            let _ = Encoder::Pass(pass).done(usage);
        }
    }
}
