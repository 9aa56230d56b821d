//! Generated output: which strings of a JSON value a model generated, and their estimated tokens
//! ([`text_tokens`] of each). One place decides it for every answer the gateway meters: a chat chunk's
//! `choices`, an Anthropic content block and delta, a Responses delta, output item, content part or finished
//! text.
//!
//! The rule goes by the key that holds a string, never by a list of the fields known to hold text, so a field
//! or a delta type an upstream adds tomorrow counts from the day it appears:
//!
//! - [`Rule::Choices`] (chat completions): every string but ids, roles, types, finish reasons, indexes and
//!   log probabilities ([`is_not_generated`]);
//! - [`Rule::Delta`] (a piece of a stream: the `delta` of a Messages `content_block_delta` or of a Responses
//!   `*.delta` event): every string but `type` tags. Text, thinking, signatures, citations, refusals,
//!   reasoning, tool arguments and delta types not known today all count;
//! - [`Rule::Whole`] (content given whole: a Messages content block as it starts, a Responses output item,
//!   content part or finished text): every string but type tags, ids (`id`, `*_id`), `status`, `role`, log
//!   probabilities (a copy of the text), `obfuscation` (random padding) and `encrypted_content` (reasoning
//!   state the client sends back, whose size follows no count of anything streamed), and nothing of an
//!   object whose `type` ends in `_tool_result` (a server tool's output, such as web search results, which
//!   Anthropic bills as input, not output).
//!
//! Strings are counted as JSON text is read, without building it ([`json_tokens`], and [`DeltaTokens`] /
//! [`WholeTokens`] as fields of a caller's own serde struct), or over a value already built
//! ([`value_tokens`]). Text that does not read as JSON is counted whole: an upstream that sends it is counted
//! more, never less. A key given twice in one object is counted each time.
//!
//! What this file does not do: decide what a count is used for (the gateway's meter and stream stage do).

use crate::raw::Key;
use crate::tokens::text_tokens;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

/// Whether the value of key `key` in `choices` is not generated text: ids, roles, types, finish reasons,
/// indexes and log probabilities.
pub fn is_not_generated(key: &str) -> bool {
    matches!(key, "id" | "role" | "type" | "finish_reason" | "index" | "logprobs")
}

/// Which strings of a value are generated output (see the file's head).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// A chat completion's or chunk's `choices`.
    Choices,
    /// A streamed delta.
    Delta,
    /// Content given whole.
    Whole,
}

impl Rule {
    /// Whether the value under `key` is not generated output.
    pub fn skips(self, key: &str) -> bool {
        match self {
            Rule::Choices => is_not_generated(key),
            Rule::Delta => key == "type",
            Rule::Whole => {
                matches!(key, "type" | "id" | "status" | "role" | "logprobs" | "obfuscation" | "encrypted_content")
                    || key.ends_with("_id")
            }
        }
    }

    /// Whether an object of type `kind` is a tool's output, none of it generated.
    fn is_tool_output(self, kind: &str) -> bool {
        self == Rule::Whole && kind.ends_with("_tool_result")
    }
}

/// The tokens of the generated strings of the JSON text `json` under `rule`; the whole text's when it does
/// not read as JSON.
pub fn json_tokens(json: &str, rule: Rule) -> u64 {
    let mut tokens = 0u64;
    let mut de = serde_json::Deserializer::from_str(json);
    let read = Count { tokens: &mut tokens, rule }.deserialize(&mut de).and_then(|()| de.end());
    if read.is_ok() {
        tokens
    } else {
        text_tokens(json)
    }
}

/// The generated tokens of a Messages text delta written as Anthropic writes it,
/// `{"type":"content_block_delta","index":N,"delta":{"type":"text_delta","text":"…"}}` with a text without escapes
/// (nearly every event of a stream), read without parsing it: what reading it under [`Rule::Delta`] counts.
/// `None` for any other bytes, which are read.
pub fn text_delta_as_written(data: &str) -> Option<u64> {
    const HEAD: &str = r#"{"type":"content_block_delta","index":"#;
    const DELTA: &str = r#","delta":{"type":"text_delta","text":""#;
    const TAIL: &str = r#""}}"#;
    let rest = data.strip_prefix(HEAD)?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    // A JSON number has no leading zero.
    if digits == 0 || (digits > 1 && rest.starts_with('0')) {
        return None;
    }
    let text = rest.get(digits..)?.strip_prefix(DELTA)?.strip_suffix(TAIL)?;
    // A quote would end the string early, a backslash starts an escape, a control character is not JSON.
    if text.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        return None;
    }
    Some(text_tokens(text))
}

/// The generated tokens of a delta event written as a flat object, as OpenAI writes every Responses `*.delta`
/// (`{"type":"response.output_text.delta","item_id":"msg_1",…,"delta":"…",…}`): no whitespace, every value a string
/// without escapes, a whole number, `[]`, `null`, `true` or `false`, and `delta`, given once, a string. What reading
/// it by its `delta` under [`Rule::Delta`] counts (that string's tokens; none without one), found without parsing.
/// `None` for any other bytes, which are read.
pub fn flat_delta_as_written(data: &str) -> Option<u64> {
    let b = data.as_bytes();
    match b {
        [b'{', b'}'] => return Some(0),
        [b'{', ..] => {}
        _ => return None,
    }
    let (mut at, mut delta) = (1, None);
    loop {
        let key = string(b, &mut at)?;
        let is_delta = &b[key] == b"delta";
        if b.get(at) != Some(&b':') {
            return None;
        }
        at += 1;
        match b.get(at)? {
            b'"' => {
                let text = string(b, &mut at)?;
                if is_delta && delta.replace(text).is_some() {
                    return None;
                }
            }
            _ if is_delta => return None,
            b'0' => at += 1,
            b'1'..=b'9' => at += b[at..].iter().take_while(|c| c.is_ascii_digit()).count(),
            _ => at += [&b"[]"[..], b"null", b"true", b"false"].into_iter().find(|w| b[at..].starts_with(w))?.len(),
        }
        match b.get(at)? {
            b',' => at += 1,
            b'}' if at + 1 == b.len() => return Some(delta.and_then(|d| data.get(d)).map_or(0, text_tokens)),
            _ => return None,
        }
    }
}

/// Where the text of the string starting at `b[*at]` (its quote) lies, when it has no escape and no control
/// character; `*at` moves past it.
fn string(b: &[u8], at: &mut usize) -> Option<std::ops::Range<usize>> {
    if b.get(*at) != Some(&b'"') {
        return None;
    }
    let start = *at + 1;
    let end = start + memchr::memchr(b'"', b.get(start..)?)?;
    if b[start..end].iter().any(|&c| c == b'\\' || c < 0x20) {
        return None;
    }
    *at = end + 1;
    Some(start..end)
}

/// The tokens of the generated strings of `value` under `rule`.
pub fn value_tokens(value: &Value, rule: Rule) -> u64 {
    match value {
        Value::String(s) => text_tokens(s),
        Value::Array(items) => items.iter().fold(0u64, |n, v| n.saturating_add(value_tokens(v, rule))),
        Value::Object(fields) => {
            if fields.get("type").and_then(Value::as_str).is_some_and(|k| rule.is_tool_output(k)) {
                return 0;
            }
            fields
                .iter()
                .filter(|(k, _)| !rule.skips(k))
                .fold(0u64, |n, (_, v)| n.saturating_add(value_tokens(v, rule)))
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => 0,
    }
}

/// The tokens of a field's generated strings under [`Rule::Delta`], counted as the field is read: a field
/// type for a caller's serde struct (`#[serde(default)]` makes a missing field 0).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DeltaTokens(pub u64);

/// The tokens of a field's generated strings under [`Rule::Whole`], as [`DeltaTokens`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WholeTokens(pub u64);

impl<'de> Deserialize<'de> for DeltaTokens {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut tokens = 0u64;
        Count { tokens: &mut tokens, rule: Rule::Delta }.deserialize(d)?;
        Ok(DeltaTokens(tokens))
    }
}

impl<'de> Deserialize<'de> for WholeTokens {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut tokens = 0u64;
        Count { tokens: &mut tokens, rule: Rule::Whole }.deserialize(d)?;
        Ok(WholeTokens(tokens))
    }
}

/// Adds the tokens of the generated strings of one JSON value to its count.
struct Count<'c> {
    tokens: &'c mut u64,
    rule: Rule,
}

impl<'de> DeserializeSeed<'de> for Count<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Count<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        *self.tokens = self.tokens.saturating_add(text_tokens(v));
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Count { tokens: &mut *self.tokens, rule: self.rule })?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        // Counted apart until the object's `type` is known: a tool's output counts nothing, whichever comes first.
        let mut inner = 0u64;
        let mut tool_output = false;
        while let Some(Key(key)) = map.next_key()? {
            if key == "type" && self.rule == Rule::Whole {
                let ToolOutput(is) = map.next_value()?;
                tool_output |= is;
            } else if self.rule.skips(&key) {
                map.next_value::<IgnoredAny>()?;
            } else {
                map.next_value_seed(Count { tokens: &mut inner, rule: self.rule })?;
            }
        }
        if !tool_output {
            *self.tokens = self.tokens.saturating_add(inner);
        }
        Ok(())
    }
}

/// Whether an object's `type` names a tool's output ([`Rule::Whole`]); any value that is not a string does not.
struct ToolOutput(bool);

impl<'de> Deserialize<'de> for ToolOutput {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ToolOutput, D::Error> {
        struct Visit;
        impl<'de> Visitor<'de> for Visit {
            type Value = ToolOutput;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E>(self, v: &str) -> Result<ToolOutput, E> {
                Ok(ToolOutput(Rule::Whole.is_tool_output(v)))
            }
            fn visit_bool<E>(self, _: bool) -> Result<ToolOutput, E> {
                Ok(ToolOutput(false))
            }
            fn visit_i64<E>(self, _: i64) -> Result<ToolOutput, E> {
                Ok(ToolOutput(false))
            }
            fn visit_u64<E>(self, _: u64) -> Result<ToolOutput, E> {
                Ok(ToolOutput(false))
            }
            fn visit_f64<E>(self, _: f64) -> Result<ToolOutput, E> {
                Ok(ToolOutput(false))
            }
            fn visit_unit<E>(self) -> Result<ToolOutput, E> {
                Ok(ToolOutput(false))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ToolOutput, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ToolOutput(false))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ToolOutput, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(ToolOutput(false))
            }
        }
        d.deserialize_any(Visit)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    /// Both readings of `v` (its text, and the value built) under `rule`, checked to agree.
    fn tokens(v: &Value, rule: Rule) -> u64 {
        let (text, value) = (json_tokens(&v.to_string(), rule), value_tokens(v, rule));
        assert_eq!(text, value, "{v} under {rule:?}");
        text
    }

    #[test]
    fn every_delta_string_counts_but_its_type() {
        // "abcdefgh": 2 tokens; type tags never count.
        let deltas = [
            json!({"type": "text_delta", "text": "abcdefgh"}),
            json!({"type": "thinking_delta", "thinking": "abcdefgh"}),
            json!({"type": "signature_delta", "signature": "abcdefgh"}),
            json!({"type": "input_json_delta", "partial_json": "abcdefgh"}),
            json!({"type": "x_new_delta", "x_anything": {"nested": ["abcdefgh"]}}),
            json!({"type": "citations_delta", "citation": {"type": "char_location", "cited_text": "abcdefgh", "document_index": 0}}),
        ];
        for d in &deltas {
            assert_eq!(tokens(d, Rule::Delta), 2, "{d}");
        }
        assert_eq!(tokens(&json!("abcdefgh"), Rule::Delta), 2, "a Responses delta is a string");
        assert_eq!(tokens(&json!({"type": "x", "id": "abcdefgh"}), Rule::Delta), 2, "only the type is left out");
    }

    #[test]
    fn whole_content_leaves_out_ids_state_and_tool_output() {
        let item = json!({"id": "msg_0123456789abcdef", "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": "abcdefgh", "annotations": [], "logprobs": [{"token": "abcd"}]}]});
        assert_eq!(tokens(&item, Rule::Whole), 2);
        let call = json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "exec", "arguments": "abcdefgh"});
        assert_eq!(tokens(&call, Rule::Whole), 3, "the name and the arguments");
        let reasoning = json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": "abcd"}], "encrypted_content": "gAAAA".repeat(100)});
        assert_eq!(tokens(&reasoning, Rule::Whole), 1);
        let tool_use = json!({"type": "tool_use", "id": "toolu_0123456789", "name": "Read", "input": {}});
        assert_eq!(tokens(&tool_use, Rule::Whole), 1);
        let redacted = json!({"type": "redacted_thinking", "data": "abcdefgh"});
        assert_eq!(tokens(&redacted, Rule::Whole), 2, "redacted thinking is output");
        // A server tool's output, its type first or last.
        let results = json!({"tool_use_id": "srvtoolu_1", "content": [{"type": "web_search_result", "title": "abcd", "encrypted_content": "x"}], "type": "web_search_tool_result"});
        assert_eq!(tokens(&results, Rule::Whole), 0);
        assert_eq!(tokens(&json!({"type": 5, "text": "abcd"}), Rule::Whole), 1, "a type that is not text");
    }

    #[test]
    fn chat_choices_count_every_generated_field() {
        let choices = json!([{"index": 0, "finish_reason": null, "logprobs": {"content": [{"token": "zzzz"}]},
            "delta": {"role": "assistant", "content": "abcd", "reasoning_content": "abcd", "refusal": "abcd",
            "audio": {"id": "audio_1", "transcript": "abcd"}, "x_future": "abcd",
            "tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "abcd"}}]}}]);
        assert_eq!(tokens(&choices, Rule::Choices), 7);
    }

    #[test]
    fn a_text_delta_as_anthropic_writes_it_is_read_without_parsing() {
        let data = r#"{"type":"content_block_delta","index":12,"delta":{"type":"text_delta","text":"abcdefgh é"}}"#;
        assert_eq!(text_delta_as_written(data), Some(4));
        assert_eq!(
            text_delta_as_written(data),
            Some(json_tokens(r#"{"type":"text_delta","text":"abcdefgh é"}"#, Rule::Delta))
        );
        for other in [
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a\nb"}}"#,
            r#"{"type":"content_block_delta","index":01,"delta":{"type":"text_delta","text":"ab"}}"#,
            r#"{"type":"content_block_delta","index":,"delta":{"type":"text_delta","text":"ab"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"b"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"ab"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ab"},"x":1}"#,
            r#"{"type":"content_block_delta", "index":0,"delta":{"type":"text_delta","text":"ab"}}"#,
            "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\tb\"}}",
        ] {
            assert_eq!(text_delta_as_written(other), None, "{other}");
        }
    }

    #[test]
    fn a_delta_as_openai_writes_it_is_read_without_parsing() {
        let data = r#"{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"abcdefgh é","logprobs":[],"obfuscation":"x1"}"#;
        assert_eq!(flat_delta_as_written(data), Some(4));
        assert_eq!(flat_delta_as_written(r#"{"type":"response.x.delta","n":null,"b":true}"#), Some(0), "no delta");
        for other in [
            r#"{"type":"response.output_text.delta","delta":"a\nb"}"#,
            r#"{"type":"response.output_text.delta","delta":{"text":"ab"}}"#,
            r#"{"type":"response.output_text.delta","delta":"ab","delta":"cd"}"#,
            r#"{"type":"response.output_text.delta","output_index":01,"delta":"ab"}"#,
            r#"{"type":"response.output_text.delta","output_index":-1,"delta":"ab"}"#,
            r#"{"type":"response.output_text.delta","logprobs":[1],"delta":"ab"}"#,
            r#"{"type":"response.output_text.delta", "delta":"ab"}"#,
            r#"{"type":"response.output_text.delta","delta":"ab"} "#,
            r#"{"type":"response.output_text.delta","delta":"ab""#,
            "{\"type\":\"response.output_text.delta\",\"delta\":\"a\tb\"}",
        ] {
            assert_eq!(flat_delta_as_written(other), None, "{other}");
        }
    }

    #[test]
    fn unreadable_text_is_counted_whole() {
        let text = r#"[{"delta":{"content":"abcd"},"x":1e999}]"#;
        assert_eq!(json_tokens(text, Rule::Choices), text_tokens(text));
        assert_eq!(json_tokens("not json", Rule::Delta), text_tokens("not json"));
        assert_eq!(
            json_tokens(r#"[{"delta":{"content":"abcd","content":"abcd"}}]"#, Rule::Choices),
            2,
            "repeats count"
        );
        let field: DeltaTokens = serde_json::from_str(r#"{"type":"text_delta","text":"\n\n\n\n"}"#).unwrap();
        assert_eq!(field, DeltaTokens(1), "escapes read as the characters they stand for");
    }
}
