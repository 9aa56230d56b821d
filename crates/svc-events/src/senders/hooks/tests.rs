//! Tests of the hook runner with real scripts in a temporary directory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::envelope::{Meta, Source};
use crate::kinds::EventKind;
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn envelope(data: serde_json::Value) -> Envelope {
    let s = Source {
        fleet: "f".into(),
        node: "n".into(),
        agent: "a".into(),
        meta: Meta { swarm: Some("s".into()), build: None },
    };
    Envelope::new(EventKind::Test, data, &s).unwrap()
}

fn runner(dir: &Path, timeout: Duration) -> HookRunner {
    HookRunner::new(HookFile::at(dir.join("hooks.json")), HookSettings { timeout, max_concurrent: 2 }).with_depth(0)
}

#[tokio::test]
async fn env_vars_reach_the_hook() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let s = script(dir.path(), "h.sh", &format!(
        "printf '%s' \"$SVC_EVENT\" > {o}.event; echo \"$SVC_EVENT_KIND $SVC_HOOK_DEPTH $SVC_EVENT_ORIGIN\" > {o}.kind; cat \"$SVC_EVENT_FILE\" > {o}.file; echo hi; echo oops >&2",
        o = out.display()
    ));
    let r = runner(dir.path(), Duration::from_secs(10));
    r.registry().file().add("test", &s).unwrap();
    let env = envelope(json!({"x": "ä\n\"quoted\""}));
    let runs = tokio::time::timeout(Duration::from_secs(20), r.run(&env, Some("key:k-1"))).await.unwrap().unwrap();
    assert_eq!(runs.len(), 1);
    assert!(runs[0].succeeded(), "{:?}", runs[0]);
    assert_eq!((runs[0].stdout.as_str(), runs[0].stderr.as_str()), ("hi\n", "oops\n"));
    let back: Envelope =
        serde_json::from_str(&std::fs::read_to_string(format!("{}.event", out.display())).unwrap()).unwrap();
    assert_eq!(back, env);
    let from_file: Envelope =
        serde_json::from_str(&std::fs::read_to_string(format!("{}.file", out.display())).unwrap()).unwrap();
    assert_eq!(from_file, env);
    assert_eq!(std::fs::read_to_string(format!("{}.kind", out.display())).unwrap(), "test 1 key:k-1\n");
}

#[tokio::test]
async fn hanging_hook_and_its_children_are_killed() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("child.pid");
    let s = script(dir.path(), "hang.sh", &format!("sleep 300 & echo $! > {}; wait", pidfile.display()));
    let r = runner(dir.path(), Duration::from_millis(500));
    r.registry().file().add("*", &s).unwrap();
    let started = std::time::Instant::now();
    let runs = tokio::time::timeout(Duration::from_secs(20), r.run(&envelope(json!({})), None)).await.unwrap().unwrap();
    assert_eq!(runs[0].status, HookStatus::TimedOut(Duration::from_millis(500)));
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    let pid: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    // The background `sleep` was in the hook's group: it must be gone (or a zombie about to be reaped by init).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.is_empty() || stat.split_whitespace().nth(2) == Some("Z") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "child {pid} still alive: {stat}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn large_envelope_goes_through_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let s = script(
        dir.path(),
        "big.sh",
        &format!("printf '%s' \"${{#SVC_EVENT}}\" > {o}.len; cat \"$SVC_EVENT_FILE\" > {o}.file", o = out.display()),
    );
    let r = runner(dir.path(), Duration::from_secs(10));
    r.registry().file().add("test", &s).unwrap();
    let env = envelope(json!({"blob": "x".repeat(300 * 1024)}));
    let runs = tokio::time::timeout(Duration::from_secs(20), r.run(&env, Some("key:k-1"))).await.unwrap().unwrap();
    assert!(runs[0].succeeded(), "{:?}", runs[0]);
    assert_eq!(std::fs::read_to_string(format!("{}.len", out.display())).unwrap(), "0");
    let back: Envelope =
        serde_json::from_str(&std::fs::read_to_string(format!("{}.file", out.display())).unwrap()).unwrap();
    assert_eq!(back, env);
}

#[tokio::test]
async fn envelope_at_the_env_limit_still_fits() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("len");
    let s = script(dir.path(), "len.sh", &format!("printf '%s' \"${{#SVC_EVENT}}\" > {}", out.display()));
    let r = runner(dir.path(), Duration::from_secs(10));
    r.registry().file().add("test", &s).unwrap();
    let base = envelope(json!({"blob": ""})).to_json().len();
    let env = envelope(json!({"blob": "x".repeat(MAX_SVC_EVENT_BYTES - base)}));
    assert_eq!(env.to_json().len(), MAX_SVC_EVENT_BYTES);
    let runs = tokio::time::timeout(Duration::from_secs(20), r.run(&env, Some("key:k-1"))).await.unwrap().unwrap();
    assert!(runs[0].succeeded(), "{:?}", runs[0]);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), MAX_SVC_EVENT_BYTES.to_string());
}

#[tokio::test]
async fn depth_limit_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let r = runner(dir.path(), Duration::from_secs(1)).with_depth(MAX_HOOK_DEPTH);
    let err = r.run(&envelope(json!({})), None).await.unwrap_err();
    assert!(matches!(err, HookRunError::DepthExceeded { depth: 3, max: 3 }));
}

#[tokio::test]
async fn failing_and_missing_scripts_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(dir.path(), "fail.sh", "exit 7");
    let gone = script(dir.path(), "gone.sh", "exit 0");
    let r = runner(dir.path(), Duration::from_secs(10));
    r.registry().file().add("test", &s).unwrap();
    r.registry().file().add("test", &gone).unwrap();
    std::fs::remove_file(&gone).unwrap();
    let runs = tokio::time::timeout(Duration::from_secs(20), r.run(&envelope(json!({})), None)).await.unwrap().unwrap();
    assert_eq!(runs[0].status, HookStatus::Exited(7));
    assert!(matches!(runs[1].status, HookStatus::FailedToStart(_)));
}
