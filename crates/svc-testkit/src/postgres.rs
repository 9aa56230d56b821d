//! A fresh PostgreSQL database per test, on the server the tests are given.

/// A fresh, empty database on `$SVC_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`, the
/// admin database it is created from); returns its URL. Databases of earlier runs (named with their creation
/// time) are dropped once they are ten minutes old, so repeated runs do not pile them up; a database in use
/// refuses DROP, so a running test is never touched.
///
/// # Panics
/// When PostgreSQL cannot be reached or refuses: the fleet tests need it.
pub async fn fresh_database() -> String {
    let admin =
        std::env::var("SVC_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let pool = match sqlx::PgPool::connect(&admin).await {
        Ok(p) => p,
        Err(e) => panic!("PostgreSQL must be reachable at {admin} for the fleet tests: {e}"),
    };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let old: Vec<String> =
        sqlx::query_scalar("SELECT CAST(datname AS TEXT) FROM pg_database WHERE datname LIKE 'svc_test_%'")
            .fetch_all(&pool)
            .await
            .unwrap_or_default();
    for name in old {
        let created = name.split('_').nth(2).and_then(|t| t.parse::<u64>().ok()).unwrap_or(0);
        if created + 600 < now {
            let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name}")).execute(&pool).await;
        }
    }
    let name = format!("svc_test_{now}_{:016x}", rand::random::<u64>());
    if let Err(e) = sqlx::query(&format!("CREATE DATABASE {name}")).execute(&pool).await {
        panic!("cannot create the test database {name}: {e}");
    }
    pool.close().await;
    let base = admin.rsplit_once('/').map(|(b, _)| b.to_string()).unwrap_or(admin);
    format!("{base}/{name}")
}
