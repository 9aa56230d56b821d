//! Pass-through of the Gemini API to a deployment that speaks it (`gemini/`, `vertex_ai/` Gemini models): the
//! client's body without the fields the gateway added from the path, its output cap
//! (`generationConfig.maxOutputTokens`) lowered to what the budget allows; the answer metered by its
//! `usageMetadata` and forwarded with the client's name as `modelVersion`.
//!
//! Usage: `promptTokenCount` (with `toolUsePromptTokenCount`, input too) is the prompt, of which
//! `cachedContentTokenCount` was read from the cache; `candidatesTokenCount` + `thoughtsTokenCount` the
//! completion (Google bills thinking as output). In a stream each event's counts are the total so far: the last wins.

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::borrow::Cow;
use svc_budget::Usage;
use svc_providers::estimate::text_tokens;
use svc_providers::generated::{value_tokens, Rule};
use svc_providers::raw::{write_text_fields, Fields};
use svc_providers::usage::Reported;
use svc_providers::RequestError;

/// The body to send: the client's object as it wrote it, without `model` and `stream` (the gateway's, from the
/// path), with `generationConfig.maxOutputTokens` lowered to `cap` when the client asked for more (or set when it
/// asked none). Only `generationConfig` is parsed, and only when there is a cap.
pub fn prepare(raw: &[u8], cap: Option<u64>) -> Result<Bytes, RequestError> {
    let Fields(fields) =
        serde_json::from_slice(raw).map_err(|e| crate::bad(format!("request body is not a JSON object: {e}"), None))?;
    let kept = || fields.iter().filter(|(k, _)| k != "model" && k != "stream");
    let config = match cap {
        Some(cap) => Some(capped_config(fields.iter().find(|(k, _)| k == "generationConfig").map(|(_, v)| *v), cap)?),
        None => None,
    };
    let size = raw.len();
    let mut out = write_text_fields(kept().map(|(k, v)| (&**k, v.get().as_bytes())), size, |k| {
        (k == "generationConfig").then(|| config.as_deref().map(Cow::Borrowed)).flatten()
    });
    if let (Some(config), false) = (&config, kept().any(|(k, _)| k == "generationConfig")) {
        svc_providers::raw::append(&mut out, "generationConfig", config);
    }
    Ok(Bytes::from(out))
}

/// A `generationConfig` (the client's, or none) with `maxOutputTokens` at most `cap`, as JSON text.
fn capped_config(config: Option<&RawValue>, cap: u64) -> Result<Vec<u8>, RequestError> {
    let mut config: Map<String, Value> = match config {
        Some(raw) => serde_json::from_str(raw.get()).map_err(|e| {
            crate::bad(format!("`generationConfig` is not an object: {e}"), Some("generationConfig".into()))
        })?,
        None => Map::new(),
    };
    let asked = config.get("maxOutputTokens").and_then(Value::as_u64);
    if asked.is_none_or(|a| a > cap) {
        config.insert("maxOutputTokens".into(), Value::from(cap));
    }
    serde_json::to_vec(&config).map_err(|e| crate::bad(format!("cannot write `generationConfig`: {e}"), None))
}

/// The counts of a `usageMetadata` object; what is wrong with it otherwise.
pub(crate) fn counts(u: &Value) -> Result<Usage, String> {
    if !u.is_object() {
        return Err("`usageMetadata` is not an object".into());
    }
    let count = |key: &str| match u.get(key) {
        None | Some(Value::Null) => Ok(0),
        Some(v) => v.as_u64().ok_or_else(|| format!("`usageMetadata.{key}` is not a whole number from 0")),
    };
    Ok(Usage {
        prompt_tokens: count("promptTokenCount")?.saturating_add(count("toolUsePromptTokenCount")?),
        completion_tokens: count("candidatesTokenCount")?.saturating_add(count("thoughtsTokenCount")?),
        cache_read_tokens: count("cachedContentTokenCount")?,
        ..Usage::default()
    })
}

/// What a `usageMetadata` says was used.
pub fn usage(metadata: Option<&Value>) -> Reported {
    match metadata.filter(|u| !u.is_null()).map(counts) {
        None => Reported::Missing,
        Some(Ok(usage)) => Reported::Counts(usage),
        Some(Err(why)) => Reported::Malformed(why),
    }
}

/// The generated tokens of a response's `candidates`: the texts and function calls of their parts (thought
/// signatures, safety ratings and finish reasons are not output).
pub fn output_tokens(candidates: &Value) -> u64 {
    let parts = candidates
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("content")?.get("parts")?.as_array())
        .flatten();
    parts.fold(0u64, |n, p| {
        let tokens = match p {
            Value::Object(part) => part
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "thoughtSignature" | "thought"))
                .fold(0u64, |t, (_, v)| t.saturating_add(value_tokens(v, Rule::Whole))),
            other => value_tokens(other, Rule::Whole),
        };
        n.saturating_add(tokens)
    })
}

/// One event of a passed-through Gemini stream: its data with `modelVersion` set to `alias` (JSON text), only its
/// `candidates` and `usageMetadata` parsed, the rest forwarded as written; the usage it reports and the generated
/// tokens it carries. Data that is not an object is forwarded as it is and counted whole.
pub fn event(data: &str, alias: &[u8]) -> (Option<Vec<u8>>, Option<Reported>, u64) {
    let Ok(Fields(fields)) = serde_json::from_str::<Fields<'_>>(data) else {
        return (None, None, text_tokens(data));
    };
    let parsed = |key: &str| {
        let raw = fields.iter().find(|(k, _)| k == key)?.1;
        Some(serde_json::from_str::<Value>(raw.get()).unwrap_or(Value::Null))
    };
    let generated = parsed("candidates").map_or(0, |c| output_tokens(&c));
    let reported = parsed("usageMetadata").map(|u| usage(Some(&u)));
    let rewritten =
        svc_providers::raw::write_fields(&fields, |k| (k == "modelVersion").then_some(Cow::Borrowed(alias)));
    (Some(rewritten), reported, generated)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_the_gateways_fields_go_and_a_larger_cap_is_lowered() {
        let raw = br#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":9000,"topK":64},"model":"g","stream":true}"#;
        let out: Value = serde_json::from_slice(&prepare(raw, Some(100)).unwrap_or_default()).unwrap_or_default();
        assert_eq!(
            out,
            json!({"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":100,"topK":64}})
        );
        // Without a cap every other field is sent byte for byte, in its order.
        let raw = br#"{ "contents" : [1, 2.50, "\u00e9"], "model":"g", "stream":false }"#;
        assert_eq!(&prepare(raw, None).unwrap_or_default()[..], br#"{"contents":[1, 2.50, "\u00e9"]}"#);
        let out: Value =
            serde_json::from_slice(&prepare(br#"{"contents":[],"model":"g"}"#, Some(7)).unwrap_or_default())
                .unwrap_or_default();
        assert_eq!(out["generationConfig"], json!({"maxOutputTokens": 7}));
        let small = br#"{"generationConfig":{"maxOutputTokens":5}}"#;
        let out: Value = serde_json::from_slice(&prepare(small, Some(7)).unwrap_or_default()).unwrap_or_default();
        assert_eq!(out["generationConfig"]["maxOutputTokens"], 5);
        assert!(prepare(b"[1]", None).is_err());
    }

    #[test]
    fn usage_metadata_bills_thoughts_as_output_and_tool_prompts_as_input() {
        let u = json!({"promptTokenCount": 100, "cachedContentTokenCount": 40, "candidatesTokenCount": 7,
            "thoughtsTokenCount": 20, "toolUsePromptTokenCount": 3, "totalTokenCount": 130});
        let want = Usage { prompt_tokens: 103, completion_tokens: 27, cache_read_tokens: 40, ..Usage::default() };
        assert_eq!(usage(Some(&u)), Reported::Counts(want));
        assert_eq!(usage(None), Reported::Missing);
        assert!(matches!(usage(Some(&json!({"promptTokenCount": -1}))), Reported::Malformed(_)));
    }

    #[test]
    fn stream_events_are_renamed_metered_and_counted() {
        let data = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "abcdefgh", "thoughtSignature": "x".repeat(400)}]},
            "safetyRatings": [{"category": "HARM_CATEGORY_X", "probability": "NEGLIGIBLE"}]}],
            "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2}, "modelVersion": "gemini-2.5-pro-002"});
        let (out, reported, generated) = event(&data.to_string(), br#""my-gemini""#);
        let out: Value = serde_json::from_slice(&out.unwrap_or_default()).unwrap_or_default();
        assert_eq!(out["modelVersion"], "my-gemini");
        assert_eq!(generated, 2, "the text alone");
        let want = Usage { prompt_tokens: 5, completion_tokens: 2, ..Usage::default() };
        assert_eq!(reported, Some(Reported::Counts(want)));
        let (out, reported, generated) = event("not json", br#""m""#);
        assert_eq!((out, reported, generated), (None, None, text_tokens("not json")));
    }
}
