//! Added latency of the translations over the OpenAI passthrough (issue 5's benchmark, and issue 31's): the same
//! chat request through `Deployment::chat` and `chat_stream` against a local OpenAI-compatible test upstream and
//! against the translated providers' own fakes (svc-testkit servers in this process, recording off where
//! possible): Anthropic Messages, Google's Gemini API, Bedrock's Converse (its stream in AWS's event-stream
//! frames; with a Bedrock API key, and SigV4-signed). Many calls each, alternating. Prints p50/p90 of the whole call and of the time to the
//! first chunk, and the difference from OpenAI's. The fake servers do similar work, so the difference is the
//! translation's cost (request conversion, signing, response or stream-event conversion) plus the small
//! difference between the servers.
//!
//! Run: `cargo run --release -p svc-providers --example translation_overhead [-- CALLS [ONLY]]` (default 5000);
//! with ONLY (`openai`, `anthropic`, `gemini`, `bedrock` (a Bedrock API key) or `bedrock-sigv4` (signed; the fake
//! then checks each signature in this process too)) it makes only that provider's calls, non-streaming and
//! streamed, and prints nothing: what `bench/translation.sh` counts under callgrind.

use futures::StreamExt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use svc_providers::auth::{Auth, AwsSigner};
use svc_providers::{Anthropic, Bedrock, ChatRequest, Deployment, Gemini, OpenAi, Upstream};
use svc_testkit::anthropic::FakeAnthropic;
use svc_testkit::clouds::bedrock::{self, FakeBedrock};
use svc_testkit::clouds::vertex::{self, FakeVertex};
use svc_testkit::upstream::{Behaviour, Upstream as FakeOpenAi};

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p) as usize]
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let calls: usize = std::env::args().nth(1).map(|a| a.parse()).transpose()?.unwrap_or(5000);
    let only = std::env::args().nth(2);
    let openai = FakeOpenAi::start_on("127.0.0.1:0", Behaviour { record: false, ..Behaviour::default() }).await?;
    let anthropic = FakeAnthropic::start(Some("k")).await?;
    anthropic.set_recording(false);
    let google = FakeVertex::start().await?;
    let aws = FakeBedrock::start(None).await?;
    let client = svc_providers::UpstreamClient::new().map_err(|e| anyhow::anyhow!(e))?;
    let dep = |name: &'static str, upstream: Upstream| {
        (
            name,
            Deployment {
                id: "bench".into(),
                upstream_model: "m".into(),
                timeout: Duration::from_secs(10),
                max_event_bytes: 1 << 20,
                max_response_bytes: 64 << 20,
                upstream,
            },
        )
    };
    let signer = AwsSigner::new(bedrock::ACCESS_KEY_ID, bedrock::SECRET_ACCESS_KEY, None, bedrock::REGION, "bedrock");
    let deployments = [
        dep("openai", Upstream::OpenAi(Arc::new(OpenAi::new(client.clone(), &openai.base_url, None)))),
        dep(
            "anthropic",
            Upstream::Anthropic(Arc::new(Anthropic::new(client.clone(), anthropic.base_url(), Some("k"), 1024))),
        ),
        dep(
            "gemini",
            Upstream::Gemini(Arc::new(Gemini::new(client.clone(), &google.base_url, Some(vertex::GEMINI_API_KEY)))),
        ),
        dep(
            "bedrock",
            Upstream::Bedrock(Arc::new(Bedrock::new(
                client.clone(),
                &aws.base_url,
                Auth::bearer(Some(bedrock::API_KEY)),
                1024,
            ))),
        ),
        dep(
            "bedrock-sigv4",
            Upstream::Bedrock(Arc::new(Bedrock::new(client, &aws.base_url, Auth::SigV4(Arc::new(signer)), 1024))),
        ),
    ];
    let deployments: Vec<_> =
        deployments.into_iter().filter(|(n, _)| only.as_deref().is_none_or(|o| o == *n)).collect();
    let body = br#"{"model":"m","max_tokens":64,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello to the fleet."}],"tools":[{"type":"function","function":{"name":"lookup","description":"look up","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}}]}"#;
    let plain = ChatRequest::parse(body)?;
    let mut body = plain.body().clone();
    body.insert("stream".into(), serde_json::Value::Bool(true));
    let mut streamed = ChatRequest::from_body(body);
    streamed.force_stream_usage();

    let mut times: Vec<(Vec<f64>, Vec<f64>)> = deployments.iter().map(|_| (Vec::new(), Vec::new())).collect();
    for i in 0..calls + calls / 10 {
        let warm = i < calls / 10;
        for ((_, d), (full, first)) in deployments.iter().zip(times.iter_mut()) {
            let t = Instant::now();
            d.chat(plain.clone()).await?;
            let whole = t.elapsed().as_secs_f64() * 1e6;
            let t = Instant::now();
            let mut chunks = d.chat_stream(streamed.clone()).await?;
            chunks.next().await.transpose()?;
            let ttfc = t.elapsed().as_secs_f64() * 1e6;
            while let Some(chunk) = chunks.next().await {
                chunk?;
            }
            if !warm {
                full.push(whole);
                first.push(ttfc);
            }
        }
    }
    if only.is_some() {
        return Ok(());
    }
    println!("{calls} calls each, alternating; microseconds; added = p50 − OpenAI's p50 (p90 likewise)");
    let (mut base_full, mut base_first) = times[0].clone();
    let (b50, b90, f50, f90) =
        (pct(&mut base_full, 0.5), pct(&mut base_full, 0.9), pct(&mut base_first, 0.5), pct(&mut base_first, 0.9));
    for ((name, _), (full, first)) in deployments.iter().zip(times.iter_mut()) {
        let (p50, p90, t50, t90) = (pct(full, 0.5), pct(full, 0.9), pct(first, 0.5), pct(first, 0.9));
        println!(
            "{name:<10} non-streaming p50 {p50:7.1} (added {:+6.1}, p90 {:+6.1})   first chunk p50 {t50:7.1} (added {:+6.1}, p90 {:+6.1})",
            p50 - b50,
            p90 - b90,
            t50 - f50,
            t90 - f90
        );
    }
    Ok(())
}
