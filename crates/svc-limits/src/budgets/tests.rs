//! Budgets with an injected clock over a real SQLite store: periods across restarts, reset at the
//! boundary, calendar months, and the budget events.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use chrono::TimeZone;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicI64, Ordering};
use svc_events::MemorySink;
use svc_keys::VirtualKey;
use svc_store::SpendRecord;

fn at(y: i32, mo: u32, d: u32, h: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, 0, 0).single().unwrap()
}

const CONFIG: &str = "
model_list:
  - model_name: m
    params: { model: mock/m, input_cost_per_token: 0.000001, output_cost_per_token: 0.000001 }
gateway_settings:
  budget_alert_thresholds: [0.5, 0.8]
  teams:
    - { team_id: t, budget_limit: 1, models: [m], budget_duration: 1mo, budget_start: '2026-01-31T00:00:00Z' }
";

struct Rig {
    budgets: Arc<Budgets>,
    store: Store,
    now: Arc<AtomicI64>,
    events: MemorySink,
    tasks: tokio_util::task::TaskTracker,
    _dir: tempfile::TempDir,
}

impl Rig {
    /// Every announcement made: the budgets dropped and their announcer finished (the tracker waited for), so
    /// that what the sink holds is all there will be. Returns the sink and the store's folder.
    async fn quiet(self) -> (MemorySink, tempfile::TempDir) {
        let Rig { budgets, tasks, events, _dir: dir, .. } = self;
        drop(budgets);
        tasks.close();
        let waited = tokio::time::timeout(std::time::Duration::from_secs(5), tasks.wait()).await;
        assert!(waited.is_ok(), "the budget announcer never ended");
        (events, dir)
    }
}

/// An ask whose worst case is `nanos` (prompt only, one nano-unit a token).
fn nanos(n: i64) -> Ask {
    Ask {
        prompt_tokens: u64::try_from(n).unwrap(),
        completion_tokens: 0,
        choices: 1,
        input: Price::from_picos(1_000),
        output: Price::from_picos(1_000),
        fixed: Money::ZERO,
    }
}

fn m(n: i64) -> Money {
    Money::from_nanos(n)
}

async fn rig(dir: Option<tempfile::TempDir>, now: DateTime<Utc>) -> Rig {
    rig_with(CONFIG, dir, now).await
}

async fn rig_with(config: &str, dir: Option<tempfile::TempDir>, now: DateTime<Utc>) -> Rig {
    let dir = dir.unwrap_or_else(|| tempfile::tempdir().unwrap());
    let store = Store::connect(&format!("sqlite://{}", dir.path().join("b.db").display())).await.unwrap();
    let config = svc_config::load_str(config, "t.yaml", svc_config::ConfigSource::Builtin, &|_| None).unwrap();
    svc_keys::admin::sync_teams(&store, &config).await.unwrap();
    let clock_now = Arc::new(AtomicI64::new(now.timestamp_millis()));
    let c = clock_now.clone();
    let clock: Clock = Arc::new(move || DateTime::<Utc>::from_timestamp_millis(c.load(Ordering::SeqCst)).unwrap());
    let events = MemorySink::default();
    let tasks = tokio_util::task::TaskTracker::new();
    let budgets =
        Arc::new(Budgets::new(store.clone(), Arc::new(config), Arc::new(events.clone()), clock, &tasks).await.unwrap());
    Rig { budgets, store, now: clock_now, events, tasks, _dir: dir }
}

fn principal() -> Principal {
    let row = svc_store::KeyRow {
        key_alias: Some("agent-key".into()),
        agent_role: Some("coder".into()),
        ..svc_store::KeyRow { id: "k1".into(), team_id: "t".into(), ..Default::default() }
    };
    Principal::Key(Arc::new(VirtualKey { anchor: at(2026, 1, 1, 0), ..VirtualKey::from_row(&row) }))
}

async fn spend(store: &Store, when: DateTime<Utc>, cost: i64) {
    let r = SpendRecord {
        record_id: uuid::Uuid::new_v4().to_string(),
        request_id: uuid::Uuid::new_v4().to_string(),
        ts_ms: when.timestamp_millis(),
        key_id: Some("k1".into()),
        team_id: Some("t".into()),
        model_alias: "m".into(),
        upstream_model: "m".into(),
        deployment: "m".into(),
        prompt_tokens: 1,
        completion_tokens: 1,
        cost,
        status: 200,
        latency_ms: 1,
        ..Default::default()
    };
    store.insert_spend_batch(&[r]).await.unwrap();
}

#[tokio::test]
async fn restart_across_a_month_end_boundary_starts_the_new_period_at_zero() {
    // Anchor Jan 31: periods are Jan 31 → Feb 28 → Mar 31 (clamped, no drift).
    let r = rig(None, at(2026, 2, 27, 12)).await;
    spend(&r.store, at(2026, 2, 10, 0), 900_000_000).await;
    let v = r.budgets.team_view("t").await.unwrap().unwrap();
    assert_eq!(
        (v.spent, v.period_start.as_str(), v.reset_at.as_str()),
        (0.9, "2026-01-31T00:00:00Z", "2026-02-28T00:00:00Z")
    );
    assert!(r.budgets.admit(&principal(), &nanos(200_000_000)).await.is_err());
    // A gateway started after the reset (it was down across it) begins the new period at zero.
    let dir = r._dir;
    let r = rig(Some(dir), at(2026, 3, 2, 0)).await;
    let v = r.budgets.team_view("t").await.unwrap().unwrap();
    assert_eq!(
        (v.spent, v.period_start.as_str(), v.reset_at.as_str()),
        (0.0, "2026-02-28T00:00:00Z", "2026-03-31T00:00:00Z")
    );
    assert!(r.budgets.admit(&principal(), &nanos(200_000_000)).await.is_ok());
}

#[tokio::test]
async fn a_running_gateway_resets_exactly_at_the_boundary() {
    let r = rig(None, at(2026, 2, 27, 23)).await;
    let res = r.budgets.admit(&principal(), &nanos(950_000_000)).await.unwrap();
    res.reservation.settle(m(950_000_000));
    assert!(r.budgets.admit(&principal(), &nanos(100_000_000)).await.is_err());
    // One millisecond before the reset: still refused; at the reset: admitted.
    r.now.store(at(2026, 2, 28, 0).timestamp_millis() - 1, Ordering::SeqCst);
    assert!(r.budgets.admit(&principal(), &nanos(100_000_000)).await.is_err());
    r.now.store(at(2026, 2, 28, 0).timestamp_millis(), Ordering::SeqCst);
    let ok = r.budgets.admit(&principal(), &nanos(100_000_000)).await;
    assert!(ok.is_ok());
    drop(ok);
    let v = r.budgets.team_view("t").await.unwrap().unwrap();
    assert_eq!((v.spent, v.reserved), (0.0, 0.0), "a dropped reservation is released");
}

#[tokio::test]
async fn budget_events_are_announced_once_per_period() {
    let r = rig(None, at(2026, 2, 10, 0)).await;
    let p = principal();
    // 0.6 of the budget: crosses 0.5.
    // (The pipeline writes the spend record as it settles; here the test does.)
    r.budgets.admit(&p, &nanos(600_000_000)).await.unwrap().reservation.settle(m(600_000_000));
    spend(&r.store, at(2026, 2, 10, 0), 600_000_000).await;
    // 0.85: crosses 0.8.
    r.budgets.admit(&p, &nanos(250_000_000)).await.unwrap().reservation.settle(m(250_000_000));
    spend(&r.store, at(2026, 2, 10, 0), 250_000_000).await;
    // Refused twice: budget.exceeded once.
    let refusal = r.budgets.admit(&p, &nanos(200_000_000)).await.err().unwrap();
    assert!(matches!(refusal, crate::Refused::Budget { .. }), "{refusal:?}");
    assert!(r.budgets.admit(&p, &nanos(200_000_000)).await.is_err());
    let mut kinds = Vec::new();
    for _ in 0..100 {
        kinds = r.events.events().iter().map(|e| e.kind.as_str()).collect::<Vec<_>>();
        if kinds.len() >= 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (sink, dir) = r.quiet().await;
    let events = sink.events();
    kinds.sort_unstable();
    assert_eq!(kinds, vec!["budget.alert", "budget.alert", "budget.exceeded"], "{events:?}");
    let exceeded = events.iter().find(|e| e.kind == svc_events::EventKind::BudgetExceeded).unwrap();
    assert_eq!(exceeded.agent, "coder");
    assert_eq!(exceeded.data["team_id"], "t");
    assert_eq!(exceeded.data["key_alias"], "agent-key");
    assert_eq!(exceeded.data["limit"], 1.0);
    assert_eq!(exceeded.data["period_end"], "2026-02-28T00:00:00Z");
    let alert =
        events.iter().find(|e| e.kind == svc_events::EventKind::BudgetAlert && e.data["threshold"] == 0.8).unwrap();
    assert_eq!(alert.data["spent"], 0.85);
    // A restart in the same period does not announce them again.
    let r2 = rig(Some(dir), at(2026, 2, 11, 0)).await;
    assert!(r2.budgets.admit(&p, &nanos(200_000_000)).await.is_err());
    let (sink, _) = r2.quiet().await;
    assert!(sink.events().is_empty(), "{:?}", sink.events());
}

/// Alerts another node recorded but has not stored yet (it is between the two steps) hold this node's
/// `budget.exceeded` back until they are stored, so no receiver gets `exceeded` before them; once they are, it
/// goes out (before the wait's bound, which is for a node that stopped in between).
#[tokio::test]
async fn exceeded_waits_for_the_alerts_another_node_recorded_to_be_stored() {
    let r = rig(None, at(2026, 2, 10, 0)).await;
    let period = at(2026, 1, 31, 0).timestamp_millis();
    for notice in ["alert:500", "alert:800"] {
        assert!(r.store.notice_once("team:t", period, notice).await.unwrap());
    }
    let held = r.budgets.admit(&principal(), &nanos(900_000_000)).await.unwrap();
    assert!(r.budgets.admit(&principal(), &nanos(200_000_000)).await.is_err());
    let refused = std::time::Instant::now();
    for _ in 0..10 {
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        assert!(r.events.events().is_empty(), "{:?}", r.events.events());
    }
    r.store.notice_emitted("team:t", period, "alert:500").await.unwrap();
    r.store.notice_emitted("team:t", period, "alert:800").await.unwrap();
    let deadline = refused + super::announce::ALERTS_STORED_WITHIN;
    while r.events.events().is_empty() {
        assert!(std::time::Instant::now() < deadline, "exceeded went out only at the wait's bound");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let kinds: Vec<&str> = r.events.events().iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["budget.exceeded"]);
    assert_eq!(r.store.notices_unemitted("team:t", period).await.unwrap(), Vec::<String>::new());
    drop(held);
}

/// An agent's worst case (prompt plus 128,000 completion tokens at 1,000 nano-units each) on a team budget
/// of 1.00 that has 0.05 left.
fn agent_ask() -> Ask {
    Ask {
        prompt_tokens: 100,
        completion_tokens: 128_000,
        choices: 1,
        input: Price::from_picos(1_000_000),
        output: Price::from_picos(1_000_000),
        fixed: Money::ZERO,
    }
}

#[tokio::test]
async fn the_last_part_of_a_budget_is_usable_with_a_capped_completion() {
    let r = rig(None, at(2026, 2, 10, 0)).await;
    let p = principal();
    r.budgets.admit(&p, &nanos(950_000_000)).await.unwrap().reservation.settle(m(950_000_000));
    // 0.128 does not fit in the 0.05 left: admitted with what 0.05 pays for after the prompt.
    let g = r.budgets.admit(&p, &agent_ask()).await.unwrap();
    assert!(g.capped);
    assert_eq!(g.completion_tokens, 49_900);
    assert!(g.reservation.held() <= m(50_000_000));
    let v = r.budgets.team_view("t").await.unwrap().unwrap();
    assert!(v.spent + v.reserved <= 1.0, "{v:?}");
    // While it holds the rest, nothing useful fits: refused, and the refusal says what is left.
    let refusal = r.budgets.admit(&p, &agent_ask()).await.err().unwrap();
    let details = refusal.budget_details().cloned().unwrap_or_default();
    assert_eq!(details["requested"], 0.1281);
    assert!(details["remaining"].as_f64().unwrap() < 0.001, "{details:?}");
    drop(g);
    // Less than `budget_min_output_tokens` (256 by default) left after the prompt: refused.
    r.budgets.admit(&p, &nanos(49_800_000)).await.unwrap().reservation.settle(m(49_800_000));
    assert!(r.budgets.admit(&p, &agent_ask()).await.is_err());
}

#[tokio::test]
async fn strict_admission_refuses_what_does_not_fit_whole() {
    let strict = CONFIG.replace("gateway_settings:\n", "gateway_settings:\n  budget_admission: refuse\n");
    let r = rig_with(&strict, None, at(2026, 2, 10, 0)).await;
    let p = principal();
    r.budgets.admit(&p, &nanos(950_000_000)).await.unwrap().reservation.settle(m(950_000_000));
    assert!(r.budgets.admit(&p, &agent_ask()).await.is_err());
    let fits = Ask { completion_tokens: 1_000, ..agent_ask() };
    let g = r.budgets.admit(&p, &fits).await.unwrap();
    assert!(!g.capped && g.completion_tokens == 1_000);
}

/// A settlement charges what the meter decided: a provider's bill above the reservation (its bound was too
/// low; the meter flags it) is charged whole, and the reservation is released.
#[tokio::test]
async fn a_settlement_charges_the_bill_even_above_its_reservation() {
    let r = rig(None, at(2026, 2, 10, 0)).await;
    let g = r.budgets.admit(&principal(), &nanos(100)).await.unwrap();
    g.reservation.settle(m(300));
    let v = r.budgets.team_view("t").await.unwrap().unwrap();
    assert_eq!((v.spent, v.reserved), (0.0000003, 0.0));
}

#[tokio::test]
async fn a_request_too_dear_for_a_budget_that_holds_little_announces_no_alert() {
    let r = rig(None, at(2026, 2, 10, 0)).await;
    let p = principal();
    // A worst case that does not fit is refused while the budget holds nothing: "exceeded" alone ...
    assert!(r.budgets.admit(&p, &nanos(1_500_000_000)).await.is_err());
    // ... then spend crosses 0.5 and 0.8: no alert comes after "exceeded".
    r.budgets.admit(&p, &nanos(900_000_000)).await.unwrap().reservation.settle(m(900_000_000));
    let (sink, dir) = r.quiet().await;
    let events = sink.events();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["budget.exceeded"], "{events:?}");
    // Also after a restart in the same period.
    let r2 = rig(Some(dir), at(2026, 2, 11, 0)).await;
    spend(&r2.store, at(2026, 2, 10, 0), 900_000_000).await;
    r2.budgets.admit(&p, &nanos(10_000_000)).await.unwrap().reservation.settle(m(10_000_000));
    let (sink, _) = r2.quiet().await;
    assert!(sink.events().is_empty(), "{:?}", sink.events());
}

/// An alert this node raises after another node recorded "exceeded" is left out, and recorded as done, so that
/// no node announcing "exceeded" waits for it to be stored.
#[tokio::test]
async fn an_alert_after_another_nodes_exceeded_is_left_out_and_recorded_done() {
    let r = rig(None, at(2026, 2, 10, 0)).await;
    let period = at(2026, 1, 31, 0).timestamp_millis();
    // This node's account is loaded before the other node records "exceeded" (an account loaded after it raises
    // no alerts at all).
    r.budgets.admit(&principal(), &nanos(1_000)).await.unwrap().reservation.settle(m(1_000));
    assert!(r.store.notice_once("team:t", period, "exceeded").await.unwrap());
    r.budgets.admit(&principal(), &nanos(600_000_000)).await.unwrap().reservation.settle(m(600_000_000));
    let store = r.store.clone();
    let (sink, _dir) = r.quiet().await;
    assert!(sink.events().is_empty(), "{:?}", sink.events());
    let mut done = store.notices("team:t", period).await.unwrap();
    done.sort();
    assert_eq!(done, ["alert:500", "exceeded"]);
    // Only the other node's own "exceeded" (never stored here) is left unstored.
    assert_eq!(store.notices_unemitted("team:t", period).await.unwrap(), ["exceeded"]);
}

#[tokio::test]
async fn a_burst_announces_each_alert_before_exceeded_once() {
    // With a currency label, which every announcement carries.
    let config = CONFIG.replace("gateway_settings:\n", "gateway_settings:\n  currency: USD\n");
    let r = rig_with(&config, None, at(2026, 2, 10, 0)).await;
    let p = principal();
    // Ten requests of 0.1 hold the whole budget before any settles; the eleventh is refused.
    let mut held = Vec::new();
    for _ in 0..10 {
        held.push(r.budgets.admit(&p, &nanos(100_000_000)).await.unwrap());
    }
    for _ in 0..5 {
        assert_eq!(
            r.budgets.admit(&p, &nanos(100_000_000)).await.err().map(|e| e.budget_details().is_some()),
            Some(true)
        );
    }
    for g in held {
        g.reservation.settle(m(90_000_000));
    }
    // Every announcement made (the announcer finished): exactly these, in this order.
    let (sink, _dir) = r.quiet().await;
    let events = sink.events();
    assert!(events.iter().all(|e| e.data["currency"] == "USD"), "{events:?}");
    let seen: Vec<(String, Value)> =
        events.iter().map(|e| (e.kind.as_str().to_string(), e.data["threshold"].clone())).collect();
    assert_eq!(
        seen,
        [
            ("budget.alert".to_string(), json!(0.5)),
            ("budget.alert".to_string(), json!(0.8)),
            ("budget.exceeded".to_string(), Value::Null)
        ],
        "{events:?}"
    );
}

/// A key's budget changed while the gateway runs (`/key/update`, `svc keys update`) holds from its next request:
/// raised, what it already spent leaves room; lowered below that spend, it refuses. (The account made at the
/// key's first request kept its first limit until a restart.)
#[tokio::test]
async fn a_keys_changed_budget_holds_from_its_next_request() {
    let r = rig(None, at(2026, 2, 10, 0)).await;
    let with_budget = |nanos: i64| {
        let Principal::Key(k) = principal() else { unreachable!() };
        Principal::Key(Arc::new(VirtualKey { max_budget: Some(m(nanos)), ..(*k).clone() }))
    };
    // 0.1 of a 0.1 key budget spent: the next request does not fit.
    r.budgets.admit(&with_budget(100_000_000), &nanos(100_000_000)).await.unwrap().reservation.settle(m(100_000_000));
    assert!(r.budgets.admit(&with_budget(100_000_000), &nanos(50_000_000)).await.is_err());
    // Raised to 0.2: it fits.
    let grant = r.budgets.admit(&with_budget(200_000_000), &nanos(50_000_000)).await;
    assert!(grant.is_ok(), "{:?}", grant.err());
    grant.unwrap().reservation.settle(m(50_000_000));
    // Lowered to 0.12, below the 0.15 spent: refused, and the refusal reports the new limit.
    let refused = r.budgets.admit(&with_budget(120_000_000), &nanos(1_000)).await.err();
    let details = refused.as_ref().and_then(|e| e.budget_details()).cloned().unwrap_or_default();
    assert_eq!(details["limit"], json!(0.12), "{refused:?}");
}
