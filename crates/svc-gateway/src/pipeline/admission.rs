//! Admission: whether a request may start now. [`enter`] takes its place among `server.max_in_flight`
//! requests (503 with `Retry-After` beyond it) before anything else is done; [`admit`], once the deployment
//! and so the prices are known, counts it against the rate limits and reserves its worst-case cost in its
//! budgets (429 otherwise).

use crate::auth::Principal;
use crate::budgets::Reservation;
use crate::error::ApiError;
use crate::pipeline::routing::Route;
use crate::state::AppState;
use svc_budget::{Money, Usage};
use svc_providers::ChatRequest;
use tokio::sync::OwnedSemaphorePermit;

/// Completion tokens reserved when neither the request nor the model gives a cap.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u64 = 4096;

/// What an admitted request holds until it is settled.
#[derive(Debug)]
pub struct Ticket {
    _slot: OwnedSemaphorePermit,
}

/// Takes a place among the requests in flight, or answers 503.
pub fn enter(state: &AppState) -> Result<Ticket, ApiError> {
    match state.in_flight.clone().try_acquire_owned() {
        Ok(slot) => Ok(Ticket { _slot: slot }),
        Err(_) => Err(ApiError::overloaded(
            format!(
                "the gateway is at its limit of {} requests in flight; retry with backoff",
                state.config.server.max_in_flight
            ),
            1,
        )),
    }
}

/// The worst-case cost of a request on a route: the conservative prompt estimate plus the completion cap
/// (`max_tokens`, else the model's `max_output_tokens`, else 4096) at the route's prices.
pub fn worst_case(route: &Route, req: &ChatRequest, prompt_estimate: u64) -> Money {
    let cap = req.max_tokens().or(route.max_output_tokens.map(u64::from)).unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS);
    Usage { prompt_tokens: prompt_estimate, completion_tokens: cap }.cost(route.input_price, route.output_price)
}

/// Counts the request against rate limits and reserves its worst-case cost in its budgets. The master key
/// passes untouched (spec 8.2).
pub async fn admit(
    state: &AppState,
    principal: &Principal,
    amount: Money,
    prompt_estimate: u64,
) -> Result<Reservation, ApiError> {
    if principal.key().is_none() {
        return Ok(Reservation::none());
    }
    state.rates.admit(principal, &state.config, prompt_estimate)?;
    state.budgets.admit(principal, amount).await
}
