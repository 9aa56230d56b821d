//! HTTP/1.1 bytes of the answers given where no request reaches the router: the 503 to a connection beyond
//! `max_connections`, and the JSON answers standing in for hyper's own bodiless 400, 414 and 431. The body,
//! status and headers come from [`ApiError`], as every other error answer's do; this module only frames them.

use crate::error::ApiError;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use std::time::SystemTime;

/// The statuses hyper answers by itself (hyper 1.12, `proto/h1/role.rs`, `on_error`).
const HYPER_ERRORS: [u16; 3] = [400, 414, 431];

/// The JSON answer to write instead of `written`, when `written` is exactly one of hyper's own error
/// answers: a complete head with status 400, 414 or 431, only `connection`, `content-length: 0` and `date`
/// headers, and no body.
pub(super) fn replace_hyper_error(written: &[u8]) -> Option<Vec<u8>> {
    let mut headers = [httparse::EMPTY_HEADER; 4];
    let mut head = httparse::Response::new(&mut headers);
    match head.parse(written) {
        Ok(httparse::Status::Complete(len)) if len == written.len() => {}
        _ => return None,
    }
    let code = head.code.filter(|c| HYPER_ERRORS.contains(c))?;
    let mut date = None;
    for h in head.headers.iter() {
        match h.name.to_ascii_lowercase().as_str() {
            "connection" => {}
            "content-length" if h.value == b"0" => {}
            "date" => date = Some(h.value.to_vec()),
            _ => return None,
        }
    }
    let status = StatusCode::from_u16(code).ok()?;
    Some(error_bytes(ApiError::unreadable_request(status), date))
}

/// The 503 answered to a connection beyond `server.max_connections`.
pub(super) fn too_many_connections(max: usize) -> Vec<u8> {
    let err =
        ApiError::overloaded(format!("the gateway is at its limit of {max} open connections; retry with backoff"), 1);
    error_bytes(err, None)
}

/// `err` as a complete HTTP/1.1 response that closes the connection, with a new `x-request-id` (every answer
/// carries one) and `date` (the given one, else now).
fn error_bytes(err: ApiError, date: Option<Vec<u8>>) -> Vec<u8> {
    let body = serde_json::to_vec(&err.body()).unwrap_or_default();
    let response = err.into_response();
    let status = response.status();
    let mut out = Vec::with_capacity(256 + body.len());
    out.extend_from_slice(
        format!("HTTP/1.1 {} {}\r\n", status.as_str(), status.canonical_reason().unwrap_or("")).as_bytes(),
    );
    for (name, value) in response.headers() {
        if name != header::CONTENT_LENGTH && name != header::CONNECTION {
            push_header(&mut out, name.as_str(), value.as_bytes());
        }
    }
    push_header(&mut out, "x-request-id", uuid::Uuid::new_v4().to_string().as_bytes());
    push_header(&mut out, "content-length", body.len().to_string().as_bytes());
    push_header(&mut out, "connection", b"close");
    let date = date.unwrap_or_else(|| httpdate::fmt_http_date(SystemTime::now()).into_bytes());
    push_header(&mut out, "date", &date);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&body);
    out
}

fn push_header(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::{json, Value};

    /// Splits an answer into its status, its lower-cased headers and its JSON body.
    fn parse(bytes: &[u8]) -> (u16, Vec<(String, String)>, Value) {
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut head = httparse::Response::new(&mut headers);
        let len = match head.parse(bytes).unwrap() {
            httparse::Status::Complete(len) => len,
            httparse::Status::Partial => panic!("partial head"),
        };
        let headers = head
            .headers
            .iter()
            .map(|h| (h.name.to_ascii_lowercase(), String::from_utf8_lossy(h.value).into_owned()))
            .collect();
        (head.code.unwrap(), headers, serde_json::from_slice(&bytes[len..]).unwrap())
    }

    fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
        headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The exact bytes hyper 1.12 writes, observed on a running gateway.
    const HYPER_431: &[u8] = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\n\
content-length: 0\r\ndate: Tue, 24 Nov 2026 01:09:42 GMT\r\n\r\n";

    #[test]
    fn hyper_error_answers_become_json() {
        let answer = replace_hyper_error(HYPER_431).unwrap();
        let (status, headers, body) = parse(&answer);
        assert_eq!(status, 431);
        assert_eq!(header(&headers, "content-type"), Some("application/json"));
        assert_eq!(header(&headers, "connection"), Some("close"));
        assert_eq!(header(&headers, "date"), Some("Tue, 24 Nov 2026 01:09:42 GMT"));
        assert!(header(&headers, "x-request-id").is_some());
        assert_eq!(body["error"]["type"], "request_headers_too_large");
        assert_eq!(body["error"]["code"], "431");
        let bad = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        let (status, _, body) = parse(&replace_hyper_error(bad).unwrap());
        assert_eq!((status, body["error"]["type"].clone()), (400, json!("invalid_request_error")));
    }

    #[test]
    fn anything_else_passes_through() {
        let cases: [&[u8]; 6] = [
            // An answer of the router (it always has x-request-id and more).
            b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\nx-request-id: a\r\ncontent-length: 2\r\n\r\n",
            // A head followed by a body, or only part of a head.
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",
            b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\n",
            // Another status, or a body length.
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 5\r\n\r\n",
            // Body bytes of a response, or a chunk.
            b"1a\r\ndata: {\"x\":1}\r\n",
        ];
        for bytes in cases {
            assert!(replace_hyper_error(bytes).is_none(), "{}", String::from_utf8_lossy(bytes));
        }
    }

    #[test]
    fn the_connection_refusal_is_a_503_with_retry_after() {
        let (status, headers, body) = parse(&too_many_connections(2));
        assert_eq!(status, 503);
        assert_eq!(header(&headers, "retry-after"), Some("1"));
        assert_eq!(header(&headers, "content-type"), Some("application/json"));
        assert_eq!(body["error"]["type"], "overloaded_error");
        assert!(body["error"]["message"].as_str().unwrap().contains("limit of 2 open connections"));
    }
}
