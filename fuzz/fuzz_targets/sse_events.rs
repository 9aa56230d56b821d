//! `svc_providers::sse::json_events` over arbitrary byte chunks (see `svc_fuzz::chunks`): it never panics,
//! ends by itself, yields only JSON objects, and nothing after its first error.

#![no_main]

use libfuzzer_sys::fuzz_target;
use svc_providers::sse::json_events;

fuzz_target!(|data: &[u8]| {
    let items = svc_fuzz::drain(
        json_events("fuzz".into(), futures::stream::iter(svc_fuzz::chunks(data)), 4096),
        data.len() + 2,
    );
    if let Some(first_error) = items.iter().position(Result::is_err) {
        assert_eq!(first_error + 1, items.len(), "items after an error");
    }
    for object in items.iter().flatten() {
        svc_fuzz::assert_json_round_trips(object);
    }
});
