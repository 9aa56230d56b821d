//! The last part of a budget: a request whose worst case (a conservative prompt estimate, the largest
//! completion cap) does not fit what is left is bounded again, tightly, before it is capped or refused. The
//! provider is asked for the exact input count where it offers one for free (Anthropic `count_tokens`, OpenAI
//! `responses/input_tokens`; the mock counts by its own rule), and the plan keeps only the deployments that
//! count alike (the first one's provider and model), so the count bounds every attempt. Only this last stretch
//! pays the extra round trip; a count that fails or cannot be had leaves the loose bound.

use super::admission::{self, Beyond};
use super::Inbound;
use std::time::Duration;
use svc_front::passthrough;
use svc_front::Reading;
use svc_limits::budgets::Ask;
use svc_providers::passthrough::Wire;
use svc_routing::{Plan, Route};

/// The longest a count may take (it is on the request's path).
const COUNT_TIMEOUT: Duration = Duration::from_secs(10);

/// A count larger than this is not believed (no model takes it).
const MAX_COUNT: u64 = 10_000_000;

/// What a request makes the provider bill, told again from the provider's exact input count.
#[derive(Debug)]
pub struct Tight {
    /// The request's ask with the exact input.
    pub ask: Ask,
    /// The input the body makes, as counted (the meter's estimate).
    pub counted: u64,
    /// The ask with no web search, when the request's searches can be turned off (`max_tool_calls: 0` on a
    /// Responses request passed through).
    pub without_searches: Option<Ask>,
}

/// The request as it goes to the plan's first deployment, bounded by its exact input count, when that can be
/// had: then `plan` keeps only the deployments that count alike. `beyond` is what the body does not hold (a
/// continued response's history is in a Responses count, web search results are in none).
pub async fn tightened(
    plan: &mut Plan,
    inbound: &Inbound,
    alias: &str,
    body: &[u8],
    reading: &Reading,
    beyond: Beyond,
    hour_cache: bool,
) -> Option<Tight> {
    if beyond.uncounted {
        return None;
    }
    let first = plan.candidates().first()?.clone();
    let native = inbound.api.wire().filter(|w| first.deployment.speaks(*w));
    let counted = match tokio::time::timeout(COUNT_TIMEOUT, count(&first, native, inbound, alias, body)).await {
        Ok(Ok(Some(counted))) => counted,
        Ok(Ok(None)) => return None,
        Ok(Err(why)) => {
            tracing::debug!(deployment = %first.deployment.id, error = %why, "cannot count the input; the loose bound stays");
            return None;
        }
        Err(_) => {
            tracing::debug!(deployment = %first.deployment.id, "the input count timed out; the loose bound stays");
            return None;
        }
    };
    // A Responses count holds the chain of `previous_response_id`.
    let holds_history = native == Some(Wire::Responses);
    if counted > MAX_COUNT || beyond.window.is_some_and(|w| counted > w) {
        tracing::warn!(deployment = %first.deployment.id, counted, "an input count above the context window; the loose bound stays");
        return None;
    }
    plan.keep_like_first();
    let input_tokens = if holds_history { beyond.results } else { beyond.input_tokens };
    let exact = Beyond { input_tokens, ..beyond };
    let ask = admission::ask(plan.candidates(), reading, counted, exact, hour_cache);
    let without_searches = (native == Some(Wire::Responses) && beyond.searches > 0).then(|| {
        let bare = Beyond { input_tokens: input_tokens - beyond.results, results: 0, searches: 0, ..beyond };
        admission::ask(plan.candidates(), reading, counted, bare, hour_cache)
    });
    Some(Tight { ask, counted, without_searches })
}

/// The exact input of the request on `first`: of the client's body as passed through (`native`), else of the
/// chat request as it would be sent (made from the body here). `None` when the deployment offers no count.
async fn count(
    first: &Route,
    native: Option<Wire>,
    inbound: &Inbound,
    alias: &str,
    body: &[u8],
) -> Result<Option<u64>, String> {
    let model = first.upstream_model(alias);
    match native {
        Some(wire) => {
            let body = passthrough::prepare(inbound.api, body, &model, None).map_err(|e| e.message)?;
            first.deployment.count_native(wire, &body, inbound.headers.clone()).await.map_err(|e| e.to_string())
        }
        None => {
            let req = inbound.api.to_chat(body).map_err(|e| e.message)?;
            first.deployment.count_chat(&req, &model).await.map_err(|e| e.to_string())
        }
    }
}
