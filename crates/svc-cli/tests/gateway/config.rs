//! `svc config check` and start-up with a broken config: every problem with file, line and column.

use crate::harness::*;

async fn check(yaml: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("svc.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = svc().args(["config", "check", "--config"]).arg(&path).output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).replace(&path.display().to_string(), "svc.yaml");
    (out.status.code().unwrap_or(-1), stderr)
}

#[tokio::test]
async fn check_reports_every_problem_with_line_numbers() {
    let (code, stderr) = check(&config_for("http://127.0.0.1:9/v1", "")).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("valid (3 models, 2 teams"), "{stderr}");
    let broken = "server:\n  prot: 4000\nmodel_list:\n  - model_name: a\n    params:\n      model: openai/x\n      api_key: os.environ/SVC_TEST_SURELY_UNSET\ngateway_settings:\n  budget_duration: 30x\n  teams:\n    - team_id: t\n      budget_limit: -1\n      models: [b]\n";
    let (code, stderr) = check(broken).await;
    assert_eq!(code, 1);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines,
        vec![
            "svc.yaml:2:3: server: unknown field `prot` (did you mean `port`?)",
            "svc.yaml:7:16: model_list[0].params.api_key: environment variable `SVC_TEST_SURELY_UNSET` is not set",
            "svc.yaml:9:20: gateway_settings.budget_duration: `30x` is not a duration; write a positive whole number and a unit: s, m, h, d, w or mo (e.g. `30d`)",
            "svc.yaml:12:21: gateway_settings.teams[0].budget_limit: `-1` is negative; amounts and prices must be zero or more",
            "svc.yaml:13:16: gateway_settings.teams[0].models: unknown model `b`; it is not a `model_name` in model_list",
            "svc.yaml: invalid (5 errors)",
        ]
    );
}

#[tokio::test]
async fn serve_refuses_a_broken_config_and_a_missing_master_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("svc.yaml");
    std::fs::write(&path, "server:\n  port: nope\n").unwrap();
    let out = svc().args(["serve", "--config"]).arg(&path).output().await.unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("svc.yaml:2:9: server.port"), "{stderr}");
    std::fs::write(&path, "server:\n  port: 0\n").unwrap();
    let out = svc()
        .env_remove("SVC_MASTER_KEY")
        .args(["serve", "--config"])
        .arg(&path)
        .current_dir(dir.path())
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no master key"));
}

#[tokio::test]
async fn the_shipped_example_is_valid() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/svc.yaml");
    let out = svc()
        .args(["config", "check", "--config", example])
        .env("OPENAI_API_KEY", "x")
        .env("ANTHROPIC_API_KEY", "x")
        .env("SVC_NTFY_TOKEN", "x")
        .env("SVC_WEBHOOK_SECRET", "x")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("valid (4 models, 2 teams, 0 warnings)"), "{stderr}");
}

/// A model entry with several problems: every one is reported, and a team naming the entry's alias is not
/// told the model does not exist.
#[tokio::test]
async fn check_reports_every_problem_of_one_model_entry() {
    let broken = "\
model_list:
  - model_name: openai/gpt-4.1-mini
    params:
      model: opneai/gpt-4.1-mini
      input_cost_per_token: -0.0000004
      output_cost_per_token: lots
      max_output_tokens: many
gateway_settings:
  teams:
    - team_id: executor
      budget_limit: 50
      models: [openai/gpt-4.1-mini]
";
    let (code, stderr) = check(broken).await;
    assert_eq!(code, 1);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines,
        vec![
            "svc.yaml:4:14: model_list[0].params.model: `opneai/gpt-4.1-mini` must be `<provider>/<model id>` with provider openai, anthropic, gemini, azure, vertex_ai, bedrock or mock",
            "svc.yaml:5:29: model_list[0].params.input_cost_per_token: `-0.0000004` is negative; amounts and prices must be zero or more",
            "svc.yaml:6:30: model_list[0].params.output_cost_per_token: `lots` is not a decimal number",
            "svc.yaml:7:26: model_list[0].params.max_output_tokens: expected a whole number of the right size, found `many`",
            "svc.yaml: invalid (4 errors)",
        ]
    );
}

/// A webhook secret read from a misspelt variable is one error (the variable), not also a "missing `secret`";
/// one error is "1 error".
#[tokio::test]
async fn an_unset_secret_variable_is_one_error() {
    let broken = "\
model_list:
  - model_name: m
    params:
      model: mock/echo
notifications:
  webhooks:
    - url: http://127.0.0.1:9/hook
      events: ['*']
      secret: os.environ/SVC_TEST_SURELY_UNSET_SECRET
";
    let (code, stderr) = check(broken).await;
    assert_eq!(code, 1);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines,
        vec![
            "svc.yaml:9:15: notifications.webhooks[0].secret: environment variable `SVC_TEST_SURELY_UNSET_SECRET` is not set",
            "svc.yaml: invalid (1 error)",
        ]
    );
}
