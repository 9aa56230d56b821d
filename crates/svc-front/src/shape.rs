//! Which API's shape an error answer is written in, chosen by the request's path: OpenAI's for the OpenAI
//! routes (the gateway's own shape, written by svc-gateway's `error.rs`), Anthropic's for the Messages routes,
//! Google's for the Gemini routes.

use crate::Fault;
use serde_json::Value;

/// The shape of a path's error answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorShape {
    /// `{"error": {"message", "type", "param", "code"}}`, as the gateway writes it.
    OpenAi,
    /// `{"type": "error", "error": {"type", "message"}}`.
    Anthropic,
    /// `{"error": {"code", "message", "status", "details"}}`.
    Google,
}

impl ErrorShape {
    /// The shape of the answers to a request for `path`.
    pub fn of_path(path: &str) -> ErrorShape {
        let bare = path.strip_prefix("/v1").unwrap_or(path);
        if bare == "/messages" || bare == "/messages/count_tokens" {
            ErrorShape::Anthropic
        } else if crate::gemini::is_gemini_path(path) {
            ErrorShape::Google
        } else {
            ErrorShape::OpenAi
        }
    }

    /// The body of `fault` in this shape; `None` for OpenAI's, which the gateway has written already.
    pub fn body(self, fault: &Fault<'_>) -> Option<Value> {
        match self {
            ErrorShape::OpenAi => None,
            ErrorShape::Anthropic => Some(crate::messages::error_body(fault.status, fault.message)),
            ErrorShape::Google => Some(crate::gemini::error_body(fault)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_choose_their_shape() {
        for (path, shape) in [
            ("/v1/messages", ErrorShape::Anthropic),
            ("/messages/count_tokens", ErrorShape::Anthropic),
            ("/v1/chat/completions", ErrorShape::OpenAi),
            ("/v1beta/models/gemini-2.5-pro:streamGenerateContent", ErrorShape::Google),
            ("/v1/models/gemini-2.5-pro:generateContent", ErrorShape::Google),
            ("/v1/models", ErrorShape::OpenAi),
        ] {
            assert_eq!(ErrorShape::of_path(path), shape, "{path}");
        }
    }
}
