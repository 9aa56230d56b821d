//! Push delivery through `svc-notify`: header mapping for every kind, title/priority overrides, RFC 2047,
//! the 4095-byte body, token auth (exit 3), an unreachable or failing server (exit 2), retries.

use crate::util::*;
use std::time::Duration;
use svc_testkit::ntfy::{Access, NtfyServer};

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn header_mapping_for_every_severity() {
    let ntfy = NtfyServer::start().await;
    let ws = Workspace::new();
    ws.config(Some(&ntfy.url()), None, &[], "");
    let table = [
        ("agent.started", 2),
        ("agent.stopped", 2),
        ("agent.crashed", 4),
        ("task.created", 2),
        ("task.done", 2),
        ("task.blocked", 3),
        ("epic.closed", 2),
        ("budget.alert", 3),
        ("budget.exceeded", 5),
        ("model.degraded", 3),
        ("model.unavailable", 5),
        ("node.offline", 5),
        ("swarm.complete", 2),
        ("swarm.timeout", 3),
        // `test` takes the push block's configured priority (`high` in these configs).
        ("test", 4),
    ];
    for (kind, _) in table {
        let data = if kind == "task.done" { task_done_data("Ship it") } else { "{}".to_string() };
        ws.notify(&["--event", kind, "--data", &data, "--agent", "executor"]).run().await.code(0);
    }
    let msgs = ntfy.wait_for_messages(table.len(), WAIT).await;
    let reqs = ntfy.requests();
    for (i, (kind, prio)) in table.iter().enumerate() {
        assert_eq!(msgs[i].title.as_deref(), Some(*kind));
        assert_eq!(msgs[i].priority, Some(*prio), "{kind}");
        assert_eq!(msgs[i].tags, vec!["n1", "executor"]);
        assert_eq!(msgs[i].topic, "svc-fleet-test");
        let word = ["", "min", "low", "default", "high", "urgent"][*prio as usize];
        assert_eq!(reqs[i].header("x-priority"), Some(word), "{kind}");
        assert_eq!(reqs[i].header("x-title"), Some(*kind));
        assert_eq!(reqs[i].header("x-tags"), Some("n1,executor"));
        assert_eq!(reqs[i].header("authorization"), None);
    }
    assert_eq!(msgs[4].message, "Ship it");
    assert_eq!(msgs[0].message, "agent.started from executor on n1");
}

#[tokio::test]
async fn overrides_env_and_non_ascii() {
    let ntfy = NtfyServer::start().await;
    let ws = Workspace::new();
    ws.config(Some(&ntfy.url()), None, &[], "");
    ws.notify(&[
        "--event",
        "budget.exceeded",
        "--priority",
        "min",
        "--title",
        "Budget — Grüße\r\nX-Evil: 1",
        "--data",
        r#"{"team":"executor","spent":"50.02","limit":"50.00"}"#,
    ])
    .env("SVC_NODE", "nœud-7")
    .env("SVC_AGENT", "agent-x")
    .run()
    .await
    .code(0);
    let m = &ntfy.wait_for_messages(1, WAIT).await[0];
    assert_eq!(m.title.as_deref(), Some("Budget — Grüße  X-Evil: 1"));
    assert_eq!(m.priority, Some(1));
    assert_eq!(m.tags, vec!["nœud-7", "agent-x"]);
    assert_eq!(m.message, "budget.exceeded: team executor spent 50.02 of 50.00");
    let r = &ntfy.requests()[0];
    assert!(r.header("x-title").unwrap().starts_with("=?UTF-8?B?"), "{:?}", r.headers);
    assert!(r.headers.get("x-evil").is_none());
}

#[tokio::test]
async fn long_body_is_cut_to_4095_bytes_on_a_char_boundary() {
    let ntfy = NtfyServer::start().await;
    let ws = Workspace::new();
    ws.config(Some(&ntfy.url()), None, &[], "");
    let title = "ü".repeat(2500); // 5000 bytes
    ws.notify(&["--event", "task.done", "--data", &task_done_data(&title)]).run().await.code(0);
    let m = &ntfy.wait_for_messages(1, WAIT).await[0];
    assert_eq!(m.message.len(), 4094);
    assert!(m.message.chars().all(|c| c == 'ü'));
}

#[tokio::test]
async fn token_accepted() {
    let ntfy = NtfyServer::with_auth(Access {
        write_tokens: vec!["tk_goodgoodgoodgoodgoodgoodgood1".into()],
        read_tokens: vec![],
    })
    .await;
    let ws = Workspace::new();
    ws.config(Some(&ntfy.url()), Some("tk_goodgoodgoodgoodgoodgoodgood1"), &[], "");
    let out = ws.notify(&["--title", "hello"]).run().await;
    out.code(0);
    assert_eq!(ntfy.requests()[0].header("authorization"), Some("Bearer tk_goodgoodgoodgoodgoodgoodgood1"));
    assert_eq!(ntfy.messages().len(), 1);
    assert!(!out.stdout.contains("tk_good") && !out.stderr.contains("tk_good"));
}

#[tokio::test]
async fn token_rejected_exits_3() {
    let ntfy =
        NtfyServer::with_auth(Access { write_tokens: vec!["tk_good".into()], read_tokens: vec!["tk_reader".into()] })
            .await;
    let ws = Workspace::new();
    // Unknown token: 401.
    ws.config(Some(&ntfy.url()), Some("tk_wrongwrongwrong"), &[], "");
    let out = ws.notify(&[]).run().await;
    out.code(3).one_error_line("refused authentication (HTTP 401)");
    assert!(!out.stderr.contains("tk_wrong"));
    // Known token without write permission: 403.
    ws.config(Some(&ntfy.url()), Some("tk_reader"), &[], "");
    ws.notify(&[]).run().await.code(3).one_error_line("HTTP 403");
    // No token on a server with access control: 403.
    ws.config(Some(&ntfy.url()), None, &[], "");
    ws.notify(&[]).run().await.code(3);
    // Auth failures are not retried.
    assert_eq!(ntfy.requests().len(), 3);
    assert!(ntfy.messages().is_empty());
}

#[tokio::test]
async fn server_down_exits_2_after_a_short_retry() {
    let ntfy = NtfyServer::start().await;
    ntfy.down();
    let ws = Workspace::new();
    ws.config(Some(&ntfy.url()), None, &[], "");
    let out = ws.notify(&[]).run().await;
    out.code(2).one_error_line(&format!("push server {} unreachable: connection refused", ntfy.url()));
    assert!(out.elapsed < Duration::from_secs(10), "{:?}", out.elapsed);
    // Back up on the same port: delivered.
    ntfy.up().await;
    ws.notify(&[]).run().await.code(0);
    assert_eq!(ntfy.wait_for_messages(1, WAIT).await.len(), 1);
}

#[tokio::test]
async fn transient_failures_are_retried_permanent_ones_are_not() {
    let ntfy = NtfyServer::start().await;
    let ws = Workspace::new();
    ws.config(Some(&ntfy.url()), None, &[], "");
    // 503 then 429 then success: delivered.
    ntfy.fail_next(1, 503);
    ntfy.fail_next(1, 429);
    ws.notify(&[]).run().await.code(0);
    assert_eq!(ntfy.requests().iter().map(|r| r.status).collect::<Vec<_>>(), vec![503, 429, 200]);
    // 5xx on every attempt: unreachable after 3 attempts.
    ntfy.fail_next(3, 500);
    ws.notify(&[]).run().await.code(2).one_error_line("HTTP 500");
    assert_eq!(ntfy.requests().len(), 6);
    // 413 / 400 / 404: configuration or size errors, one attempt, exit 1.
    ntfy.fail_next(1, 413);
    ws.notify(&[]).run().await.code(1).one_error_line("rejected the message (HTTP 413)");
    assert_eq!(ntfy.requests().len(), 7);
}

#[tokio::test]
async fn priority_flag_overrides_the_severity() {
    let ntfy = NtfyServer::start().await;
    let ws = Workspace::new();
    ws.config(Some(&ntfy.url()), None, &[], "");
    ws.notify(&["--priority", "urgent"]).run().await.code(0);
    assert_eq!(ntfy.messages()[0].priority, Some(5));
}
