//! Starts the real `svc` binary on an ephemeral port with a temporary config and store, and talks to it.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub const MASTER: &str = "sk-master-test-0123456789";

/// A running gateway; killed on drop.
pub struct Gateway {
    pub url: String,
    pub dir: Arc<tempfile::TempDir>,
    pub config: PathBuf,
    child: Child,
    pub log: Arc<Mutex<Vec<String>>>,
}

/// A config whose models point at `api_base` (three aliases, two teams).
pub fn config_for(api_base: &str, extra_server: &str) -> String {
    config_with(api_base, api_base, extra_server)
}

/// Like [`config_for`], with `openai/gpt-4.1-nano` at its own `nano_base`.
pub fn config_with(api_base: &str, nano_base: &str, extra_server: &str) -> String {
    format!(
        "server:\n  host: 127.0.0.1\n  port: 0\n{extra_server}\
model_list:
  - model_name: openai/gpt-4.1-mini
    params:
      model: openai/up-mini
      api_base: {api_base}
      api_key: upstream-secret
      timeout_seconds: 2
      input_cost_per_token: 0.0000004
      output_cost_per_token: 0.0000016
  - model_name: openai/gpt-4.1-nano
    params:
      model: openai/up-nano
      api_base: {nano_base}
  - model_name: anthropic/claude-opus-4-1
    params:
      model: mock/claude-opus-4-1
gateway_settings:
  teams:
    - team_id: executor
      budget_limit: 50
      models: [openai/gpt-4.1-mini, openai/gpt-4.1-nano]
    - team_id: orchestrator
      budget_limit: 200
      models: [anthropic/claude-opus-4-1]
"
    )
}

pub fn svc() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_svc"));
    c.env("SVC_MASTER_KEY", MASTER).env_remove("SVC_CONFIG").env("RUST_LOG", "info");
    c
}

impl Gateway {
    /// Starts a gateway with `yaml` in a fresh directory.
    pub async fn start(yaml: &str) -> Gateway {
        let dir = Arc::new(tempfile::tempdir().unwrap());
        Gateway::start_in(dir, yaml).await
    }

    /// Starts a gateway in `dir` (reusing its store when one is there).
    pub async fn start_in(dir: Arc<tempfile::TempDir>, yaml: &str) -> Gateway {
        Gateway::start_with_env(dir, yaml, &[]).await
    }

    /// [`Gateway::start_in`] with `env` set for the process.
    pub async fn start_with_env(dir: Arc<tempfile::TempDir>, yaml: &str, env: &[(&str, &str)]) -> Gateway {
        let config = dir.path().join("svc.yaml");
        let db = dir.path().join("svc.db");
        let yaml = if yaml.contains("database_url") {
            yaml.to_string()
        } else {
            yaml.replacen("server:\n", &format!("server:\n  database_url: sqlite://{}\n", db.display()), 1)
        };
        std::fs::write(&config, yaml).unwrap();
        let mut cmd = svc();
        cmd.arg("serve").arg("--config").arg(&config).current_dir(dir.path()).envs(env.iter().copied());
        Gateway::launch(cmd, dir, config).await
    }

    /// Starts `cmd` (an `svc serve` command) and waits for it to listen. `dir` is kept alive with it.
    pub async fn launch(mut cmd: Command, dir: Arc<tempfile::TempDir>, config: PathBuf) -> Gateway {
        let mut child = cmd
            .env("SVC_HOOKS_FILE", dir.path().join("hooks.json"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = tokio::sync::oneshot::channel();
        let log2 = log.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            let mut tx = Some(tx);
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(i) = line.find("listening on http") {
                    // A text line ends the address with a space, a JSON line with its closing quote.
                    let rest = &line[i + "listening on ".len()..];
                    let addr =
                        rest.split(|c: char| c.is_whitespace() || c == '"').next().unwrap_or_default().to_string();
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(addr);
                    }
                }
                log2.lock().unwrap().push(line);
            }
        });
        let url = match tokio::time::timeout(Duration::from_secs(30), rx).await {
            Ok(Ok(u)) => u,
            _ => panic!("svc did not start; log:\n{}", log.lock().unwrap().join("\n")),
        };
        Gateway { url, dir, config, child, log }
    }

    /// The process id of the running gateway.
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or_default()
    }

    /// The gateway's log lines so far.
    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    pub fn path(&self, p: &str) -> String {
        format!("{}{}", self.url, p)
    }

    /// `host:port` of the gateway.
    pub fn addr(&self) -> &str {
        self.url.trim_start_matches("http://")
    }

    /// Sends SIGTERM, as a service manager does to stop it.
    pub fn terminate(&self) {
        let pid = self.child.id().expect("the gateway is running");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    }

    /// Waits up to `within` for the process to exit; its exit code, or `None` when it is still running.
    pub async fn exit_code(&mut self, within: Duration) -> Option<i32> {
        match tokio::time::timeout(within, self.child.wait()).await {
            Ok(status) => Some(status.unwrap().code().unwrap_or(-1)),
            Err(_) => None,
        }
    }

    /// kill -9.
    pub async fn kill(mut self) -> Arc<tempfile::TempDir> {
        self.child.kill().await.unwrap();
        self.dir.clone()
    }

    /// Creates a virtual key through the admin API; returns the secret.
    pub async fn key(&self, body: Value) -> String {
        let r = client().post(self.path("/key/generate")).bearer_auth(MASTER).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
        r.json::<Value>().await.unwrap()["key"].as_str().unwrap().to_string()
    }

    /// The store, once every answered request's spend record is in it (`/spend/logs` flushes the journal's
    /// writer first).
    pub async fn store(&self) -> svc_store::Store {
        let r = client().get(self.path("/spend/logs?limit=1")).bearer_auth(MASTER).send().await.unwrap();
        assert_eq!(r.status(), 200);
        svc_store::Store::connect(&self.db_url()).await.unwrap()
    }

    pub fn db_url(&self) -> String {
        format!("sqlite://{}", self.dir.path().join("svc.db").display())
    }

    pub fn dir_path(&self) -> &Path {
        self.dir.path()
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap()
}

pub fn chat(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
}

/// POSTs a chat completion with `key`; returns status, headers and JSON body.
pub async fn post_chat(g: &Gateway, key: &str, body: &Value) -> (u16, reqwest::header::HeaderMap, Value) {
    let r = client().post(g.path("/v1/chat/completions")).bearer_auth(key).json(body).send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().await.unwrap();
    let json = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, headers, json)
}

/// GETs an admin path with the master key; returns the JSON answer.
pub async fn admin_get(g: &Gateway, path: &str) -> Value {
    client().get(g.path(path)).bearer_auth(MASTER).send().await.unwrap().json().await.unwrap()
}

/// Waits until `f` holds, up to `secs`.
pub async fn eventually(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while tokio::time::Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    f()
}
