//! One chunk of a chat-completions stream, as the gateway acts on it: either as an OpenAI-compatible upstream
//! wrote it, read only as deep as its top-level fields ([`raw::Object`]), or built by a translation (the
//! Anthropic stream, the mock). The gateway reads a chunk's `usage`, its `id` and `created`, and the text it
//! generated, and writes it again with `model` (and `usage`) changed; a raw chunk does all of that without
//! being parsed into a map: the whole parse and writing out again of every chunk was most of the cost of a
//! streamed request (about 25,000 instructions a chunk, measured with callgrind).
//!
//! Where a consumer needs the whole chunk (a translation to another client API, a test), [`Chunk::map`]
//! parses it once.
//!
//! A translation may also yield a count-only chunk ([`Chunk::count_only`]): output the upstream generated that
//! chat completions has no form for (an Anthropic thinking block, a signature, a delta type not known
//! today). It is never sent to a client, but its tokens count toward the stream's completion cap like any
//! chunk's.

use crate::generated::{self, Rule};
use crate::raw;
use crate::usage;
use serde_json::{Map, Value};
use std::sync::OnceLock;

/// One chat-completions chunk.
#[derive(Debug, Clone)]
pub struct Chunk {
    /// The upstream's text, when the chunk came from one.
    raw: Option<raw::Object>,
    /// The whole chunk: built, or parsed from `raw` on first use.
    parsed: OnceLock<Map<String, Value>>,
    /// Set on a count-only chunk: the generated tokens of the output it stands for.
    count_only: Option<u64>,
}

/// What to do with a chunk's `usage` when it is written again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageEdit<'a> {
    /// Leave it as it is.
    Keep,
    /// Leave it out.
    Remove,
    /// Write this JSON text in its place.
    Set(&'a [u8]),
}

impl From<Map<String, Value>> for Chunk {
    fn from(map: Map<String, Value>) -> Chunk {
        Chunk { raw: None, parsed: OnceLock::from(map), count_only: None }
    }
}

impl Chunk {
    /// A translated stream's chunk: `chat.completion.chunk` `id` of `model`, made at `created`, with `choices`
    /// and, when given, `usage`.
    pub(crate) fn translated(id: &str, created: i64, model: &str, choices: Value, usage: Option<Value>) -> Chunk {
        let mut m = Map::new();
        m.insert("id".into(), Value::from(id));
        m.insert("object".into(), Value::from("chat.completion.chunk"));
        m.insert("created".into(), Value::from(created));
        m.insert("model".into(), Value::from(model));
        m.insert("choices".into(), choices);
        if let Some(usage) = usage {
            m.insert("usage".into(), usage);
        }
        Chunk::from(m)
    }

    /// A chunk as an upstream wrote it.
    pub fn raw(object: raw::Object) -> Chunk {
        Chunk { raw: Some(object), parsed: OnceLock::new(), count_only: None }
    }

    /// A count-only chunk: `tokens` of generated output a translation could not put in a chunk. Its map is
    /// empty; it is counted ([`Chunk::generated_tokens`]) and never sent.
    pub fn count_only(tokens: u64) -> Chunk {
        Chunk { raw: None, parsed: OnceLock::from(Map::new()), count_only: Some(tokens) }
    }

    /// Whether this is a count-only chunk, to be counted and not sent.
    pub fn is_count_only(&self) -> bool {
        self.count_only.is_some()
    }

    /// The whole chunk (parsed on first use when it came raw).
    pub fn map(&self) -> &Map<String, Value> {
        self.parsed.get_or_init(|| match &self.raw {
            Some(raw) => match serde_json::from_slice::<Value>(raw.bytes()) {
                Ok(Value::Object(map)) => map,
                // Read once already as an object: this cannot happen.
                _ => Map::new(),
            },
            None => Map::new(),
        })
    }

    /// The whole chunk, owned.
    pub fn into_map(mut self) -> Map<String, Value> {
        self.map();
        self.parsed.take().unwrap_or_default()
    }

    /// Field `key` of the whole chunk (parses a raw chunk).
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.map().get(key)
    }

    /// The JSON text of a top-level field of a raw chunk.
    fn text(&self, key: &str) -> Option<&str> {
        self.raw.as_ref().and_then(|r| r.get(key))
    }

    /// The usage the chunk reports (`None`: it has no `usage`, or `usage` is null).
    pub fn usage(&self) -> Option<usage::Reported> {
        match &self.raw {
            Some(raw) => raw.get("usage").filter(|t| *t != "null").map(|t| usage::read_text(Some(t))),
            None => self.map().get("usage").filter(|u| !u.is_null()).map(|u| usage::read(Some(u))),
        }
    }

    /// `id` and `created` (null when missing).
    pub fn id_and_created(&self) -> (Value, Value) {
        let field = |k: &str| match &self.raw {
            Some(raw) => raw.value(k).unwrap_or(Value::Null),
            None => self.map().get(k).cloned().unwrap_or(Value::Null),
        };
        (field("id"), field("created"))
    }

    /// The estimated tokens of every generated string in `choices` ([`Rule::Choices`]), or those a count-only
    /// chunk stands for.
    pub fn generated_tokens(&self) -> u64 {
        if let Some(tokens) = self.count_only {
            return tokens;
        }
        if self.raw.is_some() {
            return self.text("choices").map_or(0, |t| generated::json_tokens(t, Rule::Choices));
        }
        self.map().get("choices").map_or(0, |choices| generated::value_tokens(choices, Rule::Choices))
    }

    /// Whether this is a usage chunk: `choices` empty and `usage` set.
    pub fn is_usage_only(&self) -> bool {
        let empty_choices = match &self.raw {
            Some(raw) => raw.get("choices").is_some_and(is_empty_array),
            None => self.map().get("choices").and_then(Value::as_array).is_some_and(Vec::is_empty),
        };
        empty_choices && self.usage().is_some()
    }

    /// The chunk's JSON text, with `model` set to the JSON text `model` (added at the end when the chunk has
    /// none) and `usage` edited. A raw chunk keeps the upstream's text of every other field, in its order.
    pub fn to_json(self, model: &[u8], usage: UsageEdit<'_>) -> Vec<u8> {
        match &self.raw {
            Some(raw) => {
                let (set, drop): (&[(&str, &[u8])], _) = match usage {
                    UsageEdit::Keep => (&[("model", model)], None),
                    UsageEdit::Remove => (&[("model", model)], Some("usage")),
                    UsageEdit::Set(u) => (&[("model", model), ("usage", u)], None),
                };
                raw.write_edited(set, drop)
            }
            None => {
                let mut map = self.into_map();
                edit_map(&mut map, model, usage);
                serde_json::to_vec(&map).unwrap_or_else(|_| b"{}".to_vec())
            }
        }
    }

    /// The whole chunk with `usage` edited (for a translation to another client API).
    pub fn into_edited_map(self, usage: UsageEdit<'_>) -> Map<String, Value> {
        let mut map = self.into_map();
        match usage {
            UsageEdit::Keep => {}
            UsageEdit::Remove => {
                map.remove("usage");
            }
            UsageEdit::Set(u) => {
                map.insert("usage".into(), serde_json::from_slice(u).unwrap_or(Value::Null));
            }
        }
        map
    }
}

impl std::ops::Index<&str> for Chunk {
    type Output = Value;

    /// Field `key` of the whole chunk, null when it has none (as indexing a [`Value`]).
    fn index(&self, key: &str) -> &Value {
        static NULL: Value = Value::Null;
        self.get(key).unwrap_or(&NULL)
    }
}

/// Sets `model` and edits `usage` in a built chunk.
fn edit_map(map: &mut Map<String, Value>, model: &[u8], usage: UsageEdit<'_>) {
    match usage {
        UsageEdit::Keep => {}
        UsageEdit::Remove => {
            map.remove("usage");
        }
        UsageEdit::Set(u) => {
            map.insert("usage".into(), serde_json::from_slice(u).unwrap_or(Value::Null));
        }
    }
    map.insert("model".into(), serde_json::from_slice(model).unwrap_or(Value::Null));
}

/// Whether the JSON text `t` is an empty array (`[]`, or whitespace inside).
fn is_empty_array(t: &str) -> bool {
    t.strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .is_some_and(|inside| inside.bytes().all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r')))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn raw(v: &Value) -> Chunk {
        Chunk::raw(raw::Object::parse(v.to_string().as_bytes()).unwrap())
    }

    #[test]
    fn raw_and_built_chunks_read_alike() {
        let chunks = [
            json!({"id": "c1", "object": "chat.completion.chunk", "created": 7, "model": "up",
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": "héllo wörld",
                "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
                "finish_reason": null, "logprobs": {"content": [{"token": "x"}]}}]}),
            json!({"id": "c1", "created": 7, "model": "up", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}),
            json!({"id": "c1", "choices": [ ], "usage": null}),
            json!({"choices": [{"delta": {"content": "a\"b\\c\u{1F600}"}}], "usage": {"prompt_tokens": -1}}),
            json!({"choices": "text"}),
        ];
        for c in &chunks {
            let (r, b) = (raw(c), Chunk::from(c.as_object().unwrap().clone()));
            assert_eq!(r.usage(), b.usage(), "{c}");
            assert_eq!(r.id_and_created(), b.id_and_created(), "{c}");
            assert_eq!(r.generated_tokens(), b.generated_tokens(), "{c}");
            assert_eq!(r.is_usage_only(), b.is_usage_only(), "{c}");
            assert_eq!(r.map(), b.map(), "{c}");
            for edit in [UsageEdit::Keep, UsageEdit::Remove, UsageEdit::Set(br#"{"prompt_tokens":1}"#)] {
                let (re, be) = (r.clone().to_json(b"\"alias\"", edit), b.clone().to_json(b"\"alias\"", edit));
                let data = |e: &[u8]| -> Value { serde_json::from_slice(e).unwrap() };
                assert_eq!(data(&re), data(&be), "{c} {edit:?}");
            }
        }
        assert!(raw(&chunks[1]).is_usage_only() && raw(&chunks[1]).generated_tokens() == 0);
        assert!(!raw(&chunks[2]).is_usage_only(), "a null usage is none");
    }

    #[test]
    fn a_raw_chunk_keeps_the_upstreams_text_and_order() {
        let text = r#"{"id":"c","model":"up","usage":{"prompt_tokens":1, "completion_tokens":2},"choices":[ {"delta":{"content":"x"}} ]}"#;
        let chunk = Chunk::raw(raw::Object::parse(text.as_bytes()).unwrap());
        let out = chunk.clone().to_json(b"\"alias\"", UsageEdit::Keep);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"id\":\"c\",\"model\":\"alias\",\"usage\":{\"prompt_tokens\":1, \"completion_tokens\":2},\"choices\":[ {\"delta\":{\"content\":\"x\"}} ]}"
        );
        let out = chunk.to_json(b"\"alias\"", UsageEdit::Remove);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"id\":\"c\",\"model\":\"alias\",\"choices\":[ {\"delta\":{\"content\":\"x\"}} ]}"
        );
        let no_model = Chunk::raw(raw::Object::parse(br#"{"usage":1}"#).unwrap());
        assert_eq!(no_model.to_json(b"\"m\"", UsageEdit::Remove), br#"{"model":"m"}"#.to_vec());
    }

    #[test]
    fn every_generated_string_of_an_upstream_chunk_counts() {
        // Each "abcdefgh" is 2 tokens; ids, roles, types, indexes, finish reasons and log probabilities are not
        // generated. What an OpenAI-compatible upstream streams counts whatever field carries it.
        let deltas = [
            json!({"content": "abcdefgh"}),
            json!({"reasoning_content": "abcdefgh"}),
            json!({"reasoning": "abcdefgh"}),
            json!({"refusal": "abcdefgh"}),
            json!({"audio": {"id": "audio_0123456789", "transcript": "abcdefgh"}}),
            json!({"tool_calls": [{"index": 0, "id": "call_0123456789", "type": "function", "function": {"arguments": "abcdefgh"}}]}),
            json!({"x_new_field": {"nested": ["abcdefgh"]}}),
        ];
        for delta in deltas {
            let c = json!({"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta,
                "logprobs": {"content": [{"token": "zzzz"}]}, "finish_reason": null}]});
            assert_eq!(raw(&c).generated_tokens(), 2, "{c}");
            assert_eq!(Chunk::from(c.as_object().unwrap().clone()).generated_tokens(), 2, "{c}");
        }
        let text = r#"{"choices":[{"delta":{"content":"abcd"},"x":1e999}]}"#;
        let unreadable = Chunk::raw(raw::Object::parse(text.as_bytes()).unwrap());
        assert!(unreadable.generated_tokens() > 1, "choices that do not read are counted whole");
    }

    #[test]
    fn a_count_only_chunk_is_counted_and_empty() {
        let c = Chunk::count_only(7);
        assert!(c.is_count_only() && !raw(&json!({"choices": []})).is_count_only());
        assert_eq!((c.generated_tokens(), c.usage(), c.map().is_empty()), (7, None, true));
    }
}
