//! The upstream stage: calls the chosen deployment and turns its answer into the client's response, with
//! the alias restored in `model`. Streams are forwarded chunk by chunk as they arrive: the usage chunk the
//! gateway asked for is removed when the client did not ask for it, and settlement runs before `[DONE]`,
//! or, when the client hangs up mid-stream, in a tracked task that still charges what was generated.

use crate::error::ApiError;
use crate::pipeline::settlement::Settle;
use axum::body::Body;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{Map, Value};
use svc_budget::Usage;
use svc_providers::{count_tokens, ChatRequest, ChunkStream};

/// Reads `usage` of a response or chunk.
pub fn usage_of(body: &Map<String, Value>) -> Option<Usage> {
    let u = body.get("usage")?.as_object()?;
    Some(Usage {
        prompt_tokens: u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
        completion_tokens: u.get("completion_tokens").and_then(Value::as_u64).unwrap_or(0),
    })
}

/// A conservative prompt-token estimate, for budget reservations and for upstreams that report no usage:
/// over the JSON of the messages and tools, every two ASCII bytes count as one token and every other
/// character as two (real tokenizers average about four ASCII characters a token and rarely split a
/// character into more than two), plus 4 per message and 3 for the framing.
pub fn estimate_prompt(req: &ChatRequest) -> u64 {
    fn estimate(text: &str) -> u64 {
        let ascii = text.bytes().filter(u8::is_ascii).count() as u64;
        let other = text.chars().filter(|c| !c.is_ascii()).count() as u64;
        ascii.div_ceil(2) + 2 * other
    }
    let messages = req.messages();
    let mut total = 3 + 4 * messages.len() as u64;
    for m in messages {
        total += estimate(&m.to_string());
    }
    for field in ["tools", "functions", "response_format"] {
        if let Some(v) = req.body.get(field) {
            total += estimate(&v.to_string());
        }
    }
    total
}

/// Estimate of completion tokens in a response's choices when the upstream reported none.
fn estimate_completion(body: &Map<String, Value>) -> u64 {
    body.get("choices").map(|c| count_tokens(&c.to_string())).unwrap_or(0)
}

/// The OpenAI `usage` object of `u`.
fn usage_json(u: Usage) -> Value {
    serde_json::json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    })
}

/// Finishes a non-streaming call: settle, restore the alias, serialize. An upstream that reported no usage is
/// charged the gateway's conservative estimate, and the response carries that estimate as its `usage` (as
/// LiteLLM does), so every answer has the spec 2.5 shape.
pub async fn reply(settle: Settle, prompt_estimate: u64, mut body: Map<String, Value>) -> Result<Bytes, ApiError> {
    let usage = match usage_of(&body) {
        Some(u) => u,
        None => {
            let u = Usage { prompt_tokens: prompt_estimate, completion_tokens: estimate_completion(&body) };
            body.insert("usage".into(), usage_json(u));
            u
        }
    };
    body.insert("model".into(), Value::String(settle.route.alias.clone()));
    settle.finish(usage, 200).await;
    serde_json::to_vec(&body).map(Bytes::from).map_err(|_| ApiError::internal("cannot encode the response"))
}

/// State of a forwarded stream.
struct Forward {
    upstream: ChunkStream,
    alias: Value,
    client_wants_usage: bool,
    usage: Option<Usage>,
    prompt_estimate: u64,
    streamed_tokens: u64,
    settle: Option<Settle>,
    finished: bool,
    /// `id` and `created` of the first chunk, for a usage chunk the gateway adds itself.
    first: Option<(Value, Value)>,
}

impl Forward {
    fn usage_so_far(&self) -> Usage {
        self.usage.unwrap_or(Usage { prompt_tokens: self.prompt_estimate, completion_tokens: self.streamed_tokens })
    }

    /// Adjusts one chunk for the client; `None` drops it.
    fn rewrite(&mut self, mut chunk: Map<String, Value>) -> Option<Bytes> {
        if let Some(u) = usage_of(&chunk) {
            self.usage = Some(u);
        }
        if self.client_wants_usage && self.first.is_none() {
            let field = |k: &str| chunk.get(k).cloned().unwrap_or(Value::Null);
            self.first = Some((field("id"), field("created")));
        }
        if let Some(choices) = chunk.get("choices").and_then(Value::as_array) {
            for c in choices {
                if let Some(text) = c.get("delta").and_then(|d| d.get("content")).and_then(Value::as_str) {
                    self.streamed_tokens += count_tokens(text);
                }
            }
        }
        if !self.client_wants_usage {
            let is_usage_chunk = chunk.get("choices").and_then(Value::as_array).is_some_and(Vec::is_empty)
                && chunk.get("usage").is_some_and(|u| !u.is_null());
            if is_usage_chunk {
                return None;
            }
            chunk.remove("usage");
        }
        chunk.insert("model".into(), self.alias.clone());
        sse_data(&chunk)
    }

    /// The end of a stream: `data: [DONE]`, after a usage chunk of the gateway's estimate when the client asked
    /// for usage and the upstream sent none (the estimate is what the call was charged).
    fn done(&mut self, charged: Usage) -> Bytes {
        const DONE: &[u8] = b"data: [DONE]\n\n";
        if !self.client_wants_usage || self.usage.is_some() {
            return Bytes::from_static(DONE);
        }
        let (id, created) = self.first.take().unwrap_or((Value::Null, Value::Null));
        let chunk = serde_json::json!({
            "id": id, "object": "chat.completion.chunk", "created": created, "model": self.alias,
            "choices": [], "usage": usage_json(charged),
        });
        let mut out = sse_data(&chunk).map(Vec::from).unwrap_or_default();
        out.extend_from_slice(DONE);
        Bytes::from(out)
    }
}

/// One SSE event, `data: <json>` and a blank line, serialized in place.
fn sse_data(value: &impl serde::Serialize) -> Option<Bytes> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"data: ");
    serde_json::to_writer(&mut out, value).ok()?;
    out.extend_from_slice(b"\n\n");
    Some(Bytes::from(out))
}

impl Drop for Forward {
    fn drop(&mut self) {
        // The client went away before the end: the upstream request is cancelled by dropping its stream
        // (this struct owns it); what was generated is still charged, in a task shutdown waits for.
        if let Some(settle) = self.settle.take() {
            let usage = self.usage_so_far();
            let tasks = settle.state.tasks.clone();
            tasks.spawn(async move {
                settle.finish(usage, 499).await;
            });
        }
    }
}

/// The SSE body of a streamed call.
pub fn stream_body(settle: Settle, upstream: ChunkStream, client_wants_usage: bool, prompt_estimate: u64) -> Body {
    let alias = Value::String(settle.route.alias.clone());
    let state = Forward {
        upstream,
        alias,
        client_wants_usage,
        usage: None,
        prompt_estimate,
        streamed_tokens: 0,
        settle: Some(settle),
        finished: false,
        first: None,
    };
    let stream = futures::stream::unfold(state, |mut st| async move {
        if st.finished {
            return None;
        }
        loop {
            match st.upstream.next().await {
                Some(Ok(chunk)) => {
                    if let Some(bytes) = st.rewrite(chunk) {
                        return Some((Ok::<Bytes, std::io::Error>(bytes), st));
                    }
                }
                Some(Err(e)) => {
                    st.finished = true;
                    let usage = st.usage_so_far();
                    if let Some(mut settle) = st.settle.take() {
                        // A stream broken mid-way counts against the deployment's health.
                        settle.in_flight.broken();
                        settle.finish(usage, 502).await;
                    }
                    let err = ApiError::from(e);
                    tracing::warn!(error = %err.message, "upstream stream failed mid-way");
                    let line = sse_data(&err.body()).unwrap_or_default();
                    return Some((Ok(line), st));
                }
                None => {
                    st.finished = true;
                    let usage = st.usage_so_far();
                    if let Some(settle) = st.settle.take() {
                        settle.finish(usage, 200).await;
                    }
                    let done = st.done(usage);
                    return Some((Ok(done), st));
                }
            }
        }
    });
    Body::from_stream(stream)
}
