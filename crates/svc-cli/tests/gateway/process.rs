//! The process as the system sees it: with one worker, `svc serve` runs its main thread, the worker (and tokio's
//! blocking pool while it has work), SQLite's connections and one log writer, no other thread; every log line,
//! the request lines and the others, comes through that writer.

use crate::harness::*;
use std::sync::Arc;
use svc_testkit::upstream::Upstream;

/// The names of the process's threads, as `/proc` gives them (15 bytes at most), sorted.
fn thread_names(pid: u32) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_string())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn one_worker_runs_no_thread_beyond_sqlite_and_one_log_writer() {
    let up = Upstream::start().await.unwrap();
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let g = Gateway::start_with_env(dir, &config_for(&up.base_url, ""), &[("TOKIO_WORKER_THREADS", "1")]).await;
    let (status, headers, _) = post_chat(&g, MASTER, &chat("openai/gpt-4.1-mini")).await;
    assert_eq!(status, 200);
    let answered = headers["x-request-id"].to_str().unwrap().to_string();
    // The start-up lines came (the harness read `listening on`), and the request's line comes after them.
    let log = g.log.clone();
    let logged =
        eventually(5, || log.lock().unwrap().iter().any(|l| l.contains(&answered) && l.contains("request_id"))).await;
    assert!(logged, "no request line for {answered}:\n{}", g.log_text());

    let names = thread_names(g.pid());
    let count = |name: &str| names.iter().filter(|n| *n == name).count();
    let others: Vec<&str> =
        names.iter().map(String::as_str).filter(|n| !["tokio-rt-worker", "sqlx-sqlite-wor"].contains(n)).collect();
    assert_eq!(others, ["svc", "svc-request-log"], "{names:?}");
    assert!((1..=2).contains(&count("tokio-rt-worker")), "one worker and at most one blocking thread: {names:?}");
    assert!((1..=3).contains(&count("sqlx-sqlite-wor")), "three SQLite connections at most: {names:?}");
}
