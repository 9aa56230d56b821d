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
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    TestDb { store: Store::connect(&url).await.unwrap(), _dir: Some(dir) }
}

async fn postgres() -> TestDb {
    let admin =
        std::env::var("SVC_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&admin).await.expect("PostgreSQL must be reachable for the fleet-store tests");
    // Databases of earlier runs (named with their creation time) are dropped once they are ten minutes old, so
    // repeated runs do not pile them up; a database in use refuses DROP, so a running test is never touched.
    let now = chrono::Utc::now().timestamp();
    let old = sqlx::query("SELECT CAST(datname AS TEXT) FROM pg_database WHERE datname LIKE 'svc_test_%'")
        .fetch_all(&pool)
        .await
        .unwrap();
    for row in old {
        let name: String = sqlx::Row::try_get(&row, 0).unwrap();
        let created = name.split('_').nth(2).and_then(|t| t.parse::<i64>().ok()).unwrap_or(0);
        if created < now - 600 {
            let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name}")).execute(&pool).await;
        }
    }
    let name = format!("svc_test_{now}_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    sqlx::query(&format!("CREATE DATABASE {name}")).execute(&pool).await.unwrap();
    let base = admin.rsplit_once('/').map(|(b, _)| b.to_string()).unwrap();
    TestDb { store: Store::connect(&format!("{base}/{name}")).await.unwrap(), _dir: None }
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
    assert_eq!(s.find_key("hash-k2").await.unwrap().unwrap().id, "k2");
    let mut k = key("k1", Some("alpha"));
    k.revoked_ms = Some(9);
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

/// Spend record number `i` of `team`: 10 + 5 tokens, cost 100.
fn rec(i: i64, team: &str) -> SpendRecord {
    SpendRecord {
        request_id: format!("r{i}"),
        ts_ms: i,
        key_id: Some("k".into()),
        team_id: Some(team.into()),
        agent_role: None,
        model_alias: "m".into(),
        upstream_model: "u".into(),
        deployment: "m".into(),
        prompt_tokens: 10,
        completion_tokens: 5,
        cost: 100,
        status: 200,
        latency_ms: 3,
    }
}

async fn spend_and_outbox(s: &Store) {
    let batch: Vec<_> = (0..10).map(|i| rec(i, if i < 7 { "a" } else { "b" })).collect();
    s.insert_spend_batch(&batch).await.unwrap();
    let f = SpendFilter { team_id: Some("a".into()), start_ms: Some(2), ..Default::default() };
    assert_eq!(s.sum_spend(&f).await.unwrap(), 500);
    let page = s.query_spend(&SpendFilter::default(), 3, 1).await.unwrap();
    assert_eq!(page.iter().map(|r| r.ts_ms).collect::<Vec<_>>(), vec![8, 7, 6]);
    let totals = s.spend_totals("team", &SpendFilter::default()).await.unwrap();
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
        deliveries: vec![("ntfy".to_string(), format!("d-{n}-1")), ("webhook:0".to_string(), format!("d-{n}-2"))],
    };
    let a = s.outbox_enqueue(&event("1")).await.unwrap();
    let b = s.outbox_enqueue(&event("2")).await.unwrap();
    let p = s.outbox_pending("ntfy", 10).await.unwrap();
    assert_eq!(p.iter().map(|i| i.id).collect::<Vec<_>>(), vec![a, b]);
    assert_eq!((p[0].title.as_deref(), p[0].delivery_id.as_str()), (Some("t"), "d-1-1"));
    s.outbox_attempt_failed(a, "ntfy", "down", 1234).await.unwrap();
    let again = s.outbox_pending("ntfy", 10).await.unwrap();
    assert_eq!((again[0].attempts, again[0].next_attempt_ms, &again[0].delivery_id), (1, 1234, &p[0].delivery_id));
    s.outbox_delivered(a, "ntfy").await.unwrap();
    s.outbox_dead(b, "webhook:0", "410").await.unwrap();
    assert_eq!(s.outbox_pending("ntfy", 10).await.unwrap().len(), 1);
    let st = s.outbox_stats(None).await.unwrap();
    assert_eq!(st, OutboxStats { pending: 2, delivered: 1, failed: 1 });
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
}

macro_rules! both_backends {
    ($($name:ident),*) => {
        mod on_sqlite { $( #[tokio::test] async fn $name() { let db = super::sqlite().await; super::$name(&db.store).await; } )* }
        mod on_postgres { $( #[tokio::test] async fn $name() { let db = super::postgres().await; super::$name(&db.store).await; } )* }
    };
}

both_backends!(keys_round_trip, teams_keep_anchor, spend_and_outbox, outbox_batches, meta);

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
