//! Exit 1 cases of `svc-notify` (spec 6.3, issue 4): one `svc-notify: ` line on stderr each, never clap's 2.

use crate::util::*;

const OK_PUSH: &str = "http://127.0.0.1:9";

#[tokio::test]
async fn usage_errors_exit_1_help_and_version_exit_0() {
    let ws = Workspace::new();
    ws.config(Some(OK_PUSH), None, &[], "");
    ws.notify(&["--bogus"]).run().await.code(1).one_error_line("unexpected argument '--bogus'");
    ws.notify(&["--event"]).run().await.code(1).one_error_line("--event");
    let help = ws.notify(&["--help"]).run().await;
    help.code(0);
    assert!(help.stdout.contains("--dry-run") && help.stdout.contains("--priority"), "{}", help.shown);
    let v = ws.notify(&["--version"]).run().await;
    v.code(0);
    assert!(v.stdout.starts_with("svc-notify "), "{}", v.shown);
}

#[tokio::test]
async fn no_config_file() {
    let ws = Workspace::new();
    let mut cmd = Cmd::new(env!("CARGO_BIN_EXE_svc-notify"));
    cmd.env("HOME", ws.dir.path().to_str().unwrap());
    // Run from an empty directory: no --config, no SVC_CONFIG, no ./svc.yaml.
    let out = cmd.arg("--dry-run").run_in(ws.dir.path()).await;
    out.code(1).one_error_line("no configuration file");
    let mut cmd = Cmd::new(env!("CARGO_BIN_EXE_svc-notify"));
    let out = cmd.arg("--config").arg(ws.path("missing.yaml").to_str().unwrap()).run().await;
    out.code(1).one_error_line("cannot read config file");
}

#[tokio::test]
async fn invalid_config_reports_file_line_col() {
    let ws = Workspace::new();
    let path = ws.write_config("notifications:\n  ntfy:\n    server: ftp://x\n    topic: svc-fleet-a\n");
    let out = ws.notify(&[]).run().await;
    out.code(1).one_error_line(&format!("{}:3:13: notifications.ntfy.server", path.display()));
    ws.write_config("notifications:\n  ntfy:\n    server: http://x\n    topic: v1\n");
    ws.notify(&[]).run().await.code(1).stderr_has("not a valid topic");
}

#[tokio::test]
async fn push_missing_or_disabled_with_nothing_else() {
    let ws = Workspace::new();
    ws.write_config("fleet:\n  name: a\n");
    ws.notify(&[]).run().await.code(1).one_error_line("no push block");
    ws.write_config(
        "notifications:\n  ntfy:\n    enabled: false\n    server: http://127.0.0.1:9\n    topic: svc-fleet-a\n",
    );
    ws.notify(&[]).run().await.code(1).one_error_line("disabled");
}

#[tokio::test]
async fn bad_event_data_and_priority() {
    let ws = Workspace::new();
    ws.config(Some(OK_PUSH), None, &[], "");
    ws.notify(&["--event", "task.finished", "--dry-run"])
        .run()
        .await
        .code(1)
        .one_error_line("unknown event kind `task.finished`");
    ws.notify(&["--data", "{not json", "--dry-run"]).run().await.code(1).one_error_line("`--data` is not valid JSON");
    ws.notify(&["--data", "[1,2]", "--dry-run"]).run().await.code(1).one_error_line("`data` must be a JSON object");
    ws.notify(&["--priority", "loud", "--dry-run"]).run().await.code(1).one_error_line("`--priority loud`");
    ws.notify(&["--event", "task.done", "--data", r#"{"task_id":1}"#, "--dry-run"])
        .run()
        .await
        .code(1)
        .one_error_line("`task.done` needs `data.task_title` (a string)");
    ws.notify(&["--data", "@/nonexistent/file.json", "--dry-run"])
        .run()
        .await
        .code(1)
        .one_error_line("cannot read `--data` file");
}
