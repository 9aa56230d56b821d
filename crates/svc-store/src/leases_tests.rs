//! Budget leases and fleet rate buckets against the real PostgreSQL (a fresh database per test).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::tests::postgres;

const P: i64 = 1_000;
const LEASE_MS: i64 = 60_000;

fn ask<'a>(scope: &'a str, node: &'a str, least: i64, want: i64) -> LeaseAsk<'a> {
    LeaseAsk { scope, period: P, limit: 1_000, node, least, want, share: 1, lease_ms: LEASE_MS }
}

fn spend(id: &str, node: &str, cost: i64, scope: &str) -> ChargedRecord {
    ChargedRecord {
        record: SpendRecord {
            record_id: id.into(),
            node: Some(node.into()),
            request_id: id.into(),
            ts_ms: 5,
            team_id: Some("t".into()),
            model_alias: "m".into(),
            upstream_model: "u".into(),
            deployment: "d".into(),
            prompt_tokens: 1,
            completion_tokens: 1,
            cost,
            status: 200,
            latency_ms: 1,
            ..Default::default()
        },
        charges: vec![Charge { scope: scope.into(), period: P, limit: 1_000 }],
    }
}

async fn period(s: &Store, scope: &str) -> PeriodRow {
    s.budget_period(scope, P).await.unwrap().unwrap()
}

#[tokio::test]
async fn grants_never_pass_the_limit_and_spend_is_charged_once() {
    let db = postgres().await;
    let s = &db.store;
    let a = s.lease_grant(&ask("team:t", "a", 1, 600)).await.unwrap();
    assert_eq!((a.granted, a.limit, a.lease, a.others_spent), (600, 1_000, 600, 0));
    let b = s.lease_grant(&ask("team:t", "b", 1, 600)).await.unwrap();
    assert_eq!((b.granted, b.lease), (400, 400), "only what is left");
    let c = s.lease_grant(&ask("team:t", "c", 10, 50)).await.unwrap();
    assert_eq!(c.granted, 0, "less than the least useful amount is nothing");

    // Spend is charged to the writer's lease, once even when the batch is written again.
    let batch = vec![spend("r1", "a", 100, "team:t"), spend("r2", "a", 20, "team:t")];
    assert_eq!(s.write_charged_spend(&batch).await.unwrap(), 2);
    assert_eq!(s.write_charged_spend(&batch).await.unwrap(), 0);
    assert_eq!(
        period(s, "team:t").await,
        PeriodRow { limit: 1_000, granted: 1_000, settled: 0, held_back: 0, leased_spent: 120 }
    );
    assert_eq!(s.lease_grant(&ask("team:t", "b", 0, 0)).await.unwrap().others_spent, 120);

    // Room given back is grantable again; an ended lease settles its spend and frees the rest.
    assert_eq!(s.lease_give_back("team:t", P, "a", 200).await.unwrap(), 200);
    assert_eq!(s.lease_grant(&ask("team:t", "c", 10, 500)).await.unwrap().granted, 200);
    s.lease_end("team:t", P, "a").await.unwrap();
    let p = period(s, "team:t").await;
    assert_eq!((p.granted, p.settled, p.spent()), (600, 120, 120));
    assert_eq!(s.lease_grant(&ask("team:t", "c", 1, 1_000)).await.unwrap().granted, 280);
    // A record of an ended lease (written late) is settled in the period.
    assert_eq!(s.write_charged_spend(&[spend("r3", "a", 5, "team:t")]).await.unwrap(), 1);
    assert_eq!(period(s, "team:t").await.settled, 125);
    assert_eq!(s.lease_return_all("b").await.unwrap(), 1);
    assert_eq!(s.lease_return_all("c").await.unwrap(), 1);
    let p = period(s, "team:t").await;
    assert_eq!((p.granted, p.settled), (0, 125));
}

#[tokio::test]
async fn a_dead_nodes_lease_is_reclaimed_with_a_holdback_until_it_comes_back() {
    let db = postgres().await;
    let s = &db.store;
    // Node a's lease expires at once (it never renews).
    let mut dead = ask("key:k", "a", 1, 400);
    dead.lease_ms = -1;
    assert_eq!(s.lease_grant(&dead).await.unwrap().granted, 400);
    assert_eq!(s.lease_grant(&ask("key:k", "b", 1, 400)).await.unwrap().granted, 400);
    s.write_charged_spend(&[spend("r1", "a", 100, "key:k")]).await.unwrap();
    assert_eq!(s.lease_renew("b", LEASE_MS, &[]).await.unwrap(), 1);
    assert_eq!(s.lease_reclaim().await.unwrap(), 1, "only the expired lease");
    // 100 spent; its unspent 300 held back (its journal may hold that much), nothing back in the period yet.
    let p = period(s, "key:k").await;
    assert_eq!((p.granted, p.settled, p.held_back, p.spent()), (400, 400, 300, 100));
    assert_eq!(s.lease_grant(&ask("key:k", "b", 1, 1_000)).await.unwrap().granted, 200);
    // Node a comes back and writes its journal: 30 it had answered is taken from the holdback...
    s.write_charged_spend(&[spend("r2", "a", 30, "key:k")]).await.unwrap();
    let p = period(s, "key:k").await;
    assert_eq!((p.settled, p.held_back, p.spent()), (400, 270, 130));
    // ...and what is left of it is released.
    assert_eq!(s.lease_release_holdbacks("a").await.unwrap(), 1);
    let p = period(s, "key:k").await;
    assert_eq!((p.granted, p.settled, p.held_back), (600, 130, 0));
    assert_eq!(s.lease_grant(&ask("key:k", "c", 1, 1_000)).await.unwrap().granted, 270);
}

fn exposed(scope: &str, exposure: i64, seq: i64) -> Exposure {
    Exposure { scope: scope.into(), period: P, exposure, seq }
}

async fn lease_exposure(s: &Store, scope: &str, node: &str) -> Option<i64> {
    sqlx::query_scalar("SELECT exposure FROM budget_leases WHERE scope = $1 AND period_start_ms = $2 AND node = $3")
        .bind(scope)
        .bind(P)
        .bind(node)
        .fetch_one(s.pool())
        .await
        .unwrap()
}

/// Issue 28, item 8: a reclaimed lease holds back only what its node said it may have answered and not written
/// (at most its unspent part); the rest returns at once. Its journal, written when it comes back, is charged to
/// the holdback, and what is left of that is released.
#[tokio::test]
async fn a_dead_nodes_lease_holds_back_only_its_reported_exposure() {
    let db = postgres().await;
    let s = &db.store;
    let mut dead = ask("key:k", "a", 1, 400);
    dead.lease_ms = -1;
    assert_eq!(s.lease_grant(&dead).await.unwrap().granted, 400);
    assert_eq!(s.lease_grant(&ask("key:k", "b", 1, 400)).await.unwrap().granted, 400);
    // Node a writes 100 and, in the same transaction, says it may have answered 50 more it has not written.
    let batch = [spend("r1", "a", 100, "key:k")];
    assert_eq!(s.write_charged_spend_exposed(&batch, "a", &[exposed("key:k", 50, 5)]).await.unwrap(), 1);
    assert_eq!(lease_exposure(s, "key:k", "a").await, Some(50));
    // An older report (a renewal sent before the batch, answered after it) changes nothing; nor does a report of
    // a lease the node does not hold.
    assert_eq!(s.lease_expose("a", &[exposed("key:k", 300, 4), exposed("team:x", 9, 9)]).await.unwrap(), 0);
    assert_eq!(lease_exposure(s, "key:k", "a").await, Some(50));
    // A renewal carries reports too (b's lease: its own).
    assert_eq!(s.lease_renew("b", LEASE_MS, &[exposed("key:k", 30, 1)]).await.unwrap(), 1);
    assert_eq!(lease_exposure(s, "key:k", "b").await, Some(30));
    assert_eq!(s.lease_reclaim().await.unwrap(), 1, "only the expired lease");
    // 100 spent, 50 held back, the other 250 of its unspent 300 back in the period.
    let p = period(s, "key:k").await;
    assert_eq!((p.granted, p.settled, p.held_back, p.spent()), (400, 150, 50, 100));
    assert_eq!(s.lease_grant(&ask("key:k", "b", 1, 1_000)).await.unwrap().granted, 450);
    // Node a comes back: its journal's 30 is taken from the holdback, the rest of which is then released.
    assert_eq!(
        s.write_charged_spend(&[spend("r1", "a", 100, "key:k"), spend("r2", "a", 30, "key:k")]).await.unwrap(),
        1
    );
    let p = period(s, "key:k").await;
    assert_eq!((p.settled, p.held_back, p.spent()), (150, 20, 130));
    assert_eq!(s.lease_release_holdbacks("a").await.unwrap(), 1);
    let p = period(s, "key:k").await;
    assert_eq!((p.granted, p.settled, p.held_back, p.spent()), (850, 130, 0, 130));
    assert_eq!(s.lease_grant(&ask("key:k", "c", 1, 1_000)).await.unwrap().granted, 20);
}

/// A report above the lease's unspent part holds back no more than that part; a lease whose node never
/// reported (a node of an earlier version) holds back its whole unspent part, as before reports existed.
#[tokio::test]
async fn a_holdback_never_passes_the_unspent_lease() {
    let db = postgres().await;
    let s = &db.store;
    for (node, exposure) in [("a", Some(500)), ("b", None), ("c", Some(0))] {
        let mut dead = ask("team:t", node, 1, 200);
        dead.lease_ms = -1;
        assert_eq!(s.lease_grant(&dead).await.unwrap().granted, 200);
        s.write_charged_spend(&[spend(&format!("r-{node}"), node, 50, "team:t")]).await.unwrap();
        if let Some(e) = exposure {
            assert_eq!(s.lease_expose(node, &[exposed("team:t", e, 1)]).await.unwrap(), 1);
        }
    }
    // A grant carries a report: the lease it creates takes it at once.
    let mut dead = ask("team:t", "d", 1, 100);
    dead.lease_ms = -1;
    assert_eq!(s.lease_grant_exposed(&dead, &[exposed("team:t", 20, 1)]).await.unwrap().granted, 100);
    assert_eq!(lease_exposure(s, "team:t", "d").await, Some(20));
    assert_eq!(s.lease_reclaim().await.unwrap(), 4);
    let held: Vec<(String, i64)> =
        sqlx::query_as("SELECT node, amount FROM budget_holdbacks WHERE scope = 'team:t' ORDER BY node")
            .fetch_all(s.pool())
            .await
            .unwrap();
    let want = [("a", 150), ("b", 150), ("d", 20)].map(|(n, a)| (n.to_string(), a)).to_vec();
    assert_eq!(held, want, "c said it had nothing unwritten");
    let p = period(s, "team:t").await;
    assert_eq!((p.granted, p.settled, p.held_back, p.spent()), (0, 470, 320, 150));
}

#[tokio::test]
async fn the_stores_limit_wins_over_the_nodes() {
    let db = postgres().await;
    let s = &db.store;
    let team = crate::TeamRow {
        team_id: "t".into(),
        budget_limit: Some(300),
        models: vec![],
        budget_duration: "30d".into(),
        anchor_ms: 0,
        rpm_limit: None,
        tpm_limit: None,
        in_config: true,
        ..Default::default()
    };
    s.sync_teams(&[(team, false)]).await.unwrap();
    let g = s.lease_grant(&ask("team:t", "a", 1, 1_000)).await.unwrap();
    assert_eq!((g.granted, g.limit), (300, 300));
}

#[tokio::test]
async fn rate_buckets_are_shared_and_refill() {
    let db = postgres().await;
    let s = &db.store;
    assert_eq!(s.rate_take("rpm:key:k", 10, 10, 1, 6).await.unwrap(), 6);
    assert_eq!(s.rate_take("rpm:key:k", 10, 10, 1, 6).await.unwrap(), 4);
    assert_eq!(s.rate_take("rpm:key:k", 10, 10, 1, 6).await.unwrap(), 0);
    s.rate_give_back("rpm:key:k", 10, 3).await.unwrap();
    assert_eq!(s.rate_take("rpm:key:k", 10, 10, 3, 6).await.unwrap(), 3);
    // 6,000 a minute: 100 a second.
    assert_eq!(s.rate_take("rpm:key:fast", 100, 6_000, 1, 100).await.unwrap(), 100);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut got = 0;
    while got < 10 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        got += s.rate_take("rpm:key:fast", 100, 6_000, 1, 100).await.unwrap();
    }
    assert!(got >= 10, "the bucket refills");
}

#[tokio::test]
async fn the_fleet_announces_each_of_its_health_transitions_once() {
    let db = postgres().await;
    let s = &db.store;
    for name in ["a", "b", "c"] {
        let row = crate::NodeRow {
            node: name.into(),
            fleet: "f".into(),
            address: format!("http://{name}:4000"),
            version: "1".into(),
            started_ms: 1,
            heartbeat_ms: 1,
            state: crate::NodeState::Online,
            state_since_ms: 1,
            requests_served: 0,
            in_flight: 0,
            teams: "{}".into(),
            config_digest: String::new(),
            host: "h".into(),
            instance: name.into(),
        };
        s.register_node(&row, 0).await.unwrap();
    }
    let judged =
        |node: &'static str, state: &'static str| async move { s.health_judged("f", node, "d1", state).await.unwrap() };
    assert!(judged("a", "degraded").await, "the first to judge it degraded announces");
    assert!(!judged("b", "degraded").await, "the fleet is degraded already");
    assert!(judged("b", "unavailable").await, "worse: announced");
    assert!(!judged("c", "unavailable").await);
    assert!(!judged("a", "unavailable").await);
    // Recoveries are silent; the fleet is healthy again only when every online node is.
    assert!(!judged("a", "healthy").await);
    assert!(!judged("b", "healthy").await);
    assert!(!judged("a", "degraded").await, "c still judges it unavailable");
    assert!(!judged("c", "healthy").await);
    assert!(!judged("a", "healthy").await);
    assert!(judged("c", "degraded").await, "a new transition of the fleet");
    // Another deployment is judged apart.
    assert!(s.health_judged("f", "a", "d2", "unavailable").await.unwrap());
}

#[tokio::test]
async fn sqlite_refuses_fleet_operations() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::connect(&format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display())).await.unwrap();
    assert!(matches!(s.lease_grant(&ask("team:t", "a", 1, 1)).await, Err(StoreError::FleetOnly)));
}

/// The fleet's spend writer keeps every column of a record: the client API, client, session and stored
/// response (it once left out the first three) read back as written.
#[tokio::test]
async fn the_fleet_writer_keeps_every_column_of_a_record() {
    let db = postgres().await;
    let s = &db.store;
    let mut full = spend("r1", "a", 10, "team:t");
    full.record.api = Some("responses".into());
    full.record.client = Some("codex_exec".into());
    full.record.session_id = Some("sess-1".into());
    full.record.response_id = Some("resp_1".into());
    let bare = spend("r2", "a", 10, "team:t");
    assert_eq!(s.write_charged_spend(&[full.clone(), bare.clone()]).await.unwrap(), 2);
    let mut back = s.query_spend(&crate::SpendFilter::default(), 10, 0).await.unwrap();
    back.sort_by(|a, b| a.record_id.cmp(&b.record_id));
    assert_eq!(back, vec![full.record, bare.record]);
    assert_eq!(s.response_owner("resp_1").await.unwrap().map(|o| o.deployment), Some("d".into()));
}
