//! OpenAI embeddings at a Gemini API deployment: the request (`input`, a string or a list of strings;
//! `dimensions`) becomes one `:batchEmbedContents` call (a request per input, `outputDimensionality`), and its
//! `{"embeddings": [{"values"}]}` the OpenAI list. The Gemini API reports no token count for embeddings: the
//! usage is the gateway's estimate of the inputs (`tokens.rs`), said so by `usage.estimated: true`.

use crate::passthrough::Raw;
use crate::{raw, ProviderError};
use serde_json::{json, Value};

fn unsupported(message: &str, param: &str) -> ProviderError {
    ProviderError::Unsupported { message: message.into(), param: Some(param.into()) }
}

/// The inputs of an OpenAI embeddings body and the `batchEmbedContents` body they become for `model`.
pub(super) fn to_batch(body: &[u8], model: &str) -> Result<(Vec<String>, Vec<u8>), ProviderError> {
    let body: Value = serde_json::from_slice(body).map_err(|_| unsupported("request body is not JSON", "input"))?;
    let inputs: Vec<String> = match body.get("input") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .map(|i| i.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or_else(|| unsupported("a Gemini deployment embeds texts: `input` must be strings", "input"))?,
        _ => return Err(unsupported("`input` must be a string or a non-empty array of strings", "input")),
    };
    let requests: Vec<Value> = inputs
        .iter()
        .map(|text| {
            let mut r = json!({"model": format!("models/{model}"), "content": {"parts": [{"text": text}]}});
            if let Some(d) = body.get("dimensions") {
                r["outputDimensionality"] = d.clone();
            }
            r
        })
        .collect();
    let out = serde_json::to_vec(&json!({ "requests": requests }))
        .map_err(|e| ProviderError::Unsupported { message: format!("cannot encode request: {e}"), param: None })?;
    Ok((inputs, out))
}

/// The OpenAI list of a `batchEmbedContents` answer to `inputs`.
pub(super) fn from_batch(
    deployment: &str,
    answer: &[u8],
    model: &str,
    inputs: &[String],
) -> Result<Raw, ProviderError> {
    let bad = |detail: &str| ProviderError::BadResponse { deployment: deployment.to_string(), detail: detail.into() };
    let answer: Value = serde_json::from_slice(answer).map_err(|_| bad("the embeddings answer is not JSON"))?;
    let embeddings = answer.get("embeddings").and_then(Value::as_array).ok_or_else(|| bad("no `embeddings`"))?;
    if embeddings.len() != inputs.len() {
        return Err(bad("the answer has not one embedding per input"));
    }
    let data: Vec<Value> = embeddings
        .iter()
        .enumerate()
        .map(|(i, e)| json!({"object": "embedding", "index": i, "embedding": e.get("values").cloned().unwrap_or(Value::Null)}))
        .collect();
    let tokens: u64 = inputs.iter().map(|t| crate::tokens::text_tokens(t)).sum();
    let out = json!({"object": "list", "data": data, "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "estimated": true}});
    let object = raw::Object::parse(out.to_string().as_bytes()).map_err(|_| bad("cannot write the answer"))?;
    Ok(Raw::Reply(object))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_become_one_batch_and_come_back_in_order() {
        let (inputs, body) = to_batch(br#"{"model":"e","input":["a b","c"],"dimensions":8}"#, "gemini-embedding-001")
            .unwrap_or_else(|e| panic!("{e}"));
        let body: Value = serde_json::from_slice(&body).unwrap_or_default();
        assert_eq!(
            body["requests"][1],
            json!({"model": "models/gemini-embedding-001", "content": {"parts": [{"text": "c"}]}, "outputDimensionality": 8})
        );
        let answer = br#"{"embeddings":[{"values":[0.1]},{"values":[0.2]}]}"#;
        let Ok(Raw::Reply(out)) = from_batch("d", answer, "gemini-embedding-001", &inputs) else {
            panic!("not a reply")
        };
        let out: Value = serde_json::from_slice(out.bytes()).unwrap_or_default();
        assert_eq!(out["data"][1]["embedding"], json!([0.2]));
        assert_eq!(out["usage"]["estimated"], true);
        assert!(to_batch(br#"{"input":[[1,2]]}"#, "m").is_err());
        assert!(from_batch("d", br#"{"embeddings":[]}"#, "m", &inputs).is_err());
    }
}
