//! `svc-notify --dry-run`: the first line, headers, body and envelope; nothing sent, no hook run, exit 0.

use crate::util::*;
use std::time::Duration;
use svc_testkit::ntfy::NtfyServer;
use svc_testkit::webhook::WebhookReceiver;

#[tokio::test]
async fn dry_run_prints_and_sends_nothing() {
    let ntfy = NtfyServer::start().await;
    let rx = WebhookReceiver::start().await;
    let ws = Workspace::new();
    let url = rx.url();
    ws.config(
        Some(&ntfy.url()),
        Some("tk_verysecret"),
        &[Hook { secret: "hook-secret", ..Hook::new(&url, &["*"]) }],
        "",
    );
    let marker = ws.path("hook-ran");
    let script = ws.script("h.sh", &format!("touch {}", marker.display()));
    ws.register("*", &script);
    let out = ws.notify(&["--event", "test", "--title", "Hello there", "--dry-run"]).run().await;
    out.code(0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], format!("DRY RUN: would POST to {}/svc-fleet-test", ntfy.url()), "{}", out.shown);
    assert_eq!(lines[1], "X-Title: Hello there");
    assert_eq!(lines[2], "X-Priority: high");
    assert_eq!(lines[3], "X-Tags: n1,svc-notify");
    assert_eq!(lines[4], "Authorization: Bearer ***");
    assert_eq!(lines[5], "");
    assert_eq!(lines[6], "test from svc-notify on n1");
    assert!(out.stdout.contains(&format!("DRY RUN: would POST to {url}\n")), "{}", out.shown);
    assert!(out.stdout.contains("X-SVC-Signature: sha256="));
    for header in ["X-SVC-Origin: svc-notify\n", "webhook-id: ", "webhook-timestamp: ", "webhook-signature: v1,"] {
        assert!(out.stdout.contains(header), "{header}\n{}", out.shown);
    }
    assert!(out.stdout.contains(&format!("DRY RUN: would run hook {}", script.display())));
    // The envelope is the last block.
    let start = out.stdout.rfind("\n{\n").unwrap() + 1;
    let env: serde_json::Value = serde_json::from_str(&out.stdout[start..]).unwrap();
    assert_eq!(env["event"], "test");
    assert_eq!(env["fleet"], "alpha");
    // Secrets never printed.
    assert!(!out.stdout.contains("tk_verysecret") && !out.stdout.contains("hook-secret"));
    // Nothing sent, nothing run.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(ntfy.requests().is_empty());
    assert!(rx.received().is_empty());
    assert!(!marker.exists());
}

#[tokio::test]
async fn dry_run_without_push_starts_with_the_first_webhook() {
    let ws = Workspace::new();
    ws.config(None, None, &[Hook::new("http://127.0.0.1:9/hook", &["task.*"])], "");
    let out = ws.notify(&["--event", "task.created", "--data", r#"{"task_id":3}"#, "--dry-run"]).run().await;
    out.code(0);
    assert!(out.stdout.starts_with("DRY RUN: would POST to http://127.0.0.1:9/hook\n"), "{}", out.shown);
    let out = ws.notify(&["--event", "agent.started", "--dry-run"]).run().await;
    out.code(0);
    assert!(out.stdout.starts_with("DRY RUN: no destination takes `agent.started`"), "{}", out.shown);
}

/// A webhook URL carrying a token is shown redacted, in the dry run as everywhere else.
#[tokio::test]
async fn dry_run_shows_webhook_urls_redacted() {
    let ws = Workspace::new();
    let url = "https://user:pw@hooks.example.com/services/T0001/B0002/xoxb-token?sig=abc";
    ws.config(None, None, &[Hook::new(url, &["*"])], "");
    let out = ws.notify(&["--dry-run"]).run().await;
    out.code(0);
    assert!(
        out.stdout.starts_with("DRY RUN: would POST to https://***@hooks.example.com/services/…?…\n"),
        "{}",
        out.shown
    );
    for secret in ["user", "pw@", "T0001", "xoxb-token", "sig=abc"] {
        assert!(!out.stdout.contains(secret) && !out.stderr.contains(secret), "{secret}\n{}", out.shown);
    }
}
