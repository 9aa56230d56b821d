//! A passed-through answer's `usage` read from its text: the counts a Responses or Messages `usage` holds are read
//! straight into a struct, without building the object as a map (a `Value` of a Responses `usage`, with its two
//! nested objects, cost about 7,000 instructions a request, measured; this reading costs a fraction of it).
//!
//! Any text this reading does not take as it is goes through the `Value` readers of [`super::passthrough`], which
//! say what is wrong: not an object, a repeated key, a count that is not a whole number from 0, a nested field that
//! is neither an object nor null. Where this reading takes a text, both read the same counts (property test
//! `usage_read_from_its_text_reads_as_its_value`).

use super::passthrough::{count, messages_usage, reply_usage};
use super::Api;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::Value;
use svc_budget::Usage;
use svc_providers::usage::Reported;

/// The counts of a Responses or Messages `usage` (absent or null: `None`).
#[derive(Debug, Default, Deserialize)]
struct Counts<'a> {
    /// Present (even null) or not: a Messages `message_delta` repeats the input counts only when it has this key.
    #[serde(default, deserialize_with = "present")]
    input_tokens: Option<Option<u64>>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    #[serde(borrow)]
    input_tokens_details: Option<&'a RawValue>,
    #[serde(borrow)]
    cache_creation: Option<&'a RawValue>,
    /// Present (even null) or not: a `message_delta` without it keeps `message_start`'s web searches.
    #[serde(default, borrow, deserialize_with = "present")]
    server_tool_use: Option<Option<&'a RawValue>>,
}

/// The counts of one nested object of a `usage`.
#[derive(Debug, Default, Deserialize)]
struct Nested {
    cached_tokens: Option<u64>,
    ephemeral_1h_input_tokens: Option<u64>,
    web_search_requests: Option<u64>,
}

/// A field given, whatever its value (`null` included): `Some`.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// Whether `text` is a JSON object's text (a struct also reads from an array, which is no `usage`).
fn is_object(text: &str) -> bool {
    text.trim_start().starts_with('{')
}

/// The counts of a nested object's text; `Some(default)` for none or null, `None` for anything else that is not
/// an object that reads.
fn nested(raw: Option<&RawValue>) -> Option<Nested> {
    match raw.map(RawValue::get) {
        None | Some("null") => Some(Nested::default()),
        Some(text) if is_object(text) => serde_json::from_str(text).ok(),
        Some(_) => None,
    }
}

impl<'a> Counts<'a> {
    /// The counts of `text`, a `usage` object's text; `None` when this reading does not take it as it is.
    fn read(text: &'a str) -> Option<Counts<'a>> {
        if !is_object(text) {
            return None;
        }
        serde_json::from_str(text).ok()
    }

    /// A Messages `usage` with `completion_tokens`, as [`messages_usage`] reads it.
    fn messages(&self, completion_tokens: u64) -> Option<Usage> {
        let creation = self.cache_creation_input_tokens.unwrap_or(0);
        let read = self.cache_read_input_tokens.unwrap_or(0);
        Some(Usage {
            prompt_tokens: self.input_tokens.flatten().unwrap_or(0).saturating_add(creation).saturating_add(read),
            completion_tokens,
            cache_creation_tokens: creation,
            cache_read_tokens: read,
            cache_creation_1h_tokens: nested(self.cache_creation)?.ephemeral_1h_input_tokens.unwrap_or(0),
            tool_uses: nested(self.server_tool_use.flatten())?.web_search_requests.unwrap_or(0),
        })
    }

    /// The usage of a reply in `api` (Responses and Messages only), as [`reply_usage`] reads it.
    fn reply(&self, api: Api, output: Option<&str>) -> Option<Usage> {
        match api {
            Api::Messages => self.messages(self.output_tokens.unwrap_or(0)),
            Api::Responses => Some(Usage {
                prompt_tokens: self.input_tokens.flatten().unwrap_or(0),
                completion_tokens: self.output_tokens.unwrap_or(0),
                cache_read_tokens: nested(self.input_tokens_details)?.cached_tokens.unwrap_or(0),
                tool_uses: output.map_or(0, svc_providers::usage::web_search_calls),
                ..Usage::default()
            }),
            Api::Chat | Api::Embeddings | Api::Gemini => None,
        }
    }
}

/// The `Value` of a `usage` text the fast reading did not take (`None` when it is no JSON).
fn value(usage: Option<&str>) -> Option<Value> {
    usage.and_then(|text| serde_json::from_str(text).ok())
}

/// [`reply_usage`] of a `usage` given as its JSON text (an answer's or an event's raw field).
pub fn reply_usage_text(api: Api, usage: Option<&str>, output: Option<&str>) -> Reported {
    // Only Responses and Messages usages are read from their text; the others are not read twice.
    let read = usage.filter(|_| matches!(api, Api::Responses | Api::Messages)).and_then(Counts::read);
    if let Some(usage) = read.and_then(|c| c.reply(api, output)) {
        return Reported::Counts(usage);
    }
    reply_usage(api, value(usage).as_ref(), output)
}

/// [`messages_usage`] (with no completion tokens) of a `usage` given as its JSON text: a `message_start`'s.
pub(crate) fn messages_start_text(usage: Option<&str>) -> Result<Usage, String> {
    if let Some(usage) = usage.and_then(Counts::read).and_then(|c| c.messages(0)) {
        return Ok(usage);
    }
    messages_usage(value(usage).as_ref(), 0)
}

/// The counts of a Messages stream's `message_delta` (`data`, the event's text): its output and server tool uses,
/// with the input counts it repeats (newer streams) or `start` gave (`message_start`'s, in older ones; none: zero).
pub(crate) fn final_counts(data: &str, start: Option<&Result<Usage, String>>) -> Reported {
    final_counts_text(data, start).unwrap_or_else(|| final_counts_value(data, start))
}

/// [`final_counts`] read from a `Value` of the event.
fn final_counts_value(data: &str, start: Option<&Result<Usage, String>>) -> Reported {
    let v: Value = serde_json::from_str(data).unwrap_or(Value::Null);
    let u = v.get("usage");
    let repeated = u.and_then(|u| u.get("input_tokens")).map(|_| messages_usage(u, 0));
    // Server tool uses come with the final counts.
    let tools = match u.and_then(|u| u.get("server_tool_use")) {
        Some(t) => count(Some(t), "web_search_requests").map(Some),
        None => Ok(None),
    };
    final_of(repeated, start, count(u, "output_tokens"), tools)
}

/// [`final_counts`] read from the event's text; `None` when this reading does not take the text as it is.
fn final_counts_text(data: &str, start: Option<&Result<Usage, String>>) -> Option<Reported> {
    #[derive(Deserialize)]
    struct Delta<'a> {
        #[serde(borrow)]
        usage: Option<&'a RawValue>,
    }
    if !is_object(data) {
        return None;
    }
    let delta: Delta<'_> = serde_json::from_str(data).ok()?;
    let counts = match delta.usage {
        None => Counts::default(),
        Some(raw) => Counts::read(raw.get())?,
    };
    let repeated = match counts.input_tokens {
        Some(_) => Some(Ok(counts.messages(0)?)),
        None => None,
    };
    let tools = match counts.server_tool_use {
        Some(raw) => Some(nested(raw)?.web_search_requests.unwrap_or(0)),
        None => None,
    };
    Some(final_of(repeated, start, Ok(counts.output_tokens.unwrap_or(0)), Ok(tools)))
}

/// A `message_delta`'s counts: the input counts it repeats (`repeated`) or else `start`'s (none: zero), its output,
/// and its server tool uses (none given: the input's); the first fault found, if any.
fn final_of(
    repeated: Option<Result<Usage, String>>,
    start: Option<&Result<Usage, String>>,
    completion: Result<u64, String>,
    tools: Result<Option<u64>, String>,
) -> Reported {
    let input = repeated.unwrap_or_else(|| start.cloned().unwrap_or(Ok(Usage::default())));
    match (input, completion, tools) {
        (Ok(input), Ok(completion_tokens), Ok(tools)) => {
            Reported::Counts(Usage { completion_tokens, tool_uses: tools.unwrap_or(input.tool_uses), ..input })
        }
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => Reported::Malformed(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Values a count may be given as, good and bad.
    fn count_value() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => (0u64..1_000_000).prop_map(|n| n.to_string()),
            1 => Just("null".to_string()),
            1 => Just("-1".to_string()),
            1 => Just("-0".to_string()),
            1 => Just("1.5".to_string()),
            1 => Just("1e3".to_string()),
            1 => Just("\"7\"".to_string()),
            1 => Just("18446744073709551615".to_string()),
            1 => Just("18446744073709551616".to_string()),
            1 => Just("[3]".to_string()),
            1 => Just("{}".to_string()),
            1 => Just("true".to_string()),
        ]
    }

    /// An object's text from `fields` (keys may repeat), with or without spaces.
    fn object_text(fields: &[(String, String)], spaced: bool) -> String {
        let sep = if spaced { " , " } else { "," };
        let colon = if spaced { " : " } else { ":" };
        let fields: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\"{colon}{v}")).collect();
        format!("{{{}}}", fields.join(sep))
    }

    /// A nested object of a `usage` (or something else in its place).
    fn nested_value() -> impl Strategy<Value = String> {
        let keys = prop_oneof![
            Just("cached_tokens"),
            Just("ephemeral_1h_input_tokens"),
            Just("web_search_requests"),
            Just("x")
        ];
        let object = (prop::collection::vec((keys.prop_map(String::from), count_value()), 0..4), any::<bool>())
            .prop_map(|(fields, spaced)| object_text(&fields, spaced));
        prop_oneof![6 => object, 1 => count_value(), 1 => Just("[{\"cached_tokens\":5}]".to_string())]
    }

    /// A `usage` object's text: known keys with counts or nested objects, repeated keys sometimes.
    fn usage_text() -> impl Strategy<Value = String> {
        let counts = prop_oneof![
            Just("input_tokens"),
            Just("output_tokens"),
            Just("cache_creation_input_tokens"),
            Just("cache_read_input_tokens"),
            Just("total_tokens"),
        ]
        .prop_flat_map(|k| (Just(k.to_string()), count_value()));
        let nested = prop_oneof![Just("input_tokens_details"), Just("cache_creation"), Just("server_tool_use")]
            .prop_flat_map(|k| (Just(k.to_string()), nested_value()));
        let field = prop_oneof![3 => counts, 2 => nested];
        let object = (prop::collection::vec(field, 0..8), any::<bool>())
            .prop_map(|(fields, spaced)| object_text(&fields, spaced));
        prop_oneof![8 => object, 1 => count_value(), 1 => Just("[{\"input_tokens\":5}]".to_string())]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// Wherever the text is read without a `Value`, it reads as the `Value` does.
        #[test]
        fn usage_read_from_its_text_reads_as_its_value(usage in usage_text(), start_err in any::<bool>()) {
            let parsed = value(Some(&usage));
            let output = Some(r#"[{"type":"web_search_call"}]"#);
            for api in [Api::Responses, Api::Messages] {
                prop_assert_eq!(reply_usage_text(api, Some(&usage), output), reply_usage(api, parsed.as_ref(), output));
            }
            prop_assert_eq!(messages_start_text(Some(&usage)), messages_usage(parsed.as_ref(), 0));
            let start = if start_err { Err("bad start".to_string()) } else { Ok(Usage { prompt_tokens: 9, tool_uses: 2, ..Usage::default() }) };
            for data in [format!(r#"{{"type":"message_delta","usage":{usage}}}"#), format!(r#"{{"usage":{usage},"usage":{{}}}}"#)] {
                for start in [None, Some(&start)] {
                    prop_assert_eq!(final_counts(&data, start), final_counts_value(&data, start));
                }
            }
        }
    }

    #[test]
    fn agent_usage_is_read_from_its_text() {
        let responses = r#"{"input_tokens":10,"output_tokens":5,"total_tokens":15,"input_tokens_details":{"cached_tokens":4},"output_tokens_details":{"reasoning_tokens":0}}"#;
        let counts = Counts::read(responses).and_then(|c| c.reply(Api::Responses, None));
        let want = Usage { prompt_tokens: 10, completion_tokens: 5, cache_read_tokens: 4, ..Usage::default() };
        assert_eq!(counts, Some(want), "read without a Value");
        let messages = r#"{"input_tokens":3,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"cache_creation":{"ephemeral_5m_input_tokens":40,"ephemeral_1h_input_tokens":60},"output_tokens":7,"server_tool_use":{"web_search_requests":2},"service_tier":"standard"}"#;
        let counts = Counts::read(messages).and_then(|c| c.reply(Api::Messages, None));
        let want = Usage {
            prompt_tokens: 1103,
            completion_tokens: 7,
            cache_creation_tokens: 100,
            cache_read_tokens: 1000,
            cache_creation_1h_tokens: 60,
            tool_uses: 2,
        };
        assert_eq!(counts, Some(want), "read without a Value");
        let delta = r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":42}}"#;
        let start = Ok(Usage { prompt_tokens: 1110, tool_uses: 1, ..Usage::default() });
        let want = Usage { prompt_tokens: 1110, completion_tokens: 42, tool_uses: 1, ..Usage::default() };
        assert_eq!(final_counts_text(delta, Some(&start)), Some(Reported::Counts(want)));
        // What the text reading does not take is left to the `Value`.
        for text in
            [r#"{"input_tokens":1,"input_tokens":2}"#, r#"{"input_tokens":-1}"#, "[1]", r#"{"cache_creation":[1]}"#]
        {
            assert!(Counts::read(text).and_then(|c| c.reply(Api::Messages, None)).is_none(), "{text}");
        }
    }
}
