//! The built-in `mock` provider: deterministic replies with honest token counts, streaming included, so a
//! fleet can be tested end to end with no accounts, no network and no spend.
//!
//! The reply to a conversation is `[mock <model>] ` (the upstream model id the request names) followed by the last user message (at most 64
//! tokens), or a greeting when there is none. Tokens are counted by one rule everywhere: a run of letters
//! or digits is one token, every other visible character is one token. The prompt costs its messages'
//! tokens plus 4 per message plus 3 (the chat framing, as OpenAI counts it); the completion costs exactly
//! the tokens streamed, and `max_tokens` cuts the reply with `finish_reason: "length"`.

use crate::passthrough::{Forwarded, Raw};
use crate::{ChatRequest, Chunk, ChunkStream, ProviderError, Reply, Target};
use serde_json::{json, Map, Value};

/// The mock provider (stateless).
#[derive(Debug, Default)]
pub struct Mock;

const ECHO_LIMIT: usize = 64;

/// Counts tokens by the mock's rule (see the module docs). This is the mock upstream's own tokenizer, what it
/// reports as usage; the gateway's estimates are `crate::estimate`.
fn count_tokens(text: &str) -> u64 {
    pieces(text).len() as u64
}

/// Splits text into tokens, each keeping the white space before it, so concatenating them gives the text
/// back (without trailing white space).
fn pieces(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((_, c)) = chars.peek().copied() {
        // Leading white space belongs to the next token.
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let (_, first) = chars.next().unwrap_or((0, ' '));
        if first.is_alphanumeric() {
            while chars.peek().is_some_and(|(_, c)| c.is_alphanumeric()) {
                chars.next();
            }
        }
        let end = chars.peek().map(|(i, _)| *i).unwrap_or(text.len());
        out.push(&text[start..end]);
        start = end;
    }
    out
}

/// The text of a message's `content` (a string, or the text parts of an array).
fn content_text(message: &Value) -> String {
    match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join(" ")
        }
        _ => String::new(),
    }
}

/// Prompt tokens of a request by the mock's rule.
pub(crate) fn prompt_tokens(req: &ChatRequest) -> u64 {
    req.messages().iter().map(|m| count_tokens(&content_text(m)) + 4).sum::<u64>() + 3
}

/// The reply's tokens and finish reason.
fn reply(model: &str, req: &ChatRequest) -> (Vec<String>, &'static str) {
    let last_user =
        req.messages().iter().rev().find(|m| m.get("role").and_then(Value::as_str) == Some("user")).map(content_text);
    let echo: String = match last_user {
        Some(t) if !t.trim().is_empty() => pieces(&t).into_iter().take(ECHO_LIMIT).collect(),
        _ => "Hello from the svc mock provider.".to_string(),
    };
    let text = format!("[mock {model}] {}", echo.trim_start());
    let mut tokens: Vec<String> = pieces(&text).into_iter().map(String::from).collect();
    let mut finish = "stop";
    if let Some(max) = req.max_tokens() {
        if (tokens.len() as u64) > max {
            tokens.truncate(max as usize);
            finish = "length";
        }
    }
    (tokens, finish)
}

fn usage(prompt: u64, completion: u64) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

fn as_map(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

impl Mock {
    pub(crate) async fn chat(&self, _d: &Target<'_>, req: ChatRequest) -> Result<Reply, ProviderError> {
        let model = req.model().to_string();
        let (tokens, finish) = reply(&model, &req);
        let body = json!({
            "id": format!("chatcmpl-mock-{}", uuid::Uuid::new_v4().simple()),
            "object": "chat.completion",
            "created": chrono::Utc::now().timestamp(),
            "model": model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": tokens.concat()},
                "finish_reason": finish,
            }],
            "usage": usage(prompt_tokens(&req), tokens.len() as u64),
        });
        Ok(Reply::Object(as_map(body)))
    }

    pub(crate) async fn chat_stream(&self, _d: &Target<'_>, req: ChatRequest) -> Result<ChunkStream, ProviderError> {
        let (tokens, finish) = reply(req.model(), &req);
        let id = format!("chatcmpl-mock-{}", uuid::Uuid::new_v4().simple());
        let created = chrono::Utc::now().timestamp();
        let model = req.model().to_string();
        let chunk = |delta: Value, finish: Value, usage: Value| {
            as_map(json!({
                "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], "usage": usage,
            }))
        };
        let mut chunks = Vec::with_capacity(tokens.len() + 3);
        chunks.push(chunk(json!({"role": "assistant", "content": ""}), Value::Null, Value::Null));
        for t in &tokens {
            chunks.push(chunk(json!({"content": t}), Value::Null, Value::Null));
        }
        chunks.push(chunk(json!({}), json!(finish), Value::Null));
        if req.wants_stream_usage() {
            let mut last = chunk(json!({}), Value::Null, usage(prompt_tokens(&req), tokens.len() as u64));
            last.insert("choices".into(), json!([]));
            chunks.push(last);
        } else {
            for c in &mut chunks {
                c.remove("usage");
            }
        }
        Ok(Box::pin(futures::stream::iter(chunks.into_iter().map(|c| Ok(Chunk::from(c))))))
    }
}

/// Dimensions of a mock embedding.
const EMBEDDING_DIMENSIONS: usize = 16;

/// The mock embedding of `text`: [`EMBEDDING_DIMENSIONS`] numbers from -1 to 1 derived from the text's bytes
/// (FNV-1a), the same for the same text, different for different texts.
fn embedding(text: &str) -> Vec<f64> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    (0..EMBEDDING_DIMENSIONS)
        .map(|i| {
            for b in text.bytes().chain([i as u8]) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
            ((h >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

impl Mock {
    /// Embeddings (`POST /embeddings`): one deterministic vector per input (a string, or a list of strings or
    /// token arrays), usage by the mock's token rule.
    pub(crate) async fn embed(&self, _d: &Target<'_>, req: Forwarded) -> Result<Raw, ProviderError> {
        let body: Value = serde_json::from_slice(&req.body).map_err(|e| ProviderError::Unsupported {
            message: format!("request body is not JSON: {e}"),
            param: None,
        })?;
        let inputs: Vec<String> = match body.get("input") {
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(items)) if !items.is_empty() => items
                .iter()
                .map(|i| match i {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect(),
            _ => {
                return Err(ProviderError::Unsupported {
                    message: "`input` must be a string or a non-empty array".into(),
                    param: Some("input".into()),
                })
            }
        };
        let tokens: u64 = inputs.iter().map(|t| count_tokens(t)).sum();
        let data: Vec<Value> = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": embedding(t)}))
            .collect();
        let reply = json!({"object": "list", "data": data, "model": body.get("model"),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}});
        let bytes = serde_json::to_vec(&reply)
            .map_err(|e| ProviderError::Unsupported { message: format!("cannot encode: {e}"), param: None })?;
        crate::raw::Object::parse(&bytes)
            .map(Raw::Reply)
            .map_err(|e| ProviderError::Unsupported { message: format!("cannot encode: {e}"), param: None })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use futures::StreamExt;
    use std::sync::Arc;
    use std::time::Duration;

    fn dep() -> crate::Deployment {
        crate::Deployment {
            id: "m".into(),
            upstream_model: "gpt-x".into(),
            timeout: Duration::from_secs(1),
            max_event_bytes: 1 << 20,
            max_response_bytes: 64 << 20,
            upstream: crate::Upstream::Mock(Arc::new(Mock)),
        }
    }

    #[test]
    fn tokens_rule() {
        assert_eq!(count_tokens("Hello, world!"), 4);
        assert_eq!(count_tokens("  "), 0);
        assert_eq!(pieces("a  bc, d").concat(), "a  bc, d");
    }

    #[tokio::test]
    async fn replies_deterministically_with_honest_usage() {
        let req = ChatRequest::parse(br#"{"model":"gpt-x","messages":[{"role":"user","content":"Say hi"}]}"#).unwrap();
        let r = dep().chat(req.clone()).await.unwrap().into_object().unwrap();
        assert_eq!(r["choices"][0]["message"]["content"], "[mock gpt-x] Say hi");
        // "[", "mock", "gpt", "-", "x", "]", "Say", "hi" = 8; prompt: 2 + 4 + 3 = 9.
        assert_eq!(r["usage"], json!({"prompt_tokens": 9, "completion_tokens": 8, "total_tokens": 17}));
        let mut body = req.body().clone();
        body.insert("stream_options".into(), json!({"include_usage": true}));
        let req2 = ChatRequest::from_body(body);
        let chunks: Vec<_> = dep().chat_stream(req2).await.unwrap().collect().await;
        let text: String = chunks
            .iter()
            .filter_map(|c| c.as_ref().ok()?["choices"].get(0)?["delta"]["content"].as_str().map(String::from))
            .collect();
        assert_eq!(text, "[mock gpt-x] Say hi");
        let last = chunks.last().unwrap().as_ref().unwrap();
        assert_eq!(last["usage"]["completion_tokens"], 8);
    }

    #[tokio::test]
    async fn embeddings_are_deterministic() {
        let req = |input: &str| Forwarded {
            body: bytes::Bytes::from(format!(r#"{{"model":"e","input":["{input}","other"]}}"#)),
            stream: false,
            headers: Vec::new(),
        };
        let Ok(Raw::Reply(a)) = Mock.embed(&dep().target(), req("hello world")).await else { panic!("no reply") };
        let Ok(Raw::Reply(b)) = Mock.embed(&dep().target(), req("hello world")).await else { panic!("no reply") };
        let (a, b): (Value, Value) =
            (serde_json::from_slice(a.bytes()).unwrap(), serde_json::from_slice(b.bytes()).unwrap());
        assert_eq!(a["data"], b["data"]);
        assert_eq!(a["data"][0]["embedding"].as_array().map(Vec::len), Some(16));
        assert_ne!(a["data"][0]["embedding"], a["data"][1]["embedding"]);
        assert_eq!(a["usage"]["prompt_tokens"], 3);
    }

    #[tokio::test]
    async fn max_tokens_cuts_with_length() {
        let req = ChatRequest::parse(
            br#"{"model":"x","messages":[{"role":"user","content":"one two three"}],"max_tokens":3}"#,
        )
        .unwrap();
        let r = dep().chat(req).await.unwrap().into_object().unwrap();
        assert_eq!(r["choices"][0]["finish_reason"], "length");
        assert_eq!(r["usage"]["completion_tokens"], 3);
    }
}
