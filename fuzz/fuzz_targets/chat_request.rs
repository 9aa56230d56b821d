//! A client's chat-completions body read as its bytes (`ChatRequest::parse`) against the same body parsed
//! whole (`ChatRequest::check` of a map), on arbitrary input: both accept and refuse the same bodies with the
//! same error, read the same model, stream flag, cap and choices, estimate the same media parts and messages
//! (the JSON estimate may count more, never less: the bytes keep a repeated key the map drops), and after the
//! gateway's changes the bytes sent are JSON that parses to the changed map.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};
use svc_providers::ChatRequest;

fuzz_target!(|data: &[u8]| {
    let raw = ChatRequest::parse(data);
    let full = match serde_json::from_slice::<Value>(data) {
        Ok(Value::Object(map)) => ChatRequest::check(map),
        _ => {
            assert!(raw.is_err(), "accepted what is not a JSON object");
            return;
        }
    };
    let (mut raw, mut full) = match (raw, full) {
        (Ok(r), Ok(f)) => (r, f),
        (Err(a), Err(b)) => {
            assert_eq!(a, b);
            return;
        }
        (a, b) => panic!("the bytes and the map disagree: {a:?} against {b:?}"),
    };
    assert_eq!(raw.model(), full.model());
    assert_eq!((raw.stream(), raw.max_tokens(), raw.choices()), (full.stream(), full.max_tokens(), full.choices()));
    assert_eq!(raw.wants_stream_usage(), full.wants_stream_usage());
    let (r, f) = (raw.prompt_parts(), full.prompt_parts());
    assert_eq!((r.messages, r.media), (f.messages, f.media));
    assert!(r.json_tokens >= f.json_tokens, "{r:?} < {f:?}");
    let asked = raw.max_tokens();
    for req in [&mut raw, &mut full] {
        req.set_model("upstream");
        req.cap_completion_tokens(7);
        req.force_stream_usage();
    }
    let sent: Map<String, Value> = serde_json::from_slice(&raw.to_json().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the bytes sent are not a JSON object: {e}"));
    assert_eq!(&sent, raw.body());
    assert_eq!(&sent, full.body());
    let capped = Some(asked.map_or(7, |a| a.min(7)));
    assert_eq!((raw.max_tokens(), raw.wants_stream_usage()), (capped, true));
    assert_eq!(full.max_tokens(), capped);
});
