//! The model-request path of every client API (chat completions, Messages, Responses, embeddings), one stage
//! per module:
//!
//! 1. `auth` (middleware, before this): the key → a `Principal`, or 401.
//! 2. [`admission::enter`]: a place among `max_in_flight` requests, or 503 + `Retry-After`.
//! 3. The front end (`svc_front::Api::read`): what the pipeline acts on of the client's body (a `Reading`), and
//!    a chat body as the pipeline's chat-completions request, checked (400 naming the field; bounds on
//!    `max_tokens` and `n` included). A Messages or Responses body is read as it is: its chat form is made by
//!    `attempts` only for a deployment that does not speak its API.
//! 4. [`access::check`]: the alias exists, as written or matched by a wildcard alias (404), and the caller may
//!    use it (403).
//! 5. The plan (svc-routing's `ModelTable::plan`): the alias's deployments in rotation, fewest in flight
//!    first, then its fallbacks' (pinned to the deployment holding the stored response the request continues,
//!    which must be one the caller may reach: [`stored::reach`], else 404 as an unknown `previous_response_id`).
//! 6. [`admission`]: rate limits and budgets (svc-limits): the worst case on the dearest deployment of the plan
//!    reserved in the team's and key's budgets; when it does not fit, first bounded tightly by the provider's exact input count
//!    (`tighten`), then possibly with a lower completion cap (429 `Budget exceeded` / `rate_limit_exceeded`).
//! 7. `attempts`: the provider call, passed through when the deployment speaks the client's API, else as a
//!    chat completion; the alias becomes the upstream id on the way out and comes back in `model`; failures
//!    retried along the plan.
//! 8. [`upstream`] and [`settlement`]: the answer metered ([`meter`]) and written in the client's API, its
//!    cost (never above the reservation) and spend record made durable (`crate::spend`) before the response
//!    completes.
//!
//! Every attempt's outcome goes to its deployment's health (svc-routing's `health`).

pub mod access;
pub mod admission;
mod attempts;
pub mod meter;
pub mod settlement;
pub mod stored;
mod tighten;
pub mod upstream;

use crate::error::ApiError;
use attempts::Call;
use axum::http::{HeaderName, HeaderValue};
use axum::response::Response;
use bytes::Bytes;
use meter::Meter;
use std::sync::Arc;
use std::time::Instant;
use svc_events::EventSink;
use svc_front::{Api, Caller, Reading, Translated, Unseen};
use svc_keys::Principal;
use svc_limits::budgets::Grant;
use svc_providers::{estimate, ChatRequest};
use svc_routing::{ModelTable, Plan, Route};

/// What the stages of a model request read, and nothing more: [`handle`] is given it, its calls and their
/// settlement hold it. A handler gets it from the gateway's state by `FromRef` (`state.rs`).
#[derive(Clone)]
pub struct Pipeline {
    /// The validated configuration.
    pub(crate) config: Arc<svc_config::Config>,
    /// The store (stored responses' owners).
    pub(crate) store: svc_store::Store,
    /// Aliases → deployments, and the homes of stored responses.
    pub(crate) models: Arc<ModelTable>,
    /// Permits of `server.max_in_flight`: model requests being answered.
    pub(crate) answering: Arc<tokio::sync::Semaphore>,
    /// Budget accounts.
    pub(crate) budgets: Arc<svc_limits::budgets::Budgets>,
    /// Rate limiters.
    pub(crate) rates: Arc<svc_limits::rate::RateLimits>,
    /// Where the gateway's own events go (deployment health).
    pub(crate) events: Arc<dyn EventSink>,
    /// The group-commit writer of spend records.
    pub(crate) spend: crate::spend::SpendWriter,
    /// The Prometheus series.
    pub(crate) metrics: Arc<crate::observe::Metrics>,
    /// This node in its fleet (its heartbeat counts the requests served).
    pub(crate) node: Arc<svc_routing::node::FleetNode>,
    /// Work that shutdown waits for (the settlement of a stream cut off).
    pub(crate) tasks: tokio_util::task::TaskTracker,
}

impl Pipeline {
    /// The model requests being answered now.
    pub(crate) fn in_flight(&self) -> usize {
        self.config.server.max_in_flight.saturating_sub(self.answering.available_permits())
    }
}

/// The deployment that served a request (`x-svc-model-id`). Header names are constants, made at compile time
/// (a name given as text is parsed on every use).
pub const MODEL_ID_HEADER: HeaderName = HeaderName::from_static("x-svc-model-id");
/// The completion cap a request was admitted with, when its budget could not pay for the one it asked.
pub const CAPPED_HEADER: HeaderName = HeaderName::from_static("x-svc-budget-max-tokens");
/// The request's id, the client's or the gateway's.
pub const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");
/// Time in the gateway minus time waiting for the upstream.
pub const OVERHEAD_HEADER: HeaderName = HeaderName::from_static("x-svc-overhead-duration-ms");

/// `f` of `id`'s hyphenated lower-case text, written into a buffer on the stack, without the formatter that
/// `to_string` goes through (request and spend record ids, one each a request).
pub fn with_id_text<R>(id: uuid::Uuid, f: impl FnOnce(&str) -> R) -> R {
    f(id.hyphenated().encode_lower(&mut uuid::Uuid::encode_buffer()))
}

/// How a request came in: its client API (in which [`handle`] reads the body), the client's API headers for a
/// pass-through, and who called.
#[derive(Debug, Clone)]
pub struct Inbound {
    /// The client API, in whose shape the answer is written.
    pub api: Api,
    /// Who called.
    pub caller: Caller,
    /// The client's API headers passed through (`anthropic-version`, `anthropic-beta`).
    pub headers: Vec<(axum::http::HeaderName, HeaderValue)>,
}

impl Inbound {
    /// The client's `anthropic-beta` values, when it sent any.
    fn betas(&self) -> Option<&str> {
        self.headers.iter().find(|(name, _)| name.as_str() == "anthropic-beta").and_then(|(_, v)| v.to_str().ok())
    }
}

/// Runs one model request through the stages listed at the top of this file. `alias` receives the alias asked
/// for as soon as it is read (moved there, not copied), so the caller can name it in a refusal's request line.
pub async fn handle(
    state: &Arc<Pipeline>,
    principal: Principal,
    request_id: String,
    body: &Bytes,
    started: Instant,
    inbound: &Inbound,
    alias: &mut String,
) -> Result<Response, ApiError> {
    let ticket = admission::enter(&state.answering, state.config.server.max_in_flight)?;
    let Translated { mut chat, mut reading, continues, stored, unseen, fields } = inbound.api.read(body)?;
    let facts = Facts::of(std::mem::take(&mut reading.model), &reading, chat.as_mut());
    *alias = facts.alias;
    let alias: &str = alias;
    access::check(&state.models, &state.config, &principal, alias)?;
    let home = match continues.as_deref() {
        Some(id) => Some(continued(state, &principal, id).await?),
        None => None,
    };
    let (mut plan, first) = plan(&state.models, state.events.as_ref(), alias, home.as_ref())?;
    if let Some(betas) = inbound.betas() {
        admission::check_betas(plan.candidates(), betas, state.config.gateway.anthropic_beta_allowed.as_deref())?;
    }
    let history = home.as_ref().map(|h| h.tokens);
    let asked = Asked { reading: &reading, body, inbound, alias };
    let Admitted { grant, meter, tool_calls } = admit(state, &principal, &mut plan, asked, unseen, history).await?;
    let call = Call {
        state,
        principal,
        request_id,
        body,
        started,
        alias,
        stream: facts.stream,
        client_wants_usage: facts.client_wants_usage,
        asked: facts.asked,
        granted: grant.capped.then_some(grant.completion_tokens),
        meter,
        api: inbound.api,
        inbound,
        continues: continues.is_some(),
        stored,
        tool_calls,
        fields: fields.as_ref(),
    };
    let outcome = call.attempts(plan, chat, first).await;
    call.respond(outcome, ticket, grant.reservation).await
}

/// What the pipeline reads off the request once: the alias, whether it streams (a stream always asks the
/// upstream for usage; whether the client asked is kept), and the client's own completion cap.
struct Facts {
    alias: String,
    stream: bool,
    client_wants_usage: bool,
    asked: Option<u64>,
}

impl Facts {
    /// The facts of `reading` (its `model` given as `alias`); a stream's chat form, when made, asks for usage.
    fn of(alias: String, reading: &Reading, chat: Option<&mut ChatRequest>) -> Facts {
        if let Some(chat) = chat.filter(|_| reading.stream) {
            chat.force_stream_usage();
        }
        let (stream, client_wants_usage) = (reading.stream, reading.wants_stream_usage);
        Facts { alias, stream, client_wants_usage, asked: reading.max_tokens }
    }
}

/// The stored response a request continues, when the caller may reach it (boxed: a store read, rare, kept out
/// of the handler's future).
fn continued<'a>(
    state: &'a Pipeline,
    principal: &'a Principal,
    id: &'a str,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<svc_routing::Home, ApiError>> + Send + 'a>> {
    let shared = state.config.gateway.responses_shared_within_team;
    Box::pin(stored::reach(&state.models, &state.store, shared, principal, id, stored::Asked::AsPrevious))
}

/// Stage 5: the deployments to try, pinned to a stored response's deployment when the request continues one.
fn plan(
    models: &ModelTable,
    sink: &dyn EventSink,
    alias: &str,
    continues: Option<&svc_routing::Home>,
) -> Result<(Plan, Arc<Route>), ApiError> {
    let unknown = || ApiError::unknown_model(alias);
    let mut plan = models.plan(alias, sink).ok_or_else(unknown)?;
    if let Some(home) = continues {
        plan.pin(&home.route.deployment.id);
    }
    let first = plan.candidates().first().cloned().ok_or_else(unknown)?;
    Ok((plan, first))
}

/// What the admission reads of the request: its reading, the client's body, how it came in and its alias.
#[derive(Clone, Copy)]
struct Asked<'a> {
    reading: &'a Reading,
    body: &'a [u8],
    inbound: &'a Inbound,
    alias: &'a str,
}

/// What the last part of a budget admitted: the holds, the ask they were made for, the prompt's count and the
/// built-in tool calls left to the request.
struct LastPart {
    grant: Grant,
    ask: svc_limits::budgets::Ask,
    prompt_estimate: u64,
    tool_calls: Option<u64>,
}

/// The last part of a budget, where the loose worst case does not fit: the bound made tight (`tighten`), then
/// the request without its web searches where they can be turned off, then `Budgets::admit` (a lower
/// completion cap, or 429).
async fn last_part(
    state: &Pipeline,
    principal: &Principal,
    plan: &mut Plan,
    asked: Asked<'_>,
    (loose, prompt_estimate): (svc_limits::budgets::Ask, u64),
    beyond: admission::Beyond,
    hour_cache: bool,
) -> Result<LastPart, ApiError> {
    let Asked { reading, body, inbound, alias } = asked;
    let Some(tight) = tighten::tightened(plan, inbound, alias, body, reading, beyond, hour_cache).await else {
        let grant = state.budgets.admit(principal, &loose).await?;
        return Ok(LastPart { grant, ask: loose, prompt_estimate, tool_calls: None });
    };
    let (mut ask, mut tool_calls) = (tight.ask, None);
    if let Some(bare) = tight.without_searches {
        if let Some(grant) = state.budgets.admit_whole(principal, &ask).await? {
            return Ok(LastPart { grant, ask, prompt_estimate: tight.counted, tool_calls });
        }
        (ask, tool_calls) = (bare, Some(0));
    }
    let grant = state.budgets.admit(principal, &ask).await?;
    Ok(LastPart { grant, ask, prompt_estimate: tight.counted, tool_calls })
}

/// An admitted request: its holds, the meter its answer will be judged with, and the built-in tool calls
/// (web searches) it is left, when they had to be turned off for it to fit.
struct Admitted {
    grant: Grant,
    meter: Meter,
    tool_calls: Option<u64>,
}

/// Stage 6: rate limits and the budget reservation of the worst case over the plan. In the last part of a
/// budget, where that does not fit, the bound is made tight first (`tighten`: the exact input count), then the
/// web searches are turned off where they can be, then the completion is capped (or the request refused).
async fn admit(
    state: &Pipeline,
    principal: &Principal,
    plan: &mut Plan,
    asked: Asked<'_>,
    unseen: Unseen,
    history: Option<Option<u64>>,
) -> Result<Admitted, ApiError> {
    let Asked { reading, body, .. } = asked;
    let mut prompt_estimate = estimate::prompt_tokens_of(reading.parts);
    // Most requests hold all they are billed for: only the others pay for finding out who is budgeted.
    let budgeted = (unseen.uncounted.is_some() || matches!(history, Some(None))) && state.budgets.apply_to(principal);
    let beyond = admission::beyond(plan.candidates(), unseen, history, budgeted, &state.config.gateway.admission)?;
    // A prompt cache entry kept for an hour (`"ttl": "1h"` on a block) is written at its own, dearer price.
    static TTL: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"ttl\""));
    let hour_cache = TTL.find(body).is_some();
    let mut ask = admission::ask(plan.candidates(), reading, prompt_estimate, beyond, hour_cache);
    admission::rate(&state.rates, &state.config, principal, ask.prompt_tokens).await?;
    let (grant, tool_calls) = match state.budgets.admit_whole(principal, &ask).await? {
        Some(grant) => (grant, None),
        // Boxed: the last part of a budget is rare, and its futures would make every request's larger.
        None => {
            let loose = (ask, prompt_estimate);
            let last = Box::pin(last_part(state, principal, plan, asked, loose, beyond, hour_cache)).await?;
            (ask, prompt_estimate) = (last.ask, last.prompt_estimate);
            (last.grant, last.tool_calls)
        }
    };
    let meter = Meter {
        prompt_estimate,
        // The deployment's own bounds are set per attempt.
        input_bound: meter::UNKNOWN_CONTEXT,
        model_cap: None,
        completion_cap: grant.completion_tokens,
        upstream_cap: None,
        choices: ask.choices,
        budgeted: grant.reservation.is_budgeted(),
    };
    Ok(Admitted { grant, meter, tool_calls })
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_id_is_written_as_to_string_writes_it() {
        for id in [uuid::Uuid::now_v7(), uuid::Uuid::new_v4(), uuid::Uuid::nil(), uuid::Uuid::max()] {
            assert_eq!(super::with_id_text(id, str::to_owned), id.to_string());
        }
    }
}
