//! The command lines as their users meet them: help that explains the product (no internal documentation,
//! no references to the specification), and programs that end quietly with success when their output is
//! closed early, as `svc spend | head` does.

use crate::harness::*;
use std::process::Stdio;

const SVC_NOTIFY: &str = env!("CARGO_BIN_EXE_svc-notify");

/// Every `svc` command path, for `--help`.
const COMMANDS: &[&[&str]] = &[
    &[],
    &["serve"],
    &["config"],
    &["config", "check"],
    &["keys"],
    &["keys", "create"],
    &["keys", "list"],
    &["keys", "revoke"],
    &["keys", "rotate"],
    &["teams"],
    &["teams", "list"],
    &["spend"],
    &["hooks"],
    &["hooks", "add"],
    &["hooks", "list"],
    &["hooks", "remove"],
    &["hooks", "test"],
    &["events"],
    &["events", "tail"],
];

/// Words of the code, not of the product.
const INTERNAL: &[&str] = &["spec", "crate", "glue", "clap", "binaries", "issue", "svc_cli", "svc-cli"];

async fn help(program: &str, args: &[&str], flag: &str) -> String {
    let out = tokio::process::Command::new(program).args(args).arg(flag).output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{program} {args:?} {flag}: {}", String::from_utf8_lossy(&out.stderr));
    text
}

fn assert_product_help(what: &str, text: &str) {
    let lower = text.to_lowercase();
    for word in INTERNAL {
        assert!(!lower.contains(word), "`{what}` help mentions `{word}`:\n{text}");
    }
    assert!(text.contains("Usage:"), "{text}");
}

#[tokio::test]
async fn help_explains_the_product_without_internal_wording() {
    let svc = env!("CARGO_BIN_EXE_svc");
    for args in COMMANDS {
        for flag in ["-h", "--help"] {
            let text = help(svc, args, flag).await;
            assert_product_help(&format!("svc {} {flag}", args.join(" ")), &text);
        }
    }
    let top = help(svc, &[], "--help").await;
    assert!(top.contains("OpenAI-compatible gateway") && top.contains("Exit status"), "{top}");
    for flag in ["-h", "--help"] {
        let text = help(SVC_NOTIFY, &[], flag).await;
        assert_product_help(&format!("svc-notify {flag}"), &text);
        assert!(text.contains("Send one fleet event") && text.contains("--dry-run"), "{text}");
    }
    // --version stays.
    for program in [svc, SVC_NOTIFY] {
        let version = help(program, &[], "--version").await;
        assert!(version.starts_with("svc") && version.trim_end().ends_with(env!("CARGO_PKG_VERSION")), "{version}");
    }
}

/// Runs `cmd` with its stdout a pipe whose reading end is already closed; returns the exit code and stderr.
async fn run_with_stdout_closed(mut cmd: tokio::process::Command) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    // Not `output()`: it would replace stdout with a pipe of its own.
    let child = cmd.stdout(Stdio::from(writer)).stderr(Stdio::piped()).kill_on_drop(true).spawn().unwrap();
    let out =
        tokio::time::timeout(std::time::Duration::from_secs(60), child.wait_with_output()).await.unwrap().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test]
async fn a_closed_stdout_ends_every_printing_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("svc.yaml");
    let db = dir.path().join("svc.db");
    let yaml = format!(
        "server:\n  database_url: sqlite://{}\nmodel_list:\n  - model_name: m\n    params: {{ model: mock/m }}\n\
         gateway_settings:\n  teams:\n    - team_id: t\nnotifications:\n  ntfy:\n    server: http://127.0.0.1:9\n    \
         topic: svc-fleet-test\n",
        db.display()
    );
    std::fs::write(&config, yaml).unwrap();
    let mut create = svc();
    let out = create.arg("--config").arg(&config).args(["keys", "create", "--team", "t"]).output().await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));

    let runs: &[&[&str]] = &[
        &["spend"],
        &["keys", "list"],
        &["keys", "list", "--json"],
        &["keys", "create", "--team", "t"],
        &["teams", "list"],
        &["--help"],
    ];
    for args in runs {
        let mut cmd = svc();
        cmd.arg("--config").arg(&config).args(*args).env("SVC_HOOKS_FILE", dir.path().join("hooks.json"));
        let (code, stderr) = run_with_stdout_closed(cmd).await;
        assert_eq!(code, Some(0), "svc {args:?}: {stderr}");
        assert!(!stderr.to_lowercase().contains("pipe"), "svc {args:?}: {stderr}");
    }
    let mut notify = tokio::process::Command::new(SVC_NOTIFY);
    notify.arg("--config").arg(&config).arg("--dry-run").env("SVC_HOOKS_FILE", dir.path().join("hooks.json"));
    let (code, stderr) = run_with_stdout_closed(notify).await;
    assert_eq!((code, stderr.as_str()), (Some(0), ""), "svc-notify --dry-run");
}
