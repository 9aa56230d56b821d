//! `svc events tail`: it needs only the push block (secrets of other parts of the config may be unset), it
//! reconnects after the push server closed the stream and resumes after the last message it printed, and it
//! gives up with exit 2 and a clear message when the server stays away.

use crate::util::*;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use svc_testkit::ntfy::NtfyServer;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// A running `svc events tail` whose output lines are collected as they come.
struct Tail {
    child: tokio::process::Child,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<Vec<String>>>,
}

fn collect(from: impl AsyncRead + Unpin + Send + 'static) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let into = lines.clone();
    tokio::spawn(async move {
        let mut reader = BufReader::new(from).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            into.lock().unwrap().push(line);
        }
    });
    lines
}

impl Tail {
    fn start(ws: &Workspace, args: &[&str]) -> Tail {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_svc"));
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", ws.dir.path())
            .arg("--config")
            .arg(ws.path("svc.yaml"))
            .args(["events", "tail"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().unwrap();
        let stdout = collect(child.stdout.take().unwrap());
        let stderr = collect(child.stderr.take().unwrap());
        Tail { child, stdout, stderr }
    }

    fn shown(&self) -> String {
        format!(
            "--- stdout\n{}\n--- stderr\n{}",
            self.stdout.lock().unwrap().join("\n"),
            self.stderr.lock().unwrap().join("\n")
        )
    }

    /// Waits (20 s at most) until a stdout line contains `needle`.
    async fn wait_stdout(&self, needle: &str) {
        let ok = eventually(|| self.stdout.lock().unwrap().iter().any(|l| l.contains(needle))).await;
        assert!(ok, "no stdout line with `{needle}`\n{}", self.shown());
    }

    async fn wait_stderr(&self, needle: &str) {
        let ok = eventually(|| self.stderr.lock().unwrap().iter().any(|l| l.contains(needle))).await;
        assert!(ok, "no stderr line with `{needle}`\n{}", self.shown());
    }

    fn count(&self, needle: &str) -> usize {
        self.stdout.lock().unwrap().iter().filter(|l| l.contains(needle)).count()
    }
}

async fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while tokio::time::Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f()
}

/// Publishes `title` straight to the push server, as any fleet member would.
async fn publish(ntfy: &NtfyServer, title: &str) {
    let r = reqwest::Client::new()
        .post(format!("{}/svc-fleet-test", ntfy.url()))
        .header("X-Title", title)
        .body(format!("{title} body"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// A config whose master key, webhook secret and upstream key come from variables that are not set: `svc serve`
/// and `svc-notify` would refuse it, `svc events tail` reads only the push block.
fn config_with_unset_secrets(ws: &Workspace, server: &str) {
    let hook = Hook { secret: "os.environ/SVC_TEST_UNSET_HOOK_SECRET", ..Hook::new("http://127.0.0.1:9/hook", &["*"]) };
    let extra = "server:\n  master_key: os.environ/SVC_TEST_UNSET_MASTER\nmodel_list:\n  - model_name: m\n    params:\n      model: openai/m\n      api_key: os.environ/SVC_TEST_UNSET_UPSTREAM\n";
    ws.config(Some(server), None, &[hook], extra);
}

#[tokio::test]
async fn tail_needs_only_the_push_block_and_reconnects_after_the_last_message() {
    let ntfy = NtfyServer::start().await;
    let ws = Workspace::new();
    config_with_unset_secrets(&ws, &ntfy.url());
    publish(&ntfy, "first").await;
    let tail = Tail::start(&ws, &["--since", "all"]);
    tail.wait_stdout("first").await;
    // The push server goes away (the stream closes) and comes back on the same port.
    ntfy.down();
    tail.wait_stderr("reconnecting").await;
    ntfy.up().await;
    publish(&ntfy, "second").await;
    tail.wait_stdout("second").await;
    tail.wait_stderr("reconnected").await;
    publish(&ntfy, "third").await;
    tail.wait_stdout("third").await;
    // Resumed after the last message seen: nothing printed twice.
    let counts = (tail.count("first"), tail.count("second"), tail.count("third"));
    assert_eq!(counts, (1, 1, 1), "{}", tail.shown());
}

#[tokio::test]
async fn tail_gives_up_with_exit_2_when_the_server_stays_away() {
    let ntfy = NtfyServer::start().await;
    let ws = Workspace::new();
    config_with_unset_secrets(&ws, &ntfy.url());
    publish(&ntfy, "hello").await;
    let mut tail = Tail::start(&ws, &["--reconnect-timeout", "2", "--since", "all"]);
    tail.wait_stdout("hello").await;
    ntfy.down();
    let started = tokio::time::Instant::now();
    let status = tokio::time::timeout(Duration::from_secs(30), tail.child.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(2), "{}", tail.shown());
    assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());
    tail.wait_stderr("reconnecting").await;
    let err = tail.stderr.lock().unwrap().join("\n");
    let last = err.lines().last().unwrap_or_default();
    assert!(last.starts_with("svc: ") && last.contains(&ntfy.url()) && last.contains("2 s"), "{err}");
    assert!(last.contains("could not reconnect"), "{err}");
}
