//! Shell hooks run by `svc-notify`: `SVC_EVENT` is the envelope, a hanging hook is killed at the timeout, a
//! 300 KiB envelope reaches the hook through `SVC_EVENT_FILE`, the loop guard stops a hook that calls
//! `svc-notify` recursively, and `svc hooks` registration rules.

use crate::util::*;
use std::time::Duration;
use svc_testkit::webhook::WebhookReceiver;

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn svc_event_parses_back_to_the_envelope_sent() {
    let rx = WebhookReceiver::start().await;
    let ws = Workspace::new();
    let url = rx.url();
    ws.config(None, None, &[Hook::new(&url, &["*"])], "");
    let out_file = ws.path("event.json");
    let script = ws.script(
        "h.sh",
        &format!(
            "printf '%s' \"$SVC_EVENT\" > {o}; echo \"$SVC_EVENT_KIND\" > {o}.kind; cat \"$SVC_EVENT_FILE\" > {o}.file; echo \"$SVC_HOOK_DEPTH\" > {o}.depth",
            o = out_file.display()
        ),
    );
    ws.register("task.done", &script);
    ws.notify(&["--event", "task.done", "--data", &task_done_data("Quotes \" and\nnewlines ✓")]).run().await.code(0);
    let sent: serde_json::Value = rx.wait_for(1, WAIT).await[0].json();
    let from_env: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    let from_file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ws.path("event.json.file")).unwrap()).unwrap();
    assert_eq!(from_env, sent);
    assert_eq!(from_file, sent);
    assert_eq!(std::fs::read_to_string(ws.path("event.json.kind")).unwrap(), "task.done\n");
    assert_eq!(std::fs::read_to_string(ws.path("event.json.depth")).unwrap(), "1\n");
}

#[tokio::test]
async fn hanging_hook_is_killed_at_the_timeout() {
    let rx = WebhookReceiver::start().await;
    let ws = Workspace::new();
    let url = rx.url();
    ws.config(None, None, &[Hook::new(&url, &["*"])], "  hooks:\n    timeout_seconds: 1\n");
    let pid_file = ws.path("pid");
    let script = ws.script("hang.sh", &format!("sleep 120 & echo $! > {}; wait", pid_file.display()));
    ws.register("*", &script);
    let out = ws.notify(&[]).run().await;
    out.code(0).one_error_line("timed out after 1s");
    assert!(out.elapsed < Duration::from_secs(8), "{:?}", out.elapsed);
    let pid = std::fs::read_to_string(&pid_file).unwrap().trim().to_string();
    // Killed: it has closed its files (the hook's output was read to its end), but a process on a busy machine
    // may still be running its exit when svc-notify returns; it must be gone (or a zombie) soon after.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.is_empty() || stat.split_whitespace().nth(2) == Some("Z") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the hook's child survived: {stat}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_300_kib_envelope_reaches_the_hook_through_the_file() {
    let rx = WebhookReceiver::start().await;
    let ws = Workspace::new();
    let url = rx.url();
    ws.config(None, None, &[Hook::new(&url, &["*"])], "");
    let out_file = ws.path("big");
    let script = ws.script(
        "big.sh",
        &format!(
            "printf '%s' \"${{#SVC_EVENT}}\" > {o}.len; cat \"$SVC_EVENT_FILE\" > {o}.json",
            o = out_file.display()
        ),
    );
    ws.register("test", &script);
    let data = ws.path("data.json");
    std::fs::write(&data, serde_json::json!({"blob": "x".repeat(300 * 1024)}).to_string()).unwrap();
    ws.notify(&["--data", &format!("@{}", data.display())]).run().await.code(0);
    let sent = rx.wait_for(1, WAIT).await[0].json();
    assert_eq!(std::fs::read_to_string(ws.path("big.len")).unwrap(), "0", "SVC_EVENT is empty when too large");
    let got: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(ws.path("big.json")).unwrap()).unwrap();
    assert_eq!(got, sent);
    assert_eq!(got["data"]["blob"].as_str().unwrap().len(), 300 * 1024);
}

#[tokio::test]
async fn loop_guard_stops_a_recursive_hook() {
    let rx = WebhookReceiver::start().await;
    let ws = Workspace::new();
    let url = rx.url();
    let config = ws.config(None, None, &[Hook::new(&url, &["*"])], "");
    let log = ws.path("depths.log");
    // Every run of the hook emits another event, which would run the hook again forever.
    let script = ws.script(
        "loop.sh",
        &format!(
            "echo \"$SVC_HOOK_DEPTH\" >> {log}\n{bin} --config {cfg} --event test 2>> {log}.err",
            log = log.display(),
            bin = env!("CARGO_BIN_EXE_svc-notify"),
            cfg = config.display()
        ),
    );
    ws.register("test", &script);
    ws.notify(&[]).run().await.code(0);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "1\n2\n3\n");
    let err = std::fs::read_to_string(ws.path("depths.log.err")).unwrap();
    assert!(err.contains("svc-notify: hook depth 3 reached the limit of 3: not running hooks"), "{err}");
    // Push/webhooks are still delivered at every level: 1 + 3 nested emissions.
    assert_eq!(rx.wait_for(4, WAIT).await.len(), 4);
}

#[tokio::test]
async fn hooks_count_as_a_destination() {
    let ws = Workspace::new();
    ws.write_config("fleet:\n  name: a\n");
    let marker = ws.path("ran");
    let script = ws.script("h.sh", &format!("touch {}", marker.display()));
    ws.register("*", &script);
    ws.notify(&[]).run().await.code(0);
    assert!(marker.exists());
}

#[tokio::test]
async fn failing_hook_is_reported_but_does_not_fail_delivery() {
    let ws = Workspace::new();
    ws.write_config("fleet:\n  name: a\n");
    let script = ws.script("fail.sh", "echo broken >&2; exit 4");
    ws.register("test", &script);
    ws.notify(&[]).run().await.code(0).one_error_line("exit status 4");
}

#[tokio::test]
async fn hooks_command_rules() {
    use svc_cli::notify::hooks_cmd::{run_with_file, HooksCommand};
    use svc_events::senders::hooks::HookFile;
    let ws = Workspace::new();
    let file = HookFile::at(ws.hooks_file());
    let ok = ws.script("ok.sh", "echo from-hook");
    let not_exec = ws.path("plain.sh");
    std::fs::write(&not_exec, "#!/bin/sh\n").unwrap();
    let add =
        |event: &str, p: &std::path::Path| HooksCommand::Add { event: event.into(), script_path: p.to_path_buf() };
    assert_eq!(run_with_file(add("task.done", &not_exec), None, file.clone()).await, std::process::ExitCode::FAILURE);
    assert_eq!(
        run_with_file(add("task.done", &ws.path("missing.sh")), None, file.clone()).await,
        std::process::ExitCode::FAILURE
    );
    assert_eq!(run_with_file(add("task.nope", &ok), None, file.clone()).await, std::process::ExitCode::FAILURE);
    assert_eq!(run_with_file(add("task.done", &ok), None, file.clone()).await, std::process::ExitCode::SUCCESS);
    assert_eq!(file.load().unwrap().len(), 1);
    assert_eq!(
        run_with_file(HooksCommand::Test { event: "task.done".into() }, None, file.clone()).await,
        std::process::ExitCode::SUCCESS
    );
    let rm = HooksCommand::Remove { event: "task.done".into(), script_path: ok.clone() };
    assert_eq!(run_with_file(rm.clone(), None, file.clone()).await, std::process::ExitCode::SUCCESS);
    assert_eq!(run_with_file(rm, None, file.clone()).await, std::process::ExitCode::FAILURE);
    assert!(file.load().unwrap().is_empty());
}

/// Hooks take the patterns webhooks take: an exact kind, `*`, or a prefix such as `budget.*`, in `svc hooks add`,
/// `remove` and `test`, and when an event runs them.
#[tokio::test]
async fn hooks_take_the_patterns_webhooks_take() {
    use svc_cli::notify::hooks_cmd::{run_with_file, HooksCommand};
    use svc_events::senders::hooks::HookFile;
    let ws = Workspace::new();
    ws.write_config("fleet:\n  name: a\n");
    let file = HookFile::at(ws.hooks_file());
    let log = ws.path("kinds.log");
    let script = ws.script("k.sh", &format!("echo \"$SVC_EVENT_KIND\" >> {}", log.display()));
    let add = |event: &str| HooksCommand::Add { event: event.into(), script_path: script.clone() };
    assert_eq!(run_with_file(add("budget.*"), None, file.clone()).await, std::process::ExitCode::SUCCESS);
    assert_eq!(run_with_file(add("nope.*"), None, file.clone()).await, std::process::ExitCode::FAILURE);
    assert_eq!(run_with_file(add("task*"), None, file.clone()).await, std::process::ExitCode::FAILURE);
    assert_eq!(file.load().unwrap().iter().map(|r| r.event.as_str()).collect::<Vec<_>>(), ["budget.*"]);
    // `svc hooks test 'budget.*'` runs the hook once, with a test envelope of the first kind it takes.
    let test = |event: &str| HooksCommand::Test { event: event.into() };
    assert_eq!(run_with_file(test("budget.*"), None, file.clone()).await, std::process::ExitCode::SUCCESS);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "budget.alert\n");
    assert_eq!(run_with_file(test("budget.exceeded"), None, file.clone()).await, std::process::ExitCode::SUCCESS);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "budget.alert\nbudget.exceeded\n");
    // An event of a matching kind runs it; another kind does not.
    ws.notify(&["--event", "budget.exceeded"]).run().await.code(0);
    ws.notify(&["--event", "task.created"]).run().await.code(0);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "budget.alert\nbudget.exceeded\nbudget.exceeded\n");
    let rm = HooksCommand::Remove { event: "budget.*".into(), script_path: script.clone() };
    assert_eq!(run_with_file(rm, None, file.clone()).await, std::process::ExitCode::SUCCESS);
    assert!(file.load().unwrap().is_empty());
}

/// `svc hooks test` without a config builds its envelope like the gateway and `svc-notify`: fleet `default` and
/// the host name as node (unless `SVC_NODE` says otherwise).
#[tokio::test]
async fn hooks_test_envelope_names_this_host() {
    use svc_cli::notify::hooks_cmd::{run_with_file, HooksCommand};
    use svc_events::senders::hooks::HookFile;
    let ws = Workspace::new();
    let file = HookFile::at(ws.hooks_file());
    let out = ws.path("envelope.json");
    let dump = ws.script("dump.sh", &format!("printf '%s' \"$SVC_EVENT\" > '{}'", out.display()));
    let add = HooksCommand::Add { event: "task.done".into(), script_path: dump };
    assert_eq!(run_with_file(add, None, file.clone()).await, std::process::ExitCode::SUCCESS);
    let test = HooksCommand::Test { event: "task.done".into() };
    assert_eq!(run_with_file(test, None, file).await, std::process::ExitCode::SUCCESS);
    let env: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string();
    let expected = std::env::var("SVC_NODE").unwrap_or(host);
    assert_eq!((env["fleet"].as_str(), env["node"].as_str()), (Some("default"), Some(expected.as_str())));
}
