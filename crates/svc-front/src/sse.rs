//! Writing server-sent events, the one way every stream the gateway sends does it: `event: <kind>` (when there
//! is one) and the data, one `data:` line per line of it, then a blank line.

use bytes::Bytes;
use serde::Serialize;

pub use svc_providers::sse::write;

/// Appends one event whose data is `data` as JSON (one line: serde writes no newline), serialized in place.
pub fn write_json(out: &mut Vec<u8>, kind: &str, data: &impl Serialize) {
    if !kind.is_empty() {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(kind.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    let start = out.len();
    if serde_json::to_writer(&mut *out, data).is_err() {
        out.truncate(start);
        out.extend_from_slice(b"{}");
    }
    out.extend_from_slice(b"\n\n");
}

/// One event of JSON data.
pub fn json(kind: &str, data: &impl Serialize) -> Bytes {
    let mut out = Vec::with_capacity(256);
    write_json(&mut out, kind, data);
    Bytes::from(out)
}

/// The JSON data of each event in `bytes` (what a client reads of a stream), for tests.
#[cfg(test)]
pub(crate) fn data_of(bytes: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter_map(|l| l.strip_prefix("data: ").and_then(|d| serde_json::from_str(d).ok()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_have_their_name_and_one_data_line_per_line() {
        let mut out = Vec::new();
        write(&mut out, "ping", b"a\nb");
        write_json(&mut out, "", &serde_json::json!({"x": 1}));
        write(&mut out, "", b"c\n");
        assert_eq!(out, b"event: ping\ndata: a\ndata: b\n\ndata: {\"x\":1}\n\ndata: c\ndata: \n\n");
    }
}
