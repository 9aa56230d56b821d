//! The cloud providers through the real binary, against svc-testkit's fakes of Azure OpenAI, Vertex AI and
//! Bedrock, which check credentials as the clouds do: Azure's `api-key`, `api-version` and deployment path (and
//! its v1 route with an Entra token); Vertex AI's JWT-bearer exchange, verified with the service account's
//! public key and cached to expiry; Bedrock's SigV4, recomputed by the fake's own implementation, and a Bedrock
//! API key. Plain, streamed and tool-calling answers, errors per API, spend priced with cache and thinking
//! tokens, and a fallback from one cloud to another.

use crate::harness::*;
use serde_json::{json, Value};
use svc_testkit::clouds::azure::FakeAzure;
use svc_testkit::clouds::bedrock::{self, FakeBedrock};
use svc_testkit::clouds::vertex::{self, FakeVertex};
use svc_testkit::clouds::Reply;

/// The spend records, once `n` are written.
async fn spend(g: &Gateway, n: usize) -> Vec<Value> {
    let mut data = Vec::new();
    for _ in 0..200 {
        data = admin_get(g, "/spend/logs?limit=100").await["data"].as_array().cloned().unwrap_or_default();
        if data.len() >= n {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    data
}

/// The readiness report's provider entries by deployment: (provider, ready).
async fn readiness(g: &Gateway) -> (u16, Vec<(String, String, bool)>) {
    let r = client().get(g.path("/health/readiness")).send().await.unwrap();
    let status = r.status().as_u16();
    let report: Value = r.json().await.unwrap();
    let entries = report["providers"].as_array().cloned().unwrap_or_default();
    let read = |e: &Value| {
        (
            e["deployment"].as_str().unwrap_or_default().to_string(),
            e["provider"].as_str().unwrap_or_default().to_string(),
            e["ready"] == true,
        )
    };
    (status, entries.iter().map(read).collect())
}

/// The record of deployment `d` (the newest).
fn record<'a>(records: &'a [Value], d: &str) -> &'a Value {
    records.iter().find(|r| r["deployment"] == d).unwrap_or_else(|| panic!("no record of {d}: {records:?}"))
}

/// The text of an SSE body's chat chunks, its tool call names, and its usage chunk.
fn read_stream(text: &str) -> (String, Vec<String>, Option<Value>) {
    let (mut content, mut tools, mut usage) = (String::new(), Vec::new(), None);
    for line in text.lines() {
        let Some(data) = line.strip_prefix("data: ") else { continue };
        let Ok(chunk) = serde_json::from_str::<Value>(data) else { continue };
        if let Some(t) = chunk.pointer("/choices/0/delta/content").and_then(Value::as_str) {
            content.push_str(t);
        }
        if let Some(name) = chunk.pointer("/choices/0/delta/tool_calls/0/function/name").and_then(Value::as_str) {
            tools.push(name.to_string());
        }
        if !chunk["usage"].is_null() {
            usage = Some(chunk["usage"].clone());
        }
    }
    (content, tools, usage)
}

/// `POST /v1beta/models/{call}` (the Gemini API) with the key in `x-goog-api-key`: the status and the body.
async fn gemini_api(g: &Gateway, key: &str, call: &str, body: &Value) -> (u16, String) {
    let r = client().post(g.path(&format!("/v1beta/models/{call}"))).header("x-goog-api-key", key).json(body);
    let r = r.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

fn ask(model: &str, stream: bool) -> Value {
    let mut body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream});
    if stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

fn with_tool(mut body: Value) -> Value {
    body["tools"] = json!([{"type": "function", "function": {"name": "read_file", "description": "reads",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]);
    body
}

async fn stream_text(g: &Gateway, key: &str, body: &Value) -> (u16, String) {
    let r = client().post(g.path("/v1/chat/completions")).bearer_auth(key).json(body).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test]
async fn azure_deployments_answer_with_api_key_and_entra_token_on_both_routes() {
    let az = FakeAzure::start("az-key-1", "entra-token-1", &["gpt-4o-prod"]).await.unwrap();
    let base = &az.base_url;
    let yaml = format!(
        "server:\n  host: 127.0.0.1\n  port: 0\nmodel_list:
  - model_name: azure-gpt
    params: {{model: azure/gpt-4o-prod, api_base: '{base}', api_key: az-key-1, api_version: '2024-10-21',
      input_cost_per_token: 0.0000025, output_cost_per_token: 0.00001, cache_read_input_token_cost: 0.00000125}}
  - model_name: azure-v1
    params: {{model: azure/gpt-4o-prod, api_base: '{base}/openai/v1', azure_ad_token: entra-token-1}}
  - model_name: azure-old
    params: {{model: azure/gpt-4o-prod, api_base: '{base}', api_key: az-key-1, api_version: '2022-12-01'}}
  - model_name: azure-wrong-key
    params: {{model: azure/gpt-4o-prod, api_base: '{base}', api_key: not-the-key}}
gateway_settings:\n  health_check_interval_seconds: 0\n  num_retries: 0\n  teams:\n    - team_id: cloud\n      budget_limit: 100\n"
    );
    let g = Gateway::start(&yaml).await;
    let key = g.key(json!({"team_id": "cloud", "key_alias": "azure-user"})).await;

    let (status, _, body) = post_chat(&g, &key, &ask("azure-gpt", false)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "Hello from the cloud.");
    let first = &az.requests()[0];
    assert_eq!(
        (first.path.as_str(), first.query.as_str(), first.headers.get("api-key").map(String::as_str)),
        ("/openai/deployments/gpt-4o-prod/chat/completions", "api-version=2024-10-21", Some("az-key-1"))
    );
    assert!(!first.headers.contains_key("authorization"));
    // 6 uncached input tokens × 2.5e-6 + 4 cached × 1.25e-6 + 5 output × 1e-5 = 7e-5.
    let records = spend(&g, 1).await;
    assert_eq!(record(&records, "azure-gpt")["spend_nanos"].as_i64(), Some(70_000), "{records:?}");

    // The v1 route with an Entra token: the deployment goes as `model`; a streamed tool call.
    az.push(Reply::ToolCall { name: "read_file".into(), args: json!({"path": "notes.txt"}) });
    let (status, text) = stream_text(&g, &key, &with_tool(ask("azure-v1", true))).await;
    assert_eq!(status, 200, "{text}");
    let (_, tools, usage) = read_stream(&text);
    assert_eq!(tools, ["read_file"], "{text}");
    assert_eq!(usage.map(|u| u["completion_tokens"].clone()), Some(json!(5)));
    let v1 = az.requests().pop().unwrap();
    assert_eq!((v1.path.as_str(), v1.query.as_str()), ("/openai/v1/chat/completions", ""));
    assert_eq!(v1.headers.get("authorization").map(String::as_str), Some("Bearer entra-token-1"));
    assert_eq!(v1.body["model"], "gpt-4o-prod");

    // An api-version Azure does not know, a wrong key, and Azure's own error: each one's message comes back.
    let (status, _, body) = post_chat(&g, &key, &ask("azure-old", false)).await;
    assert_eq!(status, 404, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("Resource not found"), "{body}");
    // A key Azure refuses is the gateway's configuration, said so (not the client's key).
    let (status, _, body) = post_chat(&g, &key, &ask("azure-wrong-key", false)).await;
    assert_eq!((status, body["error"]["code"].as_str()), (502, Some("upstream_credentials_refused")), "{body}");
    assert!(!az.requests().pop().unwrap().authorized);
    az.push(Reply::Error { status: 400, kind: "content_filter".into(), message: "The response was filtered".into() });
    let (status, _, body) = post_chat(&g, &key, &ask("azure-gpt", false)).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("filtered"), "{body}");
    // Probes: the model list, with each deployment's credential; the ones Azure refuses are not ready.
    let (status, providers) = readiness(&g).await;
    assert_eq!(status, 503, "{providers:?}");
    for (deployment, provider, ready) in &providers {
        let want = matches!(deployment.as_str(), "azure-gpt" | "azure-v1");
        assert_eq!((provider.as_str(), *ready), ("azure", want), "{providers:?}");
    }
    assert!(!g.log_text().contains("az-key-1") && !g.log_text().contains("entra-token-1"));
}

#[tokio::test]
async fn vertex_ai_exchanges_a_signed_jwt_once_and_serves_gemini_and_claude() {
    let vx = FakeVertex::start().await.unwrap();
    let dir = std::sync::Arc::new(tempfile::tempdir().unwrap());
    std::fs::write(dir.path().join("sa.json"), vx.service_account_json()).unwrap();
    let base = &vx.base_url;
    let (project, location) = (vertex::PROJECT, vertex::LOCATION);
    let yaml = format!(
        "server:\n  host: 127.0.0.1\n  port: 0\nmodel_list:
  - model_name: vertex-gemini
    params: {{model: vertex_ai/gemini-2.5-pro, api_base: '{base}', vertex_project: {project}, vertex_location: {location},
      vertex_credentials: sa.json, input_cost_per_token: 0.00000125, output_cost_per_token: 0.00001,
      cache_read_input_token_cost: 0.000000125}}
  - model_name: vertex-claude
    params: {{model: vertex_ai/claude-sonnet-4@20250514, api_base: '{base}', vertex_location: {location},
      vertex_credentials: sa.json, input_cost_per_token: 0.000003, output_cost_per_token: 0.000015,
      cache_read_input_token_cost: 0.0000003, cache_creation_input_token_cost: 0.00000375}}
gateway_settings:\n  health_check_interval_seconds: 0\n  num_retries: 0\n  teams:\n    - team_id: cloud\n      budget_limit: 100\n"
    );
    let g = Gateway::start_in(dir.clone(), &yaml).await;
    let key = g.key(json!({"team_id": "cloud", "key_alias": "vertex-user"})).await;
    vx.set_token_lifetime(62);

    for _ in 0..2 {
        let (status, _, body) = post_chat(&g, &key, &ask("vertex-gemini", false)).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["choices"][0]["message"]["content"], "Hello from the cloud.");
    }
    assert_eq!(vx.exchanges(), 1, "the token is cached until it expires");
    let calls: Vec<_> = vx.requests().into_iter().filter(|r| r.path != "/token").collect();
    assert!(calls.iter().all(|r| r.authorized), "{calls:?}");
    assert_eq!(
        calls[0].path,
        format!("/v1/projects/{project}/locations/{location}/publishers/google/models/gemini-2.5-pro:generateContent")
    );
    // 7 uncached × 1.25e-6 + 3 cached × 1.25e-7 + (5 + 2 thinking) × 1e-5 = 7.9125e-5.
    let records = spend(&g, 2).await;
    let r = record(&records, "vertex-gemini");
    assert_eq!((r["prompt_tokens"].as_i64(), r["completion_tokens"].as_i64()), (Some(10), Some(7)), "{r}");
    assert_eq!(r["spend_nanos"].as_i64(), Some(79_125), "{r}");

    // Claude on Vertex: streamed chat through streamRawPredict, a Messages client passed through rawPredict.
    let (status, text) = stream_text(&g, &key, &ask("vertex-claude", true)).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(read_stream(&text).0, "Hello from the cloud.", "{text}");
    // Tool calls both ways: Claude's tool_use and Gemini's functionCall, streamed as chat tool calls.
    for model in ["vertex-claude", "vertex-gemini"] {
        vx.push(Reply::ToolCall { name: "read_file".into(), args: json!({"path": "b.txt"}) });
        let (status, text) = stream_text(&g, &key, &with_tool(ask(model, true))).await;
        assert_eq!((status, read_stream(&text).1), (200, vec!["read_file".to_string()]), "{model}: {text}");
        let sent = vx.requests().pop().unwrap().body;
        let declared = sent.pointer("/tools/0/name").or_else(|| sent.pointer("/tools/0/functionDeclarations/0/name"));
        assert_eq!(declared, Some(&json!("read_file")), "{model}: {sent}");
    }
    let messages =
        json!({"model": "vertex-claude", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]});
    let r = client().post(g.path("/v1/messages")).header("x-api-key", &key).json(&messages).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let reply: Value = r.json().await.unwrap();
    assert_eq!(
        (reply["model"].as_str(), reply["content"][0]["text"].as_str()),
        (Some("vertex-claude"), Some("Hello from the cloud."))
    );
    let raw = vx.requests().pop().unwrap();
    assert!(raw.path.ends_with("/publishers/anthropic/models/claude-sonnet-4@20250514:rawPredict"), "{}", raw.path);
    assert_eq!((raw.body["anthropic_version"].as_str(), raw.body.get("model")), (Some("vertex-2023-10-16"), None));

    // A Gemini client passed through to Gemini on Vertex.
    let gemini = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    let (status, text) = gemini_api(&g, &key, "vertex-gemini:generateContent", &gemini).await;
    assert_eq!(status, 200, "{text}");
    let reply: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(reply["candidates"][0]["content"]["parts"][0]["text"], "Hello from the cloud.");
    assert_eq!(reply["usageMetadata"]["thoughtsTokenCount"], 2);

    // Google's errors keep their status and message.
    vx.push(Reply::Error {
        status: 400,
        kind: "INVALID_ARGUMENT".into(),
        message: "Request contains an invalid argument.".into(),
    });
    let (status, _, body) = post_chat(&g, &key, &ask("vertex-gemini", false)).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("invalid argument"), "{body}");

    // A token is exchanged again a minute before it expires (these live 62 s: replaced after 2 s).
    let before = vx.exchanges();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while vx.exchanges() < before + 2 && std::time::Instant::now() < deadline {
        let (status, _, body) = post_chat(&g, &key, &ask("vertex-gemini", false)).await;
        assert_eq!(status, 200, "{body}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(vx.exchanges() >= before + 2, "a token about to expire is replaced");
    // Probes: free token counts, with the token.
    let (status, providers) = readiness(&g).await;
    assert_eq!(status, 200, "{providers:?}");
    assert!(providers.iter().all(|(_, p, ready)| p == "vertex_ai" && *ready), "{providers:?}");
    let paths: Vec<String> = vx.requests().into_iter().filter(|r| r.authorized).map(|r| r.path).collect();
    assert!(paths.iter().any(|p| p.ends_with("/publishers/anthropic/models/count-tokens:rawPredict")), "{paths:?}");
    assert!(paths.iter().any(|p| p.ends_with("gemini-2.5-pro:countTokens")), "{paths:?}");
    assert!(!g.log_text().contains("PRIVATE KEY") && !g.log_text().contains("ya29."));
}

#[tokio::test]
async fn bedrock_signs_with_sigv4_frames_streams_and_falls_back_to_another_cloud() {
    let br = FakeBedrock::start(Some("session-token-1")).await.unwrap();
    let az = FakeAzure::start("az-key-1", "entra", &["gpt-4o-prod"]).await.unwrap();
    let (base, azure) = (&br.base_url, &az.base_url);
    let (key_id, secret, region, api_key) =
        (bedrock::ACCESS_KEY_ID, bedrock::SECRET_ACCESS_KEY, bedrock::REGION, bedrock::API_KEY);
    let yaml = format!(
        "server:\n  host: 127.0.0.1\n  port: 0\nmodel_list:
  - model_name: llama
    params: {{model: 'bedrock/meta.llama3-3-70b-instruct-v1:0', aws_bedrock_runtime_endpoint: '{base}',
      aws_access_key_id: {key_id}, aws_secret_access_key: '{secret}', aws_session_token: session-token-1,
      aws_region_name: {region}, input_cost_per_token: 0.00000072, output_cost_per_token: 0.00000072,
      cache_read_input_token_cost: 0.00000007, cache_creation_input_token_cost: 0.0000009}}
    fallbacks: [azure-gpt]
  - model_name: claude-bedrock
    params: {{model: 'bedrock/us.anthropic.claude-sonnet-4-20250514-v1:0', aws_bedrock_runtime_endpoint: '{base}',
      api_key: {api_key}, aws_region_name: {region}}}
  - model_name: wrong-secret
    params: {{model: 'bedrock/meta.llama3-3-70b-instruct-v1:0', aws_bedrock_runtime_endpoint: '{base}',
      aws_access_key_id: {key_id}, aws_secret_access_key: not-the-secret, aws_session_token: session-token-1,
      aws_region_name: {region}}}
  - model_name: azure-gpt
    params: {{model: azure/gpt-4o-prod, api_base: '{azure}', api_key: az-key-1}}
gateway_settings:\n  health_check_interval_seconds: 0\n  num_retries: 1\n  teams:\n    - team_id: cloud\n      budget_limit: 100\n"
    );
    let g = Gateway::start(&yaml).await;
    let key = g.key(json!({"team_id": "cloud", "key_alias": "bedrock-user"})).await;

    let (status, _, body) = post_chat(&g, &key, &ask("llama", false)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "Hello from the cloud.");
    let first = br.requests().remove(0);
    assert!(first.authorized, "SigV4 checked by the fake's own implementation");
    assert_eq!(first.path, "/model/meta.llama3-3-70b-instruct-v1%3A0/converse");
    assert_eq!(first.headers.get("x-amz-security-token").map(String::as_str), Some("session-token-1"));
    // 10 + 4 cache reads + 2 cache writes in, 5 out: 10×7.2e-7 + 4×7e-8 + 2×9e-7 + 5×7.2e-7 = 1.288e-5.
    let records = spend(&g, 1).await;
    let r = record(&records, "llama");
    assert_eq!((r["prompt_tokens"].as_i64(), r["spend_nanos"].as_i64()), (Some(16), Some(12_880)), "{r}");

    // ConverseStream's binary frames, with a tool call.
    br.push(Reply::ToolCall { name: "read_file".into(), args: json!({"path": "notes.txt"}) });
    let (status, text) = stream_text(&g, &key, &with_tool(ask("llama", true))).await;
    assert_eq!(status, 200, "{text}");
    let (_, tools, usage) = read_stream(&text);
    assert_eq!(tools, ["read_file"], "{text}");
    assert!(text.contains(r#"\"path\""#) || text.contains("notes.txt"), "{text}");
    assert_eq!(usage.map(|u| u["prompt_tokens"].clone()), Some(json!(16)));
    let sent = br.requests().pop().unwrap();
    assert_eq!(sent.body["toolConfig"]["tools"][0]["toolSpec"]["name"], "read_file");

    // Claude with a Bedrock API key: InvokeModel's stream of Messages events, passed through to a Messages client.
    let messages = json!({"model": "claude-bedrock", "max_tokens": 100, "stream": true,
        "metadata": {"user_id": "session_1"}, "messages": [{"role": "user", "content": "hi"}]});
    let r = client().post(g.path("/v1/messages")).header("x-api-key", &key).json(&messages).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(
        text.contains("event: message_start") && text.contains("text_delta") && text.contains("event: message_stop"),
        "{text}"
    );
    let invoke = br.requests().pop().unwrap();
    assert_eq!(invoke.path, "/model/us.anthropic.claude-sonnet-4-20250514-v1%3A0/invoke-with-response-stream");
    assert_eq!(invoke.headers.get("authorization").map(String::as_str), Some(format!("Bearer {api_key}").as_str()));
    assert_eq!(
        (invoke.body["anthropic_version"].as_str(), invoke.body.get("model")),
        (Some("bedrock-2023-05-31"), None)
    );
    let (status, text) = stream_text(&g, &key, &ask("claude-bedrock", true)).await;
    assert_eq!((status, read_stream(&text).0.as_str()), (200, "Hello from the cloud."), "{text}");

    // A wrong secret: the signature the fake computes does not match.
    let (status, _, body) = post_chat(&g, &key, &ask("wrong-secret", false)).await;
    assert_eq!((status, body["error"]["code"].as_str()), (502, Some("upstream_credentials_refused")), "{body}");
    assert!(!br.requests().pop().unwrap().authorized);

    // Bedrock throttles: the alias falls back to Azure.
    br.push(Reply::Error { status: 429, kind: "ThrottlingException".into(), message: "Too many requests".into() });
    let (status, _, body) = post_chat(&g, &key, &ask("llama", false)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "Hello from the cloud.");
    assert_eq!(az.requests().len(), 1, "served by Azure");
    let records = spend(&g, 6).await;
    assert!(records.iter().any(|r| r["deployment"] == "azure-gpt" && r["model"] == "llama"), "{records:?}");
    // Probes: Bedrock's free CountTokens; the deployment with the wrong secret is the one not ready.
    let (status, providers) = readiness(&g).await;
    assert_eq!(status, 503, "{providers:?}");
    for (deployment, provider, ready) in &providers {
        let want = if deployment == "azure-gpt" { "azure" } else { "bedrock" };
        assert_eq!((provider.as_str(), *ready), (want, deployment != "wrong-secret"), "{providers:?}");
    }
    assert!(br.requests().iter().any(|r| r.path.ends_with("/count-tokens") && r.authorized));
    assert!(!g.log_text().contains(secret) && !g.log_text().contains(api_key));
}

#[tokio::test]
async fn gemini_api_deployments_and_the_gemini_front_end() {
    let gm = FakeVertex::start().await.unwrap();
    let up = svc_testkit::upstream::Upstream::start().await.unwrap();
    let (base, openai, gkey) = (&gm.base_url, &up.base_url, vertex::GEMINI_API_KEY);
    let yaml = format!(
        "server:\n  host: 127.0.0.1\n  port: 0\nmodel_list:
  - model_name: gemini-pro
    params: {{model: gemini/gemini-2.5-pro, api_base: '{base}', api_key: {gkey},
      input_cost_per_token: 0.00000125, output_cost_per_token: 0.00001}}
  - model_name: gemini-embed
    params: {{model: gemini/gemini-embedding-001, api_base: '{base}', api_key: {gkey}}}
  - model_name: chat-up
    params: {{model: openai/up-model, api_base: '{openai}', api_key: upstream-secret}}
gateway_settings:\n  health_check_interval_seconds: 0\n  num_retries: 0\n  teams:\n    - team_id: cloud\n      budget_limit: 100\n"
    );
    let g = Gateway::start(&yaml).await;
    let key = g.key(json!({"team_id": "cloud", "key_alias": "gemini-user"})).await;

    // The gemini/ provider: a chat completion translated, and a streamed tool call.
    let (status, _, body) = post_chat(&g, &key, &ask("gemini-pro", false)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "Hello from the cloud.");
    assert_eq!(
        (body["usage"]["prompt_tokens"].as_i64(), body["usage"]["completion_tokens"].as_i64()),
        (Some(10), Some(7))
    );
    let sent = gm.requests().pop().unwrap();
    assert_eq!(sent.path, "/v1beta/models/gemini-2.5-pro:generateContent");
    assert!(sent.authorized && sent.body["contents"][0]["parts"][0]["text"] == "hi", "{sent:?}");
    gm.push(Reply::ToolCall { name: "read_file".into(), args: json!({"path": "a.txt"}) });
    let (status, text) = stream_text(&g, &key, &with_tool(ask("gemini-pro", true))).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(read_stream(&text).1, ["read_file"], "{text}");
    assert_eq!(gm.requests().pop().unwrap().query, "alt=sse");

    // The Gemini front end translated to an OpenAI-compatible deployment, streamed as Gemini CLI asks.
    let gemini = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "generationConfig": {"maxOutputTokens": 50}});
    let (status, text) = gemini_api(&g, &key, "chat-up:streamGenerateContent?alt=sse", &gemini).await;
    assert_eq!(status, 200, "{text}");
    let events: Vec<Value> =
        text.lines().filter_map(|l| l.strip_prefix("data: ")).filter_map(|d| serde_json::from_str(d).ok()).collect();
    let said: String =
        events.iter().filter_map(|e| e.pointer("/candidates/0/content/parts/0/text").and_then(Value::as_str)).collect();
    assert_eq!(said, "Hello from the test upstream.", "{text}");
    let usage = events.iter().rev().find_map(|e| e.get("usageMetadata")).unwrap();
    assert_eq!((usage["promptTokenCount"].as_i64(), usage["candidatesTokenCount"].as_i64()), (Some(10), Some(5)));
    let sent = up.requests().pop().unwrap().body;
    assert!(sent["max_completion_tokens"] == 50 || sent["max_tokens"] == 50, "the cap goes on: {sent}");

    // countTokens passed through; embeddings from a gemini/ deployment, in both APIs.
    let (status, text) = gemini_api(&g, &key, "gemini-pro:countTokens", &gemini).await;
    assert_eq!(status, 200, "{text}");
    let counted: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(counted["totalTokens"], 7, "{counted}");
    let embed = json!({"content": {"parts": [{"text": "embed me"}]}});
    let r =
        client().post(g.path("/v1beta/models/gemini-embed:embedContent")).query(&[("key", key.as_str())]).json(&embed);
    let r = r.send().await.unwrap();
    assert_eq!(r.status(), 200);
    let embedded: Value = r.json().await.unwrap();
    assert_eq!(embedded["embedding"]["values"], json!([0.5, 0.0]), "{embedded}");
    let openai = json!({"model": "gemini-embed", "input": ["a", "b"]});
    let r = client().post(g.path("/v1/embeddings")).bearer_auth(&key).json(&openai).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let list: Value = r.json().await.unwrap();
    assert_eq!(list["data"][1]["embedding"], json!([0.5, 1.0]), "{list}");
    assert_eq!(gm.requests().pop().unwrap().path, "/v1beta/models/gemini-embedding-001:batchEmbedContents");

    // Google's errors, in Google's shape, to a Gemini client.
    gm.push(Reply::Error { status: 429, kind: "RESOURCE_EXHAUSTED".into(), message: "Quota exceeded".into() });
    let (status, text) = gemini_api(&g, &key, "gemini-pro:generateContent", &gemini).await;
    assert_eq!(status, 429, "{text}");
    let error: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (error["error"]["code"].as_i64(), error["error"]["status"].as_str()),
        (Some(429), Some("RESOURCE_EXHAUSTED")),
        "{error}"
    );
    assert!(!g.log_text().contains(gkey));
}
