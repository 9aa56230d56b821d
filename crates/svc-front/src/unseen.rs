//! What a request makes the provider bill that its body does not hold, read off the client's request: input
//! from state the provider keeps or fetches (a conversation, a stored prompt, a file or a document, what a
//! `file_search`, `web_fetch` or MCP tool brings back), and server-side web searches (billed per use, their
//! results billed as input). The pipeline bounds each before it admits the request (`pipeline::admission`).
//!
//! What this file does not do: decide the bound (admission does) or know a stored response's history (the
//! chain of `previous_response_id` is the pipeline's, `pipeline::stored`).

use serde_json::{Map, Value};

/// The web searches a request lets the provider run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Searches {
    /// No web search tool.
    #[default]
    None,
    /// At most this many (the tools' `max_uses`, added up).
    AtMost(u64),
    /// A web search tool without a limit of its own.
    Unlimited,
}

/// What a request makes the provider bill beyond its body.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unseen {
    /// What refers to input the gateway cannot count from the body, when something does.
    pub uncounted: Option<&'static str>,
    /// The web searches it allows.
    pub searches: Searches,
}

/// Content part types whose input the provider reads from a file, a document or a URL.
const DOCUMENT_PARTS: [&str; 3] = ["document", "file", "input_file"];

impl Unseen {
    /// What a Messages or Responses request (`req`, the client's object read from `body`) makes the provider
    /// bill beyond it.
    pub fn of(req: &Map<String, Value>, body: &[u8]) -> Unseen {
        Unseen::of_read(req, may_name_a_document(body))
    }

    /// [`Unseen::of`], told whether the body may name a document ([`may_name_a_document`]), by a reader that
    /// already asked.
    pub(crate) fn of_read(req: &Map<String, Value>, may_name_a_document: bool) -> Unseen {
        let mut uncounted = None;
        if req.get("conversation").is_some_and(|c| !c.is_null()) {
            uncounted = Some("a `conversation` the provider keeps");
        } else if req.get("prompt").is_some_and(Value::is_object) {
            uncounted = Some("a stored `prompt`");
        } else if req.get("mcp_servers").is_some_and(|m| m.as_array().is_some_and(|a| !a.is_empty())) {
            uncounted = Some("MCP servers' tool results");
        } else if may_name_a_document && ["messages", "input"].iter().any(|k| req.get(*k).is_some_and(has_document)) {
            uncounted = Some("a file or document part");
        }
        let mut searches = Searches::None;
        for tool in req.get("tools").and_then(Value::as_array).into_iter().flatten() {
            let kind = tool.get("type").and_then(Value::as_str).unwrap_or_default();
            if kind == "file_search" || kind == "mcp" || kind.starts_with("web_fetch") {
                uncounted = uncounted.or(Some("a tool whose results the provider adds as input"));
            }
            if kind == "web_search" || kind.starts_with("web_search_") {
                searches = match (searches, tool.get("max_uses").and_then(Value::as_u64)) {
                    (Searches::Unlimited, _) | (_, None) => Searches::Unlimited,
                    (Searches::None, Some(n)) => Searches::AtMost(n),
                    (Searches::AtMost(m), Some(n)) => Searches::AtMost(m.saturating_add(n)),
                };
            }
        }
        // A Responses request's `max_tool_calls` bounds its built-in tool calls, web searches included.
        if let (Some(most), Searches::AtMost(_) | Searches::Unlimited) =
            (req.get("max_tool_calls").and_then(Value::as_u64), searches)
        {
            searches = match searches {
                Searches::AtMost(n) => Searches::AtMost(n.min(most)),
                _ => Searches::AtMost(most),
            };
        }
        Unseen { uncounted, searches }
    }

    /// What a chat-completions request makes the provider bill beyond its body: its file parts.
    pub fn of_chat(documents: u64) -> Unseen {
        Unseen { uncounted: (documents > 0).then_some("a file part"), searches: Searches::None }
    }
}

/// Whether the JSON text `body` may hold a content part of a document type: the end of one of
/// [`DOCUMENT_PARTS`] as a string (`document"`, `file"`), or an escape, which could spell one. Most bodies hold
/// neither, and are not walked part by part (one pass of `memmem` over the bytes instead).
pub(crate) fn may_name_a_document(body: &[u8]) -> bool {
    use memchr::memmem::Finder;
    use std::sync::LazyLock;
    static ENDS: LazyLock<[Finder<'static>; 3]> =
        LazyLock::new(|| [Finder::new(b"document\""), Finder::new(b"file\""), Finder::new(b"\\u")]);
    ENDS.iter().any(|f| f.find(body).is_some())
}

/// Whether `v` (a message list or an input) holds a content part of a document type, at any depth.
fn has_document(v: &Value) -> bool {
    match v {
        Value::Array(items) => items.iter().any(has_document),
        Value::Object(o) => {
            let kind = o.get("type").and_then(Value::as_str).unwrap_or_default();
            DOCUMENT_PARTS.contains(&kind)
                || o.values().any(|v| v.is_array() && has_document(v))
                || o.get("content").is_some_and(has_document)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn of(v: Value) -> Unseen {
        Unseen::of(v.as_object().cloned().as_ref().unwrap_or(&Map::new()), v.to_string().as_bytes())
    }

    #[test]
    fn state_the_provider_keeps_is_uncounted() {
        assert_eq!(of(json!({"input": "hi"})), Unseen::default());
        assert!(of(json!({"input": "hi", "conversation": "conv_1"})).uncounted.is_some());
        assert!(of(json!({"input": "hi", "prompt": {"id": "pmpt_1"}})).uncounted.is_some());
        let file = json!({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]}]});
        assert!(of(file).uncounted.is_some());
        let pdf = json!({"messages": [{"role": "user", "content": [{"type": "document", "source": {"type": "url", "url": "u"}}]}]});
        assert!(of(pdf).uncounted.is_some());
        assert!(of(json!({"tools": [{"type": "file_search", "vector_store_ids": ["v"]}]})).uncounted.is_some());
        let plain = json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "file"}]}]});
        assert_eq!(of(plain).uncounted, None, "a word in a text is no file");
        assert_eq!(Unseen::of_chat(1).uncounted, Some("a file part"));
        // A type spelled with an escape is the same type: the byte check lets it through to the walk.
        let escaped = r#"{"input": [{"role": "user", "content": [{"type": "input_fil\u0065", "file_id": "f"}]}]}"#;
        let req: Map<String, Value> = serde_json::from_str(escaped).unwrap_or_default();
        assert!(Unseen::of(&req, escaped.as_bytes()).uncounted.is_some(), "{escaped}");
        assert!(may_name_a_document(br#"{"type" : "document" }"#));
        assert!(!may_name_a_document(br#"{"type": "text", "text": "a file or a document here"}"#));
    }

    #[test]
    fn web_searches_are_bounded_by_their_tools() {
        assert_eq!(of(json!({"tools": [{"type": "web_search"}]})).searches, Searches::Unlimited);
        let bounded = json!({"tools": [{"type": "web_search"}], "max_tool_calls": 2});
        assert_eq!(of(bounded).searches, Searches::AtMost(2), "max_tool_calls bounds them");
        let anthropic = json!({"tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]});
        assert_eq!(of(anthropic).searches, Searches::AtMost(3));
        let two = json!({"tools": [{"type": "web_search_20250305", "max_uses": 3}, {"type": "web_search_20250305", "max_uses": 2}]});
        assert_eq!(of(two).searches, Searches::AtMost(5));
        assert_eq!(of(json!({"tools": [{"type": "function", "name": "web_search"}]})).searches, Searches::None);
    }
}
