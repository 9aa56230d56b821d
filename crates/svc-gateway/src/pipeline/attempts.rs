//! Stage 7 and 8 of the pipeline: the attempts along the plan, and the answer in the client's API.
//!
//! An attempt is a pass-through when the deployment speaks the client's API (`Deployment::forward`), else a
//! chat completion (`Deployment::chat` / `chat_stream`) that the front end translates back. A failed attempt
//! (connect error, timeout, 408, 429, 5xx, an answer that is not a completion) is retried along the plan within
//! `num_retries` and the first deployment's `timeout_seconds`, counted from the request's arrival; a stream is
//! retried only while nothing of it reached the client (the gateway waits for the upstream's first chunk
//! before answering), never after. Every attempt's outcome goes to its deployment's health.

use super::admission::{self, Ticket};
use super::meter::{self, Meter};
use super::settlement::Settle;
use super::upstream::{self, Source};
use super::{Inbound, CAPPED_HEADER, MODEL_ID_HEADER};
use crate::error::ApiError;
use crate::observe::Attempts;
use axum::body::Body;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use svc_front::passthrough_stream::PassStream;
use svc_front::{Api, Encoder};
use svc_keys::Principal;
use svc_limits::budgets::Reservation;
use svc_providers::passthrough::{EventStream, Forwarded, Raw, Wire};
use svc_providers::{ChatRequest, ChunkStream, ProviderError, Reply};
use svc_routing::health::Outcome;
use svc_routing::{Failure, InFlight, Plan, Route};

/// What a successful attempt got.
pub(super) enum Answer {
    Reply(Reply),
    Stream(ChunkStream),
    /// A passed-through reply, in the client's API.
    Raw(svc_providers::raw::Object),
    /// A passed-through stream of the client's API's events.
    RawStream(EventStream),
}

/// One admitted request on its way through the attempts.
pub(super) struct Call<'a> {
    pub(super) state: &'a Arc<super::Pipeline>,
    pub(super) principal: Principal,
    pub(super) request_id: String,
    pub(super) body: &'a Bytes,
    pub(super) started: Instant,
    /// The alias asked for.
    pub(super) alias: &'a str,
    pub(super) stream: bool,
    pub(super) client_wants_usage: bool,
    /// The client's own completion cap.
    pub(super) asked: Option<u64>,
    /// The cap the budgets pay for, when it is lower than the client's.
    pub(super) granted: Option<u64>,
    pub(super) meter: Meter,
    pub(super) api: Api,
    pub(super) inbound: &'a Inbound,
    /// Whether the request continues a stored response (`previous_response_id`).
    pub(super) continues: bool,
    /// Whether the upstream keeps the answer (a Responses request without `store: false`).
    pub(super) stored: bool,
    /// The built-in tool calls (web searches) the budgets pay for, when lower than the client's.
    pub(super) tool_calls: Option<u64>,
    /// The client's body read as top-level fields (a Messages or Responses body read as it is): a pass-through
    /// writes it again from these.
    pub(super) fields: Option<&'a svc_providers::raw::Object>,
}

/// A failed call: the deployment that gave the last error (or, when the time was up before any attempt, the
/// first one), the error, and the time spent waiting.
pub(super) type Failed = (Arc<Route>, ProviderError, Duration, u32);

/// A successful attempt.
pub(super) struct Done {
    route: Arc<Route>,
    answer: Answer,
    in_flight: InFlight,
    /// The meter with the cap this attempt's upstream was told.
    meter: Meter,
    waited: Duration,
    /// Attempts made.
    tries: u32,
}

impl Call<'_> {
    /// Tries the plan's deployments until one answers, within `num_retries` and the timeout of the plan's
    /// first deployment (`first_route`). On failure: the deployment that gave the last error (or, when the
    /// time was up before any attempt, the first one), the error, and the time spent waiting.
    pub(super) async fn attempts(
        &self,
        mut plan: Plan,
        mut first: Option<ChatRequest>,
        first_route: Arc<Route>,
    ) -> Result<Done, Failed> {
        let deadline = self.started + first_route.deployment.timeout;
        let mut waited = Duration::ZERO;
        let mut last: Option<(Arc<Route>, ProviderError)> = None;
        let mut tries = 0u32;
        while let Some(attempt) = plan.next_attempt() {
            if attempt.repeat > 0 {
                let pause = svc_routing::backoff(attempt.repeat);
                if Instant::now() + pause >= deadline {
                    break;
                }
                tokio::time::sleep(pause).await;
                waited += pause;
            }
            let within = deadline.saturating_duration_since(Instant::now());
            if within.is_zero() {
                break;
            }
            let route = attempt.route.clone();
            let told = self.told_cap(&route);
            let meter = Meter {
                upstream_cap: told,
                input_bound: route.max_input_tokens.unwrap_or(meter::UNKNOWN_CONTEXT),
                model_cap: route.max_output_tokens.map(u64::from),
                ..self.meter
            };
            let in_flight = InFlight::new(route.clone());
            let t0 = Instant::now();
            tries += 1;
            let Some(result) = self.try_once(&route, told, within, &mut first).await else { break };
            let took = t0.elapsed();
            waited += took;
            match result {
                Ok(answer) => {
                    if matches!(answer, Answer::Reply(_) | Answer::Raw(_)) {
                        route.record(Outcome::Answered(took), self.state.events.as_ref());
                    }
                    let mut in_flight = in_flight;
                    if matches!(answer, Answer::Stream(_) | Answer::RawStream(_)) {
                        in_flight.watch_stream(took, self.state.events.clone());
                    }
                    return Ok(Done { route, answer, in_flight, meter, waited, tries });
                }
                Err(e) => {
                    match svc_routing::classify(&e) {
                        Failure::Final => {
                            last = Some((route, e));
                            break;
                        }
                        Failure::RateLimited => plan.exclude(&attempt),
                        Failure::Fault => {}
                    }
                    route.record(Outcome::Failed, self.state.events.as_ref());
                    tracing::warn!(request_id = %self.request_id, deployment = %route.deployment.id, error = %e, "upstream attempt failed");
                    last = Some((route, e));
                }
            }
        }
        match last {
            Some((route, e)) => Err((route, e, waited, tries)),
            None => {
                let after = self.started.elapsed();
                let e = ProviderError::Timeout { deployment: first_route.deployment.id.clone(), after };
                Err((first_route, e, waited, tries))
            }
        }
    }

    /// One attempt on `route` within `within`: passed through when the deployment speaks the client's API, else as
    /// a chat completion (the chat form `first`, when the request was read as one, is used once; else, and on a
    /// retry, it is made from the client's bytes). `None` when the body cannot be read again.
    async fn try_once(
        &self,
        route: &Arc<Route>,
        told: Option<u64>,
        within: Duration,
        first: &mut Option<ChatRequest>,
    ) -> Option<Result<Answer, ProviderError>> {
        let wire = self.api.wire();
        let result = match wire.filter(|w| route.deployment.speaks(*w)) {
            Some(wire) => self.pass(route, wire, told, within).await,
            // Embeddings have no chat form to fall back on.
            None if wire == Some(Wire::Embeddings) => Err(ProviderError::Unsupported {
                message: format!("deployment `{}` does not serve embeddings", route.deployment.id),
                param: Some("model".into()),
            }),
            None if self.continues => Err(ProviderError::Unsupported {
                message: format!(
                    "`previous_response_id` needs a stored response, which only an OpenAI deployment keeps; \
                     deployment `{}` is not one: send the whole input instead",
                    route.deployment.id
                ),
                param: Some("previous_response_id".into()),
            }),
            None => {
                // The chat form read is used once; else it is made from the client's bytes (a retry, or a
                // Messages or Responses request read as it is, on a deployment that does not speak its API).
                let mut req = match first.take() {
                    Some(r) => r,
                    None => self.reparse().ok()?,
                };
                req.set_model(&route.upstream_model(self.alias));
                if let Some(cap) = told {
                    req.cap_completion_tokens(cap);
                }
                if self.stream {
                    open_stream(route, req, within).await.map(Answer::Stream)
                } else {
                    call(route, req, within).await.map(Answer::Reply)
                }
            }
        };
        Some(result)
    }

    /// The completion cap to tell `route`'s upstream, lowering the request's as needed: to the model's
    /// `max_output_tokens` when the client asked for more, and to the budget's grant when that is lower.
    /// `None` when the upstream is told none (the client asked for none and the budget paid for the default).
    fn told_cap(&self, route: &Route) -> Option<u64> {
        let asked = self.asked.map(|a| admission::route_cap(route, Some(a)));
        match (asked, self.granted) {
            (Some(a), Some(g)) => Some(a.min(g)),
            (a, g) => a.or(g),
        }
    }

    /// A pass-through attempt: the client's body in its own API (only `model` and the cap changed), bounded
    /// by `within` until the reply or the stream's first event.
    async fn pass(
        &self,
        route: &Route,
        wire: Wire,
        told: Option<u64>,
        within: Duration,
    ) -> Result<Answer, ProviderError> {
        let upstream_model = route.upstream_model(self.alias);
        let body = match self.fields {
            Some(fields) => {
                svc_front::passthrough::prepare_read(self.api, fields, &upstream_model, told, self.tool_calls)
            }
            None => svc_front::passthrough::prepare_with(self.api, self.body, &upstream_model, told, self.tool_calls)
                .map_err(|e| ProviderError::Unsupported { message: e.message, param: None })?,
        };
        let req = Forwarded { body, stream: self.stream, headers: self.inbound.headers.clone() };
        let open = async {
            match route.deployment.forward(wire, req).await? {
                Raw::Reply(body) => Ok(Answer::Raw(body)),
                Raw::Stream(events) => first_then_rest(events).await.map(Answer::RawStream),
            }
        };
        match tokio::time::timeout(within, open).await {
            Ok(result) => result,
            Err(_) => Err(deadline_passed(route, within)),
        }
    }

    /// The chat form of the client's body.
    fn reparse(&self) -> Result<ChatRequest, ApiError> {
        let mut req = self.api.to_chat(self.body)?;
        if self.stream {
            req.force_stream_usage();
        }
        Ok(req)
    }

    /// Stage 8: the client's response to the attempts' outcome, settled (a failure is recorded at no cost),
    /// with `x-svc-model-id`, the capped completion header and the time spent waiting for upstreams.
    pub(super) async fn respond(
        &self,
        outcome: Result<Done, Failed>,
        ticket: Ticket,
        reservation: Reservation,
    ) -> Result<Response, ApiError> {
        let (mut response, route, waited) = match outcome {
            Ok(Done { route, answer, in_flight, meter, waited, tries }) => {
                let settle = self.settle(&route, in_flight, ticket, reservation, tries, waited);
                (self.answer(settle, answer, meter).await?, route, waited)
            }
            Err((route, err, waited, tries)) => {
                let err = ApiError::from(err);
                let settle = self.settle(&route, InFlight::new(route.clone()), ticket, reservation, tries, waited);
                settle.failed(err.status().as_u16()).await;
                (err.into_response(), route, waited)
            }
        };
        let h = response.headers_mut();
        h.insert(MODEL_ID_HEADER, model_id(&route));
        if let Some(k) = self.granted {
            h.insert(CAPPED_HEADER, HeaderValue::from(k));
        }
        response.extensions_mut().insert(crate::observe::Logged { upstream_wait: waited });
        Ok(response)
    }

    /// What settles the call on `route`.
    fn settle(
        &self,
        route: &Arc<Route>,
        in_flight: InFlight,
        ticket: Ticket,
        reservation: Reservation,
        tries: u32,
        waited: Duration,
    ) -> Settle {
        // A fallback alias's deployment (not one a wildcard alias matched) answered.
        let fallback = route.alias != self.alias && !route.alias.contains('*');
        Settle {
            state: self.state.clone(),
            principal: self.principal.clone(),
            route: serving(route, self.alias),
            request_id: self.request_id.clone(),
            started: self.started,
            ticket,
            in_flight,
            reservation,
            api: self.api,
            caller: self.inbound.caller.clone(),
            attempts: Attempts { count: tries, fallback, waited },
            first_byte: None,
            response_id: None,
            stored: self.stored,
        }
    }

    /// The client's response to a successful attempt.
    async fn answer(&self, settle: Settle, answer: Answer, meter: Meter) -> Result<Response, ApiError> {
        let (chunks, encoder) = match answer {
            Answer::Reply(reply) => {
                let bytes = upstream::reply(settle, meter, reply, self.api).await?;
                return Ok(json_response(bytes));
            }
            Answer::Raw(body) => {
                let bytes = upstream::raw_reply(settle, meter, &body, self.api).await?;
                return Ok(json_response(bytes));
            }
            Answer::Stream(chunks) => {
                let encoder = self.api.encoder(&settle.route.alias);
                (Source::Chunks(chunks), encoder)
            }
            Answer::RawStream(events) => {
                let encoder = Encoder::Pass(PassStream::new(self.api, &settle.route.alias).with_cut(meter.cut_after()));
                (Source::Events(events), Some(encoder))
            }
        };
        let limits = self.state.config.gateway.streams;
        let wants_usage = self.client_wants_usage || encoder.is_some();
        let body = upstream::stream_body(settle, chunks, wants_usage, meter, limits, self.started, encoder);
        let mut resp = Response::new(body);
        *resp.status_mut() = StatusCode::OK;
        let h = resp.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        h.insert(const { HeaderName::from_static("x-accel-buffering") }, HeaderValue::from_static("no"));
        Ok(resp)
    }
}

/// A 200 JSON response.
fn json_response(bytes: Bytes) -> Response {
    let mut resp = Response::new(Body::from(bytes));
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// The route to settle and answer with: a fallback answers under the alias the client asked for.
fn serving(route: &Arc<Route>, alias: &str) -> Arc<Route> {
    if route.alias == alias {
        route.clone()
    } else {
        Arc::new(route.serving_as(alias))
    }
}

/// `x-svc-model-id` of a deployment.
fn model_id(route: &Route) -> HeaderValue {
    HeaderValue::from_str(&route.deployment.id).unwrap_or(HeaderValue::from_static("unknown"))
}

/// The timeout error of an attempt cut short by the request's deadline: it names the deployment's own
/// `timeout_seconds` when the deadline was (nearly) all of it.
fn deadline_passed(route: &Route, within: Duration) -> ProviderError {
    let timeout = route.deployment.timeout;
    let after = if within + Duration::from_millis(100) >= timeout { timeout } else { within };
    ProviderError::Timeout { deployment: route.deployment.id.clone(), after }
}

/// A non-streaming attempt, bounded by `within`.
async fn call(route: &Route, req: ChatRequest, within: Duration) -> Result<Reply, ProviderError> {
    match tokio::time::timeout(within, route.deployment.chat(req)).await {
        Ok(result) => result,
        Err(_) => Err(deadline_passed(route, within)),
    }
}

/// Waits for a stream's first item: an error before it is the attempt's error (nothing reached the client);
/// else the first item is put back in front of the rest.
async fn first_then_rest<T: Send + 'static>(
    mut items: Pin<Box<dyn Stream<Item = Result<T, ProviderError>> + Send>>,
) -> Result<Pin<Box<dyn Stream<Item = Result<T, ProviderError>> + Send>>, ProviderError> {
    match items.next().await {
        Some(Ok(first)) => Ok(Box::pin(futures::stream::once(async move { Ok(first) }).chain(items))),
        Some(Err(e)) => Err(e),
        None => Ok(items),
    }
}

/// A streaming attempt: the upstream's headers and its first chunk, bounded by `within`. A stream that fails
/// before its first chunk is an error like any other (nothing reached the client, so it may be retried); the
/// first chunk is put back in front of the rest.
async fn open_stream(route: &Route, req: ChatRequest, within: Duration) -> Result<ChunkStream, ProviderError> {
    let open = async { first_then_rest(route.deployment.chat_stream(req).await?).await };
    match tokio::time::timeout(within, open).await {
        Ok(result) => result,
        Err(_) => Err(deadline_passed(route, within)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use svc_front::Caller;

    /// Alias `a`: an OpenAI-compatible deployment nothing listens for (refused at once), with `b`, the mock, as
    /// its fallback; two retries.
    const YAML: &str = "
model_list:
  - model_name: a
    params: { model: openai/x, api_base: 'http://127.0.0.1:9/v1', api_key: k }
    model_info: { id: a1 }
    fallbacks: [b]
  - { model_name: b, params: { model: mock/b }, model_info: { id: b1 } }
gateway_settings:
  num_retries: 2
";

    async fn pipeline(dir: &tempfile::TempDir) -> Arc<super::super::Pipeline> {
        let url = format!("sqlite://{}", dir.path().join("svc.db").display());
        let store = svc_store::Store::connect(&url).await.unwrap();
        let config = svc_config::load_str(YAML, "t.yaml", svc_config::ConfigSource::Builtin, &|_| None).unwrap();
        crate::AppState::new(config, store, None).await.unwrap().pipeline()
    }

    /// The attempts of a chat request for `a` (`continues`: as a continuation of a stored response).
    async fn attempt(p: &Arc<super::super::Pipeline>, continues: bool) -> Result<Done, Failed> {
        let body = Bytes::from_static(br#"{"model":"a","messages":[{"role":"user","content":"hi"}]}"#);
        let inbound = Inbound { api: Api::Chat, caller: Caller::default(), headers: Vec::new() };
        let meter = Meter {
            prompt_estimate: 10,
            input_bound: meter::UNKNOWN_CONTEXT,
            completion_cap: 100,
            upstream_cap: None,
            model_cap: None,
            choices: 1,
            budgeted: false,
        };
        let call = Call {
            state: p,
            principal: Principal::Master,
            request_id: "req-1".into(),
            body: &body,
            started: Instant::now(),
            alias: "a",
            stream: false,
            client_wants_usage: false,
            asked: None,
            granted: None,
            meter,
            api: Api::Chat,
            inbound: &inbound,
            continues,
            stored: false,
            tool_calls: None,
            fields: None,
        };
        let plan = p.models.plan("a", p.events.as_ref()).unwrap();
        let first_route = plan.candidates()[0].clone();
        call.attempts(plan, Some(ChatRequest::parse(&body).unwrap()), first_route).await
    }

    fn failures(p: &super::super::Pipeline, id: &str) -> u32 {
        p.models.deployment(id).unwrap().health.view().consecutive_failures
    }

    #[tokio::test]
    async fn a_deployment_that_cannot_be_reached_is_counted_and_its_fallback_answers() {
        let dir = tempfile::tempdir().unwrap();
        let p = pipeline(&dir).await;
        let Ok(done) = attempt(&p, false).await else { panic!("the fallback should have answered") };
        assert_eq!((done.route.deployment.id.as_str(), done.tries), ("b1", 2));
        assert!(matches!(done.answer, Answer::Reply(_)));
        assert_eq!((failures(&p, "a1"), failures(&p, "b1")), (1, 0), "the failure counts against a1 alone");
    }

    #[tokio::test]
    async fn a_failure_of_the_request_itself_is_answered_at_once_and_counts_against_nobody() {
        let dir = tempfile::tempdir().unwrap();
        let p = pipeline(&dir).await;
        // A continuation of a stored response cannot be sent as a chat completion: the request's fault, so
        // neither retried on the fallback nor counted against the deployment (never asked).
        let Err((route, e, _, tries)) = attempt(&p, true).await else { panic!("a continuation as a chat call") };
        assert!(matches!(e, ProviderError::Unsupported { .. }), "{e:?}");
        assert_eq!((route.deployment.id.as_str(), tries), ("a1", 1), "not retried after the final error");
        assert_eq!((failures(&p, "a1"), failures(&p, "b1")), (0, 0));
    }
}
