//! The answer stage: turns a deployment's answer into the client's response, with the alias restored in
//! `model` and the usage metered (`meter.rs`).
//!
//! A reply is settled before it is sent. A stream is forwarded chunk by chunk as it arrives: the usage chunk
//! the gateway asked for is removed when the client did not ask for it, and settlement runs before
//! `[DONE]`, or, when the client hangs up mid-stream, in a tracked task that still charges what was
//! generated. Whatever the upstream does, a stream is bounded:
//!
//! - a budgeted stream whose generated output passes its reserved completion tokens (`Meter::cut_after`) is
//!   cut: the client gets its API's ending for a stream at its cap (chat: `finish_reason: "length"` and a
//!   clean `[DONE]`), and the call is charged its reservation. Whatever the upstream generates counts, sent
//!   or not: every generated string of a chunk (`Chunk::generated_tokens`), the count-only chunks a
//!   translation yields for output it has no form for, and a passed-through event's output
//!   (`PassStream::event`);
//! - the wait for each next chunk is bounded by `stream_idle_timeout_seconds`, the whole stream by
//!   `stream_timeout_seconds`; past either, the stream ends with one error event (504), charged what was
//!   generated;
//! - an event longer than `stream_max_event_bytes` ends it like a broken upstream (`svc_providers::sse`).

use crate::error::ApiError;
use crate::pipeline::meter::{Meter, Metered};
use crate::pipeline::settlement::Settle;
use axum::body::Body;
use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use serde_json::Value;
use std::borrow::Cow;
use std::pin::Pin;
use std::time::Duration;
use svc_budget::Usage;
use svc_config::StreamSettings;

use svc_front::{sse, Api, Encoder};
use svc_providers::passthrough::{EventStream, RawEvent};
use svc_providers::raw::Object;
use svc_providers::{estimate, usage, Chunk, ChunkStream, Reply, UsageEdit};
use tokio::time::{Instant, Sleep};

/// The most bytes of upstream events that are ready at once sent to the client as one frame.
const BATCH_BYTES: usize = 64 * 1024;

/// The OpenAI `usage` object of `u`.
fn usage_json(u: Usage) -> Value {
    serde_json::json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.total_tokens(),
    })
}

/// Logs a provider fault found while metering.
fn log_fault(settle: &Settle, metered: &Metered) {
    if let Some(fault) = &metered.fault {
        tracing::warn!(request_id = %settle.request_id, deployment = %settle.route.deployment.id, %fault,
            "the upstream reported usage that cannot be right: charged the call's reservation");
    }
}

/// Finishes a non-streaming call: meter, settle, restore the alias, serialize. When the upstream's usage is
/// missing or not believed, the response carries the counts that were charged as its `usage`, so every
/// answer has the spec 2.5 shape and what the client is shown is what was recorded.
pub async fn reply(settle: Settle, meter: Meter, reply: Reply, api: Api) -> Result<Bytes, ApiError> {
    let mut body = match (reply, api) {
        (Reply::Json(answer), Api::Chat) => return raw_reply(settle, meter, &answer, api).await,
        (reply, _) => {
            reply.into_object().map_err(|_| ApiError::internal("the upstream's answer is not a JSON object"))?
        }
    };
    let completion = || body.get("choices").map(estimate::completion_tokens).unwrap_or(0);
    let metered = meter.judge(usage::read(body.get("usage")), completion);
    log_fault(&settle, &metered);
    if !metered.as_reported() {
        body.insert("usage".into(), usage_json(metered.usage));
    }
    body.insert("model".into(), Value::String(settle.route.alias.clone()));
    settle.finish(&metered, 200).await;
    serde_json::to_vec(&api.render(body)).map(Bytes::from).map_err(|_| ApiError::internal("cannot encode the response"))
}

/// Finishes a call whose answer stays in the upstream's bytes: an OpenAI-compatible chat completion, or a
/// passed-through answer. Only the top-level fields are read and only `usage`, `id` and the generated content
/// (when usage must be estimated) are parsed; the client's name goes into `model`, and a Responses id is
/// recorded as a stored response of the caller's ([`Settle::stored_response`]). A chat completion is made to look as [`reply`] makes a translated one: `model` and,
/// when the upstream's count was not believed, the `usage` charged, added when missing. A passed-through answer
/// keeps its own shape: only an existing `model` is replaced.
pub async fn raw_reply(mut settle: Settle, meter: Meter, body: &Object, api: Api) -> Result<Bytes, ApiError> {
    let bad = || ApiError::internal("the upstream's answer is not a JSON object");
    let field = |key: &str| body.value(key);
    let chat = api == Api::Chat;
    let fields = api.answer_fields();
    let reported = if chat {
        usage::read_text(body.get("usage"))
    } else {
        svc_front::usage_text::reply_usage_text(api, body.get(fields.usage), body.get("output"))
    };
    let metered = meter.judge(reported, || {
        let generated = if chat { field("choices") } else { field(fields.output) };
        generated.map(|g| estimate::completion_tokens(&g)).unwrap_or(0)
    });
    log_fault(&settle, &metered);
    if api == Api::Responses {
        if let Some(Value::String(id)) = field("id") {
            settle.stored_response(&id);
        }
    }
    let alias = serde_json::to_vec(&settle.route.alias).map_err(|_| bad())?;
    let out = if chat {
        let usage = if metered.as_reported() { None } else { serde_json::to_vec(&usage_json(metered.usage)).ok() };
        let mut set: Vec<(&str, &[u8])> = vec![("model", &alias)];
        if let Some(usage) = &usage {
            set.push(("usage", usage));
        }
        body.write_with(&set)
    } else {
        body.write(|k| (k == fields.model).then_some(Cow::Borrowed(&alias[..])))
    };
    settle.finish(&metered, 200).await;
    Ok(Bytes::from(out))
}

/// What a stream's upstream sends.
pub enum Source {
    /// Chat-completion chunks (forwarded, or translated by an [`Encoder`]).
    Chunks(ChunkStream),
    /// The events of a passed-through stream, as the upstream wrote them.
    Events(EventStream),
}

/// One item of a [`Source`].
enum Item {
    Chunk(Chunk),
    Event(RawEvent),
}

impl Source {
    async fn next(&mut self) -> Option<Result<Item, svc_providers::ProviderError>> {
        match self {
            Source::Chunks(s) => s.next().await.map(|r| r.map(Item::Chunk)),
            Source::Events(s) => s.next().await.map(|r| r.map(Item::Event)),
        }
    }
}

/// State of a forwarded stream.
struct Forward {
    upstream: Source,
    alias: Value,
    /// `alias` as JSON text, what each forwarded chunk's `model` is set to.
    alias_json: Vec<u8>,
    client_wants_usage: bool,
    meter: Meter,
    /// What the upstream's usage chunk said, once it came.
    reported: Option<usage::Reported>,
    /// Generated tokens so far by the plain estimate (for the cut; twice this is the conservative estimate,
    /// to charge).
    generated: u64,
    idle: Duration,
    deadline: Instant,
    total: Duration,
    /// When the upstream last sent a chunk (or the stream began).
    last: Instant,
    /// Armed at the earlier of `last + idle` and `deadline`; moved only when it fires, never per chunk.
    timer: Pin<Box<Sleep>>,
    settle: Option<Settle>,
    finished: bool,
    /// Whether the client's first bytes were handed to the server.
    sent_first: bool,
    /// Where the stream is with the frame of its first bytes.
    first_frame: FirstFrame,
    /// `id` and `created` of the first chunk, for the chunks the gateway adds itself.
    first: Option<(Value, Value)>,
    /// The client API's events, when it is not chat completions.
    encoder: Option<Encoder>,
}

/// Where a stream is with the frame of its first bytes ([`Forward::first_alone`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum FirstFrame {
    /// Not made yet.
    Unmade,
    /// Sent alone: the stream yields before its next frame, so that the server writes it at once.
    SentAlone,
    /// Made, and written or going with the rest.
    Done,
}

/// Why a stream ended before the upstream finished it.
enum Stop {
    /// The upstream failed.
    Failed(ApiError),
    /// The generated output passed the reserved completion tokens.
    Cut,
}

impl Forward {
    /// What to charge for the stream so far.
    fn metered(&self) -> Metered {
        let reported = self.reported.clone().unwrap_or(usage::Reported::Missing);
        self.meter.judge(reported, || self.generated_read().saturating_mul(2))
    }

    /// The generated tokens so far, every event read (a passed-through stream reads the events it held unread).
    fn generated_read(&self) -> u64 {
        match &self.encoder {
            Some(Encoder::Pass(pass)) => self.generated.max(pass.generated()),
            _ => self.generated,
        }
    }

    /// Adjusts one chunk for the client; `None` drops it.
    fn rewrite(&mut self, item: Item) -> Option<Bytes> {
        let chunk = match (item, &mut self.encoder) {
            (Item::Chunk(chunk), _) if chunk.is_count_only() => {
                self.generated = self.generated.saturating_add(chunk.generated_tokens());
                return None;
            }
            (Item::Chunk(chunk), _) => chunk,
            (Item::Event(event), Some(Encoder::Pass(pass))) => {
                let (bytes, generated) = pass.event(event);
                self.generated = self.generated.saturating_add(generated);
                if let Some(reported) = pass.reported() {
                    self.reported = Some(reported);
                }
                if let (Some(id), Some(settle)) = (pass.take_response_id(), self.settle.as_mut()) {
                    settle.stored_response(&id);
                }
                return bytes;
            }
            // Raw events come only with a pass-through encoder.
            (Item::Event(_), _) => return None,
        };
        if let Some(reported) = chunk.usage() {
            self.reported = Some(reported);
        }
        if self.first.is_none() {
            self.first = Some(chunk.id_and_created());
        }
        self.generated = self.generated.saturating_add(chunk.generated_tokens());
        let is_usage_chunk = chunk.is_usage_only();
        let charged: Vec<u8>;
        let usage = if !self.client_wants_usage {
            if is_usage_chunk {
                return None;
            }
            UsageEdit::Remove
        } else if is_usage_chunk {
            let metered = self.metered();
            if metered.as_reported() {
                UsageEdit::Keep
            } else {
                // What the client is shown is what is charged.
                charged = serde_json::to_vec(&usage_json(metered.usage)).unwrap_or_default();
                UsageEdit::Set(&charged)
            }
        } else {
            UsageEdit::Keep
        };
        if let Some(encoder) = &mut self.encoder {
            return encoder.chunk(chunk.into_edited_map(usage));
        }
        let json = chunk.to_json(&self.alias_json, usage);
        let mut out = Vec::with_capacity(json.len() + 8);
        sse::write(&mut out, "", &json);
        Some(Bytes::from(out))
    }

    /// Whether the first bytes go to the client alone, at once, rather than in one frame with what the upstream
    /// sent in the same breath: when no other request is in flight, where the time to the first byte is what
    /// counts. With others in flight, the write saved is worth more than the few microseconds the first bytes wait
    /// for the rest of their batch (one `writev` a stream less: a passed-through Responses stream at 64 at once
    /// went from 55.8 to 51.6 µs of CPU, BENCHMARKS.md).
    fn first_alone(&self) -> bool {
        self.settle.as_ref().is_some_and(|s| s.state.in_flight() <= 1)
    }

    /// A chunk the gateway writes itself, in the stream's own `id` and `created`.
    fn own_chunk(&self, choices: Value, usage: Option<Usage>) -> Bytes {
        let (id, created) = self.first.clone().unwrap_or((Value::Null, Value::Null));
        let mut chunk = serde_json::json!({
            "id": id, "object": "chat.completion.chunk", "created": created, "model": self.alias, "choices": choices,
        });
        if let (Some(u), Value::Object(m)) = (usage, &mut chunk) {
            m.insert("usage".into(), usage_json(u));
        }
        sse::json("", &chunk)
    }

    /// The end of a stream: `data: [DONE]`, after a usage chunk of what was charged when the client asked for
    /// usage and the upstream sent none.
    fn done(&mut self, charged: Usage) -> Bytes {
        const DONE: &[u8] = b"data: [DONE]\n\n";
        if let Some(encoder) = &mut self.encoder {
            return encoder.done(charged);
        }
        if !self.client_wants_usage || self.reported.is_some() {
            return Bytes::from_static(DONE);
        }
        let mut out = Vec::from(self.own_chunk(Value::Array(Vec::new()), Some(charged)));
        out.extend_from_slice(DONE);
        Bytes::from(out)
    }

    /// The end of a stream cut at its cap: every choice finishes with `length`, then the charged usage (when
    /// asked) and `[DONE]`.
    fn cut(&mut self, charged: Usage) -> Bytes {
        if let Some(encoder) = &mut self.encoder {
            return encoder.cut(charged);
        }
        let finishes: Vec<Value> = (0..self.meter.choices.max(1))
            .map(|i| serde_json::json!({"index": i, "delta": {}, "finish_reason": "length"}))
            .collect();
        let mut out = Vec::from(self.own_chunk(Value::Array(finishes), None));
        if self.client_wants_usage {
            out.extend_from_slice(&self.own_chunk(Value::Array(Vec::new()), Some(charged)));
        }
        out.extend_from_slice(b"data: [DONE]\n\n");
        Bytes::from(out)
    }

    /// The next chunk of the upstream within the idle and total bounds. The timer is not moved for every
    /// chunk (a timer-wheel update each): when it fires early, it is re-armed from the last chunk's time.
    async fn next(&mut self) -> Option<Result<Item, ApiError>> {
        loop {
            tokio::select! {
                biased;
                item = self.upstream.next() => {
                    self.last = Instant::now();
                    return item.map(|r| r.map_err(ApiError::from));
                }
                () = self.timer.as_mut() => {
                    let now = Instant::now();
                    if now >= self.deadline {
                        let secs = self.total.as_secs();
                        return Some(Err(ApiError::upstream_timeout(format!(
                            "the upstream stream ran longer than {secs} s (stream_timeout_seconds)"
                        ))));
                    }
                    let idle_at = self.last + self.idle;
                    if now >= idle_at {
                        let secs = self.idle.as_secs();
                        return Some(Err(ApiError::upstream_timeout(format!(
                            "the upstream sent nothing for {secs} s (stream_idle_timeout_seconds)"
                        ))));
                    }
                    self.timer.as_mut().reset(idle_at.min(self.deadline));
                }
            }
        }
    }

    /// One item of the upstream (`None`: its end) handled: the bytes for the client, if any. After the stream's
    /// end, a cut or a failure, `finished` is set and these are its last bytes.
    async fn step(&mut self, item: Option<Result<Item, ApiError>>) -> Option<Bytes> {
        match item {
            Some(Ok(chunk)) => {
                let bytes = self.rewrite(chunk);
                if self.meter.cut_after().is_some_and(|cut| self.generated > cut) {
                    // Whatever this chunk held past the cap is not sent.
                    return Some(self.stop(Stop::Cut).await);
                }
                if bytes.is_some() && !self.sent_first {
                    self.sent_first = true;
                    if let Some(settle) = self.settle.as_mut() {
                        settle.first_byte = Some(settle.started.elapsed());
                    }
                }
                bytes
            }
            Some(Err(err)) => Some(self.stop(Stop::Failed(err)).await),
            None => {
                self.finished = true;
                let metered = self.metered();
                if let Some(settle) = self.settle.take() {
                    log_fault(&settle, &metered);
                    settle.finish(&metered, 200).await;
                }
                Some(self.done(metered.usage))
            }
        }
    }

    /// Ends the stream early: settles and returns the last bytes for the client.
    async fn stop(&mut self, why: Stop) -> Bytes {
        self.finished = true;
        let Some(mut settle) = self.settle.take() else { return Bytes::new() };
        match why {
            Stop::Cut => {
                let shown = Usage {
                    prompt_tokens: self.meter.prompt_estimate,
                    completion_tokens: self.meter.completion_limit(),
                    ..Usage::default()
                };
                tracing::warn!(request_id = %settle.request_id, deployment = %settle.route.deployment.id,
                    "the upstream streamed past the completion cap: stream cut, charged its reservation");
                settle.finish_reserved(shown, 200).await;
                self.cut(shown)
            }
            Stop::Failed(err) => {
                let metered = self.metered();
                log_fault(&settle, &metered);
                // A stream broken mid-way counts against the deployment's health.
                settle.in_flight.broken();
                settle.finish(&metered, err.status().as_u16()).await;
                tracing::warn!(error = %err.message(), "upstream stream failed mid-way");
                match &mut self.encoder {
                    Some(encoder) => encoder.error(&err.fault()),
                    None => sse::json("", &err.body()),
                }
            }
        }
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        // The client went away before the end: the upstream request is cancelled by dropping its stream
        // (this struct owns it); what was generated is still charged, in a task shutdown waits for.
        if let Some(settle) = self.settle.take() {
            let metered = self.metered();
            let tasks = settle.state.tasks.clone();
            tasks.spawn(async move {
                settle.finish(&metered, 499).await;
            });
        }
    }
}

/// The SSE body of a streamed call, bounded by `limits` from `started` on.
pub fn stream_body(
    settle: Settle,
    upstream: Source,
    client_wants_usage: bool,
    meter: Meter,
    limits: StreamSettings,
    started: std::time::Instant,
    encoder: Option<Encoder>,
) -> Body {
    let alias = Value::String(settle.route.alias.clone());
    let alias_json = serde_json::to_vec(&alias).unwrap_or_default();
    let now = Instant::now();
    let deadline = Instant::from_std(started) + limits.total;
    let state = Forward {
        upstream,
        alias,
        alias_json,
        client_wants_usage,
        meter,
        reported: None,
        generated: 0,
        idle: limits.idle,
        deadline,
        total: limits.total,
        last: now,
        timer: Box::pin(tokio::time::sleep_until((now + limits.idle).min(deadline))),
        settle: Some(settle),
        finished: false,
        sent_first: false,
        first_frame: FirstFrame::Unmade,
        first: None,
        encoder,
    };
    // Boxed: the state is moved into each step's future and out again, a copy of all of it per chunk inline.
    let stream = futures::stream::unfold(Box::new(state), |mut st| async move {
        if st.finished {
            return None;
        }
        if st.first_frame == FirstFrame::SentAlone {
            st.first_frame = FirstFrame::Done;
            tokio::task::yield_now().await;
        }
        let first = loop {
            let item = st.next().await;
            if let Some(bytes) = st.step(item).await {
                break bytes;
            }
        };
        if st.sent_first && st.first_frame == FirstFrame::Unmade {
            if st.first_alone() {
                st.first_frame = FirstFrame::SentAlone;
                return Some((Ok::<Bytes, std::io::Error>(first), st));
            }
            st.first_frame = FirstFrame::Done;
        }
        // What the upstream sent in the same breath goes out with it, in one frame (up to BATCH_BYTES). Taken as
        // it is ready, without the bounds' timer or a clock read: it came within microseconds of the item awaited.
        let mut batch: Option<Vec<u8>> = None;
        while !st.finished && batch.as_ref().map_or(first.len(), Vec::len) < BATCH_BYTES {
            let Some(item) = st.upstream.next().now_or_never() else { break };
            let item = item.map(|r| r.map_err(ApiError::from));
            if let Some(more) = st.step(item).await {
                batch.get_or_insert_with(|| first.to_vec()).extend_from_slice(&more);
            }
        }
        Some((Ok(batch.map_or(first, Bytes::from)), st))
    });
    Body::from_stream(stream)
}
