//! Reading an upstream's server-sent events into JSON chunks, with the `eventsource-stream` crate doing the
//! SSE framing (multi-line data, comments, CRLF).

use crate::ProviderError;
use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use serde_json::{Map, Value};

/// Turns an SSE byte stream into a stream of JSON objects, ending at `data: [DONE]` or at the end of the
/// body. An unparseable event ends the stream with [`ProviderError::BadResponse`].
pub fn json_events<S, B, E>(
    deployment: String,
    bytes: S,
) -> impl Stream<Item = Result<Map<String, Value>, ProviderError>> + Send
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let events = bytes.eventsource();
    futures::stream::unfold((Box::pin(events), deployment, false), |(mut events, dep, done)| async move {
        if done {
            return None;
        }
        loop {
            let item = events.next().await?;
            let event = match item {
                Ok(ev) => ev,
                Err(e) => {
                    let err =
                        ProviderError::Unreachable { deployment: dep.clone(), detail: format!("stream broken: {e}") };
                    return Some((Err(err), (events, dep, true)));
                }
            };
            let data = event.data.trim();
            if data.is_empty() {
                continue;
            }
            if data == "[DONE]" {
                return None;
            }
            return match serde_json::from_str::<Value>(data) {
                Ok(Value::Object(m)) => Some((Ok(m), (events, dep, false))),
                _ => {
                    let detail = format!("unparseable stream event: {}", truncate(data, 200));
                    let err = ProviderError::BadResponse { deployment: dep.clone(), detail };
                    Some((Err(err), (events, dep, true)))
                }
            };
        }
    })
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}
