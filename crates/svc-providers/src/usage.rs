//! Reading the token counts an upstream reports in an OpenAI `usage` object, without believing them blindly:
//! a count must be a whole number from zero up. Whether a well-formed count is plausible for the request
//! (not above what it could produce) is the gateway's call; this file only tells present, missing and
//! malformed apart.
//!
//! What this file does not do: price usage, or replace a bad count (the gateway's settlement does both).

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use svc_budget::Usage;

/// What an upstream's `usage` said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reported {
    /// No `usage` at all (or `null`): the upstream does not count.
    Missing,
    /// Well-formed counts.
    Counts(Usage),
    /// A `usage` that is not an object of whole token counts (`{}`, negative, fractional, text): the
    /// description says what is wrong.
    Malformed(String),
}

/// Reads an OpenAI `usage` value: `prompt_tokens`, `completion_tokens` (`total_tokens` is ignored), and what a
/// provider bills apart when it says so: `prompt_tokens_details.cached_tokens` (read from the prompt cache),
/// LiteLLM's `cache_creation_input_tokens` (written to it) and `cache_creation_1h_input_tokens` (of those, for an
/// hour), and `server_tool_use.web_search_requests`.
pub fn read(usage: Option<&Value>) -> Reported {
    let fields = match usage {
        None | Some(Value::Null) => return Reported::Missing,
        Some(Value::Object(fields)) => fields,
        Some(other) => return Reported::Malformed(format!("`usage` is not an object: {}", short(other))),
    };
    let count = |key: &str| -> Result<u64, String> {
        match fields.get(key) {
            None | Some(Value::Null) => Err(format!("`usage.{key}` is missing")),
            Some(v) => v.as_u64().ok_or_else(|| format!("`usage.{key}` is not a whole number from 0: {}", short(v))),
        }
    };
    let optional = |path: &[&str]| -> Result<u64, String> {
        let mut v = Some(fields.get(path[0]));
        for key in &path[1..] {
            v = v.map(|v| v.and_then(|v| v.get(*key)));
        }
        match v.flatten() {
            None | Some(Value::Null) => Ok(0),
            Some(n) => n
                .as_u64()
                .ok_or_else(|| format!("`usage.{}` is not a whole number from 0: {}", path.join("."), short(n))),
        }
    };
    let read = || -> Result<Usage, String> {
        Ok(Usage {
            prompt_tokens: count("prompt_tokens")?,
            completion_tokens: count("completion_tokens")?,
            cache_read_tokens: optional(&["prompt_tokens_details", "cached_tokens"])?,
            cache_creation_tokens: optional(&["cache_creation_input_tokens"])?,
            cache_creation_1h_tokens: optional(&["cache_creation_1h_input_tokens"])?,
            tool_uses: optional(&["server_tool_use", "web_search_requests"])?,
        })
    };
    match read() {
        Ok(u) => Reported::Counts(u),
        Err(e) => Reported::Malformed(e),
    }
}

/// [`read`] of a `usage` field given as JSON text (an answer's raw field): the two counts are read straight
/// from the text, without building the object as a map (about 3,000 instructions a request, measured); any
/// text that reading does not take as it is (not an object, a repeated key, a count that is not a whole number)
/// goes through [`read`], which says what is wrong.
pub fn read_text(usage: Option<&str>) -> Reported {
    /// The counts' texts; other fields are skipped.
    #[derive(Deserialize)]
    struct Counts<'a> {
        #[serde(borrow)]
        prompt_tokens: Option<&'a RawValue>,
        #[serde(borrow)]
        completion_tokens: Option<&'a RawValue>,
        prompt_tokens_details: Option<Details>,
        cache_creation_input_tokens: Option<u64>,
        cache_creation_1h_input_tokens: Option<u64>,
        server_tool_use: Option<Tools>,
    }
    #[derive(Deserialize)]
    struct Details {
        cached_tokens: Option<u64>,
    }
    #[derive(Deserialize)]
    struct Tools {
        web_search_requests: Option<u64>,
    }
    let Some(text) = usage else { return Reported::Missing };
    let count = |raw: Option<&RawValue>| raw.and_then(|r| serde_json::from_str::<u64>(r.get()).ok());
    // A struct also reads from an array (`[3, 4]`), which is no `usage`.
    let object = text.trim_start().starts_with('{');
    if let (true, Ok(counts)) = (object, serde_json::from_str::<Counts>(text)) {
        if let (Some(prompt_tokens), Some(completion_tokens)) =
            (count(counts.prompt_tokens), count(counts.completion_tokens))
        {
            return Reported::Counts(Usage {
                prompt_tokens,
                completion_tokens,
                cache_read_tokens: counts.prompt_tokens_details.and_then(|d| d.cached_tokens).unwrap_or(0),
                cache_creation_tokens: counts.cache_creation_input_tokens.unwrap_or(0),
                cache_creation_1h_tokens: counts.cache_creation_1h_input_tokens.unwrap_or(0),
                tool_uses: counts.server_tool_use.and_then(|t| t.web_search_requests).unwrap_or(0),
            });
        }
    }
    match serde_json::from_str::<Value>(text) {
        Ok(value) => read(Some(&value)),
        Err(e) => Reported::Malformed(format!("`usage` is not JSON: {e}")),
    }
}

/// The web searches an OpenAI Responses `output` (as JSON text) holds: its `web_search_call` items, each billed
/// as one search. Found by their `"type": "web_search_call"` member without parsing the output (a quote inside a
/// generated string is escaped, so the member can only be a real one).
pub fn web_search_calls(output: &str) -> u64 {
    // Made once: a searcher's set-up costs about as much as a search of a short output.
    static VALUE: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"web_search_call\""));
    let bytes = output.as_bytes();
    let mut calls = 0u64;
    for at in VALUE.find_iter(bytes) {
        let before = bytes[..at].trim_ascii_end();
        let Some(before) = before.strip_suffix(b":") else { continue };
        if before.trim_ascii_end().ends_with(b"\"type\"") {
            calls = calls.saturating_add(1);
        }
    }
    calls
}

/// A value as JSON text, at most 64 characters (for a log line).
fn short(v: &Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(64) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tells_present_missing_and_malformed_apart() {
        let counts = |p, c| Reported::Counts(Usage { prompt_tokens: p, completion_tokens: c, ..Usage::default() });
        assert_eq!(read(None), Reported::Missing);
        assert_eq!(read(Some(&Value::Null)), Reported::Missing);
        assert_eq!(read(Some(&json!({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}))), counts(3, 4));
        assert_eq!(
            read(Some(&json!({"prompt_tokens": 3, "completion_tokens": 18446744073709551615u64}))),
            counts(3, u64::MAX),
            "well-formed, however absurd: judged by the gateway"
        );
        for bad in [
            json!({}),
            json!({"prompt_tokens": -1, "completion_tokens": 4}),
            json!({"prompt_tokens": 1.5, "completion_tokens": 4}),
            json!({"prompt_tokens": "3", "completion_tokens": 4}),
            json!({"prompt_tokens": 3}),
            json!({"prompt_tokens": 3, "completion_tokens": null}),
            json!([1, 2]),
            json!("12"),
        ] {
            assert!(matches!(read(Some(&bad)), Reported::Malformed(_)), "{bad}");
        }
    }

    #[test]
    fn reading_the_text_says_what_reading_the_value_says() {
        for text in [
            "null",
            r#"{"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}"#,
            r#"{"prompt_tokens":3,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0}}"#,
            r#"{"prompt_tokens":30,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":20}}"#,
            r#"{"prompt_tokens":30,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":-1}}"#,
            r#"{"prompt_tokens":30,"completion_tokens":4,"prompt_tokens_details":null}"#,
            r#"{"prompt_tokens":30,"completion_tokens":4,"cache_creation_input_tokens":9,"cache_creation_1h_input_tokens":3}"#,
            r#"{"prompt_tokens":30,"completion_tokens":4,"server_tool_use":{"web_search_requests":2}}"#,
            r#"{"prompt_tokens":30,"completion_tokens":4,"server_tool_use":{"web_search_requests":"2"}}"#,
            r#"{"prompt_tokens": 3, "completion_tokens": 18446744073709551615}"#,
            r#"{"prompt_tokens": 3, "completion_tokens": 18446744073709551616}"#,
            r#"{"prompt_tokens": 3, "completion_tokens": 4, "prompt_tokens": 5}"#,
            r#"{"prompt_tokens": 3.0, "completion_tokens": 4}"#,
            r#"{"prompt_tokens": 1e3, "completion_tokens": 4}"#,
            r#"{"prompt_tokens": -1, "completion_tokens": 4}"#,
            r#"{"prompt_tokens": "3", "completion_tokens": 4}"#,
            r#"{"prompt_tokens": 3}"#,
            r#"{"prompt_tokens": 3, "completion_tokens": null}"#,
            r#"{}"#,
            r#"[1, 2]"#,
            r#""12""#,
            r#"7"#,
        ] {
            let value: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(read_text(Some(text)), read(Some(&value)), "{text}");
        }
        assert_eq!(read_text(None), Reported::Missing);
    }

    #[test]
    fn web_search_calls_are_counted_as_items_never_as_text() {
        let output = json!([
            {"type": "web_search_call", "id": "ws_1", "status": "completed"},
            {"type":"web_search_call","id":"ws_2"},
            {"type": "message", "content": [{"type": "output_text", "text": "a \"type\": \"web_search_call\" in text"}]},
            {"name": "web_search_call"}
        ]);
        assert_eq!(web_search_calls(&output.to_string()), 2);
        assert_eq!(web_search_calls(r#"[{"type" : "web_search_call"}]"#), 1);
        assert_eq!(web_search_calls("[]"), 0);
    }
}
