//! Front ends: the client APIs the gateway's one pipeline serves. Each turns its request into the pipeline's
//! chat-completions request and renders the pipeline's answer (a completion, or a stream of chunks) in its
//! own shape; chat completions is the identity. Files by direction: `messages.rs` (Anthropic Messages ↔
//! chat), `messages_stream.rs`, `responses.rs` (OpenAI Responses ↔ chat), `responses_stream.rs`; a request
//! in a deployment's own API is passed through (`passthrough.rs`, `passthrough_stream.rs`).
//!
//! Who called is read here too ([`Caller`]): the client family from `User-Agent` and the agent's session id,
//! recorded with each spend record.
//!
//! What this crate does not know: HTTP statuses of its own (a bad body is a [`RequestError`] naming the field;
//! an error is written in an API's shape from the [`Fault`] the gateway describes), servers, keys, budgets.

pub mod embeddings;
pub mod gemini;
pub mod gemini_pass;
pub mod gemini_stream;
mod lifecycle;
pub mod messages;
pub mod messages_stream;
mod native;
pub mod passthrough;
pub mod passthrough_stream;
pub mod responses;
pub mod responses_stream;
#[cfg(test)]
mod robustness;
mod shape;
pub mod sse;
pub mod unseen;
pub mod usage_text;

use bytes::Bytes;
use gemini_stream::GeminiStream;
use http::{HeaderMap, HeaderName};
use messages_stream::MessagesStream;
pub use native::Reading;
use passthrough_stream::PassStream;
use responses_stream::ResponsesStream;
use serde_json::{Map, Value};
pub use shape::ErrorShape;
use svc_budget::Usage;
use svc_providers::passthrough::Wire;
use svc_providers::{ChatRequest, RequestError};
pub use unseen::{Searches, Unseen};

/// A bad request: `message`, naming `param`.
pub(crate) fn bad(message: impl Into<String>, param: Option<String>) -> RequestError {
    RequestError { message: message.into(), param }
}

/// A gateway error as a front end writes it, in no API's shape yet.
#[derive(Debug, Clone, Copy)]
pub struct Fault<'a> {
    /// The HTTP status.
    pub status: u16,
    /// The OpenAI-style code or type (`budget_exceeded`, `rate_limit_error`, …).
    pub code: &'a str,
    /// What went wrong.
    pub message: &'a str,
    /// Seconds until a retry can pass (`Retry-After`), when the gateway knows.
    pub retry_after: Option<u64>,
}

/// The client API a request came in by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    /// `POST /v1/chat/completions`.
    Chat,
    /// `POST /v1/messages` (Anthropic).
    Messages,
    /// `POST /v1/responses` (OpenAI).
    Responses,
    /// `POST /v1/embeddings`.
    Embeddings,
    /// `POST /v1beta/models/{model}:generateContent` and `:streamGenerateContent` (Google's Gemini API).
    Gemini,
}

impl Api {
    /// The name recorded with spend (`chat`, `messages`, `responses`, `embeddings`).
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Chat => "chat",
            Api::Messages => "messages",
            Api::Responses => "responses",
            Api::Embeddings => "embeddings",
            Api::Gemini => "gemini",
        }
    }

    /// The upstream API a request to this one passes through to unchanged (when the deployment speaks it).
    pub fn wire(self) -> Option<Wire> {
        match self {
            Api::Chat => None,
            Api::Messages => Some(Wire::Messages),
            Api::Responses => Some(Wire::Responses),
            Api::Embeddings => Some(Wire::Embeddings),
            Api::Gemini => Some(Wire::Gemini),
        }
    }

    /// A body of this API read for the pipeline, checked (400 naming the field): a Messages or Responses body
    /// as it is (`native.rs`; its chat form is made when a deployment needs it), any other as its chat form.
    pub fn read(self, body: &[u8]) -> Result<Translated, RequestError> {
        if let Some(n) = matches!(self, Api::Messages | Api::Responses).then(|| native::read(self, body)).flatten() {
            let native::Native { reading, continues, stored, unseen, fields } = n;
            return Ok(Translated { chat: None, reading, continues, stored, unseen, fields: Some(fields) });
        }
        let Chat { chat, continues, stored, unseen } = self.translate(body)?;
        let reading = Reading::of_chat(&chat);
        Ok(Translated { chat: Some(chat), reading, continues, stored, unseen, fields: None })
    }

    /// The pipeline's chat-completions request of a body of this API, checked (400 naming the field).
    pub fn to_chat(self, body: &[u8]) -> Result<ChatRequest, RequestError> {
        self.translate(body).map(|t| t.chat)
    }

    /// The chat-completions form of a body of this API, and what the pipeline needs of the rest.
    fn translate(self, body: &[u8]) -> Result<Chat, RequestError> {
        let (chat, continues, stored, unseen) = match self {
            Api::Chat => {
                let chat = ChatRequest::parse(body)?;
                let unseen = Unseen::of_chat(chat.prompt_parts().documents);
                return Ok(Chat { chat, continues: None, stored: false, unseen });
            }
            Api::Embeddings => (embeddings::to_chat(body)?, None, false, Unseen::default()),
            Api::Messages => {
                let (chat, unseen) = messages::to_chat(body)?;
                (chat, None, false, unseen)
            }
            Api::Gemini => {
                let (chat, unseen) = gemini::to_chat(body)?;
                (chat, None, false, unseen)
            }
            Api::Responses => {
                let read = responses::to_chat(body)?;
                (read.chat, read.continues, read.stored, read.unseen)
            }
        };
        Ok(Chat { chat: ChatRequest::check(chat)?, continues, stored, unseen })
    }

    /// A completion (metered, `model` the alias) in this API's shape.
    pub fn render(self, completion: Map<String, Value>) -> Map<String, Value> {
        match self {
            Api::Chat | Api::Embeddings => completion,
            Api::Messages => messages::from_completion(&completion),
            Api::Responses => responses::from_completion(&completion),
            Api::Gemini => gemini::from_completion(&completion),
        }
    }

    /// The encoder of a stream answered under `alias`, for a translated API (`None`: chat completions).
    pub fn encoder(self, alias: &str) -> Option<Encoder> {
        match self {
            Api::Chat | Api::Embeddings => None,
            Api::Messages => Some(Encoder::Messages(MessagesStream::new(alias))),
            Api::Responses => Some(Encoder::Responses(Box::new(ResponsesStream::new(alias)))),
            Api::Gemini => Some(Encoder::Gemini(GeminiStream::new(alias))),
        }
    }

    /// The top-level fields of an answer in this API that hold its usage, its model and its output.
    pub fn answer_fields(self) -> AnswerFields {
        match self {
            Api::Gemini => AnswerFields { usage: "usageMetadata", model: "modelVersion", output: "candidates" },
            Api::Messages => AnswerFields { usage: "usage", model: "model", output: "content" },
            Api::Chat | Api::Responses | Api::Embeddings => {
                AnswerFields { usage: "usage", model: "model", output: "output" }
            }
        }
    }
}

/// Where an API's answer keeps what the gateway reads and rewrites.
#[derive(Debug, Clone, Copy)]
pub struct AnswerFields {
    /// The usage (`usage`, Gemini's `usageMetadata`).
    pub usage: &'static str,
    /// The model, renamed to the client's alias (`model`, Gemini's `modelVersion`).
    pub model: &'static str,
    /// The generated output, counted when the usage is not believed.
    pub output: &'static str,
}

/// A request as the pipeline takes it.
#[derive(Debug)]
pub struct Translated {
    /// The chat-completions form, when it was made (a Messages or Responses body is read as it is:
    /// [`Api::to_chat`] makes it for a deployment that does not speak the client's API).
    pub chat: Option<ChatRequest>,
    /// What the pipeline acts on.
    pub reading: Reading,
    /// The stored response a Responses request continues (`previous_response_id`): only a deployment that
    /// speaks Responses can serve it, preferably the one that stored it.
    pub continues: Option<String>,
    /// Whether the upstream keeps its answer for later requests (a Responses request without `store: false`):
    /// only then does the gateway remember where the answer is kept.
    pub stored: bool,
    /// What it makes the provider bill beyond its body.
    pub unseen: Unseen,
    /// The body read as top-level fields, when it was read as it is: a pass-through writes it again from these
    /// ([`passthrough::prepare_read`]).
    pub fields: Option<svc_providers::raw::Object>,
}

/// A request's chat-completions form, and what the pipeline needs of the rest.
struct Chat {
    chat: ChatRequest,
    continues: Option<String>,
    stored: bool,
    unseen: Unseen,
}

/// A client body that must be a JSON object with a `model` the pipeline takes (a non-empty string of at most
/// [`svc_providers::MAX_MODEL_BYTES`]; 400 naming it otherwise): the object and the model.
fn object_with_model(body: &[u8]) -> Result<(Map<String, Value>, String), RequestError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| crate::bad(format!("request body is not valid JSON: {e}"), None))?;
    let Value::Object(req) = value else {
        return Err(crate::bad("request body must be a JSON object", None));
    };
    let model = svc_providers::model_name(req.get("model"))?.to_string();
    Ok((req, model))
}

/// A stream translated from chat chunks to another API's events.
#[derive(Debug)]
pub enum Encoder {
    /// Anthropic Messages events.
    Messages(MessagesStream),
    /// OpenAI Responses events.
    Responses(Box<ResponsesStream>),
    /// Gemini's `GenerateContentResponse` events.
    Gemini(GeminiStream),
    /// The upstream's own events, passed through.
    Pass(PassStream),
}

impl Encoder {
    /// The events of one chunk.
    pub fn chunk(&mut self, chunk: Map<String, Value>) -> Option<Bytes> {
        match self {
            Encoder::Messages(s) => s.chunk(&chunk),
            Encoder::Responses(s) => s.chunk(&chunk),
            Encoder::Gemini(s) => s.chunk(&chunk),
            // A passed-through stream carries raw events (`PassStream::event`), never chunks.
            Encoder::Pass(_) => None,
        }
    }

    /// The end of a finished stream, with what was charged.
    pub fn done(&mut self, charged: Usage) -> Bytes {
        match self {
            Encoder::Messages(s) => s.done(charged),
            Encoder::Responses(s) => s.done(charged),
            Encoder::Gemini(s) => s.done(charged),
            // The upstream's own last events were forwarded already.
            Encoder::Pass(_) => Bytes::new(),
        }
    }

    /// The end of a stream cut at its completion cap.
    pub fn cut(&mut self, charged: Usage) -> Bytes {
        match self {
            Encoder::Messages(s) => s.cut(charged),
            Encoder::Responses(s) => s.cut(charged),
            Encoder::Gemini(s) => s.cut(charged),
            Encoder::Pass(s) => s.cut(charged),
        }
    }

    /// The error event of a stream that failed mid-way.
    pub fn error(&mut self, err: &crate::Fault<'_>) -> Bytes {
        match self {
            Encoder::Messages(s) => s.error(err),
            Encoder::Responses(s) => s.error(err),
            Encoder::Gemini(s) => s.error(err),
            Encoder::Pass(s) => s.error(err),
        }
    }
}

/// Who called, as far as the request tells: recorded with spend.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    /// The client family: the `User-Agent` product name (`claude-cli`, `codex_exec`, `OpenAI/Python`, …).
    pub client: Option<String>,
    /// The agent's session id (`X-Claude-Code-Session-Id`, Codex's `session-id`, or `x-session-id`).
    pub session: Option<String>,
}

/// The longest client family kept, in bytes (a `User-Agent`'s product name: `claude-cli`, `codex_exec`).
pub const MAX_CLIENT_BYTES: usize = 64;
/// The longest session id kept, in bytes (the agents send UUIDs, 36 bytes).
pub const MAX_SESSION_BYTES: usize = 128;

/// Where agents name their session: Claude Code, Codex, and the generic name.
const SESSION_HEADERS: [HeaderName; 3] = [
    HeaderName::from_static("x-claude-code-session-id"),
    HeaderName::from_static("session-id"),
    HeaderName::from_static("x-session-id"),
];

impl Caller {
    /// Reads the caller from request headers. A value that is not printable text is not kept; one longer than
    /// its bound ([`MAX_CLIENT_BYTES`], [`MAX_SESSION_BYTES`]) is refused with 400 naming the header: it is
    /// stored with every spend record, so it is never cut silently into something that looks like another.
    pub fn from_headers(headers: &HeaderMap) -> Result<Caller, RequestError> {
        let printable = |v: &str| !v.is_empty() && v.bytes().all(|b| b.is_ascii_graphic() || b == b' ');
        let text = |name: &HeaderName| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
        let bounded = |name: &HeaderName, value: &str, max: usize| {
            if value.len() > max {
                return Err(crate::bad(
                    format!("`{name}` is {} bytes long; at most {max} are kept", value.len()),
                    Some(name.as_str().to_string()),
                ));
            }
            Ok(printable(value).then(|| value.to_string()))
        };
        let client = match text(&http::header::USER_AGENT).map(client_family) {
            Some(family) => bounded(&http::header::USER_AGENT, family, MAX_CLIENT_BYTES)?,
            None => None,
        };
        let session = match SESSION_HEADERS.iter().find_map(|h| Some((h, text(h)?))) {
            Some((name, value)) => bounded(name, value, MAX_SESSION_BYTES)?,
            None => None,
        };
        Ok(Caller { client, session })
    }
}

/// The product name of a `User-Agent`: its first token up to `/` (`claude-cli/2.1 (external)` → `claude-cli`).
fn client_family(user_agent: &str) -> &str {
    let first = user_agent.split_whitespace().next().unwrap_or_default();
    first.split('/').next().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn callers_are_read_from_agent_headers() {
        let mut h = HeaderMap::new();
        h.insert("user-agent", HeaderValue::from_static("claude-cli/2.1.330 (external, sdk-cli)"));
        h.insert("x-claude-code-session-id", HeaderValue::from_static("5f0c-session"));
        assert_eq!(
            Caller::from_headers(&h).ok(),
            Some(Caller { client: Some("claude-cli".into()), session: Some("5f0c-session".into()) })
        );
        let mut h = HeaderMap::new();
        h.insert("user-agent", HeaderValue::from_static("codex_exec/0.169.0 (Debian 12; x86_64)"));
        h.insert("session-id", HeaderValue::from_static("0199-abc"));
        assert_eq!(Caller::from_headers(&h).ok().and_then(|c| c.client).as_deref(), Some("codex_exec"));
        assert_eq!(Caller::from_headers(&HeaderMap::new()).ok(), Some(Caller::default()));
    }

    #[test]
    fn a_caller_string_is_kept_whole_up_to_its_bound_and_refused_past_it() {
        let at = |name: &'static str, value: String| {
            let mut h = HeaderMap::new();
            h.insert(name, HeaderValue::from_str(&value).unwrap_or(HeaderValue::from_static("")));
            Caller::from_headers(&h)
        };
        let session = "s".repeat(MAX_SESSION_BYTES);
        assert_eq!(at("x-session-id", session.clone()).ok().and_then(|c| c.session), Some(session));
        let e = at("x-session-id", "s".repeat(MAX_SESSION_BYTES + 1)).err().and_then(|e| e.param);
        assert_eq!(e.as_deref(), Some("x-session-id"));
        let client = "c".repeat(MAX_CLIENT_BYTES);
        assert_eq!(at("user-agent", format!("{client}/1.0 (x)")).ok().and_then(|c| c.client), Some(client));
        let e = at("user-agent", format!("{}/1.0", "c".repeat(MAX_CLIENT_BYTES + 1))).err().and_then(|e| e.param);
        assert_eq!(e.as_deref(), Some("user-agent"));
        // A long User-Agent with a short product name is fine; unprintable values are not kept.
        assert!(at("user-agent", format!("Mozilla/5.0 ({})", "x".repeat(500))).is_ok());
        let mut h = HeaderMap::new();
        h.insert("x-session-id", HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap_or(HeaderValue::from_static("")));
        assert_eq!(Caller::from_headers(&h).ok(), Some(Caller::default()));
    }
}
