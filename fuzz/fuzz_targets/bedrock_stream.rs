//! Bedrock's streams over arbitrary bytes: ConverseStream (`svc_providers::fuzzing::bedrock_converse_stream`) and
//! InvokeModel's stream of Claude (`bedrock_claude_stream`), both AWS event-stream frames. The first byte sets the
//! size of the pieces the rest arrives in (frames hold `0xFF` and `0xFE`, so `svc_fuzz::chunks` cannot cut them).
//! Each never panics, ends by itself, yields nothing after its first error, and every chunk is a JSON object.

#![no_main]

use libfuzzer_sys::fuzz_target;
use svc_providers::fuzzing::{bedrock_claude_stream, bedrock_converse_stream};

fuzz_target!(|data: &[u8]| {
    let Some((size, rest)) = data.split_first() else { return };
    let pieces: Vec<Result<Vec<u8>, String>> =
        rest.chunks(usize::from(*size % 64) + 1).map(|c| Ok(c.to_vec())).collect();
    for stream in [
        bedrock_converse_stream(futures::stream::iter(pieces.clone()), 4096),
        bedrock_claude_stream(futures::stream::iter(pieces.clone()), 4096),
    ] {
        let items = svc_fuzz::drain(stream, data.len() + 4);
        if let Some(first_error) = items.iter().position(Result::is_err) {
            assert_eq!(first_error + 1, items.len(), "items after an error");
        }
        for chunk in items.into_iter().flatten() {
            svc_fuzz::assert_json_round_trips(chunk.map());
        }
    }
});
