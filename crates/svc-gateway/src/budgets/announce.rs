//! The announcer of budget notices: one task, so notices are announced in the order they happened, each once
//! per budget and period (the store decides who is first, so also once per fleet and across restarts).

use super::{budget_fields, rfc3339, Scope, Who};
use crate::events::{EventSink, GatewayEvent};
use serde_json::{json, Value};
use std::sync::Arc;
use svc_budget::{Money, Notice, NoticeKind};
use svc_events::EventKind;
use svc_store::Store;

pub(super) type NoticeQueue = tokio::sync::mpsc::UnboundedReceiver<(Scope, Notice, Who)>;

/// The announcer task: announces queued notices one at a time, in order, until the queue closes.
pub(super) async fn announcer(store: Store, events: Arc<dyn EventSink>, mut queue: NoticeQueue, thresholds: Vec<u32>) {
    while let Some((scope, notice, who)) = queue.recv().await {
        announce(&store, events.as_ref(), &thresholds, scope, notice, who).await;
    }
}

/// Announces a notice once per period: the store decides who is first, then the event is emitted. An alert
/// of a period whose "exceeded" was already announced is dropped (folded into it), and announcing
/// "exceeded" records every alert threshold as announced, so none comes after it (also after a restart).
async fn announce(store: &Store, events: &dyn EventSink, thresholds: &[u32], scope: Scope, notice: Notice, who: Who) {
    let (kind, event, period, spent, limit, threshold) = match &notice {
        Notice::Alert { threshold_permille, spent, limit, period } => {
            (notice.kind(), EventKind::BudgetAlert, *period, *spent, *limit, Some(*threshold_permille))
        }
        Notice::Exceeded { spent, limit, period, .. } => {
            (notice.kind(), EventKind::BudgetExceeded, *period, *spent, *limit, None)
        }
    };
    let label = scope.label();
    let period_ms = period.start.timestamp_millis();
    if matches!(kind, NoticeKind::Alert(_)) {
        match store.notices(&label, period_ms).await {
            Ok(done) if done.iter().any(|n| NoticeKind::parse(n) == Some(NoticeKind::Exceeded)) => return,
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "cannot read the budget notices; announcing anyway"),
        }
    }
    match store.notice_once(&label, period_ms, &kind.label()).await {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => tracing::warn!(error = %e, "cannot record a budget notice; announcing anyway"),
    }
    if kind == NoticeKind::Exceeded {
        for t in thresholds {
            if let Err(e) = store.notice_once(&label, period_ms, &NoticeKind::Alert(*t).label()).await {
                tracing::warn!(error = %e, "cannot record a budget alert as folded into `budget.exceeded`");
            }
        }
    }
    let mut data = budget_fields(&scope, &who);
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
    events.emit(GatewayEvent { kind: event, agent: who.agent().to_string(), data: Value::Object(data) });
}
