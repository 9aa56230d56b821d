//! Test helpers: a temporary workspace (config file, hooks file, HOME) and [`Cmd`], which runs `svc-notify`
//! with a clean environment and a timeout and prints command, stdout and stderr when an assertion fails.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Bound on every `svc-notify` run.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// A temporary directory holding the config file, the hooks file and scripts.
pub struct Workspace {
    pub dir: tempfile::TempDir,
}

/// One webhook entry of a test config.
pub struct Hook<'a> {
    pub url: &'a str,
    pub events: &'a [&'a str],
    pub secret: &'a str,
    pub retry: u32,
    pub timeout: u64,
}

impl<'a> Hook<'a> {
    pub fn new(url: &'a str, events: &'a [&'a str]) -> Hook<'a> {
        Hook { url, events, secret: "s3cret", retry: 3, timeout: 5 }
    }
}

impl Workspace {
    pub fn new() -> Workspace {
        Workspace { dir: tempfile::tempdir().unwrap() }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn hooks_file(&self) -> PathBuf {
        self.path("state/hooks.json")
    }

    /// Writes `svc.yaml` and returns its path.
    pub fn write_config(&self, text: &str) -> PathBuf {
        let p = self.path("svc.yaml");
        std::fs::write(&p, text).unwrap();
        p
    }

    /// A config with a push block for `server` (topic `svc-fleet-test`), optional token and priority,
    /// the given webhooks and hooks settings.
    pub fn config(&self, server: Option<&str>, token: Option<&str>, webhooks: &[Hook<'_>], extra: &str) -> PathBuf {
        let mut y = String::from("fleet:\n  name: alpha\n  node: n1\nnotifications:\n");
        if let Some(s) = server {
            y.push_str(&format!(
                "  ntfy:\n    enabled: true\n    server: {s}\n    topic: svc-fleet-test\n    priority: high\n"
            ));
            if let Some(t) = token {
                y.push_str(&format!("    token: {t}\n"));
            }
        }
        if !webhooks.is_empty() {
            y.push_str("  webhooks:\n");
            for w in webhooks {
                let events = w.events.iter().map(|e| format!("\"{e}\"")).collect::<Vec<_>>().join(", ");
                y.push_str(&format!(
                    "    - url: {}\n      events: [{events}]\n      secret: \"{}\"\n      timeout_seconds: {}\n      retry: {}\n",
                    w.url, w.secret, w.timeout, w.retry
                ));
            }
        }
        y.push_str(extra);
        self.write_config(&y)
    }

    /// Writes an executable `#!/bin/sh` script.
    pub fn script(&self, name: &str, body: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    /// Registers a hook by writing the hooks file directly (the format svc-events documents).
    pub fn register(&self, event: &str, script: &Path) {
        let file = svc_events::senders::hooks::HookFile::at(self.hooks_file());
        file.add(event, script).unwrap();
    }

    /// `svc-notify` with `--config <svc.yaml>` and a clean environment.
    pub fn notify(&self, args: &[&str]) -> Cmd {
        let mut cmd = Cmd::new(env!("CARGO_BIN_EXE_svc-notify"));
        cmd.env("HOME", self.dir.path().to_str().unwrap());
        cmd.env("SVC_HOOKS_FILE", self.hooks_file().to_str().unwrap());
        cmd.arg("--config").arg(self.path("svc.yaml").to_str().unwrap());
        for a in args {
            cmd.arg(a);
        }
        cmd
    }
}

/// A command run with a cleared environment (PATH kept) and a timeout.
pub struct Cmd {
    program: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

/// What a finished command did.
#[derive(Debug)]
pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
    pub shown: String,
}

impl Cmd {
    pub fn new(program: &str) -> Cmd {
        Cmd { program: program.to_string(), args: Vec::new(), env: Vec::new() }
    }

    pub fn arg(&mut self, a: &str) -> &mut Cmd {
        self.args.push(a.to_string());
        self
    }

    pub fn env(&mut self, k: &str, v: &str) -> &mut Cmd {
        self.env.push((k.to_string(), v.to_string()));
        self
    }

    /// Runs it (asynchronously, so test servers on this runtime keep serving).
    pub async fn run(&self) -> Output {
        self.run_in(Path::new(".")).await
    }

    /// Runs it in `dir`.
    pub async fn run_in(&self, dir: &Path) -> Output {
        let mut c = tokio::process::Command::new(&self.program);
        c.current_dir(dir);
        c.args(&self.args).env_clear().env("PATH", std::env::var("PATH").unwrap_or_default()).kill_on_drop(true);
        for (k, v) in &self.env {
            c.env(k, v);
        }
        let started = Instant::now();
        let out = tokio::time::timeout(RUN_TIMEOUT, c.output()).await.expect("svc-notify timed out").unwrap();
        let shown = format!(
            "command: {} {}\nenv: {:?}\nexit: {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.program,
            self.args.join(" "),
            self.env,
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Output {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            elapsed: started.elapsed(),
            shown,
        }
    }
}

impl Output {
    /// Asserts the exit code, printing everything otherwise.
    pub fn code(&self, want: i32) -> &Output {
        assert_eq!(self.code, want, "unexpected exit code\n{}", self.shown);
        self
    }

    /// Asserts stderr is exactly one line starting with `svc-notify: ` and containing `needle`.
    pub fn one_error_line(&self, needle: &str) -> &Output {
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "expected one stderr line\n{}", self.shown);
        assert!(lines[0].starts_with("svc-notify: "), "missing prefix\n{}", self.shown);
        assert!(lines[0].contains(needle), "stderr lacks `{needle}`\n{}", self.shown);
        self
    }

    pub fn stderr_has(&self, needle: &str) -> &Output {
        assert!(self.stderr.contains(needle), "stderr lacks `{needle}`\n{}", self.shown);
        self
    }
}

/// The data `task.done` requires.
pub fn task_done_data(title: &str) -> String {
    serde_json::json!({"task_id": 42, "task_title": title, "epic_id": 7, "duration_seconds": 65}).to_string()
}
