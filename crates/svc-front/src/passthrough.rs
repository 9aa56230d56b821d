//! Pass-through of a client API to a deployment that speaks it (Messages → `anthropic/`, Responses →
//! `openai/`): the client's body with only `model` rewritten and the output cap lowered ([`prepare`]), and the
//! upstream's answer metered where it states its usage ([`reply_usage`], [`PassStream`]) and forwarded with
//! the name the client asked for in `model`.
//!
//! Usage: Messages `message_start` (input, cache-creation and cache-read tokens) and `message_delta`
//! (output tokens, cumulative); Responses `response.completed` (`usage.input_tokens`, `output_tokens`).
//! Prompt tokens charged = input + cache creation + cache read.

use super::Api;
use bytes::Bytes;
use serde_json::Value;
use svc_budget::Usage;
use svc_providers::usage::Reported;
use svc_providers::RequestError;

use svc_providers::raw::Object;

/// The body to send upstream: the client's bytes with `model` set to `upstream_model` and the output cap
/// lowered to `cap` when the client asked for more (or set to it when the client asked for none). Every other
/// field is copied as the client wrote it, in its order, without being parsed.
pub fn prepare(api: Api, raw: &[u8], upstream_model: &str, cap: Option<u64>) -> Result<Bytes, RequestError> {
    prepare_with(api, raw, upstream_model, cap, None)
}

/// [`prepare`], and for a Responses body the built-in tool calls (`max_tool_calls`: web searches) lowered to
/// `tool_calls` when the client allowed more (or set to it when the client set none).
pub fn prepare_with(
    api: Api,
    raw: &[u8],
    upstream_model: &str,
    cap: Option<u64>,
    tool_calls: Option<u64>,
) -> Result<Bytes, RequestError> {
    if api == Api::Gemini {
        // Its cap is nested in `generationConfig`.
        return super::gemini_pass::prepare(raw, cap);
    }
    let fields = Object::parse(raw).map_err(|e| crate::bad(format!("request body is not a JSON object: {e}"), None))?;
    Ok(prepare_read(api, &fields, upstream_model, cap, tool_calls))
}

/// [`prepare_with`] of a body already read as top-level fields (`Api::read`'s), written again from them without
/// reading the body again (its whitespace kept). A repeated field is read as its last occurrence (as a parsed map
/// keeps it), and every occurrence is set.
pub fn prepare_read(
    api: Api,
    fields: &Object,
    upstream_model: &str,
    cap: Option<u64>,
    tool_calls: Option<u64>,
) -> Bytes {
    let model = serde_json::to_vec(upstream_model).unwrap_or_else(|_| b"null".to_vec());
    let lowered = |key: &str, to: Option<u64>| {
        let asked = fields.get(key).and_then(|t| serde_json::from_str::<u64>(t).ok());
        to.filter(|to| asked.is_none_or(|a| a > *to)).map(|to| to.to_string())
    };
    let field = if api == Api::Responses { "max_output_tokens" } else { "max_tokens" };
    let cap = lowered(field, cap.filter(|_| api != Api::Embeddings));
    let tool_calls = lowered("max_tool_calls", tool_calls.filter(|_| api == Api::Responses));
    let mut set: Vec<(&str, &[u8])> = vec![("model", &model)];
    if let Some(c) = &cap {
        set.push((field, c.as_bytes()));
    }
    if let Some(t) = &tool_calls {
        set.push(("max_tool_calls", t.as_bytes()));
    }
    Bytes::from(fields.write_with(&set))
}

/// A whole number of `obj[key]`, when it is one.
pub(crate) fn count(obj: Option<&Value>, key: &str) -> Result<u64, String> {
    match obj.and_then(|o| o.get(key)) {
        None | Some(Value::Null) => Ok(0),
        Some(v) => v.as_u64().ok_or_else(|| format!("`usage.{key}` is not a whole number from 0")),
    }
}

/// Prompt tokens of a Messages `usage`: input + cache creation + cache read.
fn messages_prompt(u: Option<&Value>) -> Result<u64, String> {
    let mut total = 0u64;
    for k in ["input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"] {
        total = total.saturating_add(count(u, k)?);
    }
    Ok(total)
}

/// A Messages `usage` (input, cache-creation and cache-read tokens, the 1-hour ones among the writes, and the
/// server-side web searches) with `completion_tokens`.
pub(crate) fn messages_usage(u: Option<&Value>, completion_tokens: u64) -> Result<Usage, String> {
    let within = |key: &str| u.and_then(|u| u.get(key));
    Ok(Usage {
        prompt_tokens: messages_prompt(u)?,
        completion_tokens,
        cache_creation_tokens: count(u, "cache_creation_input_tokens")?,
        cache_read_tokens: count(u, "cache_read_input_tokens")?,
        cache_creation_1h_tokens: count(within("cache_creation"), "ephemeral_1h_input_tokens")?,
        tool_uses: count(within("server_tool_use"), "web_search_requests")?,
    })
}

/// What a passed-through reply's (or a Responses stream's final) `usage` (Gemini's `usageMetadata`) says was
/// used; for Responses, the web searches its `output` (JSON text) holds are billed uses too.
pub fn reply_usage(api: Api, usage: Option<&Value>, output: Option<&str>) -> Reported {
    let Some(u) = usage.filter(|u| !u.is_null()) else { return Reported::Missing };
    let read = || -> Result<Usage, String> {
        Ok(match api {
            Api::Messages => messages_usage(Some(u), count(Some(u), "output_tokens")?)?,
            Api::Gemini => super::gemini_pass::counts(u)?,
            Api::Embeddings | Api::Chat => {
                Usage { prompt_tokens: count(Some(u), "prompt_tokens")?, completion_tokens: 0, ..Usage::default() }
            }
            Api::Responses => Usage {
                prompt_tokens: count(Some(u), "input_tokens")?,
                completion_tokens: count(Some(u), "output_tokens")?,
                cache_read_tokens: count(u.get("input_tokens_details"), "cached_tokens")?,
                tool_uses: output.map_or(0, svc_providers::usage::web_search_calls),
                ..Usage::default()
            },
        })
    };
    match read() {
        Ok(usage) => Reported::Counts(usage),
        Err(why) => Reported::Malformed(why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Map};

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn only_model_and_a_larger_cap_change() {
        let raw =
            br#"{"model":"claude-opus-5-5","max_tokens":128000,"thinking":{"type":"adaptive"},"x_unknown":[1,2]}"#;
        let out = prepare(Api::Messages, raw, "claude-opus-5-5-20261101", Some(32000)).unwrap_or_default();
        assert_eq!(
            serde_json::from_slice::<Value>(&out).unwrap_or_default(),
            json!({"model":"claude-opus-5-5-20261101","max_tokens":32000,"thinking":{"type":"adaptive"},"x_unknown":[1,2]})
        );
        let out = prepare(Api::Responses, br#"{"model":"m","input":"hi"}"#, "gpt-5", None).unwrap_or_default();
        assert_eq!(serde_json::from_slice::<Value>(&out).unwrap_or_default(), json!({"model":"gpt-5","input":"hi"}));
        // Every other field byte for byte, in order; a missing cap is added; a smaller one stays.
        let raw = br#"{ "input" : [1, 2.50, "\u00e9"], "model":"m", "max_output_tokens": 10 }"#;
        let out = prepare(Api::Responses, raw, "up", Some(100)).unwrap_or_default();
        assert_eq!(&out[..], &br#"{ "input" : [1, 2.50, "\u00e9"], "model":"up", "max_output_tokens": 10 }"#[..]);
        let out = prepare(Api::Messages, br#"{"model":"m"}"#, "up", Some(7)).unwrap_or_default();
        let bounded = |raw: &[u8]| prepare_with(Api::Responses, raw, "up", None, Some(0)).unwrap_or_default();
        assert_eq!(&bounded(br#"{"model":"m","max_tool_calls":3}"#)[..], br#"{"model":"up","max_tool_calls":0}"#);
        assert_eq!(&bounded(br#"{"model":"m"}"#)[..], br#"{"model":"up","max_tool_calls":0}"#);
        assert_eq!(&out[..], &br#"{"model":"up","max_tokens":7}"#[..]);
        assert!(prepare(Api::Messages, b"[1]", "up", None).is_err());
    }

    #[test]
    fn a_body_read_as_it_is_is_prepared_as_its_bytes_are() {
        // `Api::read`'s fields (one jiter pass, the body's own text kept) against the body parsed on its own: the
        // same fields, values and order, so the pass-through writes what the client sent.
        let bodies = [
            (Api::Responses, r#"{"model":"m","input":"hi","max_output_tokens":10}"#),
            (Api::Responses, r#"{ "model" : "m", "input":"hi", "max_output_tokens": 900, "max_tool_calls": 5 }"#),
            (Api::Responses, r#"{"model":"m","input":"hi","max_output_tokens":null}"#),
            (Api::Responses, r#"{"model":"m","input":"hi","max_output_tokens":10,"max_output_tokens":900}"#),
            (Api::Messages, r#"{"model":"m","max_tokens":128000,"messages":[{"role":"user","content":"hi"}]}"#),
            (Api::Messages, r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"model":"n"}"#),
        ];
        for (api, body) in bodies {
            let fields = api.read(body.as_bytes()).ok().and_then(|t| t.fields);
            let fields = fields.unwrap_or_else(|| panic!("read as it is: {body}"));
            for (cap, calls) in [(None, None), (Some(100), None), (Some(100), Some(0)), (Some(5000), Some(9))] {
                let read = prepare_read(api, &fields, "up", cap, calls);
                let bytes = prepare_with(api, body.as_bytes(), "up", cap, calls).unwrap_or_default();
                let fields = |b: &[u8]| {
                    let svc_providers::raw::Fields(f) = serde_json::from_slice(b).unwrap_or_else(|e| panic!("{e}"));
                    f.into_iter().map(|(k, v)| (k.into_owned(), v.get().replace(' ', ""))).collect::<Vec<_>>()
                };
                assert_eq!(fields(&read), fields(&bytes), "{body} {cap:?} {calls:?}");
            }
        }
        // The last of a repeated cap is the one asked (and every occurrence is lowered).
        let out = prepare_with(Api::Responses, bodies[3].1.as_bytes(), "up", Some(100), None).unwrap_or_default();
        assert_eq!(&out[..], br#"{"model":"up","input":"hi","max_output_tokens":100,"max_output_tokens":100}"#);
    }

    #[test]
    fn replies_are_metered_in_their_api() {
        let body = obj(json!({"usage": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}}));
        assert_eq!(
            reply_usage(Api::Responses, body.get("usage"), None),
            Reported::Counts(Usage { prompt_tokens: 3, completion_tokens: 4, ..Usage::default() })
        );
        assert!(matches!(reply_usage(Api::Messages, Some(&json!({"input_tokens": -1})), None), Reported::Malformed(_)));
    }
}
