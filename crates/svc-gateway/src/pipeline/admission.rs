//! Admission: whether a request may start now. [`enter`] takes its place among `server.max_in_flight`
//! requests (503 with `Retry-After` beyond it) before anything else is done; once the deployments it may try
//! and so the prices are known, [`rate`] counts it against the rate limits and [`ask`] says the worst case its
//! budgets reserve (see `crate::budgets`; `super::tighten` for the last part of a budget).

use crate::error::ApiError;
use std::sync::Arc;
use svc_budget::{Money, Price};
use svc_config::Config;
use svc_front::Reading;
use svc_front::{Searches, Unseen};
use svc_keys::Principal;
use svc_limits::budgets::Ask;
use svc_limits::rate::RateLimits;
use svc_routing::{Route, DEFAULT_MAX_OUTPUT_TOKENS};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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

/// What a request makes the provider bill beyond its body, bounded over the deployments it may try.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Beyond {
    /// Input tokens the body does not hold: a stored response chain's history (as billed), web search results.
    pub input_tokens: u64,
    /// Of those, the web search results (which no input count holds).
    pub results: u64,
    /// The most input any of the deployments takes (its context window), when every one of them says.
    pub window: Option<u64>,
    /// Whether the input cannot be counted at all (then the window bounds it).
    pub uncounted: bool,
    /// The most web searches the call may run.
    pub searches: u64,
}

/// What `unseen` and a continued response's `history` (`Some(None)`: one not settled yet) make the provider bill
/// beyond the body, on the deployments of `candidates`. Input that cannot be counted is bounded by the
/// deployments' context window: a budgeted caller (`budgeted`) is refused with 400 when one of them has no
/// `max_input_tokens`, for nothing would bound the call's cost.
pub fn beyond(
    candidates: &[Arc<Route>],
    unseen: Unseen,
    history: Option<Option<u64>>,
    budgeted: bool,
    settings: &svc_config::AdmissionSettings,
) -> Result<Beyond, ApiError> {
    let window = candidates.iter().map(|r| r.max_input_tokens).collect::<Option<Vec<u64>>>();
    let window = window.and_then(|w| w.into_iter().max());
    let uncounted = unseen.uncounted.or(matches!(history, Some(None)).then_some("a response still being written"));
    if let (Some(what), None, true) = (uncounted, window, budgeted) {
        let without = candidates.iter().find(|r| r.max_input_tokens.is_none()).map_or("", |r| r.deployment.id.as_str());
        return Err(ApiError::bad_request(
            format!(
                "the request refers to {what}, input the gateway cannot count, so nothing bounds its cost; under a \
                 budget it is served only by models whose context window is configured (deployment `{without}` has \
                 no `max_input_tokens`)"
            ),
            None,
        ));
    }
    let searches = match unseen.searches {
        Searches::None => 0,
        Searches::AtMost(n) => n,
        Searches::Unlimited => settings.web_search_max_uses,
    };
    let results = searches.saturating_mul(settings.web_search_result_tokens);
    let history = history.flatten().unwrap_or(0);
    let input_tokens = history.saturating_add(results);
    Ok(Beyond { input_tokens, results, window, uncounted: uncounted.is_some(), searches })
}

/// The `anthropic-beta` values that change what a call costs: the 1M-token context (its long-context tier) and
/// the 1-hour cache writes. Each passes only when every deployment that may serve the request prices it.
const PRICED_BETAS: [(&str, &str); 2] = [
    ("context-1m-", "the long-context tier (`input_cost_per_token_above_200k_tokens`)"),
    ("extended-cache-ttl-", "1-hour cache writes (`cache_creation_input_token_cost_above_1hr`)"),
];

/// Whether the client's `anthropic-beta` values (`betas`, comma-separated) may reach the deployments of
/// `candidates` that speak Messages: with `allowed` set, only the values it lists (exact, or a prefix ending in
/// `*`); else every value, except one that changes the price when a deployment that may serve the request has no
/// price for what it changes. 400 naming the value otherwise.
pub fn check_betas(candidates: &[Arc<Route>], betas: &str, allowed: Option<&[String]>) -> Result<(), ApiError> {
    let native = || candidates.iter().filter(|r| r.deployment.speaks(svc_providers::passthrough::Wire::Messages));
    if native().next().is_none() {
        return Ok(());
    }
    for beta in betas.split(',').map(str::trim).filter(|b| !b.is_empty()) {
        if let Some(list) = allowed {
            let listed = |a: &String| a.strip_suffix('*').map_or(a == beta, |prefix| beta.starts_with(prefix));
            if !list.iter().any(listed) {
                return Err(ApiError::bad_request(
                    format!("anthropic-beta `{beta}` is not allowed by this gateway (gateway_settings.anthropic_beta_allowed)"),
                    None,
                ));
            }
            continue;
        }
        let Some((_, what)) = PRICED_BETAS.iter().find(|(prefix, _)| beta.starts_with(prefix)) else { continue };
        let priced = |r: &Arc<Route>| match beta.starts_with("context-1m-") {
            true => r.prices.long.is_some(),
            false => r.prices.cache_write_1h.is_some(),
        };
        if let Some(unpriced) = native().find(|r| !priced(r)) {
            return Err(ApiError::bad_request(
                format!(
                    "anthropic-beta `{beta}` changes the price of the call, and deployment `{}` has no price for \
                     {what}; configure it, or list the beta in gateway_settings.anthropic_beta_allowed",
                    unpriced.deployment.id
                ),
                None,
            ));
        }
    }
    Ok(())
}

/// What a request asks of its budgets over the deployments it may try: the conservative prompt estimate and
/// what the provider bills beyond the body (`beyond`; at most the context window), the largest completion cap of
/// any of them and the dearest prices (1-hour cache writes when the request asks for them: `hour_cache`), and
/// its web searches at the dearest price per search, so that any attempt, retry or fallback stays within what is
/// reserved.
pub fn ask(
    candidates: &[Arc<Route>],
    reading: &Reading,
    prompt_estimate: u64,
    beyond: Beyond,
    hour_cache: bool,
) -> Ask {
    let asked = reading.max_tokens;
    let mut prompt_tokens = prompt_estimate.saturating_add(beyond.input_tokens);
    if let Some(window) = beyond.window {
        prompt_tokens = if beyond.uncounted { window } else { prompt_tokens.min(window) };
    }
    let per_search = candidates.iter().map(|r| r.prices.per_tool_use).max().unwrap_or(Money::ZERO);
    let mut ask = Ask {
        prompt_tokens,
        completion_tokens: 0,
        choices: reading.choices,
        input: Price::ZERO,
        output: Price::ZERO,
        fixed: Money::from_nanos_i128(i128::from(per_search.nanos()).saturating_mul(i128::from(beyond.searches))),
    };
    for r in candidates {
        ask.completion_tokens = ask.completion_tokens.max(route_cap(r, asked));
        // A prompt written to the upstream's cache may cost more than a plain one; past a long-context
        // threshold every token costs the tier's price.
        let (input, output) = r.prices.dearest(prompt_tokens, hour_cache);
        ask.input = ask.input.max(input);
        ask.output = ask.output.max(output);
    }
    ask
}

/// Counts a request of `prompt_tokens` against the rate limits. The master key passes untouched (spec 8.2).
pub async fn rate(
    rates: &RateLimits,
    config: &Config,
    principal: &Principal,
    prompt_tokens: u64,
) -> Result<(), ApiError> {
    if principal.key().is_some() {
        rates.admit(principal, config, prompt_tokens).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use svc_front::{Searches, Unseen};
    use svc_routing::ModelTable;

    /// The deployments of `yaml`'s model list.
    fn routes(yaml: &str) -> Vec<Arc<Route>> {
        let config = svc_config::load_str(yaml, "t.yaml", svc_config::ConfigSource::Builtin, &|_| None).unwrap();
        let metrics = crate::observe::Metrics::new(false).unwrap();
        let table = ModelTable::build(&config, &svc_providers::UpstreamClient::new().unwrap(), &metrics).unwrap();
        table.all().cloned().collect()
    }

    const TWO: &str = "model_list:\n\
      - { model_name: a, params: { model: mock/a, max_input_tokens: 1000, search_context_cost_per_query: 0.01 } }\n\
      - { model_name: a, params: { model: mock/b, max_input_tokens: 3000 } }\n";

    #[test]
    fn what_the_body_does_not_hold_is_bounded_over_the_plan() {
        let (r, settings) = (routes(TWO), svc_config::AdmissionSettings::default());
        let none = beyond(&r, Unseen::default(), None, true, &settings).unwrap();
        assert_eq!(none, Beyond { window: Some(3000), ..Beyond::default() }, "the largest window of the plan");
        let chain = beyond(&r, Unseen::default(), Some(Some(700)), true, &settings).unwrap();
        assert_eq!((chain.input_tokens, chain.uncounted), (700, false), "a chain's history as billed");
        let streaming = beyond(&r, Unseen::default(), Some(None), true, &settings).unwrap();
        assert!(streaming.uncounted, "a response still being written is bounded by the window");
        let unlimited = Unseen { searches: Searches::Unlimited, ..Unseen::default() };
        let searches = beyond(&r, unlimited, None, true, &settings).unwrap();
        assert_eq!((searches.searches, searches.input_tokens), (5, 50_000), "the configured default and results");
        assert_eq!(searches.results, 50_000, "the results are told apart from a history");
    }

    #[test]
    fn uncounted_input_needs_a_window_under_a_budget() {
        let open = routes("model_list:\n  - { model_name: a, params: { model: mock/a } }\n");
        let settings = svc_config::AdmissionSettings::default();
        let file = Unseen::of_chat(1);
        let refused = beyond(&open, file, None, true, &settings).err().map(|e| e.body());
        assert!(refused.is_some_and(|b| b["error"]["message"].as_str().unwrap().contains("max_input_tokens")));
        assert!(beyond(&open, file, None, false, &settings).is_ok(), "nothing to bound without a budget");
    }

    #[test]
    fn the_ask_holds_the_window_for_uncounted_input_and_each_search_at_its_dearest_price() {
        let r = routes(TWO);
        let req = svc_providers::ChatRequest::parse(br#"{"model":"a","messages":[{"role":"user","content":"hi"}]}"#);
        let req = Reading::of_chat(&req.unwrap());
        let counted = Beyond { input_tokens: 100_000, results: 0, window: Some(3000), uncounted: false, searches: 2 };
        let a = ask(&r, &req, 20, counted, false);
        assert_eq!(a.prompt_tokens, 3000, "never more than the window");
        assert_eq!(a.fixed, Money::from_nanos(20_000_000), "two searches at the dearest deployment's 0.01");
        let uncounted = Beyond { uncounted: true, ..counted };
        assert_eq!(ask(&r, &req, 20, uncounted, false).prompt_tokens, 3000);
        let small = Beyond { input_tokens: 5, ..counted };
        assert_eq!(ask(&r, &req, 20, small, false).prompt_tokens, 25);
    }
}
