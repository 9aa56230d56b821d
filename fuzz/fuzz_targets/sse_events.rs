//! `svc_providers::sse::json_events` over arbitrary byte chunks (see `svc_fuzz::chunks`): it never panics,
//! ends by itself, yields only JSON objects, and nothing after its first error; a chunk written again with its
//! `model` changed reads as the same object with that `model`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use svc_providers::chunk::UsageEdit;
use svc_providers::sse::json_events;

fuzz_target!(|data: &[u8]| {
    let items = svc_fuzz::drain(
        json_events("fuzz".into(), futures::stream::iter(svc_fuzz::chunks(data)), 4096),
        data.len() + 2,
    );
    if let Some(first_error) = items.iter().position(Result::is_err) {
        assert_eq!(first_error + 1, items.len(), "items after an error");
    }
    for chunk in items.into_iter().flatten() {
        svc_fuzz::assert_json_round_trips(chunk.map());
        // Empty when the full parse refused the chunk (or it is `{}`).
        let parsed = !chunk.map().is_empty();
        let mut expected = chunk.map().clone();
        expected.insert("model".into(), Value::from("m"));
        let written = chunk.to_json(br#""m""#, UsageEdit::Keep);
        // A chunk that the full parse refuses (a number such as `1e400`, a lone surrogate escape) has no map and
        // is forwarded as written; one it reads reads the same with its `model` changed.
        if parsed {
            let back: Value = serde_json::from_slice(&written)
                .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&written)));
            assert_eq!(back, Value::Object(expected), "{}", String::from_utf8_lossy(&written));
        }
    }
});
