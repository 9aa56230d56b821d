//! What a client may hold on the real binary: slow headers and idle keep-alive connections are closed after
//! their timeouts, connections beyond `max_connections` get a JSON 503, and SIGTERM finishes within the
//! shutdown deadline even while a client holds a half-sent request, the spend of answered requests kept.

use crate::harness::*;
use crate::raw::{self, closed_within, read_response};
use serde_json::json;
use std::time::Duration;
use svc_testkit::upstream::Upstream;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

const HEALTH: &[u8] = b"GET /health HTTP/1.1\r\nHost: svc\r\n\r\n";

#[tokio::test]
async fn slow_headers_are_cut_off_after_the_header_timeout() {
    let up = Upstream::start().await.unwrap();
    let g = Gateway::start(&config_for(&up.base_url, "  header_read_timeout_seconds: 1\n")).await;
    let started = Instant::now();
    // Five clients send their request one byte every 300 ms (it would take about 10 s); one sends nothing.
    let mut slow = Vec::new();
    for _ in 0..5 {
        let (mut reader, mut writer) = raw::connect(g.addr()).await.into_split();
        let dribble = tokio::spawn(async move {
            for byte in HEALTH.iter().cycle() {
                if writer.write_all(&[*byte]).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        });
        slow.push(async move {
            let mut buf = [0u8; 64];
            let closed =
                tokio::time::timeout(Duration::from_secs(10), tokio::io::AsyncReadExt::read(&mut reader, &mut buf))
                    .await
                    .is_ok();
            dribble.abort();
            closed
        });
    }
    let mut silent = raw::connect(g.addr()).await;
    // Meanwhile a client that sends its request at once is answered.
    let answered = raw::exchange(g.addr(), HEALTH).await;
    assert_eq!(answered.status, 200);
    for (i, closed) in futures::future::join_all(slow).await.into_iter().enumerate() {
        assert!(closed, "slow client {i} still connected after 10 s");
    }
    assert!(closed_within(&mut silent, Duration::from_secs(5)).await.is_some(), "a silent client is not closed");
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(900), "closed before the timeout: {elapsed:?}");
}

#[tokio::test]
async fn idle_keep_alive_connections_are_closed_after_the_idle_timeout() {
    let up = Upstream::start().await.unwrap();
    let extra = "  header_read_timeout_seconds: 1\n  keep_alive_timeout_seconds: 3\n";
    let g = Gateway::start(&config_for(&up.base_url, extra)).await;
    let mut conn = raw::connect(g.addr()).await;
    conn.write_all(HEALTH).await.unwrap();
    assert_eq!(read_response(&mut conn, Duration::from_secs(5)).await.status, 200);
    // Idle longer than the header timeout: still open (the idle timeout is the keep-alive one)…
    assert_eq!(closed_within(&mut conn, Duration::from_millis(2000)).await, None);
    conn.write_all(HEALTH).await.unwrap();
    assert_eq!(read_response(&mut conn, Duration::from_secs(5)).await.status, 200);
    // …and closed once idle for the keep-alive timeout.
    let idle = closed_within(&mut conn, Duration::from_secs(8)).await.expect("an idle connection stays open");
    assert!(idle >= Duration::from_millis(2500), "closed after {idle:?}, before the keep-alive timeout");
}

#[tokio::test]
async fn connections_beyond_the_cap_get_a_json_503_and_are_closed() {
    let up = Upstream::start().await.unwrap();
    let g = Gateway::start(&config_for(&up.base_url, "  max_connections: 2\n")).await;
    let held = raw::connect(g.addr()).await;
    let mut other = raw::connect(g.addr()).await;
    other.write_all(HEALTH).await.unwrap();
    assert_eq!(read_response(&mut other, Duration::from_secs(5)).await.status, 200);
    let mut third = raw::connect(g.addr()).await;
    third.write_all(HEALTH).await.unwrap();
    let refused = read_response(&mut third, Duration::from_secs(5)).await;
    assert_eq!(refused.status, 503);
    assert_eq!(refused.header("content-type"), Some("application/json"));
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(
        refused.json(),
        json!({"error": {
            "message": "the gateway is at its limit of 2 open connections; retry with backoff",
            "type": "overloaded_error", "param": null, "code": "503"
        }})
    );
    assert!(closed_within(&mut third, Duration::from_secs(5)).await.is_some(), "a refused connection stays open");
    // A place frees up when a connection closes.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = raw::exchange(g.addr(), HEALTH).await;
        if r.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "no place after a connection closed: {r:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn sigterm_with_a_half_sent_request_exits_within_the_deadline_and_keeps_spend() {
    let up = Upstream::start().await.unwrap();
    let extra = "  header_read_timeout_seconds: 60\n  shutdown_timeout_seconds: 2\n";
    let mut g = Gateway::start(&config_for(&up.base_url, extra)).await;
    let (status, headers, _) = post_chat(&g, MASTER, &chat("openai/gpt-4.1-mini")).await;
    assert_eq!(status, 200);
    let answered = headers["x-request-id"].to_str().unwrap().to_string();
    // A stream under way when SIGTERM comes finishes during the drain.
    up.set(|b| b.hold_stream = true);
    let mut body = chat("openai/gpt-4.1-mini");
    body["stream"] = json!(true);
    let streaming = client().post(g.path("/v1/chat/completions")).bearer_auth(MASTER).json(&body).send().await.unwrap();
    assert_eq!(streaming.status(), 200);
    let streamed = streaming.headers()["x-request-id"].to_str().unwrap().to_string();
    let mut half = raw::connect(g.addr()).await;
    half.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: svc\r\nContent-Type: appl").await.unwrap();

    let started = Instant::now();
    g.terminate();
    up.release();
    let text = streaming.text().await.unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let code = g.exit_code(Duration::from_secs(15)).await;
    assert_eq!(code, Some(0), "svc did not exit within 15 s of SIGTERM; log:\n{}", g.log.lock().unwrap().join("\n"));
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    assert!(closed_within(&mut half, Duration::from_secs(1)).await.is_some());
    // The answered request has its line in the log (gathered lines are written every 100 ms and at exit).
    let log = g.log.clone();
    let logged =
        eventually(5, || log.lock().unwrap().iter().any(|l| l.contains(&answered) && l.contains("request_id"))).await;
    assert!(logged, "no request line for {answered}");

    // The gateway is gone: what it wrote at shutdown is in the store itself, not only in its journal.
    let store = svc_store::Store::connect(&g.db_url()).await.unwrap();
    let records = store.query_spend(&svc_store::SpendFilter::default(), 100, 0).await.unwrap();
    let ids: Vec<&str> = records.iter().map(|r| r.request_id.as_str()).collect();
    assert!(ids.contains(&answered.as_str()) && ids.contains(&streamed.as_str()), "{ids:?}");
    store.close().await;
}
