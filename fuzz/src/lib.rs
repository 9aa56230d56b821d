//! Helpers shared by the fuzz targets in `fuzz_targets/`: cutting an input into the pieces a network would
//! deliver, driving a stream to its end with a bound on its length, and checking that an output is
//! well-formed JSON. The properties themselves live in the targets.
//!
//! What this crate does not do: run anything by itself (`cargo fuzz run <target>` does, see the README's
//! Development section), or depend on anything but the crates under test.

use futures::{Stream, StreamExt};
use serde_json::{Map, Value};

/// Splits `data` into the items of a byte stream. `0xFF` ends a chunk and `0xFE` ends a chunk and then
/// breaks the connection (an `Err` item, after which a real body may still deliver bytes). Neither byte ever
/// occurs in UTF-8 text, so a seed written as a plain body is delivered as one chunk, and the fuzzer finds
/// the cuts by itself.
pub fn chunks(data: &[u8]) -> Vec<Result<Vec<u8>, String>> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, b) in data.iter().enumerate() {
        if *b == 0xFF || *b == 0xFE {
            out.push(Ok(data[start..i].to_vec()));
            if *b == 0xFE {
                out.push(Err("connection reset by fuzzer".to_string()));
            }
            start = i + 1;
        }
    }
    out.push(Ok(data[start..].to_vec()));
    out
}

/// Runs `stream` to its end and returns its items; fails when it yields more than `bound` items, the proof
/// that it terminates on its own.
pub fn drain<S: Stream>(stream: S, bound: usize) -> Vec<S::Item> {
    let mut stream = Box::pin(stream);
    futures::executor::block_on(async {
        let mut items = Vec::new();
        while let Some(item) = stream.next().await {
            items.push(item);
            assert!(items.len() <= bound, "the stream yielded more than {bound} items: it does not end");
        }
        items
    })
}

/// Fails unless `object` serializes to JSON text that parses back to the same object.
pub fn assert_json_round_trips(object: &Map<String, Value>) {
    let text = serde_json::to_string(object).unwrap_or_else(|e| panic!("output does not serialize: {e}"));
    let back: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("output is not JSON ({e}): {text}"));
    assert_eq!(back, Value::Object(object.clone()), "output changes through JSON text");
}

/// `data` as a JSON value, when it is one.
pub fn json(data: &[u8]) -> Option<Value> {
    serde_json::from_slice(data).ok()
}

/// Fails unless `usage` is what a translation may hand the gateway: `null` (the upstream never counted), a
/// malformed marker (`prompt_tokens` null with a `malformed` reason: the gateway charges its estimate), or an
/// OpenAI `usage` object whose counts are whole numbers with `total_tokens = prompt_tokens +
/// completion_tokens` (saturated at `u64::MAX`, never wrapped).
pub fn assert_openai_usage(usage: &Value) {
    if usage.is_null() || (usage["prompt_tokens"].is_null() && usage["malformed"].is_string()) {
        return;
    }
    let count = |k: &str| {
        usage.get(k).and_then(Value::as_u64).unwrap_or_else(|| panic!("usage `{k}` is missing or not a count: {usage}"))
    };
    let (prompt, completion, total) = (count("prompt_tokens"), count("completion_tokens"), count("total_tokens"));
    assert_eq!(total, prompt.saturating_add(completion), "total_tokens is not the (saturated) sum: {usage}");
}
