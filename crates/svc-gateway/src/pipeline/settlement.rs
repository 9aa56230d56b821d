//! Settlement: after a call, its cost is computed from the usage the upstream reported, the budgets settle,
//! and the spend record is made durable through the [`SpendWriter`](crate::spend::SpendWriter) before
//! the response completes.

use crate::observe::{Attempts, RequestLine};
use crate::pipeline::admission::Ticket;
use crate::pipeline::meter::{self, Basis, ChargeBasis, Metered};
use crate::pipeline::stored;
use crate::spend::writer::Recorded;
use futures::future::Either;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use svc_budget::{Cost, Money, Usage};
use svc_front::{Api, Caller};
use svc_keys::Principal;
use svc_limits::budgets::Reservation;
use svc_routing::{InFlight, Route};
use svc_store::{ChargedRecord, SpendRecord};

/// Everything needed to settle one call, held from routing until settlement.
pub struct Settle {
    /// Shared state.
    pub state: Arc<super::Pipeline>,
    /// Who called.
    pub principal: Principal,
    /// The deployment that served it.
    pub route: Arc<Route>,
    /// The request id.
    pub request_id: String,
    /// When the gateway received the request.
    pub started: Instant,
    /// The admission ticket (released when this is dropped).
    pub ticket: Ticket,
    /// Counts the call in flight on its deployment.
    pub in_flight: InFlight,
    /// The budget holds of the call.
    pub reservation: Reservation,
    /// The client API it came in by.
    pub api: Api,
    /// Who called.
    pub caller: Caller,
    /// The attempts it took.
    pub attempts: Attempts,
    /// When a stream's first bytes went to the client (from arrival).
    pub first_byte: Option<Duration>,
    /// The stored response the call created upstream (Responses), recorded with its spend.
    pub response_id: Option<String>,
    /// Whether the upstream keeps the answer (a Responses request without `store: false`): only then is its id
    /// remembered as a stored response's home.
    pub stored: bool,
}

impl Settle {
    /// The call's answer is the response `id`: its spend record will name it for every node and, when the upstream
    /// keeps it ([`Settle::stored`]), this node remembers it as the caller's at once (a stream's id comes with its
    /// first event). An answer sent with `store: false` is kept nowhere: remembering it would only fill memory.
    pub fn stored_response(&mut self, id: &str) {
        if self.response_id.is_some() || !svc_routing::homes::is_id(id) {
            return;
        }
        if self.stored {
            let owner = stored::owner_of(&self.principal);
            let home =
                svc_routing::Home { route: self.route.clone(), alias: self.route.alias.clone(), owner, tokens: None };
            self.state.models.homes.record(id, home);
        }
        self.response_id = Some(id.to_string());
    }

    /// Records the call's spend for what the meter made of its usage ([`meter::charge`]: the provider's bill,
    /// flagged when above the reservation; the reservation for counts that cannot be right) and settles its
    /// reservation. Returns what was charged.
    pub fn finish(self, metered: &Metered, status: u16) -> Settled {
        let held = self.reservation.is_budgeted().then(|| self.reservation.held());
        let (cost, basis) = meter::charge(self.route.cost(metered.usage), metered.basis, held);
        if basis == ChargeBasis::OverReservation {
            tracing::warn!(request_id = %self.request_id, deployment = %self.route.deployment.id,
                billed = %cost.total(), reserved = %held.unwrap_or_default(),
                "the call was billed more than was reserved for it: charged as billed (a bound on its cost was too low)");
        }
        self.record(metered.usage, cost, basis, status)
    }

    /// Records a call that failed: nothing is charged.
    pub fn failed(self, status: u16) -> Settled {
        self.record(Usage::default(), Cost::default(), ChargeBasis::Billed, status)
    }

    /// Records the call's spend at exactly what was reserved (a stream cut at its completion cap), showing
    /// `usage` in the record. Without a budget (never cut), the cost of `usage`.
    pub fn finish_reserved(self, usage: Usage, status: u16) -> Settled {
        let held = self.reservation.is_budgeted().then(|| self.reservation.held());
        let (cost, basis) = meter::charge(self.route.cost(usage), Basis::Unbelievable, held);
        self.record(usage, cost, basis, status)
    }

    /// Settles the budgets, writes the request line and makes the spend record durable; done at once unless the
    /// spend writer must wait (its queue full, or no journal: [`SpendWriter::try_record`]). Only that wait is a
    /// future of its own, boxed: held inline, it (the record and the queue's send, kilobytes) would make every
    /// future that settles a call that much larger, copied whole each time it moves.
    ///
    /// [`SpendWriter::try_record`]: crate::spend::SpendWriter::try_record
    fn record(mut self, usage: Usage, cost: Cost, basis: ChargeBasis, status: u16) -> Settled {
        let charged = cost.total();
        if matches!(basis, ChargeBasis::OverReservation | ChargeBasis::Reservation) {
            self.state.metrics.flagged(&self.route.deployment.id, basis.as_str());
        }
        // Budgets first: the next request's admission must see the actual cost, not the reservation.
        let charges = self.reservation.settle(charged);
        self.state.node.served();
        self.state.rates.charge(&self.principal, &self.state.config, usage.completion_tokens);
        let key = self.principal.key();
        let tokens = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let latency = self.started.elapsed();
        let line = RequestLine {
            request_id: &self.request_id,
            api: self.api,
            principal: Some(&self.principal),
            caller: Some(&self.caller),
            alias: &self.route.alias,
            alias_label: self.state.models.configured(&self.route.alias).unwrap_or(""),
            deployment: &self.route.deployment.id,
            provider: self.route.deployment.provider_name(),
            status,
            usage,
            cost: charged,
            latency,
            first_byte: self.first_byte,
            attempts: self.attempts,
            refusal: None,
        };
        line.record(&self.state.metrics);
        let record = SpendRecord {
            record_id: super::with_id_text(uuid::Uuid::now_v7(), str::to_owned),
            node: Some(self.state.config.fleet.node.clone()),
            request_id: self.request_id.clone(),
            ts_ms: svc_store::now_ms(),
            key_id: key.map(|k| k.id.clone()),
            team_id: key.map(|k| k.team_id.clone()),
            agent_role: key.and_then(|k| k.agent_role.clone()),
            model_alias: self.route.alias.clone(),
            upstream_model: self.route.deployment.upstream_model.clone(),
            deployment: self.route.deployment.id.clone(),
            prompt_tokens: tokens(usage.prompt_tokens),
            completion_tokens: tokens(usage.completion_tokens),
            cost: charged.nanos(),
            status: i64::from(status),
            latency_ms: i64::try_from(latency.as_millis()).unwrap_or(i64::MAX),
            api: Some(self.api.as_str().to_string()),
            client: self.caller.client.clone(),
            session_id: self.caller.session.clone(),
            response_id: self.response_id.take().inspect(|id| {
                self.state.models.homes.settled(id, usage.prompt_tokens.saturating_add(usage.completion_tokens));
            }),
            cache_read_tokens: tokens(usage.cache_read_tokens),
            cache_write_tokens: tokens(usage.cache_creation_tokens),
            tool_uses: tokens(usage.tool_uses),
            input_cost: cost.input.nanos(),
            output_cost: cost.output.nanos(),
            cache_read_cost: cost.cache_read.nanos(),
            cache_write_cost: cost.cache_write.nanos(),
            tool_cost: cost.tools.nanos(),
            basis: Some(basis.as_str().to_string()),
        };
        let wait = match self.state.spend.try_record(ChargedRecord { record, charges }) {
            Recorded::Done(durable) => {
                not_persisted(durable, &self.request_id);
                return Either::Left(std::future::ready(charged));
            }
            Recorded::Wait(wait) => wait,
        };
        Either::Right(Box::pin(async move {
            // The admission ticket and the deployment's in-flight count are held until the record is queued.
            let durable = self.state.spend.wait(wait).await;
            not_persisted(durable, &self.request_id);
            charged
        }))
    }
}

/// What settling a call returns: what was charged, at once or once its spend record is durable.
pub type Settled = Either<std::future::Ready<Money>, Pin<Box<dyn Future<Output = Money> + Send>>>;

/// Logs a spend record that is not durable yet (the writer keeps it and tries again).
fn not_persisted(durable: bool, request_id: &str) {
    if !durable {
        tracing::error!(request_id, "spend record of this request is not persisted yet");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::pipeline::admission;
    use crate::pipeline::meter::Basis;
    use crate::pipeline::Pipeline;
    use svc_budget::Price;
    use svc_keys::VirtualKey;
    use svc_limits::budgets::Ask;
    use svc_store::{KeyRow, SpendFilter};

    const YAML: &str = "
model_list:
  - model_name: m
    params: { model: mock/m, input_cost_per_token: 0.000001, output_cost_per_token: 0.000002 }
gateway_settings:
  teams:
    - { team_id: t, budget_limit: 1 }
";

    struct Rig {
        pipeline: Arc<Pipeline>,
        principal: Principal,
        _dir: tempfile::TempDir,
    }

    async fn rig() -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("svc.db").display());
        let store = svc_store::Store::connect(&url).await.unwrap();
        let config = svc_config::load_str(YAML, "t.yaml", svc_config::ConfigSource::Builtin, &|_| None).unwrap();
        let row = KeyRow { id: "k1".into(), team_id: "t".into(), metadata: "{}".into(), ..Default::default() };
        store.insert_key(&row).await.unwrap();
        let state = crate::AppState::new(config, store, None).await.unwrap();
        Rig { pipeline: state.pipeline(), principal: Principal::Key(Arc::new(VirtualKey::from_row(&row))), _dir: dir }
    }

    /// A call of `r`'s one deployment admitted for 100 prompt and 1,000 completion tokens (2,100,000 nanos).
    async fn settle(r: &Rig) -> Settle {
        let p = &r.pipeline;
        let route = p.models.all().next().unwrap().clone();
        let ask = Ask {
            prompt_tokens: 100,
            completion_tokens: 1_000,
            choices: 1,
            input: Price::from_picos(1_000_000),
            output: Price::from_picos(2_000_000),
            fixed: Money::ZERO,
        };
        let grant = p.budgets.admit(&r.principal, &ask).await.unwrap();
        assert_eq!(grant.reservation.held(), Money::from_nanos(2_100_000));
        Settle {
            state: p.clone(),
            principal: r.principal.clone(),
            in_flight: InFlight::new(route.clone()),
            route,
            request_id: "req-1".into(),
            started: Instant::now(),
            ticket: admission::enter(&p.answering, 4).unwrap(),
            reservation: grant.reservation,
            api: Api::Responses,
            caller: Caller::default(),
            attempts: Attempts::default(),
            first_byte: None,
            response_id: None,
            stored: true,
        }
    }

    fn billed(prompt_tokens: u64, completion_tokens: u64) -> Metered {
        Metered {
            usage: Usage { prompt_tokens, completion_tokens, ..Usage::default() },
            basis: Basis::Billed,
            fault: None,
        }
    }

    /// The one spend record written, once the writer has flushed.
    async fn record(p: &Pipeline) -> SpendRecord {
        assert!(p.spend.flush().await);
        let mut records = p.store.query_spend(&SpendFilter::default(), 10, 0).await.unwrap();
        assert_eq!(records.len(), 1, "{records:?}");
        records.remove(0)
    }

    #[tokio::test]
    async fn a_call_is_charged_its_bill_and_its_hold_and_places_are_given_back() {
        let r = rig().await;
        let p = r.pipeline.clone();
        let free = p.answering.available_permits();
        let mut s = settle(&r).await;
        s.stored_response("resp_1");
        let route = s.route.clone();
        let places = || (route.in_flight.load(std::sync::atomic::Ordering::Relaxed), p.answering.available_permits());
        assert_eq!(places(), (1, free - 1), "the call holds a place on its deployment and in the gateway");
        // 100 × 1,000 + 50 × 2,000 nanos: the bill, not the 2,100,000 held.
        assert_eq!(s.finish(&billed(100, 50), 200).await, Money::from_nanos(200_000));
        let rec = record(&p).await;
        assert_eq!((rec.cost, rec.prompt_tokens, rec.completion_tokens), (200_000, 100, 50));
        assert_eq!(
            (rec.key_id.as_deref(), rec.team_id.as_deref(), rec.basis.as_deref()),
            (Some("k1"), Some("t"), Some("billed"))
        );
        assert_eq!((rec.response_id.as_deref(), rec.api.as_deref()), (Some("resp_1"), Some("responses")));
        let team = p.budgets.team_view("t").await.unwrap().unwrap();
        assert_eq!((team.spent, team.reserved), (0.0002, 0.0), "the hold is replaced by the cost");
        let home = p.models.homes.get("resp_1").unwrap();
        assert_eq!((home.alias.as_str(), home.tokens), ("m", Some(150)), "the response's history as billed");
        assert_eq!(places(), (0, free), "both places are given back");
    }

    #[tokio::test]
    async fn an_answer_sent_with_store_false_is_named_in_its_spend_but_not_remembered() {
        let r = rig().await;
        let p = r.pipeline.clone();
        let mut s = settle(&r).await;
        s.stored = false;
        s.stored_response("resp_2");
        s.finish(&billed(100, 50), 200).await;
        assert_eq!(record(&p).await.response_id.as_deref(), Some("resp_2"), "its spend still names it");
        assert!(p.models.homes.get("resp_2").is_none(), "kept nowhere upstream: no home is remembered");
    }

    /// The frames a passed-through Responses stream of `events` (all ready at once) sends the client, settled.
    async fn pass_stream(r: &Rig, events: Vec<(&str, serde_json::Value)>) -> Vec<String> {
        use http_body_util::BodyExt;
        use svc_providers::passthrough::RawEvent;
        let s = settle(r).await;
        let events: Vec<_> =
            events.into_iter().map(|(kind, data)| Ok(RawEvent::new(kind, &data.to_string()))).collect();
        let upstream = super::super::upstream::Source::Events(Box::pin(futures::stream::iter(events)));
        let meter = crate::pipeline::meter::Meter {
            prompt_estimate: 100,
            input_bound: 1_000_000,
            completion_cap: 1_000,
            upstream_cap: None,
            model_cap: None,
            choices: 1,
            budgeted: true,
        };
        let limits = svc_config::StreamSettings {
            total: Duration::from_secs(60),
            idle: Duration::from_secs(60),
            max_event_bytes: 1 << 20,
            max_response_bytes: 1 << 20,
        };
        let pass = svc_front::passthrough_stream::PassStream::new(Api::Responses, "m").with_cut(meter.cut_after());
        let encoder = Some(svc_front::Encoder::Pass(pass));
        let mut body =
            super::super::upstream::stream_body(s, upstream, false, meter, limits, std::time::Instant::now(), encoder);
        let mut frames = Vec::new();
        while let Some(frame) = body.frame().await {
            frames.push(String::from_utf8(frame.unwrap().into_data().unwrap().to_vec()).unwrap());
        }
        frames
    }

    #[tokio::test]
    async fn a_streams_events_sent_together_go_out_as_one_frame_the_first_alone_when_no_other_is_in_flight() {
        for others in [false, true] {
            events_sent_together(others).await;
        }
    }

    async fn events_sent_together(others: bool) {
        use serde_json::json;
        let r = rig().await;
        let p = r.pipeline.clone();
        let _other = others.then(|| admission::enter(&p.answering, 4).unwrap());
        let delta = |text: &str| json!({"type": "response.output_text.delta", "delta": text});
        let events = vec![
            ("response.created", json!({"type": "response.created", "response": {"id": "resp_9", "model": "up"}})),
            ("response.output_text.delta", delta("abcd")),
            ("response.output_text.delta", delta("efgh")),
            (
                "response.completed",
                json!({"type": "response.completed", "response": {"id": "resp_9", "model": "up",
                "usage": {"input_tokens": 3, "output_tokens": 2}}}),
            ),
        ];
        // Every event is ready at once, as when they come in one read of the upstream's connection.
        let frames = pass_stream(&r, events).await;
        let rest = if others {
            // Another request in flight: the first bytes wait for the rest of their batch, one write less.
            assert_eq!(frames.len(), 1, "every event in one frame: {frames:?}");
            &frames[0]
        } else {
            assert_eq!(frames.len(), 2, "the first event alone, then the rest together: {frames:?}");
            assert!(frames[0].starts_with("event: response.created\n") && frames[0].matches("event: ").count() == 1);
            &frames[1]
        };
        let kinds: Vec<&str> = rest.lines().filter_map(|l| l.strip_prefix("event: ")).collect();
        let mut want = vec!["response.output_text.delta", "response.output_text.delta", "response.completed"];
        if others {
            want.insert(0, "response.created");
        }
        assert_eq!(kinds, want);
        assert!(rest.contains(r#""delta":"efgh""#) && rest.contains(r#""model":"m""#), "{rest}");
        let rec = record(&p).await;
        assert_eq!((rec.prompt_tokens, rec.completion_tokens, rec.response_id.as_deref()), (3, 2, Some("resp_9")));
    }

    #[tokio::test]
    async fn a_stream_without_usage_is_charged_the_output_it_sent_whole() {
        use serde_json::json;
        let r = rig().await;
        let p = r.pipeline.clone();
        // The output only in events that give it whole (held unread: far from the cut), and no usage at the end.
        let text = "abcdefgh".repeat(4); // 8 tokens
        let item = json!({"type": "message", "id": "msg_1", "content": [{"type": "output_text", "text": text}]});
        let events = vec![
            ("response.output_text.done", json!({"type": "response.output_text.done", "text": text})),
            ("response.output_item.done", json!({"type": "response.output_item.done", "item": item})),
            ("response.completed", json!({"type": "response.completed", "response": {"id": "resp_8", "model": "up"}})),
        ];
        pass_stream(&r, events).await;
        let rec = record(&p).await;
        assert_eq!((rec.prompt_tokens, rec.completion_tokens), (100, 16), "the estimate: twice the 8 tokens sent");
        assert_eq!(rec.basis.as_deref(), Some("estimated"));
    }

    #[tokio::test]
    async fn a_bill_above_the_hold_is_charged_as_billed_and_flagged() {
        let r = rig().await;
        let p = r.pipeline.clone();
        // 100 × 1,000 + 2,000 × 2,000 nanos: more than the 2,100,000 held.
        assert_eq!(settle(&r).await.finish(&billed(100, 2_000), 200).await, Money::from_nanos(4_100_000));
        let rec = record(&p).await;
        assert_eq!((rec.cost, rec.basis.as_deref()), (4_100_000, Some("over_reservation")));
    }

    #[tokio::test]
    async fn a_failed_call_costs_nothing_and_counts_that_cannot_be_right_cost_the_hold() {
        let r = rig().await;
        let p = r.pipeline.clone();
        assert_eq!(settle(&r).await.failed(502).await, Money::ZERO);
        let rec = record(&p).await;
        assert_eq!((rec.cost, rec.status), (0, 502));
        let team = p.budgets.team_view("t").await.unwrap().unwrap();
        assert_eq!((team.spent, team.reserved), (0.0, 0.0), "nothing held after a failure");
        let cut = settle(&r).await.finish_reserved(Usage { completion_tokens: 1_000, ..Usage::default() }, 200).await;
        assert_eq!(cut, Money::from_nanos(2_100_000), "a stream cut at its cap costs what was held");
    }
}
