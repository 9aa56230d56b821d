//! `svc-fake-anthropic [--api-key KEY] [--no-record] [--port N] [--control-port N]`: the fake Anthropic Messages
//! API (`svc_testkit::anthropic`) as a process, for tests in other languages (tests/python). It binds two ports of
//! 127.0.0.1 (ephemeral unless given) and says so on stderr, in one line:
//!
//! `svc-fake-anthropic listening on http://127.0.0.1:PORT control http://127.0.0.1:PORT2`
//!
//! The first is the API (`POST /v1/messages`, `GET /v1/models`). The second programs it:
//! `POST /push {"message": <an Anthropic message>}` queues that answer for the next `POST /v1/messages` (as
//! JSON, or as the event stream Anthropic would send for it), `POST /push {"error": {"status", "type",
//! "message"}}` queues an error, and `GET /requests` lists every request received (method, path, headers,
//! body). With an empty queue the answer is a plain text message. It runs until killed.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use serde_json::{json, Value};
use std::sync::Arc;
use svc_testkit::anthropic::{Canned, FakeAnthropic};

/// The fake Anthropic Messages API of svc's tests, on 127.0.0.1, with a control port that programs its answers
/// (`POST /push`) and lists what it received (`GET /requests`). It runs until killed.
#[derive(Parser)]
#[command(name = "svc-fake-anthropic", version)]
struct Args {
    /// The `x-api-key` it accepts (any, when absent).
    #[arg(long)]
    api_key: Option<String>,
    /// Keeps no record of the requests (for benchmarks).
    #[arg(long)]
    no_record: bool,
    /// The API's port (0: any free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// The control port (0: any free one).
    #[arg(long, default_value_t = 0)]
    control_port: u16,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async move {
        let fake =
            Arc::new(FakeAnthropic::start_on(&format!("127.0.0.1:{}", args.port), args.api_key.as_deref()).await?);
        fake.set_recording(!args.no_record);
        let control = tokio::net::TcpListener::bind(("127.0.0.1", args.control_port)).await?;
        let control_url = format!("http://{}", control.local_addr()?);
        let app = Router::new().route("/push", post(push)).route("/requests", get(requests)).with_state(fake.clone());
        eprintln!("svc-fake-anthropic listening on {} control {control_url}", fake.base_url());
        axum::serve(control, app).await?;
        Ok(())
    })
}

/// `POST /push`: queues a message or an error.
async fn push(State(fake): State<Arc<FakeAnthropic>>, Json(body): Json<Value>) -> Response {
    if let Some(message) = body.get("message") {
        fake.push(Canned::Message(message.clone()));
    } else if let Some(e) = body.get("error") {
        let status = e.get("status").and_then(Value::as_u64).and_then(|s| u16::try_from(s).ok()).unwrap_or(500);
        let kind = e.get("type").and_then(Value::as_str).unwrap_or("api_error");
        let message = e.get("message").and_then(Value::as_str).unwrap_or("error");
        fake.push(Canned::error(status, kind, message));
    } else {
        return (StatusCode::BAD_REQUEST, "expected {\"message\": …} or {\"error\": …}").into_response();
    }
    StatusCode::NO_CONTENT.into_response()
}

/// `GET /requests`: every request received so far, in order.
async fn requests(State(fake): State<Arc<FakeAnthropic>>) -> Json<Value> {
    let list: Vec<Value> = fake
        .requests()
        .into_iter()
        .map(|r| json!({"method": r.method, "path": r.path, "headers": r.headers, "body": r.body}))
        .collect();
    Json(Value::Array(list))
}
