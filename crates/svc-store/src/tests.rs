//! The same store tests against SQLite (a temp file) and the real PostgreSQL of the machine
//! (`SVC_TEST_POSTGRES_URL`, default `postgres://postgres@127.0.0.1:5432/test`; a fresh database per test).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

/// A store on a throw-away database; drop the guard to delete it.
pub struct TestDb {
    pub store: Store,
    _dir: Option<tempfile::TempDir>,
}

async fn sqlite() -> TestDb {
    let (url, dir) = sqlite_url();
    TestDb { store: Store::connect(&url).await.unwrap(), _dir: Some(dir) }
}

fn sqlite_url() -> (String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    (format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display()), dir)
}

pub(crate) async fn postgres() -> TestDb {
    TestDb { store: Store::connect(&postgres_url().await).await.unwrap(), _dir: None }
}

/// A fresh, empty PostgreSQL database.
async fn postgres_url() -> String {
    sqlx::any::install_default_drivers();
    svc_testkit::postgres::fresh_database().await
}

fn key(id: &str, alias: Option<&str>) -> KeyRow {
    KeyRow {
        id: id.into(),
        key_hash: format!("hash-{id}"),
        key_hint: "sk-svc-…abcd".into(),
        key_alias: alias.map(String::from),
        team_id: "executor".into(),
        agent_role: Some("coder".into()),
        models: vec!["m1".into()],
        events: vec!["task.*".into()],
        max_budget: Some(5),
        budget_duration: Some("1d".into()),
        rpm_limit: None,
        tpm_limit: Some(1000),
        metadata: "{}".into(),
        expires_ms: None,
        revoked_ms: None,
        created_ms: 1,
        updated_ms: 1,
        anchor_ms: 1,
    }
}

async fn keys_round_trip(s: &Store) {
    let g0 = s.keys_generation().await.unwrap();
    s.insert_key(&key("k1", Some("alpha"))).await.unwrap();
    assert!(matches!(s.insert_key(&key("k2", Some("alpha"))).await, Err(StoreError::Conflict(_))));
    s.insert_key(&key("k2", None)).await.unwrap();
    assert!(s.keys_generation().await.unwrap() > g0);
    assert_eq!(s.find_key("alpha").await.unwrap().unwrap().id, "k1");
    assert_eq!(s.find_key_by_hash("hash-k2").await.unwrap().unwrap().id, "k2");
    assert!(s.find_key("hash-k2").await.unwrap().is_none(), "a hash is not an id or alias");
    let mut k = key("k1", Some("alpha"));
    k.revoked_ms = Some(9);
    k.events = vec!["agent.*".into(), "swarm.complete".into()];
    assert!(s.update_key(&k).await.unwrap());
    assert_eq!(s.find_key("k1").await.unwrap().unwrap(), k);
    assert_eq!(s.list_keys().await.unwrap().len(), 2);
    assert_eq!(s.delete_keys(&["k2".into(), "nope".into()]).await.unwrap(), vec!["k2".to_string()]);
    assert_eq!(s.list_keys().await.unwrap().len(), 1);
}

async fn teams_keep_anchor(s: &Store) {
    let t = TeamRow {
        team_id: "executor".into(),
        budget_limit: Some(50),
        models: vec!["a".into()],
        budget_duration: "30d".into(),
        anchor_ms: 0,
        rpm_limit: None,
        tpm_limit: None,
        in_config: true,
        ..Default::default()
    };
    s.sync_teams(&[(t.clone(), false)]).await.unwrap();
    let first = s.list_teams().await.unwrap()[0].anchor_ms;
    let mut t2 = t.clone();
    t2.budget_limit = Some(70);
    s.sync_teams(&[(t2, false)]).await.unwrap();
    let now = s.list_teams().await.unwrap();
    assert_eq!((now[0].anchor_ms, now[0].budget_limit), (first, Some(70)));
    s.sync_teams(&[]).await.unwrap();
    assert!(!s.list_teams().await.unwrap()[0].in_config);
}

/// API teams: made, refused over a running name, changed, deleted with their keys; a file's sync leaves them be,
/// and every change moves the teams generation on.
async fn api_teams(s: &Store) {
    let file =
        TeamRow { team_id: "filed".into(), budget_duration: "30d".into(), in_config: true, ..Default::default() };
    s.sync_teams(&[(file.clone(), false)]).await.unwrap();
    let g0 = s.teams_generation().await.unwrap();
    let api = TeamRow {
        team_id: "research".into(),
        budget_limit: Some(5),
        budget_duration: "1d".into(),
        api: true,
        metadata: "{}".into(),
        created_ms: 1_000,
        ..Default::default()
    };
    s.insert_team(&api).await.unwrap();
    assert!(s.teams_generation().await.unwrap() > g0);
    let taken = |r: Result<(), StoreError>| matches!(r, Err(StoreError::Conflict(_)));
    assert!(taken(s.insert_team(&api).await), "a running API team's name is taken");
    assert!(taken(s.insert_team(&TeamRow { team_id: "filed".into(), ..api.clone() }).await), "so is a file team's");
    assert!(s.update_team(&TeamRow { budget_limit: Some(9), ..api.clone() }).await.unwrap());
    assert!(!s.update_team(&TeamRow { team_id: "filed".into(), ..api.clone() }).await.unwrap(), "not a file team");
    s.sync_teams(&[(file, false)]).await.unwrap();
    let rows = s.list_teams().await.unwrap();
    let research = rows.iter().find(|t| t.team_id == "research").unwrap();
    assert!(research.api && research.running());
    assert_eq!((research.budget_limit, research.anchor_ms), (Some(9), 1_000), "the anchor stays");
    s.insert_key(&KeyRow { team_id: "research".into(), ..key("rk", None) }).await.unwrap();
    let keys = s.keys_generation().await.unwrap();
    let (teams, gone) = s.delete_teams(&["research".into(), "filed".into()]).await.unwrap();
    assert_eq!((teams, gone), (vec!["research".to_string()], vec!["rk".to_string()]), "a file team is not deleted");
    assert!(s.keys_generation().await.unwrap() > keys);
    assert!(s.list_teams().await.unwrap().iter().all(|t| t.team_id != "research"));
    // The name is free again, with a new anchor.
    s.insert_team(&TeamRow { created_ms: 2_000, ..api }).await.unwrap();
    let again = s.list_teams().await.unwrap();
    assert_eq!(again.iter().find(|t| t.team_id == "research").map(|t| t.anchor_ms), Some(2_000));
}

/// Spend record number `i` of `team`: 10 + 5 tokens, cost 100.
fn rec(i: i64, team: &str) -> SpendRecord {
    SpendRecord {
        record_id: format!("{team}-{i}"),
        node: Some("n1".into()),
        request_id: format!("r{i}"),
        ts_ms: i,
        key_id: Some("k".into()),
        team_id: Some(team.into()),
        model_alias: "m".into(),
        upstream_model: "u".into(),
        deployment: "m".into(),
        prompt_tokens: 10,
        completion_tokens: 5,
        cost: 100,
        status: 200,
        latency_ms: 3,
        ..Default::default()
    }
}

async fn spend_and_outbox(s: &Store) {
    let batch: Vec<_> = (0..10).map(|i| rec(i, if i < 7 { "a" } else { "b" })).collect();
    s.insert_spend_batch(&batch).await.unwrap();
    let f = SpendFilter { team_id: Some("a".into()), start_ms: Some(2), ..Default::default() };
    assert_eq!(s.sum_spend(&f).await.unwrap(), 500);
    let page = s.query_spend(&SpendFilter::default(), 3, 1).await.unwrap();
    assert_eq!(page.iter().map(|r| r.ts_ms).collect::<Vec<_>>(), vec![8, 7, 6]);
    let totals = s.spend_totals(SpendGroup::Team, &SpendFilter::default()).await.unwrap();
    assert_eq!((totals[0].group.as_str(), totals[0].cost, totals[0].requests), ("a", 700, 7));
    // A batch larger than one statement goes in one transaction of several statements.
    let big: Vec<_> = (100..700).map(|i| rec(i, "c")).collect();
    s.insert_spend_batch(&big).await.unwrap();
    assert_eq!(s.sum_spend(&SpendFilter { team_id: Some("c".into()), ..Default::default() }).await.unwrap(), 60_000);

    let event = |n: &'static str| NewEvent {
        kind: "test",
        envelope: n,
        title: Some("t"),
        priority: None,
        origin: Some("key:k-1"),
        deliveries: vec![("ntfy".to_string(), format!("d-{n}-1")), ("webhook:0".to_string(), format!("d-{n}-2"))],
    };
    let a = s.outbox_enqueue(&event("1")).await.unwrap();
    let b = s.outbox_enqueue(&event("2")).await.unwrap();
    let p = s.outbox_pending("ntfy", 10).await.unwrap();
    assert_eq!(p.iter().map(|i| i.id).collect::<Vec<_>>(), vec![a, b]);
    assert_eq!((p[0].title.as_deref(), p[0].delivery_id.as_str()), (Some("t"), "d-1-1"));
    assert_eq!(p[0].origin.as_deref(), Some("key:k-1"));
    s.outbox_attempt_failed(a, "ntfy", "down", 1234).await.unwrap();
    let again = s.outbox_pending("ntfy", 10).await.unwrap();
    assert_eq!((again[0].attempts, again[0].next_attempt_ms, &again[0].delivery_id), (1, 1234, &p[0].delivery_id));
    s.outbox_delivered(a, "ntfy").await.unwrap();
    s.outbox_dead(b, "webhook:0", "410").await.unwrap();
    assert_eq!(s.outbox_pending("ntfy", 10).await.unwrap().len(), 1);
    let st = s.outbox_stats(None).await.unwrap();
    assert_eq!(st, OutboxStats { pending: 2, delivered: 1, failed: 1 });
    // A renamed destination takes its pending rows along; delivered and dead rows keep the old name.
    let c = s.outbox_enqueue(&event("3")).await.unwrap();
    assert_eq!(s.outbox_rename_destination("webhook:0", "webhook:new").await.unwrap(), 2);
    let moved = s.outbox_pending("webhook:new", 10).await.unwrap();
    assert_eq!(
        moved.iter().map(|i| (i.id, i.delivery_id.as_str())).collect::<Vec<_>>(),
        vec![(a, "d-1-2"), (c, "d-3-2")]
    );
    assert!(s.outbox_pending("webhook:0", 10).await.unwrap().is_empty());
    assert_eq!(s.outbox_stats(Some("webhook:0")).await.unwrap(), OutboxStats { pending: 0, delivered: 0, failed: 1 });
    assert_eq!(s.outbox_rename_destination("webhook:0", "webhook:new").await.unwrap(), 0);
}

/// A group-committed batch: ids come back in emission order, each delivery row belongs to its own event (even
/// when events have different destinations), and a run of deliveries is marked in one statement.
async fn outbox_batches(s: &Store) {
    let bodies: Vec<String> = (0..300).map(|i| format!("env-{i}")).collect();
    let events: Vec<NewEvent<'_>> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| NewEvent {
            kind: "test",
            envelope: b,
            title: None,
            priority: None,
            origin: None,
            // Every third event skips the webhook, as a filtered kind would.
            deliveries: std::iter::once(("push".to_string(), format!("p-{i}")))
                .chain((i % 3 != 0).then(|| ("webhook:0".to_string(), format!("w-{i}"))))
                .collect(),
        })
        .collect();
    let ids = s.outbox_enqueue_many(&events).await.unwrap();
    assert_eq!(ids.len(), 300);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids in emission order");
    let push = s.outbox_pending("push", 1000).await.unwrap();
    assert_eq!(push.iter().map(|p| p.id).collect::<Vec<_>>(), ids);
    for (i, p) in push.iter().enumerate() {
        assert_eq!((p.envelope.as_str(), p.delivery_id.as_str()), (bodies[i].as_str(), format!("p-{i}").as_str()));
    }
    let hook = s.outbox_pending("webhook:0", 1000).await.unwrap();
    assert_eq!(hook.len(), 200);
    assert!(hook.iter().all(|h| h.delivery_id == format!("w-{}", &h.envelope[4..])));
    s.outbox_delivered_many(&ids[..250], "push").await.unwrap();
    let left = s.outbox_pending("push", 1000).await.unwrap();
    assert_eq!(left.iter().map(|p| p.id).collect::<Vec<_>>(), ids[250..].to_vec());
    assert_eq!(s.outbox_pending("webhook:0", 1000).await.unwrap().len(), 200, "other destinations untouched");
}

async fn meta(s: &Store) {
    assert_eq!(s.meta_get("x").await.unwrap(), None);
    assert_eq!(s.meta_get_or_insert("x", "1").await.unwrap(), "1");
    assert_eq!(s.meta_get_or_insert("x", "2").await.unwrap(), "1");
    // Budget notices: recorded once, unstored until marked, per scope and period.
    assert!(s.notice_once("team:t", 1, "alert:800").await.unwrap());
    assert!(!s.notice_once("team:t", 1, "alert:800").await.unwrap());
    assert!(s.notice_once("team:t", 1, "exceeded").await.unwrap());
    assert!(s.notice_once("team:t", 2, "alert:800").await.unwrap());
    s.notice_emitted("team:t", 1, "exceeded").await.unwrap();
    assert_eq!(s.notices_unemitted("team:t", 1).await.unwrap(), ["alert:800"]);
    s.notice_emitted("team:t", 1, "alert:800").await.unwrap();
    assert!(s.notices_unemitted("team:t", 1).await.unwrap().is_empty());
    assert_eq!(s.notices_unemitted("team:t", 2).await.unwrap(), ["alert:800"]);
    let mut done = s.notices("team:t", 1).await.unwrap();
    done.sort();
    assert_eq!(done, ["alert:800", "exceeded"]);
}

/// A stored response's owner is read back from the spend record that names it: the first such record when an
/// upstream gave one id twice; an id no record names is unknown; the master key's records own with no key.
async fn response_owners(s: &Store) {
    let mine = SpendRecord { response_id: Some("resp_1".into()), deployment: "d1".into(), ..rec(1, "a") };
    let later = SpendRecord { response_id: Some("resp_1".into()), key_id: Some("other".into()), ..rec(2, "b") };
    let master = SpendRecord { response_id: Some("resp_2".into()), key_id: None, team_id: None, ..rec(3, "a") };
    s.insert_spend_batch(&[later, mine, master, rec(4, "a")]).await.unwrap();
    let owner = s.response_owner("resp_1").await.unwrap().unwrap();
    assert_eq!(
        owner,
        crate::ResponseOwner {
            key_id: Some("k".into()),
            team_id: Some("a".into()),
            model_alias: "m".into(),
            deployment: "d1".into(),
            tokens: 15,
        }
    );
    let owner = s.response_owner("resp_2").await.unwrap().unwrap();
    assert_eq!((owner.key_id, owner.team_id), (None, None));
    assert_eq!(s.response_owner("resp_unknown").await.unwrap(), None);
    let back = s.query_spend(&SpendFilter::default(), 10, 0).await.unwrap();
    assert_eq!(back.iter().filter(|r| r.response_id.as_deref() == Some("resp_1")).count(), 2);
}

/// A record's parts come back as written, whether its batch is written lean (no cache or tool parts: those
/// columns left to their default 0) or whole, and in a batch that mixes both.
async fn spend_parts_round_trip_lean_and_whole(s: &Store) {
    let lean = |i| SpendRecord { input_cost: 60, output_cost: 40, basis: Some("billed".into()), ..rec(i, "p") };
    let whole = |i| SpendRecord {
        cache_read_tokens: 7,
        cache_write_tokens: 3,
        tool_uses: 1,
        cache_read_cost: 5,
        cache_write_cost: 6,
        tool_cost: 9,
        input_cost: 40,
        output_cost: 40,
        ..rec(i, "p")
    };
    s.insert_spend_batch(&[lean(1), lean(2)]).await.unwrap();
    s.insert_spend_batch(&[whole(3)]).await.unwrap();
    s.insert_spend_batch(&[lean(4), whole(5)]).await.unwrap();
    let mut back =
        s.query_spend(&SpendFilter { team_id: Some("p".into()), ..Default::default() }, 10, 0).await.unwrap();
    back.sort_by_key(|r| r.ts_ms);
    let want = [lean(1), lean(2), whole(3), lean(4), whole(5)];
    assert_eq!(back, want);
}

macro_rules! both_backends {
    ($($name:ident),*) => {
        mod on_sqlite { $( #[tokio::test] async fn $name() { let db = super::sqlite().await; super::$name(&db.store).await; } )* }
        mod on_postgres { $( #[tokio::test] async fn $name() { let db = super::postgres().await; super::$name(&db.store).await; } )* }
    };
}

/// Sums cannot overflow: many records at the largest cost a record may hold add up exactly, records out of
/// range are clamped on the way in, and the database itself refuses an impossible row.
async fn spend_sums_are_exact_and_rows_bounded(s: &Store) {
    let huge: Vec<_> = (0..10_000).map(|i| SpendRecord { cost: MAX_RECORD_COST, ..rec(i, "rich") }).collect();
    s.insert_spend_batch(&huge).await.unwrap();
    let f = SpendFilter { team_id: Some("rich".into()), ..Default::default() };
    assert_eq!(s.sum_spend(&f).await.unwrap(), 10_000 * i128::from(MAX_RECORD_COST), "beyond i64: no overflow");
    let totals = s.spend_totals(SpendGroup::Team, &f).await.unwrap();
    assert_eq!((totals[0].requests, totals[0].cost), (10_000, i64::MAX), "shown clamped");
    let absurd =
        SpendRecord { prompt_tokens: -1, completion_tokens: i64::MAX, cost: i64::MAX, latency_ms: -5, ..rec(1, "odd") };
    s.insert_spend_batch(&[absurd]).await.unwrap();
    let got = s.query_spend(&SpendFilter { team_id: Some("odd".into()), ..Default::default() }, 1, 0).await.unwrap();
    assert_eq!(
        (got[0].prompt_tokens, got[0].completion_tokens, got[0].cost, got[0].latency_ms),
        (0, MAX_RECORD_TOKENS, MAX_RECORD_COST, 0)
    );
    let raw = sqlx::query(
        "INSERT INTO spend_log (request_id, ts_ms, model_alias, upstream_model, deployment, prompt_tokens, \
         completion_tokens, cost, status, latency_ms) VALUES ('x', 1, 'm', 'u', 'd', 1, 1, -5, 200, 1)",
    )
    .execute(s.pool())
    .await;
    assert!(raw.is_err(), "a negative cost is refused by the database");
}

/// A store written before the bounds existed, holding an absurd row (cost 2^63-1, -1 tokens), keeps working
/// after the upgrade: the migration clamps the row, and the team's sums succeed.
async fn old_absurd_rows_are_clamped_by_the_migration(url: String, backend: Backend) {
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&url).await.unwrap();
    let mut old = match backend {
        Backend::Sqlite => sqlx::migrate!("./migrations/sqlite"),
        Backend::Postgres => sqlx::migrate!("./migrations/postgres"),
    };
    old.migrations = std::borrow::Cow::Owned(old.migrations.iter().filter(|m| m.version < 3).cloned().collect());
    old.run(&pool).await.unwrap();
    for (i, cost) in [(1, i64::MAX), (2, i64::MAX), (3, 100)] {
        sqlx::query(
            "INSERT INTO spend_log (request_id, ts_ms, team_id, model_alias, upstream_model, deployment, prompt_tokens, \
             completion_tokens, cost, status, latency_ms) VALUES ($1, $2, 't', 'm', 'u', 'd', -1, $3, $3, 200, 1)",
        )
        .bind(format!("r{i}"))
        .bind(i)
        .bind(cost)
        .execute(&pool)
        .await
        .unwrap();
    }
    pool.close().await;
    let store = Store::connect(&url).await.unwrap();
    let f = SpendFilter { team_id: Some("t".into()), ..Default::default() };
    assert_eq!(store.sum_spend(&f).await.unwrap(), 2 * i128::from(MAX_RECORD_COST) + 100);
    let rows = store.query_spend(&f, 10, 0).await.unwrap();
    assert!(rows.iter().all(|r| r.prompt_tokens == 0 && r.completion_tokens <= MAX_RECORD_TOKENS), "{rows:?}");
}

#[tokio::test]
async fn old_absurd_rows_are_clamped_on_sqlite() {
    let (url, _dir) = sqlite_url();
    old_absurd_rows_are_clamped_by_the_migration(url, Backend::Sqlite).await;
}

#[tokio::test]
async fn old_absurd_rows_are_clamped_on_postgres() {
    old_absurd_rows_are_clamped_by_the_migration(postgres_url().await, Backend::Postgres).await;
}

/// The session index holds only records of a session (migration 0010) and still serves a query for one session.
#[tokio::test]
async fn one_sessions_records_are_found_through_the_partial_index_on_sqlite() {
    let db = sqlite().await;
    let s = &db.store;
    let batch: Vec<_> = (0..6)
        .map(|i| SpendRecord { session_id: (i % 3 == 0).then(|| format!("sess-{}", i % 2)), ..rec(i, "a") })
        .collect();
    s.insert_spend_batch(&batch).await.unwrap();
    let f = SpendFilter { session_id: Some("sess-0".into()), start_ms: Some(0), ..Default::default() };
    let got = s.query_spend(&f, 10, 0).await.unwrap();
    assert_eq!(got.iter().map(|r| r.ts_ms).collect::<Vec<_>>(), vec![0]);
    let plan = sqlx::query("EXPLAIN QUERY PLAN SELECT * FROM spend_log WHERE session_id = $1 AND ts_ms >= $2")
        .bind("sess-1")
        .bind(0i64)
        .fetch_all(s.pool())
        .await
        .unwrap();
    let plan: Vec<String> = plan.iter().map(|row| sqlx::Row::try_get(row, "detail").unwrap()).collect();
    assert!(plan.iter().any(|d| d.contains("INDEX spend_log_session_ts (session_id=?")), "{plan:?}");
    let sql: String = sqlx::query_scalar("SELECT sql FROM sqlite_master WHERE name = 'spend_log_session_ts'")
        .fetch_one(s.pool())
        .await
        .unwrap();
    assert!(sql.ends_with("WHERE session_id IS NOT NULL"), "{sql}");
}

/// One node at a time holds an outbox destination; a lapsed claim is taken over; a released one is free.
async fn outbox_claims(s: &Store) {
    assert!(s.outbox_claim("push", "n1", 1_000, 0).await.unwrap());
    assert!(!s.outbox_claim("push", "n2", 2_000, 500).await.unwrap(), "n1 holds it until 1000");
    assert!(s.outbox_claim("push", "n1", 3_000, 900).await.unwrap(), "the holder renews");
    assert!(s.outbox_claim("push", "n2", 9_000, 3_001).await.unwrap(), "lapsed: taken over");
    assert!(!s.outbox_claim("push", "n1", 9_500, 3_002).await.unwrap());
    s.outbox_release("push", "n2").await.unwrap();
    assert!(s.outbox_claim("push", "n1", 9_500, 3_003).await.unwrap(), "released: free");
    assert!(s.outbox_claim("webhook:x", "n2", 9_500, 3_003).await.unwrap(), "claims are per destination");
}

fn node_row(name: &str, at: i64, host: &str, instance: &str) -> NodeRow {
    NodeRow {
        node: name.into(),
        fleet: "f".into(),
        address: format!("http://{name}:4000"),
        version: "1".into(),
        started_ms: at,
        heartbeat_ms: at,
        state: NodeState::Online,
        state_since_ms: at,
        requests_served: 0,
        in_flight: 0,
        teams: "{}".into(),
        config_digest: String::new(),
        host: host.into(),
        instance: instance.into(),
    }
}

/// Nodes register, beat, are declared offline once per outage (whoever asks), and stop cleanly.
async fn fleet_nodes(s: &Store) {
    let node = |name: &str, at: i64| node_row(name, at, "h", &format!("{name}@{at}"));
    let registered = |r: Registration| match r {
        Registration::Registered(before) => before,
        Registration::Refused(row) => panic!("refused by {row:?}"),
    };
    assert!(registered(s.register_node(&node("a", 1_000), 0).await.unwrap()).is_none());
    assert!(registered(s.register_node(&node("b", 1_000), 0).await.unwrap()).is_none());
    assert_eq!(
        s.heartbeat(
            "a",
            "a@1000",
            &Report { now_ms: 5_000, requests_served: 10, in_flight: 2, teams: "{}", config_digest: "" }
        )
        .await
        .unwrap(),
        Beat::Sent
    );
    // b went silent: of two monitors asking at once, one gets it.
    let (x, y) = tokio::join!(s.declare_offline("f", 4_000, 6_000), s.declare_offline("f", 4_000, 6_000));
    let mut gone: Vec<String> = x.unwrap().into_iter().chain(y.unwrap()).map(|n| n.node).collect();
    gone.sort();
    assert_eq!(gone, ["b"]);
    assert!(s.declare_offline("f", 4_500, 6_100).await.unwrap().is_empty(), "announced once");
    // b comes back by itself (a heartbeat) or by a restart; a clean stop is not an outage.
    assert_eq!(
        s.heartbeat(
            "b",
            "b@1000",
            &Report { now_ms: 7_000, requests_served: 0, in_flight: 0, teams: "{}", config_digest: "" }
        )
        .await
        .unwrap(),
        Beat::Back
    );
    let before = registered(s.register_node(&node("b", 8_000), 0).await.unwrap()).unwrap();
    assert_eq!((before.state, before.instance.as_str()), (NodeState::Online, "b@1000"), "same host and address");
    s.stop_node("a", "a@1000", 9_000).await.unwrap();
    assert!(s.declare_offline("f", 100_000, 100_000).await.unwrap().iter().all(|n| n.node != "a"));
    let nodes = s.list_nodes("f").await.unwrap();
    let states: Vec<(&str, NodeState)> = nodes.iter().map(|n| (n.node.as_str(), n.state)).collect();
    assert_eq!(states, [("a", NodeState::Stopped), ("b", NodeState::Offline)]);
    assert_eq!((nodes[0].requests_served, nodes[0].in_flight), (10, 0));
}

/// A node name belongs to one run at a time: a live row from another host or address refuses a registration
/// (of two racing, exactly one wins); the same host and address take it over (a restart after a crash); an
/// aged, stopped or offline row is taken over from anywhere; the displaced run's heartbeats and stop write
/// nothing.
async fn node_names_are_unique(s: &Store) {
    let on = |host: &str, port: u16, at: i64, instance: &str| {
        let mut row = node_row("a", at, host, instance);
        row.address = format!("http://10.0.0.1:{port}");
        row
    };
    let refused = |r: Registration| match r {
        Registration::Refused(row) => row,
        Registration::Registered(_) => panic!("a live twin was overwritten"),
    };
    let first = on("h1", 4000, 1_000, "r1");
    assert_eq!(s.register_node(&first, 0).await.unwrap(), Registration::Registered(None));
    // Live (heartbeat at 1 000, cutoff 500): another port, or the same address on another host, is refused.
    for twin in [on("h1", 4001, 1_200, "r2"), on("h2", 4000, 1_200, "r2")] {
        let live = refused(s.register_node(&twin, 500).await.unwrap());
        assert_eq!(
            (live.address.as_str(), live.host.as_str(), live.heartbeat_ms),
            (first.address.as_str(), "h1", 1_000)
        );
    }
    // The same host and address: the node itself, started again after a crash.
    let again = on("h1", 4000, 1_300, "r3");
    assert!(
        matches!(s.register_node(&again, 500).await.unwrap(), Registration::Registered(Some(b)) if b.instance == "r1")
    );
    // The old run's heartbeats and stop leave the row alone; the new run's are recorded.
    assert_eq!(
        s.heartbeat(
            "a",
            "r1",
            &Report { now_ms: 1_400, requests_served: 5, in_flight: 5, teams: "{}", config_digest: "" }
        )
        .await
        .unwrap(),
        Beat::Displaced
    );
    s.stop_node("a", "r1", 1_450).await.unwrap();
    assert_eq!(
        s.heartbeat(
            "a",
            "r3",
            &Report { now_ms: 1_500, requests_served: 1, in_flight: 0, teams: "{}", config_digest: "" }
        )
        .await
        .unwrap(),
        Beat::Sent
    );
    let row = s.node("a").await.unwrap().unwrap();
    assert_eq!(
        (row.state, row.heartbeat_ms, row.requests_served, row.instance.as_str()),
        (NodeState::Online, 1_500, 1, "r3")
    );
    // Its heartbeat older than the cutoff: another host takes the name over.
    let other = on("h2", 4000, 9_000, "r4");
    assert!(
        matches!(s.register_node(&other, 2_000).await.unwrap(), Registration::Registered(Some(b)) if b.instance == "r3")
    );
    // Stopped cleanly, or declared offline: taken over at once, whatever the heartbeat's age.
    s.stop_node("a", "r4", 9_100).await.unwrap();
    assert!(matches!(s.register_node(&on("h1", 4000, 9_200, "r5"), 0).await.unwrap(), Registration::Registered(_)));
    assert_eq!(s.declare_offline("f", 9_300, 9_300).await.unwrap().len(), 1);
    assert!(matches!(s.register_node(&on("h2", 4000, 9_400, "r6"), 0).await.unwrap(), Registration::Registered(_)));
    // Two runs of a new name registering at once (on two connections): exactly one gets the row.
    for round in 0..10 {
        let name = format!("race{round}");
        let (mut x, mut y) = (on("hx", 4000, 20_000, "x"), on("hy", 4000, 20_000, "y"));
        (x.node, y.node) = (name.clone(), name.clone());
        let (rx, ry) = tokio::join!(s.register_node(&x, 10_000), s.register_node(&y, 10_000));
        let (rx, ry) = (rx.unwrap(), ry.unwrap());
        let won = |r: &Registration| matches!(r, Registration::Registered(_));
        assert!(won(&rx) != won(&ry), "exactly one wins: {rx:?} {ry:?}");
        let row = s.node(&name).await.unwrap().unwrap();
        let winner = if won(&rx) { "x" } else { "y" };
        assert_eq!(row.instance, winner);
        let loser = if won(&rx) { ry } else { rx };
        assert_eq!(loser, Registration::Refused(row), "the refusal names the winner");
    }
}

both_backends!(
    spend_parts_round_trip_lean_and_whole,
    keys_round_trip,
    teams_keep_anchor,
    api_teams,
    spend_and_outbox,
    outbox_batches,
    meta,
    spend_sums_are_exact_and_rows_bounded,
    outbox_claims,
    fleet_nodes,
    response_owners,
    node_names_are_unique
);

/// Steady load through `write` (a steady writer; its argument numbers the batch's rows), as the checkpointer
/// sees it: commits keep landing while a passive checkpoint runs, so it never copies the whole WAL back and SQLite
/// never starts the WAL over by itself. Here a reader's snapshot holds the passive pass back the same way. Once
/// the restart is due, the writer's next batch must start the WAL over: the file stops growing (without the
/// restart it grows by half again). Returns the store.
async fn wal_starts_over_with<F, Fut>(dir: &std::path::Path, write: F) -> Store
where
    F: Fn(Store, i64) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    use sqlx::Connection as _;
    let url = format!("sqlite://{}", dir.join("t.db").display());
    let store = Store::connect(&url).await.unwrap();
    let wal = dir.join("t.db-wal");
    let size = || std::fs::metadata(&wal).unwrap().len();
    for b in 0..50 {
        write(store.clone(), b * 20).await;
    }
    let mut reader = sqlx::AnyConnection::connect(&url).await.unwrap();
    let mut snapshot = reader.begin().await.unwrap();
    let _: (i64,) = sqlx::query_as("SELECT COUNT(*) FROM sqlite_master").fetch_one(&mut *snapshot).await.unwrap();
    for b in 50..100 {
        write(store.clone(), b * 20).await;
    }
    // The passive pass copies only what the reader's snapshot allows, and finds the WAL long.
    store.wal.clone().unwrap().passive(store.pool(), 0).await.unwrap();
    snapshot.rollback().await.unwrap();
    let before = size();
    assert!(before > 200 * 1024, "the WAL holds the 100 commits: {before} bytes");
    for b in 100..150 {
        write(store.clone(), b * 20).await;
    }
    let after = size();
    assert!(after < before * 5 / 4, "the WAL started over: {before} then {after} bytes");
    store
}

/// The spend writer runs the due restart before its next batch, and nothing is lost by it.
#[tokio::test]
async fn the_wal_starts_over_once_it_is_long() {
    let dir = tempfile::tempdir().unwrap();
    let store = wal_starts_over_with(dir.path(), |store, from| async move {
        let batch: Vec<_> = (0..20).map(|i| rec(from + i, "t")).collect();
        store.insert_spend_batch(&batch).await.unwrap();
    })
    .await;
    assert_eq!(store.sum_spend(&SpendFilter::default()).await.unwrap(), 100 * 3000);
}

/// The outbox writer runs it too: a node that only emits events keeps its WAL bounded.
#[tokio::test]
async fn the_outbox_writer_starts_the_wal_over_too() {
    let dir = tempfile::tempdir().unwrap();
    let store = wal_starts_over_with(dir.path(), |store, from| async move {
        let bodies: Vec<String> = (0..20).map(|i| format!("{{\"n\":{}}}", from + i)).collect();
        let events: Vec<NewEvent<'_>> = bodies
            .iter()
            .map(|b| NewEvent {
                kind: "test",
                envelope: b,
                deliveries: vec![("push".into(), b.clone())],
                ..Default::default()
            })
            .collect();
        store.outbox_enqueue_many(&events).await.unwrap();
    })
    .await;
    assert_eq!(store.outbox_stats(None).await.unwrap().pending, 3000);
}

/// `now_ms` reads the system clock as a calendar clock would: Unix milliseconds.
#[test]
fn now_is_unix_milliseconds() {
    let before = chrono::Utc::now().timestamp_millis();
    let now = now_ms();
    let after = chrono::Utc::now().timestamp_millis();
    assert!((before..=after).contains(&now), "{before} <= {now} <= {after}");
}

/// A file svc creates gets 16 KiB pages; a file made with other pages (by an older version) keeps them and is
/// written and read as before.
#[tokio::test]
async fn a_new_file_gets_16_kib_pages_and_an_old_one_keeps_its_own() {
    use sqlx::{Connection as _, Executor as _};
    async fn page_size(store: &Store) -> i64 {
        sqlx::query_scalar::<_, i64>("PRAGMA page_size").fetch_one(store.pool()).await.unwrap()
    }
    let dir = tempfile::tempdir().unwrap();
    let new = Store::connect(&format!("sqlite://{}", dir.path().join("new.db").display())).await.unwrap();
    assert_eq!(page_size(&new).await, 16384);
    let old_url = format!("sqlite://{}?mode=rwc", dir.path().join("old.db").display());
    let mut old = sqlx::AnyConnection::connect(&old_url).await.unwrap();
    old.execute("PRAGMA page_size=4096; PRAGMA journal_mode=WAL; CREATE TABLE made_before (a INTEGER)").await.unwrap();
    old.close().await.unwrap();
    let store = Store::connect(&old_url).await.unwrap();
    assert_eq!(page_size(&store).await, 4096);
    store.insert_spend_batch(&[rec(1, "t"), rec(2, "t")]).await.unwrap();
    assert_eq!(store.sum_spend(&SpendFilter::default()).await.unwrap(), 200);
}

/// A reader that holds the WAL (another process's long query) cannot hold the spend writer up: the due restart
/// gives up after a few milliseconds and the batch is written.
#[tokio::test]
async fn a_reader_holding_the_wal_does_not_stall_the_writer() {
    use sqlx::Connection as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let url = format!("sqlite://{}", path.display());
    let store = Store::connect(&url).await.unwrap();
    store.insert_spend_batch(&[rec(1, "t")]).await.unwrap();
    // Another connection in a read transaction on a snapshot that includes the WAL.
    let mut reader = sqlx::AnyConnection::connect(&url).await.unwrap();
    let mut tx = reader.begin().await.unwrap();
    let _: (i64,) = sqlx::query_as("SELECT COUNT(*) FROM spend_log").fetch_one(&mut *tx).await.unwrap();
    store.wal.clone().unwrap().passive(store.pool(), 0).await.unwrap();
    let started = std::time::Instant::now();
    store.insert_spend_batch(&[rec(2, "t")]).await.unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(1), "took {:?}", started.elapsed());
    tx.rollback().await.unwrap();
    assert_eq!(store.sum_spend(&SpendFilter::default()).await.unwrap(), 200, "both records are there");
}

/// A store a newer svc migrated further (a migration this binary does not know) still opens, as an older node
/// of a rolling upgrade needs; its data stays served.
async fn a_store_migrated_further_by_a_newer_binary_opens(url: String) {
    let store = Store::connect(&url).await.unwrap();
    store.insert_spend_batch(&[rec(1, "a")]).await.unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (99999, 'from a newer svc', TRUE, '\\x00', 1)",
    )
    .execute(store.pool())
    .await
    .unwrap();
    store.close().await;
    let again = Store::connect(&url).await;
    let again = again.unwrap_or_else(|e| panic!("an older binary refused the store: {e}"));
    assert_eq!(again.query_spend(&SpendFilter::default(), 10, 0).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_store_migrated_further_opens_on_sqlite() {
    let (url, _dir) = sqlite_url();
    a_store_migrated_further_by_a_newer_binary_opens(url).await;
}

#[tokio::test]
async fn a_store_migrated_further_opens_on_postgres() {
    a_store_migrated_further_by_a_newer_binary_opens(postgres_url().await).await;
}
