//! A passed-through stream: each upstream event is forwarded as the upstream wrote it, parsed only where the
//! gateway acts on it. The events that carry the model (`message_start`, the `response.*` lifecycle events)
//! get the client's name in it, spliced into their text; usage is read from `message_start` and
//! `message_delta` (Messages) or `response.completed` / `response.incomplete` (Responses). Every other event,
//! unknown types included, passes as bytes.
//!
//! Whatever an event adds to the output counts toward the stream's cap ([`svc_providers::generated`] decides
//! which strings are generated): every Messages `content_block_delta`'s `delta` and `content_block_start`'s
//! block, whatever their type; every Responses event whose type ends in `.delta`, by its `delta`; and,
//! because Responses also sends the output whole (`*.done` texts, `*part.done` parts, `output_item.done`
//! items, and `*.added` events), those too, each kind on its own [`Level`]. In an honest stream every level
//! holds the same output once, so the stream's count is its largest level: nothing is counted twice, and a
//! stream that sends its output by one kind of event only is counted all the same. Events that carry no
//! output (`ping`, lifecycle, progress such as `response.web_search_call.searching`) are not read for it.
//!
//! An event that gives output whole is read only when it could matter ([`Output::hold`]): it is kept unread
//! with a bound on its count (its whole text's estimate, which the estimate of the strings in it never
//! exceeds), and the events kept are read when the bounds could pass the stream's cut, when they hold more
//! than [`HELD_BYTES`], or when the stream's count is asked for ([`PassStream::generated`]). An honest stream
//! that reports its usage is never read for them.

use super::lifecycle::Inner;
use super::responses::{new_id, response, usage};
use super::usage_text::{final_counts, messages_start_text, reply_usage_text};
use super::{sse, Api};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Value};
use std::borrow::Cow;
use svc_budget::Usage;
use svc_providers::estimate::text_tokens;
use svc_providers::generated::{self, DeltaTokens, Rule, WholeTokens};
use svc_providers::passthrough::RawEvent;
use svc_providers::usage::Reported;

/// State of a passed-through stream.
#[derive(Debug)]
pub struct PassStream {
    api: Api,
    alias: Value,
    /// `alias` as JSON text, spliced into events.
    alias_json: Vec<u8>,
    /// The input side of the usage from `message_start`.
    prompt: Option<Result<Usage, String>>,
    reported: Option<Reported>,
    /// The index of a Messages content block started and not stopped.
    open_block: Option<u64>,
    /// A Responses stream's id (from `response.created`), until the caller takes it.
    response_id: Option<String>,
    /// The generated tokens counted so far, by level.
    output: Output,
    /// The count past which the stream is cut (`None`: never cut).
    cut: Option<u64>,
}

/// The kinds of event that carry output, each holding all of it once in an honest stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    /// Output piece by piece: Messages block starts and deltas, Responses `*.delta` events.
    Pieces,
    /// Responses `response.output_item.done`: each output item whole.
    Items,
    /// Responses `*part.done` (`content_part`, `reasoning_summary_part`): each part whole.
    Parts,
    /// Responses `*.done` of a text (`output_text`, `function_call_arguments`, `refusal`, …): each whole.
    Done,
    /// Responses `*.added` (items and parts as they open, annotations): near nothing in an honest stream.
    Added,
}

impl Level {
    /// The level of a Responses event that gives output whole, by its type.
    fn of_whole(kind: &str) -> Option<Level> {
        if kind == "response.output_item.done" {
            Some(Level::Items)
        } else if kind.ends_with("part.done") {
            Some(Level::Parts)
        } else if kind.ends_with(".done") {
            Some(Level::Done)
        } else if kind.ends_with(".added") {
            Some(Level::Added)
        } else {
            None
        }
    }
}

/// The most bytes of events giving output whole that a stream keeps unread (then they are read).
const HELD_BYTES: usize = 64 * 1024;

/// The generated tokens of a stream, one count per [`Level`]; the stream's count is the largest.
#[derive(Debug, Default)]
struct Output {
    /// The tokens counted, by level.
    counted: [u64; 5],
    /// Events giving output whole, not read yet (see the file's head).
    held: Vec<(Level, String)>,
    /// The most tokens the held events can hold, by level.
    held_bound: [u64; 5],
    held_bytes: usize,
}

impl Output {
    /// Adds `tokens` at `level`; what the known count grew by. The held events are read when the stream
    /// could now pass `cut`.
    fn add(&mut self, level: Level, tokens: u64, cut: Option<u64>) -> u64 {
        let before = self.known();
        let at = &mut self.counted[level as usize];
        *at = at.saturating_add(tokens);
        self.read_if_near(cut);
        self.known() - before
    }

    /// Keeps `data`, an event giving output whole at `level`, unread while it cannot matter; what the known
    /// count grew by.
    fn hold(&mut self, level: Level, data: String, cut: Option<u64>) -> u64 {
        let before = self.known();
        let at = &mut self.held_bound[level as usize];
        // Each string of the event counts at most its bytes (with its quotes and the byte before it) do.
        *at = at.saturating_add(text_tokens(&data));
        self.held_bytes = self.held_bytes.saturating_add(data.len());
        self.held.push((level, data));
        if self.held_bytes > HELD_BYTES {
            self.read_held();
        }
        self.read_if_near(cut);
        self.known() - before
    }

    fn read_if_near(&mut self, cut: Option<u64>) {
        if !self.held.is_empty() && cut.is_some_and(|cut| self.bound() > cut) {
            self.read_held();
        }
    }

    /// Reads the held events into the counts.
    fn read_held(&mut self) {
        self.counted = self.levels();
        self.held.clear();
        self.held_bound = [0; 5];
        self.held_bytes = 0;
    }

    /// The counts by level with the held events read.
    fn levels(&self) -> [u64; 5] {
        let mut levels = self.counted;
        for (level, data) in &self.held {
            let at = &mut levels[*level as usize];
            *at = at.saturating_add(generated::json_tokens(data, Rule::Whole));
        }
        levels
    }

    /// The largest level as far as it is read (the held events left out).
    fn known(&self) -> u64 {
        self.counted.iter().copied().max().unwrap_or(0)
    }

    /// The most the count can be: the held events at their bounds.
    fn bound(&self) -> u64 {
        self.counted.iter().zip(self.held_bound).map(|(c, h)| c.saturating_add(h)).max().unwrap_or(0)
    }

    /// The count, the held events read (without keeping what they counted).
    fn count(&self) -> u64 {
        self.levels().into_iter().max().unwrap_or(0)
    }
}

/// A delta event, as far as it is counted: its `delta` (text, or an object of any fields).
#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    delta: DeltaTokens,
}

/// A Messages `content_block_start`: the block's index and its initial content.
#[derive(Deserialize)]
struct BlockStart {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    content_block: WholeTokens,
}

impl PassStream {
    /// A stream answering under `alias`.
    pub fn new(api: Api, alias: &str) -> PassStream {
        PassStream {
            api,
            alias: Value::String(alias.to_string()),
            alias_json: serde_json::to_vec(alias).unwrap_or_else(|_| b"null".to_vec()),
            prompt: None,
            reported: None,
            open_block: None,
            response_id: None,
            output: Output::default(),
            cut: None,
        }
    }

    /// The stream cut once its count passes `cut` (what the caller compares the counts [`PassStream::event`]
    /// returns with): held events are read before the count could pass it.
    pub fn with_cut(mut self, cut: Option<u64>) -> PassStream {
        self.cut = cut;
        self
    }

    /// The generated tokens of the stream so far (plain estimate), every event read.
    pub fn generated(&self) -> u64 {
        self.output.count()
    }

    /// A Responses stream's id, once `response.created` gave it (then `None` again): the response it stores.
    pub fn take_response_id(&mut self) -> Option<String> {
        self.response_id.take()
    }

    /// What the upstream reported so far.
    pub fn reported(&self) -> Option<Reported> {
        self.reported.clone()
    }

    /// One event: the bytes for the client and what the stream's known count grew by (plain estimate; it reaches
    /// the whole count before it could pass the cut, see [`PassStream::generated`]).
    pub fn event(&mut self, ev: RawEvent) -> (Option<Bytes>, u64) {
        if self.api == Api::Gemini {
            let (rewritten, reported, generated) = super::gemini_pass::event(&ev.data, &self.alias_json);
            self.reported = reported.or(self.reported.take());
            let generated = self.output.add(Level::Pieces, generated, self.cut);
            return (Some(rewritten.map_or(ev.raw, |data| framed("", &data))), generated);
        }
        let kind: Cow<'_, str> =
            if ev.event.is_empty() { Cow::Owned(type_of(&ev.data)) } else { Cow::Borrowed(&ev.event) };
        let mut generated = 0u64;
        let rewritten = match kind.as_ref() {
            "message_start" => self.nested(&ev.data, "message", |s, inner| {
                s.prompt = Some(messages_start_text(inner.usage()));
            }),
            "message_delta" => {
                self.reported = Some(final_counts(&ev.data, self.prompt.as_ref()));
                None
            }
            "content_block_start" => {
                // Text that does not read is counted whole, never as nothing.
                let (index, tokens) = match serde_json::from_str::<BlockStart>(&ev.data) {
                    Ok(start) => (start.index, start.content_block.0),
                    Err(_) => (None, text_tokens(&ev.data)),
                };
                self.open_block = index;
                generated = self.output.add(Level::Pieces, tokens, self.cut);
                None
            }
            "content_block_stop" => {
                self.open_block = None;
                None
            }
            "content_block_delta" => {
                let tokens = generated::text_delta_as_written(&ev.data).unwrap_or_else(|| delta_tokens(&ev.data));
                generated = self.output.add(Level::Pieces, tokens, self.cut);
                None
            }
            k @ ("response.created"
            | "response.in_progress"
            | "response.completed"
            | "response.incomplete"
            | "response.failed") => {
                let record = k == "response.created";
                let ends = k == "response.completed" || k == "response.incomplete";
                self.nested(&ev.data, "response", |s, inner| {
                    if record && s.api == Api::Responses {
                        s.response_id = inner.id();
                    }
                    if ends {
                        s.reported = Some(reply_usage_text(s.api, inner.usage(), inner.output()));
                    }
                })
            }
            k if k.ends_with(".delta") => {
                let tokens = generated::flat_delta_as_written(&ev.data).unwrap_or_else(|| delta_tokens(&ev.data));
                generated = self.output.add(Level::Pieces, tokens, self.cut);
                None
            }
            k => {
                // Only a few of these a stream (per item and part, not per token), each held until it matters.
                if let Some(level) = Level::of_whole(k) {
                    // Copied: a slice of the event would keep the whole buffer it was read into alive.
                    generated = self.output.hold(level, String::from(&*ev.data), self.cut);
                }
                None
            }
        };
        // An event the gateway did not change goes on as the upstream wrote it.
        let out = rewritten.map_or(ev.raw, |data| framed(&ev.event, &data));
        (Some(out), generated)
    }

    /// `data` with the client's name as `<outer>.model`, after `look` has seen `<outer>`'s fields; `None` when
    /// `data` is not an object holding an `outer` object (it is then forwarded as it is).
    fn nested(&mut self, data: &str, outer: &str, look: impl FnOnce(&mut Self, &Inner<'_>)) -> Option<Vec<u8>> {
        let inner = Inner::read(data, outer)?;
        look(self, &inner);
        Some(inner.renamed(data, &self.alias_json))
    }

    /// The end of a stream cut at its completion cap (the upstream's own end was not forwarded).
    pub fn cut(&mut self, charged: Usage) -> Bytes {
        let mut out = Vec::new();
        match self.api {
            Api::Messages => {
                if let Some(index) = self.open_block.take() {
                    let stop = json!({"type": "content_block_stop", "index": index});
                    sse::write_json(&mut out, "content_block_stop", &stop);
                }
                let delta = json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": null},
                    "usage": {"input_tokens": charged.prompt_tokens, "output_tokens": charged.completion_tokens}});
                sse::write_json(&mut out, "message_delta", &delta);
                sse::write_json(&mut out, "message_stop", &json!({"type": "message_stop"}));
            }
            Api::Gemini => {
                let alias = self.alias.as_str().unwrap_or_default();
                out.extend_from_slice(&super::gemini_stream::GeminiStream::new(alias).cut(charged));
            }
            Api::Chat | Api::Responses | Api::Embeddings => {
                let u = usage(charged.prompt_tokens, charged.completion_tokens);
                let now = chrono::Utc::now().timestamp();
                let r = response(&new_id("resp"), &self.alias, now, "incomplete", Vec::new(), u);
                let incomplete = json!({"type": "response.incomplete", "response": r});
                sse::write_json(&mut out, "response.incomplete", &incomplete);
            }
        }
        Bytes::from(out)
    }

    /// The error event ending a stream that failed mid-way.
    pub fn error(&mut self, err: &crate::Fault<'_>) -> Bytes {
        match self.api {
            Api::Messages => sse::json("error", &super::messages::error_body(err.status, err.message)),
            Api::Gemini => sse::json("", &super::gemini::error_body(err)),
            Api::Chat | Api::Responses | Api::Embeddings => {
                let now = chrono::Utc::now().timestamp();
                let mut r = response(&new_id("resp"), &self.alias, now, "failed", Vec::new(), Value::Null);
                r["error"] = json!({"code": err.code, "message": err.message});
                sse::json("response.failed", &json!({"type": "response.failed", "response": r}))
            }
        }
    }
}

/// One event named `kind` (none when empty) with `data`.
fn framed(kind: &str, data: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(data.len() + kind.len() + 16);
    sse::write(&mut out, kind, data);
    Bytes::from(out)
}

/// The generated tokens of a delta event's `delta`; of the whole text when it does not read.
pub(crate) fn delta_tokens(data: &str) -> u64 {
    serde_json::from_str::<Delta>(data).map_or_else(|_| text_tokens(data), |d| d.delta.0)
}

/// The `type` of an event's data (for streams that name no events).
fn type_of(data: &str) -> String {
    #[derive(Deserialize)]
    struct Typed {
        #[serde(rename = "type")]
        kind: Option<String>,
    }
    serde_json::from_str::<Typed>(data).ok().and_then(|t| t.kind).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, data: Value) -> RawEvent {
        RawEvent::new(event, &data.to_string())
    }

    #[test]
    fn messages_streams_are_forwarded_and_metered_with_cache_tokens() {
        let mut s = PassStream::new(Api::Messages, "claude-x");
        let (start, _) = s.event(ev("message_start", json!({"type": "message_start", "message": {"id": "m", "model": "up", "usage": {
            "input_tokens": 10, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 1000, "output_tokens": 1}}})));
        let start = String::from_utf8_lossy(&start.unwrap_or_default()).into_owned();
        assert!(start.starts_with("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"claude-x\""), "{start}");
        let delta =
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "abcdefgh"}});
        let (bytes, generated) = s.event(ev("content_block_delta", delta.clone()));
        assert_eq!(generated, 2);
        assert_eq!(
            bytes.unwrap_or_default(),
            Bytes::from(format!("event: content_block_delta\ndata: {delta}\n\n")),
            "as written"
        );
        s.event(ev(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 42}}),
        ));
        let want = Usage {
            prompt_tokens: 1110,
            completion_tokens: 42,
            cache_creation_tokens: 100,
            cache_read_tokens: 1000,
            ..Usage::default()
        };
        assert_eq!(s.reported(), Some(Reported::Counts(want)));
        let (unknown, _) = s.event(RawEvent::new("brand_new", "not json\nat all"));
        assert_eq!(
            unknown.unwrap_or_default(),
            Bytes::from_static(b"event: brand_new\ndata: not json\ndata: at all\n\n")
        );
    }

    #[test]
    fn responses_streams_rename_the_model_and_read_usage() {
        // Events named as OpenAI names them, and unnamed (their type read from their data, and passed on unnamed).
        for named in [true, false] {
            let name = |kind: &'static str| if named { kind } else { "" };
            let mut s = PassStream::new(Api::Responses, "gpt-5-codex");
            let (created, _) = s.event(ev(
                name("response.created"),
                json!({"type": "response.created", "response": {"id": "resp_1", "model": "up"}}),
            ));
            let created = String::from_utf8_lossy(&created.unwrap_or_default()).into_owned();
            assert!(created.contains(r#""model":"gpt-5-codex""#), "{created}");
            assert_eq!(created.starts_with("data: "), !named, "{created}");
            assert_eq!(s.take_response_id().as_deref(), Some("resp_1"));
            let delta = json!({"type": "response.output_text.delta", "delta": "abcd"});
            let (_, generated) = s.event(ev(name("response.output_text.delta"), delta));
            assert_eq!(generated, 1);
            s.event(ev(
                name("response.completed"),
                json!({"type": "response.completed", "response": {"id": "resp_1", "model": "up",
                "usage": {"input_tokens": 3, "output_tokens": 4, "input_tokens_details": {"cached_tokens": 2}}}}),
            ));
            let want = Usage { prompt_tokens: 3, completion_tokens: 4, cache_read_tokens: 2, ..Usage::default() };
            assert_eq!(s.reported(), Some(Reported::Counts(want)), "named: {named}");
        }
    }

    #[test]
    fn events_left_alone_go_on_as_written_and_changed_ones_are_written_again() {
        let body = "event: response.created\r\nid: 1\r\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"model\":\"up\"}}\r\n\r\n\
                    event: response.output_text.delta\r\nid: 2\r\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"abcd\"}\r\n\r\n";
        let mut framer = svc_providers::sse::Framer::new(1 << 16);
        framer.feed(body.as_bytes());
        let mut s = PassStream::new(Api::Responses, "gpt-5-codex");
        let mut out = Vec::new();
        while let Some(Ok(frame)) = framer.next_event() {
            let (bytes, _) = s.event(frame);
            out.push(String::from_utf8_lossy(&bytes.unwrap_or_default()).into_owned());
        }
        assert_eq!(
            out[0],
            "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"model\":\"gpt-5-codex\"}}\n\n"
        );
        let delta = "event: response.output_text.delta\r\nid: 2\r\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"abcd\"}\r\n\r\n";
        assert_eq!(out[1], delta, "byte for byte");
    }

    /// The generated tokens `s` counts for each event, in order.
    fn counts(s: &mut PassStream, events: &[Value]) -> Vec<u64> {
        events.iter().map(|e| s.event(ev(e["type"].as_str().unwrap_or_default(), e.clone())).1).collect()
    }

    #[test]
    fn every_messages_delta_and_block_counts_whatever_its_type() {
        let mut s = PassStream::new(Api::Messages, "claude-x");
        let delta = |d: Value| json!({"type": "content_block_delta", "index": 0, "delta": d});
        let start = |b: Value| json!({"type": "content_block_start", "index": 0, "content_block": b});
        // "abcdefgh" is 2 tokens; type tags and ids are not output.
        let events = [
            delta(json!({"type": "text_delta", "text": "abcdefgh"})),
            delta(json!({"type": "thinking_delta", "thinking": "abcdefgh"})),
            delta(json!({"type": "signature_delta", "signature": "abcdefgh"})),
            delta(json!({"type": "citations_delta", "citation": {"type": "char_location", "cited_text": "abcdefgh",
                "document_index": 0, "start_char_index": 0, "end_char_index": 8}})),
            delta(json!({"type": "input_json_delta", "partial_json": "abcdefgh"})),
            delta(json!({"type": "x_new_delta", "x_new": {"deep": ["abcdefgh"]}})),
            start(json!({"type": "text", "text": "abcdefgh"})),
            start(json!({"type": "redacted_thinking", "data": "abcdefgh"})),
            start(json!({"type": "tool_use", "id": "toolu_0123456789abcdef", "name": "abcdefgh", "input": {}})),
            start(json!({"type": "x_new", "x_text": "abcdefgh"})),
            // A server tool's results are its output, billed as input: not counted.
            start(json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
                "content": [{"type": "web_search_result", "title": "abcdefgh", "encrypted_content": "abcdefgh"}]})),
        ];
        assert_eq!(counts(&mut s, &events), [2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 0]);
        let broken = RawEvent::new("content_block_delta", "{\"delta\": \"abcdefgh");
        assert_eq!(s.event(broken).1, text_tokens("{\"delta\": \"abcdefgh"), "text that does not read counts whole");
        let empty = start(json!({"type": "thinking", "thinking": "", "signature": ""}));
        assert_eq!(counts(&mut s, &[empty]), [0]);
        assert_eq!(s.open_block, Some(0), "the block start is still read for its index");
    }

    #[test]
    fn every_responses_delta_counts_whatever_its_type() {
        let mut s = PassStream::new(Api::Responses, "gpt-5-codex");
        let kinds = [
            "response.output_text.delta",
            "response.refusal.delta",
            "response.reasoning_summary_text.delta",
            "response.reasoning_text.delta",
            "response.function_call_arguments.delta",
            "response.custom_tool_call_input.delta",
            "response.x_new.delta",
        ];
        let events: Vec<Value> = kinds
            .iter()
            .map(|k| {
                json!({"type": k, "item_id": "msg_0123456789abcdef", "output_index": 0, "content_index": 0,
                "delta": "abcdefgh", "obfuscation": "padding0123", "logprobs": []})
            })
            .collect();
        assert_eq!(counts(&mut s, &events), [2; 7], "the delta alone: not its ids or padding");
        let object = json!({"type": "response.x_other.delta", "delta": {"type": "x", "text": "abcdefgh"}});
        assert_eq!(counts(&mut s, &[object]), [2], "a delta that is an object");
    }

    #[test]
    fn responses_output_given_whole_counts_once_and_alone_counts_all() {
        // With a cut at 0 every event is read as it comes (`held_events_are_read_when_they_could_matter`).
        let text = "abcdefgh".repeat(4); // 8 tokens
        let item = json!({"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]});
        let part = json!({"type": "output_text", "text": text, "annotations": []});
        let honest = [
            json!({"type": "response.output_item.added", "output_index": 0,
                "item": {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant", "content": []}}),
            json!({"type": "response.content_part.added", "item_id": "msg_1", "part": {"type": "output_text", "text": ""}}),
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "delta": "abcdefgh".repeat(2)}),
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "delta": "abcdefgh".repeat(2)}),
            json!({"type": "response.output_text.done", "item_id": "msg_1", "text": text}),
            json!({"type": "response.content_part.done", "item_id": "msg_1", "part": part}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
            json!({"type": "response.web_search_call.searching", "item_id": "ws_1"}),
        ];
        let mut s = PassStream::new(Api::Responses, "gpt-5-codex").with_cut(Some(0));
        assert_eq!(counts(&mut s, &honest), [0, 0, 4, 4, 0, 0, 0, 0], "the text once, by its deltas");
        // A stream that sends its output only whole is counted all the same, event by event.
        for whole in [
            json!({"type": "response.output_item.done", "item": item}),
            json!({"type": "response.content_part.done", "part": part}),
            json!({"type": "response.output_text.done", "text": text}),
            json!({"type": "response.x_new.done", "x_text": text}),
            json!({"type": "response.output_item.added", "item": item}),
        ] {
            let mut s = PassStream::new(Api::Responses, "gpt-5-codex").with_cut(Some(0));
            assert_eq!(counts(&mut s, &[whole.clone(), whole.clone(), whole.clone()]), [8, 8, 8], "{whole}");
        }
        // Whole items bigger than the deltas (a tool call's name is in the item only) raise the count to them.
        let mut s = PassStream::new(Api::Responses, "gpt-5-codex").with_cut(Some(0));
        let call = json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "abcd", "arguments": "abcdefgh"});
        let events = [
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": "abcdefgh"}),
            json!({"type": "response.output_item.done", "item": call}),
        ];
        assert_eq!(counts(&mut s, &events), [2, 1]);
    }

    #[test]
    fn held_events_are_read_when_they_could_matter() {
        let text = "abcdefgh".repeat(4); // 8 tokens
        let done = json!({"type": "response.output_text.done", "item_id": "msg_1", "text": text});
        let bound = text_tokens(&done.to_string());
        assert!(bound > 8, "{bound}");
        // Never cut: held unread, yet the stream's count reads them.
        let mut s = PassStream::new(Api::Responses, "gpt-5-codex");
        assert_eq!(counts(&mut s, &[done.clone(), done.clone()]), [0, 0], "held");
        assert_eq!((s.output.known(), s.generated()), (0, 16));
        let delta = json!({"type": "response.output_text.delta", "delta": "abcd"});
        assert_eq!(counts(&mut s, std::slice::from_ref(&delta)), [1], "pieces are counted as they come");
        assert_eq!(s.generated(), 16);
        // Cut at the bound of one: the first is held (its bound is under the cut), the second would let the count pass it.
        let mut s = PassStream::new(Api::Responses, "gpt-5-codex").with_cut(Some(bound));
        assert_eq!(counts(&mut s, std::slice::from_ref(&done)), [0]);
        assert_eq!(counts(&mut s, std::slice::from_ref(&done)), [16], "read once the bounds pass the cut");
        assert!(s.output.held.is_empty());
        // A delta that lifts the bound past the cut reads them too.
        let mut s = PassStream::new(Api::Responses, "gpt-5-codex").with_cut(Some(bound));
        assert_eq!(counts(&mut s, std::slice::from_ref(&done)), [0]);
        let long = json!({"type": "response.output_text.delta", "delta": "abcd".repeat(bound as usize + 1)});
        assert_eq!(counts(&mut s, &[long]), [bound + 1], "the delta alone is the largest level");
        assert!(s.output.held.is_empty());
        // Never more than HELD_BYTES kept.
        let mut s = PassStream::new(Api::Responses, "gpt-5-codex");
        let big = json!({"type": "response.output_text.done", "text": "x".repeat(HELD_BYTES / 2)});
        assert_eq!(counts(&mut s, &[big.clone(), big.clone()]), [0, 2 * text_tokens(&"x".repeat(HELD_BYTES / 2))]);
        assert!(s.output.held.is_empty() && s.output.held_bytes == 0);
    }
}
