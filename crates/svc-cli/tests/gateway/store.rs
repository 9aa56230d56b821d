//! Where the store is, whatever folder a command runs in: the demo's in the user's data folder, a config
//! file's relative SQLite path beside the file; and store files readable by their owner only.

use crate::harness::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// A temporary tree: `home/`, `data/` (XDG_DATA_HOME) and two unrelated working folders `a/` and `b/`.
fn tree() -> Arc<tempfile::TempDir> {
    let root = tempfile::tempdir().unwrap();
    for d in ["home", "data", "a", "b", "conf"] {
        std::fs::create_dir(root.path().join(d)).unwrap();
    }
    Arc::new(root)
}

/// `svc` with the tree's HOME and XDG_DATA_HOME, run in `cwd`.
fn svc_in(root: &Path, cwd: &str) -> tokio::process::Command {
    let mut cmd = svc();
    cmd.env("HOME", root.join("home")).env("XDG_DATA_HOME", root.join("data")).current_dir(root.join(cwd));
    cmd
}

async fn create_key(mut cmd: tokio::process::Command) -> (String, String) {
    let out = cmd.args(["keys", "create", "--team", "executor"]).output().await.unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let key = stdout.trim().to_string();
    assert_eq!(stdout, format!("{key}\n"), "stdout is the key alone");
    (key, stderr)
}

/// Polls until the running gateway accepts `key` (it picks up other processes' keys within a second).
async fn accepted(g: &Gateway, key: &str) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        if post_chat(g, key, &chat("openai/gpt-4.1-mini")).await.0 == 200 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o777
}

fn no_store_in(root: &Path, dirs: &[&str]) {
    for d in dirs {
        let stray: Vec<PathBuf> = std::fs::read_dir(root.join(d)).unwrap().map(|e| e.unwrap().path()).collect();
        assert!(stray.iter().all(|p| !p.to_string_lossy().contains(".db")), "a store in {d}/: {stray:?}");
    }
}

#[tokio::test]
async fn the_demo_keeps_one_store_per_user_whatever_the_folder() {
    let root = tree();
    let mut serve = svc_in(root.path(), "a");
    serve.args(["serve", "--port", "0"]);
    let g = Gateway::launch(serve, root.clone(), root.path().join("none.yaml")).await;
    let store = root.path().join("data/svc/svc.db");
    assert!(g.log.lock().unwrap().iter().any(|l| l.contains(&format!("using the demo store {}", store.display()))));

    let (key, stderr) = create_key(svc_in(root.path(), "b")).await;
    assert!(stderr.contains(&format!("svc: using the demo store {}", store.display())), "{stderr}");
    assert!(accepted(&g, &key).await, "the server does not see a key created from another folder");
    no_store_in(root.path(), &["a", "b"]);

    // The store's folder and files are the user's alone.
    assert_eq!(mode(&root.path().join("data/svc")), 0o700);
    for name in ["svc.db", "svc.db-wal", "svc.db-shm"] {
        assert_eq!(mode(&root.path().join("data/svc").join(name)), 0o600, "{name}");
    }
    // Without XDG_DATA_HOME the store is under ~/.local/share.
    let mut cmd = svc_in(root.path(), "b");
    cmd.env_remove("XDG_DATA_HOME");
    let (_, stderr) = create_key(cmd).await;
    let home_store = root.path().join("home/.local/share/svc/svc.db");
    assert!(stderr.contains(&home_store.display().to_string()), "{stderr}");
    assert!(home_store.exists());
}

#[tokio::test]
async fn a_relative_store_path_is_taken_from_the_config_files_folder() {
    let root = tree();
    let yaml = "server:\n  host: 127.0.0.1\n  port: 0\n  database_url: sqlite://gateway.db\nmodel_list:\n  \
                - model_name: openai/gpt-4.1-mini\n    params: { model: mock/gpt-4.1-mini }\ngateway_settings:\n  \
                teams:\n    - team_id: executor\n";
    let config = root.path().join("conf/svc.yaml");
    std::fs::write(&config, yaml).unwrap();
    let mut serve = svc_in(root.path(), "a");
    serve.args(["serve", "--config", "../conf/svc.yaml"]);
    let g = Gateway::launch(serve, root.clone(), config).await;

    let mut create = svc_in(root.path(), "b");
    create.args(["--config", "../conf/svc.yaml"]);
    let (key, stderr) = create_key(create).await;
    assert!(!stderr.contains("demo store"), "{stderr}");
    assert!(accepted(&g, &key).await, "the server does not see a key created from another folder");
    assert_eq!(mode(&root.path().join("conf/gateway.db")), 0o600);
    no_store_in(root.path(), &["a", "b"]);
}
