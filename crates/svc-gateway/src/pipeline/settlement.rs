//! Settlement: after a call, its cost is computed from the usage the upstream reported, the budgets settle,
//! and the spend record is made durable through the [`SpendWriter`](crate::spend::SpendWriter) before
//! the response completes.

use crate::front::{Api, Caller};
use crate::observe::{Attempts, RequestLine};
use crate::pipeline::admission::Ticket;
use crate::pipeline::meter::{self, Basis, ChargeBasis, Metered};
use crate::pipeline::stored;
use std::sync::Arc;
use std::time::{Duration, Instant};
use svc_budget::{Cost, Money, Usage};
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
}

impl Settle {
    /// The call created the stored response `id` upstream: this node remembers it as the caller's at once (a
    /// stream's id comes with its first event), and its spend record will name it for every node.
    pub fn stored_response(&mut self, id: &str) {
        if self.response_id.is_some() || !svc_routing::homes::is_id(id) {
            return;
        }
        let owner = stored::owner_of(&self.principal);
        let home =
            svc_routing::Home { route: self.route.clone(), alias: self.route.alias.clone(), owner, tokens: None };
        self.state.models.homes.record(id, home);
        self.response_id = Some(id.to_string());
    }

    /// Records the call's spend for what the meter made of its usage ([`meter::charge`]: the provider's bill,
    /// flagged when above the reservation; the reservation for counts that cannot be right) and settles its
    /// reservation. Returns what was charged.
    pub async fn finish(self, metered: &Metered, status: u16) -> Money {
        let held = self.reservation.is_budgeted().then(|| self.reservation.held());
        let (cost, basis) = meter::charge(self.route.cost(metered.usage), metered.basis, held);
        if basis == ChargeBasis::OverReservation {
            tracing::warn!(request_id = %self.request_id, deployment = %self.route.deployment.id,
                billed = %cost.total(), reserved = %held.unwrap_or_default(),
                "the call was billed more than was reserved for it: charged as billed (a bound on its cost was too low)");
        }
        self.record(metered.usage, cost, basis, status).await
    }

    /// Records a call that failed: nothing is charged.
    pub async fn failed(self, status: u16) -> Money {
        self.record(Usage::default(), Cost::default(), ChargeBasis::Billed, status).await
    }

    /// Records the call's spend at exactly what was reserved (a stream cut at its completion cap), showing
    /// `usage` in the record. Without a budget (never cut), the cost of `usage`.
    pub async fn finish_reserved(self, usage: Usage, status: u16) -> Money {
        let held = self.reservation.is_budgeted().then(|| self.reservation.held());
        let (cost, basis) = meter::charge(self.route.cost(usage), Basis::Unbelievable, held);
        self.record(usage, cost, basis, status).await
    }

    /// Boxed: held inline, recording (the spend record, the request line and the journal's append, about
    /// 2.5 KiB) would make every future that settles a call that much larger, and each is copied whole when
    /// it moves.
    fn record(
        self,
        usage: Usage,
        cost: Cost,
        basis: ChargeBasis,
        status: u16,
    ) -> std::pin::Pin<Box<impl std::future::Future<Output = Money> + Send>> {
        Box::pin(self.record_now(usage, cost, basis, status))
    }

    async fn record_now(mut self, usage: Usage, cost: Cost, basis: ChargeBasis, status: u16) -> Money {
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
            record_id: uuid::Uuid::now_v7().to_string(),
            node: Some(self.state.config.fleet.node.clone()),
            request_id: self.request_id.clone(),
            ts_ms: chrono::Utc::now().timestamp_millis(),
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
        if !self.state.spend.record(ChargedRecord { record, charges }).await {
            tracing::error!(request_id = %self.request_id, "spend record of this request is not persisted yet");
        }
        drop(self.ticket);
        drop(self.in_flight);
        charged
    }
}
