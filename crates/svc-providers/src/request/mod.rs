//! The chat-completions request as the gateway acts on it: a JSON object whose `model`, `messages`,
//! `stream`, `stream_options`, `max_tokens` / `max_completion_tokens` and `n` are checked, and whose every
//! other field (tools, tool_choice, response_format, stop, seed, user, logprobs, …) passes through untouched.

mod client;
mod scan;

pub use client::{Media, PromptParts};

use client::ClientBody;
use serde_json::{Map, Value};
use std::borrow::Cow;

/// The largest completion cap a request may ask for (`max_tokens`, `max_completion_tokens`). No model
/// writes anywhere near this much; a larger number is a client bug, answered 400 rather than reserved.
pub const MAX_COMPLETION_TOKENS: u64 = 16_777_216;
/// The most choices (`n`) a request may ask for, as OpenAI allows.
pub const MAX_CHOICES: u64 = 128;
/// The longest model name a request may give, in bytes. A wildcard alias serves any name it matches, and the
/// name goes upstream, into the spend record and the request line: a client must not be able to make it
/// large (providers' model ids are well under 100 bytes).
pub const MAX_MODEL_BYTES: usize = 256;

/// The request's `model`: a non-empty string of at most [`MAX_MODEL_BYTES`] (400 naming `model` otherwise).
pub fn model_name(model: Option<&Value>) -> Result<&str, RequestError> {
    match model {
        Some(Value::String(m)) => model_text(m),
        Some(_) => Err(bad("`model` must be a non-empty string", "model")),
        None => Err(bad("missing required field `model`", "model")),
    }
}

/// [`model_name`] of a `model` already read as a string.
pub fn model_text(m: &str) -> Result<&str, RequestError> {
    if m.len() > MAX_MODEL_BYTES {
        Err(bad(format!("`model` is {} bytes long; a model name is at most {MAX_MODEL_BYTES} bytes", m.len()), "model"))
    } else if m.is_empty() {
        Err(bad("`model` must be a non-empty string", "model"))
    } else {
        Ok(m)
    }
}

/// Whether the full parse (`serde_json::Value`) accepts the JSON text `bytes`, checked without building
/// anything: by the raw reading's own checks when they are as strict ([`scan::plain`]), else by the full parse's
/// checks with nothing kept. A reader of the raw text (jiter's) accepts what this refuses.
pub fn json_parses(bytes: &[u8]) -> bool {
    scan::plain(bytes) || serde_json::from_slice::<scan::Valid>(bytes).is_ok()
}

/// [`crate::estimate::text_tokens`] of the JSON text `raw` (valid JSON) as serde_json writes it again.
pub(crate) fn json_text_tokens(raw: &str) -> u64 {
    scan::json_tokens(raw)
}

/// A validated chat-completions request body.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    repr: Repr,
    /// What the gateway reads of the body, read once (each look-up in a parsed body hashes the key) and kept in
    /// step with it by every change.
    facts: Facts,
}

/// Where the body is.
#[derive(Debug, Clone)]
enum Repr {
    /// A body built by a translation (or a test), in its key order.
    Parsed(Map<String, Value>),
    /// The client's own bytes ([`ChatRequest::parse`]), boxed: a request is moved with the futures that hold
    /// it, and every byte of it is copied with them.
    Client(Box<ClientBody>),
}

/// The fields the gateway acts on, as the body holds them.
#[derive(Debug, Clone, Copy)]
struct Facts {
    stream: bool,
    wants_stream_usage: bool,
    /// `max_completion_tokens`, else `max_tokens`.
    max_tokens: Option<u64>,
    /// `n`, at least 1.
    choices: u64,
    /// The estimate's reading of the prompt (no change the gateway makes touches it).
    parts: PromptParts,
}

/// The scalar fields the gateway checks and acts on, as a body holds them (parsed from a map, or parsed out of
/// a client's raw fields).
struct Scalars<'a> {
    stream: Option<Cow<'a, Value>>,
    max_tokens: Option<Cow<'a, Value>>,
    max_completion_tokens: Option<Cow<'a, Value>>,
    n: Option<Cow<'a, Value>>,
    stream_options: Option<Cow<'a, Value>>,
}

impl<'a> Scalars<'a> {
    fn of(get: impl Fn(&str) -> Option<Cow<'a, Value>>) -> Scalars<'a> {
        Scalars {
            stream: get("stream"),
            max_tokens: get("max_tokens"),
            max_completion_tokens: get("max_completion_tokens"),
            n: get("n"),
            stream_options: get("stream_options"),
        }
    }

    /// `stream` a boolean, the caps non-negative integers up to [`MAX_COMPLETION_TOKENS`], `n` from 1 to
    /// [`MAX_CHOICES`] (each may be null or absent).
    fn check(&self) -> Result<(), RequestError> {
        match self.stream.as_deref() {
            None | Some(Value::Bool(_)) | Some(Value::Null) => {}
            Some(_) => return Err(bad("`stream` must be a boolean", "stream")),
        }
        for (field, value) in [("max_tokens", &self.max_tokens), ("max_completion_tokens", &self.max_completion_tokens)]
        {
            match value.as_deref() {
                None | Some(Value::Null) => {}
                Some(v) => match v.as_u64() {
                    Some(n) if n <= MAX_COMPLETION_TOKENS => {}
                    Some(_) => {
                        return Err(bad(format!("`{field}` must be at most {MAX_COMPLETION_TOKENS}"), field));
                    }
                    None => return Err(bad(format!("`{field}` must be a non-negative integer"), field)),
                },
            }
        }
        match self.n.as_deref() {
            None | Some(Value::Null) => {}
            Some(v) => match v.as_u64() {
                Some(n) if (1..=MAX_CHOICES).contains(&n) => {}
                _ => return Err(bad(format!("`n` must be an integer from 1 to {MAX_CHOICES}"), "n")),
            },
        }
        Ok(())
    }

    fn facts(&self, parts: PromptParts) -> Facts {
        let u64_of = |v: &Option<Cow<'a, Value>>| v.as_deref().and_then(Value::as_u64);
        Facts {
            stream: self.stream.as_deref().and_then(Value::as_bool).unwrap_or(false),
            wants_stream_usage: self
                .stream_options
                .as_deref()
                .and_then(|o| o.get("include_usage"))
                .and_then(Value::as_bool)
                .unwrap_or(false),
            max_tokens: u64_of(&self.max_completion_tokens).or_else(|| u64_of(&self.max_tokens)),
            choices: u64_of(&self.n).unwrap_or(1).max(1),
            parts,
        }
    }
}

/// A body that is not a valid chat-completions request; `param` names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RequestError {
    /// What is wrong.
    pub message: String,
    /// The offending field.
    pub param: Option<String>,
}

fn bad(message: impl Into<String>, param: &str) -> RequestError {
    RequestError { message: message.into(), param: Some(param.to_string()) }
}

impl ChatRequest {
    /// Reads and checks a client's request body. The body is kept as the client wrote it: only the fields the
    /// gateway acts on are read, and only the ones it changes are written again.
    pub fn parse(bytes: &[u8]) -> Result<ChatRequest, RequestError> {
        if let Some(read) = ClientBody::read(bytes) {
            let (body, facts) = read?;
            return Ok(ChatRequest { repr: Repr::Client(Box::new(body)), facts });
        }
        // Not a JSON object: the full parse words why.
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|e| RequestError { message: format!("request body is not valid JSON: {e}"), param: None })?;
        let Value::Object(body) = value else {
            return Err(RequestError { message: "request body must be a JSON object".into(), param: None });
        };
        ChatRequest::check(body)
    }

    /// Checks a request body already parsed (a front end's translation into chat completions).
    pub fn check(body: Map<String, Value>) -> Result<ChatRequest, RequestError> {
        model_name(body.get("model"))?;
        match body.get("messages") {
            Some(Value::Array(ms)) if !ms.is_empty() => {
                for (i, m) in ms.iter().enumerate() {
                    let ok = m.get("role").is_some_and(Value::is_string);
                    if !ok {
                        return Err(bad(
                            format!("`messages[{i}]` must be an object with a string `role`"),
                            &format!("messages[{i}]"),
                        ));
                    }
                }
            }
            Some(Value::Array(_)) => return Err(bad("`messages` must not be empty", "messages")),
            Some(_) => return Err(bad("`messages` must be an array", "messages")),
            None => return Err(bad("missing required field `messages`", "messages")),
        }
        Scalars::of(|k| body.get(k).map(Cow::Borrowed)).check()?;
        Ok(ChatRequest::from_body(body))
    }

    /// A request made from a body the caller built (translations, tests); not checked.
    pub fn from_body(body: Map<String, Value>) -> ChatRequest {
        let facts = Scalars::of(|k| body.get(k).map(Cow::Borrowed)).facts(prompt_parts(&body));
        ChatRequest { facts, repr: Repr::Parsed(body) }
    }

    /// The whole body, in the client's key order, with the gateway's changes (a client's body is parsed whole
    /// on the first call).
    pub fn body(&self) -> &Map<String, Value> {
        match &self.repr {
            Repr::Parsed(body) => body,
            Repr::Client(body) => body.parsed(),
        }
    }

    /// The body to send to an upstream of the chat-completions API: a client's own bytes with the changed
    /// fields written in, or a built body written out.
    pub fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        match &self.repr {
            Repr::Parsed(body) => serde_json::to_vec(body),
            Repr::Client(body) => Ok(body.to_json()),
        }
    }

    /// One field of the body.
    pub fn field(&self, name: &str) -> Option<&Value> {
        self.body().get(name)
    }

    /// How many choices were asked for (`n`, default 1).
    pub fn choices(&self) -> u64 {
        self.facts.choices
    }

    /// The alias (or model id) in `model`.
    pub fn model(&self) -> &str {
        match &self.repr {
            Repr::Parsed(body) => body.get("model").and_then(Value::as_str).unwrap_or_default(),
            Repr::Client(body) => body.model(),
        }
    }

    /// Whether the client asked for a stream.
    pub fn stream(&self) -> bool {
        self.facts.stream
    }

    /// Whether the client asked for the usage chunk of a stream.
    pub fn wants_stream_usage(&self) -> bool {
        self.facts.wants_stream_usage
    }

    /// `max_completion_tokens`, else `max_tokens`.
    pub fn max_tokens(&self) -> Option<u64> {
        self.facts.max_tokens
    }

    /// The messages.
    pub fn messages(&self) -> &[Value] {
        self.body().get("messages").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
    }

    /// What an estimate reads of the prompt (see [`crate::estimate`]).
    pub fn prompt_parts(&self) -> PromptParts {
        self.facts.parts
    }

    /// Lowers the completion cap to `tokens`: the field the client set (`max_completion_tokens`, else
    /// `max_tokens`) when it asked for more, else `max_tokens`, the one every OpenAI-compatible server knows.
    pub fn cap_completion_tokens(&mut self, tokens: u64) {
        if self.max_tokens().is_some_and(|asked| asked <= tokens) {
            return;
        }
        let completion = match &self.repr {
            Repr::Parsed(body) => body.get("max_completion_tokens").is_some_and(|v| !v.is_null()),
            Repr::Client(body) => body.has_max_completion_tokens(),
        };
        let field = if completion { "max_completion_tokens" } else { "max_tokens" };
        match &mut self.repr {
            Repr::Parsed(body) => {
                body.insert(field.into(), Value::from(tokens));
            }
            Repr::Client(body) => body.cap(field, tokens),
        }
        self.facts.max_tokens = Some(tokens);
    }

    /// Replaces `model` with the upstream id.
    pub fn set_model(&mut self, upstream: &str) {
        match &mut self.repr {
            Repr::Parsed(body) => set_model(body, upstream),
            Repr::Client(body) => body.set_model(upstream),
        }
    }

    /// Asks the upstream for the usage chunk of a stream, whatever the client asked, so the gateway
    /// always knows the token counts (the gateway strips the chunk again when the client did not ask).
    pub fn force_stream_usage(&mut self) {
        match &mut self.repr {
            Repr::Parsed(body) => force_stream_usage(body),
            Repr::Client(body) => body.force_stream_usage(),
        }
        self.facts.wants_stream_usage = true;
    }
}

/// The estimate's reading of a parsed body's prompt.
fn prompt_parts(body: &Map<String, Value>) -> PromptParts {
    let messages = body.get("messages").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let fields = ["tools", "functions", "response_format"].into_iter().filter_map(|f| body.get(f));
    let json = messages.iter().chain(fields).map(crate::tokens::json_value_tokens);
    let parts = messages.iter().filter_map(|m| m.get("content").and_then(Value::as_array)).flatten();
    let (media, documents) = parts
        .filter_map(|p| p.get("type").and_then(Value::as_str).and_then(Media::of))
        .fold((0, 0), |(m, d), kind| (m + 1, d + u64::from(kind == Media::Document)));
    PromptParts { messages: messages.len() as u64, json_tokens: json.fold(0, u64::saturating_add), media, documents }
}

/// `model` set in a parsed body.
fn set_model(body: &mut Map<String, Value>, upstream: &str) {
    body.insert("model".into(), Value::String(upstream.to_string()));
}

/// `stream_options.include_usage` set in a parsed body (`stream_options` made an object if it was not one).
fn force_stream_usage(body: &mut Map<String, Value>) {
    let opts = body.entry("stream_options").or_insert_with(|| Value::Object(Map::new()));
    if !opts.is_object() {
        *opts = Value::Object(Map::new());
    }
    if let Value::Object(o) = opts {
        o.insert("include_usage".into(), Value::Bool(true));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_bodies_naming_the_field() {
        let cases: &[(&str, Option<&str>)] = &[
            ("{", None),
            ("[]", None),
            ("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", Some("model")),
            ("{\"model\":1,\"messages\":[]}", Some("model")),
            ("{\"model\":\"m\"}", Some("messages")),
            ("{\"model\":\"m\",\"messages\":[]}", Some("messages")),
            ("{\"model\":\"m\",\"messages\":[{\"content\":\"x\"}]}", Some("messages[0]")),
            ("{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}],\"stream\":\"yes\"}", Some("stream")),
            ("{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}],\"max_tokens\":-1}", Some("max_tokens")),
            ("{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}],\"max_tokens\":1e18}", Some("max_tokens")),
            (
                "{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}],\"max_completion_tokens\":1000000000000000000}",
                Some("max_completion_tokens"),
            ),
            ("{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}],\"n\":0}", Some("n")),
            ("{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}],\"n\":129}", Some("n")),
            ("{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}],\"n\":1.5}", Some("n")),
        ];
        for (body, param) in cases {
            let err = ChatRequest::parse(body.as_bytes()).err();
            assert_eq!(err.map(|e| e.param), Some(param.map(String::from)), "{body}");
        }
    }

    #[test]
    fn keeps_unknown_fields_and_forces_usage() {
        let body = r#"{"model":"a","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}],"seed":7,"stream":true,"stream_options":{"x":1}}"#;
        let mut r = ChatRequest::parse(body.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        assert!(r.stream() && !r.wants_stream_usage());
        r.set_model("up");
        r.force_stream_usage();
        assert!(r.wants_stream_usage(), "the facts follow the body");
        let out = serde_json::to_value(r.body()).unwrap_or_default();
        assert_eq!(out["model"], "up");
        assert_eq!(out["seed"], 7);
        assert_eq!(out["tools"][0]["type"], "function");
        assert_eq!(out["stream_options"], serde_json::json!({"x":1,"include_usage":true}));
    }

    #[test]
    fn caps_lower_the_field_the_client_used() {
        let parse = |b: &str| ChatRequest::parse(b.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        let mut r = parse(r#"{"model":"a","messages":[{"role":"user"}],"max_completion_tokens":9000}"#);
        r.cap_completion_tokens(1024);
        assert_eq!((r.field("max_completion_tokens"), r.field("max_tokens")), (Some(&1024.into()), None));
        assert_eq!(r.max_tokens(), Some(1024), "the facts follow the body");
        let mut r = parse(r#"{"model":"a","messages":[{"role":"user"}],"max_tokens":100}"#);
        r.cap_completion_tokens(1024);
        assert_eq!(r.max_tokens(), Some(100), "a smaller cap of the client's stays");
        let mut r = parse(r#"{"model":"a","messages":[{"role":"user"}],"n":2}"#);
        r.cap_completion_tokens(1024);
        assert_eq!((r.field("max_tokens"), r.choices()), (Some(&1024.into()), 2));
    }

    /// A number of the client's body is forwarded with its exact value: it is parsed to the nearest double
    /// (serde_json's `float_roundtrip`; its default parser may be one unit in the last place off) and written
    /// back as text that parses to the same double. Found by the `anthropic_request` fuzz target.
    #[test]
    fn numbers_keep_their_exact_value() {
        for text in [
            "0.000000000000000000000000000000000000000000000000000000000000000000000000000002049638230412172402",
            "2222222222222226222222222222222222222",
            "0.1",
            "1e-300",
        ] {
            let body = format!(r#"{{"model":"m","messages":[{{"role":"user"}}],"top_p":{text}}}"#);
            let r = ChatRequest::parse(body.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
            let nearest: f64 = text.parse().unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(r.field("top_p").and_then(Value::as_f64), Some(nearest), "{text}");
            let forwarded = serde_json::to_string(r.body()).unwrap_or_default();
            let again: Value = serde_json::from_str(&forwarded).unwrap_or_default();
            assert_eq!(again["top_p"].as_f64(), Some(nearest), "{text} through {forwarded}");
        }
    }
}
