//! The embeddings front end (`POST /v1/embeddings`): the request always passes through to a deployment that
//! serves embeddings (`openai/`, `mock`); the pipeline's form of it is a chat request of the input's text with
//! `max_tokens: 0`, so admission reserves the input alone and the rate limits count it.

use serde_json::{json, Map, Value};
use svc_providers::RequestError;

/// The pipeline's chat-completions form of an embeddings request.
pub fn to_chat(body: &[u8]) -> Result<Map<String, Value>, RequestError> {
    let (req, model) = super::object_with_model(body)?;
    let text = match req.get("input") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .map(|i| match i {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => {
            return Err(crate::bad(
                "`input` must be a string or a non-empty array of strings or token arrays",
                Some("input".into()),
            ))
        }
    };
    let mut out = Map::new();
    out.insert("model".into(), Value::String(model));
    out.insert("messages".into(), json!([{"role": "user", "content": text}]));
    out.insert("max_tokens".into(), json!(0));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_becomes_one_message_with_no_output() {
        let out = to_chat(br#"{"model":"e","input":["a","b"],"dimensions":8}"#).unwrap_or_default();
        assert_eq!(
            Value::Object(out),
            json!({"model":"e","messages":[{"role":"user","content":"a\nb"}],"max_tokens":0})
        );
        let err = to_chat(br#"{"model":"e","input":[]}"#).err().and_then(|e| e.param);
        assert_eq!(err.as_deref(), Some("input"));
    }
}
