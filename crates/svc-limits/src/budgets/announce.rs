//! The announcer of budget notices: one task, so notices are announced in the order they happened, each once
//! per budget and period (the store decides who is first, so also once per fleet and across restarts).

use super::refusal::budget_fields;
use super::{rfc3339, Scope, Who};
use serde_json::{json, Value};
use std::sync::Arc;
use svc_budget::{Money, Notice, NoticeKind};
use svc_config::{Config, GatewaySettings};
use svc_events::EventKind;
use svc_events::{EventSink, GatewayEvent};
use svc_store::Store;

/// Unbounded, yet bounded by what can be queued: an account raises each notice once per period (its thresholds and
/// "exceeded"), so the queue holds at most (thresholds + 1) notices per budget per period, and admission never
/// waits for the announcer (which waits for the store).
pub(super) type NoticeQueue = tokio::sync::mpsc::UnboundedReceiver<(Scope, Notice, Who)>;

/// The announcer task: announces queued notices one at a time, in order, until the queue closes.
pub(super) async fn announcer(
    store: Store,
    events: Arc<dyn EventSink>,
    mut queue: NoticeQueue,
    config: Arc<arc_swap::ArcSwap<Config>>,
) {
    while let Some((scope, notice, who)) = queue.recv().await {
        let config = config.load_full();
        announce(&store, events.as_ref(), &config.gateway, scope, notice, who).await;
    }
}

/// Announces a notice once per period: the store decides who is first, then the event is emitted. Before
/// "exceeded", every alert threshold that what the budget holds has crossed and that was not announced yet is
/// announced (a burst refused before its spend is settled crosses them all at once): each `budget.alert` comes
/// before `budget.exceeded`, none after it (the accounts raise none then), across the fleet and restarts (each
/// is recorded in the store before it is emitted; `exceeded` is stored only after the alerts other nodes
/// recorded before it, and an alert recorded after it is left out).
async fn announce(
    store: &Store,
    events: &dyn EventSink,
    settings: &GatewaySettings,
    scope: Scope,
    notice: Notice,
    who: Who,
) {
    let (thresholds, currency) = (&settings.budget_alert_thresholds_permille, settings.currency.as_deref());
    let label = scope.label();
    let Notice::Exceeded { spent, limit, period, requested, remaining } = notice else {
        if !first(store, &label, &notice).await {
            return;
        }
        // An alert after "exceeded" (announced by another node, whose budget held less then) is noise. Read
        // after this alert is recorded: a node that records "exceeded" later waits for this alert to be stored.
        let kind = notice.kind().label();
        let period_ms = notice.period().start.timestamp_millis();
        match store.notices(&label, period_ms).await {
            Ok(done) if done.iter().any(|n| NoticeKind::parse(n) == Some(NoticeKind::Exceeded)) => {
                if let Err(e) = store.notice_emitted(&label, period_ms, &kind).await {
                    tracing::warn!(error = %e, "cannot record that a budget notice was left out");
                }
            }
            Ok(_) => emit(store, events, &label, &scope, &who, &notice, currency).await,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the budget notices; announcing anyway");
                emit(store, events, &label, &scope, &who, &notice, currency).await;
            }
        }
        return;
    };
    // What the budget holds (spent and reserved; in a fleet, also what other nodes hold): every threshold it
    // has crossed is announced first. A request too dear for a budget that holds little crosses none.
    let committed = limit.minus(remaining.unwrap_or(Money::ZERO));
    let crossed = |t: &u32| *t < 1000 && limit.permille(*t) <= committed;
    let mut below: Vec<u32> = thresholds.iter().copied().filter(crossed).collect();
    below.sort_unstable();
    below.dedup();
    for threshold_permille in below {
        let alert = Notice::Alert { threshold_permille, spent, limit, period };
        if first(store, &label, &alert).await {
            emit(store, events, &label, &scope, &who, &alert, currency).await;
        }
    }
    let exceeded = Notice::Exceeded { spent, limit, period, requested, remaining };
    if first(store, &label, &exceeded).await {
        // Alerts another node recorded before now: their events are stored before this one's, so delivered
        // first (one recorded after now sees "exceeded" and is left out).
        alerts_stored(store, &label, period.start.timestamp_millis()).await;
        emit(store, events, &label, &scope, &who, &exceeded, currency).await;
    }
}

/// How long a node announcing `exceeded` waits for the alerts another node recorded to be stored (that node may
/// have stopped between recording one and storing it: then `exceeded` goes out after this wait).
pub(super) const ALERTS_STORED_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Waits until every alert of the budget's period recorded in the store has its event stored, or
/// [`ALERTS_STORED_WITHIN`] has passed.
async fn alerts_stored(store: &Store, label: &str, period_ms: i64) {
    let deadline = tokio::time::Instant::now() + ALERTS_STORED_WITHIN;
    loop {
        match store.notices_unemitted(label, period_ms).await {
            Ok(pending) if !pending.iter().any(|n| NoticeKind::parse(n).is_some_and(|k| k != NoticeKind::Exceeded)) => {
                return;
            }
            Ok(_) if tokio::time::Instant::now() < deadline => {}
            Ok(pending) => {
                tracing::warn!(
                    budget = label,
                    ?pending,
                    "alerts another node recorded are not stored yet; announcing exceeded"
                );
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the budget notices; announcing exceeded");
                return;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Whether this is the first of its kind in its budget and period (recorded now); on a store failure, yes (a
/// notice announced twice beats one never announced).
async fn first(store: &Store, label: &str, notice: &Notice) -> bool {
    match store.notice_once(label, notice.period().start.timestamp_millis(), &notice.kind().label()).await {
        Ok(first) => first,
        Err(e) => {
            tracing::warn!(error = %e, "cannot record a budget notice; announcing anyway");
            true
        }
    }
}

/// Emits a notice's event and, once it is stored, says so in the store (see [`alerts_stored`]).
async fn emit(
    store: &Store,
    events: &dyn EventSink,
    label: &str,
    scope: &Scope,
    who: &Who,
    notice: &Notice,
    currency: Option<&str>,
) {
    events.emit_stored(event(scope, who, notice, currency)).await;
    if let Err(e) = store.notice_emitted(label, notice.period().start.timestamp_millis(), &notice.kind().label()).await
    {
        tracing::warn!(error = %e, "cannot record that a budget notice was stored");
    }
}

fn event(scope: &Scope, who: &Who, notice: &Notice, currency: Option<&str>) -> GatewayEvent {
    let (event, period, spent, limit, threshold) = match notice {
        Notice::Alert { threshold_permille, spent, limit, period } => {
            (EventKind::BudgetAlert, period, spent, limit, Some(*threshold_permille))
        }
        Notice::Exceeded { spent, limit, period, .. } => (EventKind::BudgetExceeded, period, spent, limit, None),
    };
    let mut data = budget_fields(scope, who, currency);
    data.insert("agent_role".into(), json!(who.agent_role()));
    data.insert("spent".into(), json!(spent.as_f64()));
    data.insert("limit".into(), json!(limit.as_f64()));
    data.insert("period_start".into(), json!(rfc3339(period.start)));
    data.insert("period_end".into(), json!(rfc3339(period.end)));
    data.insert("threshold".into(), json!(threshold.map(|t| t as f64 / 1000.0)));
    if let Notice::Exceeded { requested, remaining, .. } = notice {
        data.insert("requested".into(), json!(requested.map(Money::as_f64)));
        data.insert("remaining".into(), json!(remaining.map(Money::as_f64)));
    }
    GatewayEvent { kind: event, agent: who.agent().to_string(), data: Value::Object(data) }
}
