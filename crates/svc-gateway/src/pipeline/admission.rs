//! Admission: whether a request may start now. [`enter`] takes its place among `server.max_in_flight`
//! requests (503 with `Retry-After` beyond it) before anything else is done; [`admit`], once the deployments
//! it may try and so the prices are known, counts it against the rate limits and reserves its worst case in
//! its budgets (429 otherwise), possibly with a lower completion cap (see `crate::budgets`).

use crate::auth::Principal;
use crate::budgets::{Ask, Budgets, Grant};
use crate::error::ApiError;
use crate::pipeline::routing::Route;
use crate::rate::RateLimits;
use std::sync::Arc;
use svc_budget::Price;
use svc_config::Config;
use svc_providers::ChatRequest;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Completion tokens reserved when neither the request nor the model gives a cap.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u64 = 4096;

/// What an admitted request holds until it is settled.
#[derive(Debug)]
pub struct Ticket {
    _slot: OwnedSemaphorePermit,
}

/// Takes a place among the `limit` requests in flight (`slots`), or answers 503.
pub fn enter(slots: &Arc<Semaphore>, limit: usize) -> Result<Ticket, ApiError> {
    match slots.clone().try_acquire_owned() {
        Ok(slot) => Ok(Ticket { _slot: slot }),
        Err(_) => Err(ApiError::overloaded(
            format!("the gateway is at its limit of {limit} requests in flight; retry with backoff"),
            1,
        )),
    }
}

/// The completion cap per choice a request has on a route: its `max_tokens` (or `max_completion_tokens`),
/// lowered to the model's `max_output_tokens`; else that; else [`DEFAULT_MAX_OUTPUT_TOKENS`].
pub fn route_cap(route: &Route, asked: Option<u64>) -> u64 {
    let model = route.max_output_tokens.map(u64::from);
    match (asked, model) {
        (Some(a), Some(m)) => a.min(m),
        (Some(a), None) => a,
        (None, Some(m)) => m,
        (None, None) => DEFAULT_MAX_OUTPUT_TOKENS,
    }
}

/// What a request asks of its budgets over the deployments it may try: the conservative prompt estimate,
/// the largest completion cap of any of them and the dearest prices (1-hour cache writes when the request asks
/// for them: `hour_cache`), so that any attempt, retry or fallback stays within what is reserved.
pub fn ask(candidates: &[Arc<Route>], req: &ChatRequest, prompt_estimate: u64, hour_cache: bool) -> Ask {
    let asked = req.max_tokens();
    let mut ask = Ask {
        prompt_tokens: prompt_estimate,
        completion_tokens: 0,
        choices: req.choices(),
        input: Price::ZERO,
        output: Price::ZERO,
    };
    for r in candidates {
        ask.completion_tokens = ask.completion_tokens.max(route_cap(r, asked));
        // A prompt written to the upstream's cache may cost more than a plain one; past a long-context
        // threshold every token costs the tier's price.
        let (input, output) = r.prices.dearest(prompt_estimate, hour_cache);
        ask.input = ask.input.max(input);
        ask.output = ask.output.max(output);
    }
    ask
}

/// Counts the request against rate limits and reserves its worst case in its budgets. The master key
/// passes untouched (spec 8.2).
pub async fn admit(
    rates: &RateLimits,
    budgets: &Arc<Budgets>,
    config: &Config,
    principal: &Principal,
    ask: &Ask,
) -> Result<Grant, ApiError> {
    if principal.key().is_some() {
        rates.admit(principal, config, ask.prompt_tokens).await?;
    }
    budgets.admit(principal, ask).await
}
