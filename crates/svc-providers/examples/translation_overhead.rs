//! Added latency of the Anthropic translation over the OpenAI passthrough (issue 5's benchmark): the same chat
//! request through `Deployment::chat` and `chat_stream` against a local OpenAI-compatible test upstream and a
//! local Anthropic-shaped one (both svc-testkit servers in this process, recording off where possible), many
//! times each, alternating. Prints p50/p90 of the whole call and of the time to the first chunk, and the
//! difference. Both fake servers do similar work, so the difference is the translation's cost (request
//! conversion, response or stream-event conversion) plus the small difference between the two servers.
//!
//! Run: `cargo run --release -p svc-providers --example translation_overhead [-- CALLS]` (default 5000).

use futures::StreamExt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use svc_providers::{Anthropic, ChatRequest, Deployment, OpenAi, Upstream};
use svc_testkit::anthropic::FakeAnthropic;
use svc_testkit::upstream::{Behaviour, Upstream as FakeOpenAi};

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p) as usize]
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let calls: usize = std::env::args().nth(1).map(|a| a.parse()).transpose()?.unwrap_or(5000);
    let openai = FakeOpenAi::start_on("127.0.0.1:0", Behaviour { record: false, ..Behaviour::default() }).await?;
    let anthropic = FakeAnthropic::start(Some("k")).await?;
    let client = svc_providers::UpstreamClient::new().map_err(|e| anyhow::anyhow!(e))?;
    let dep = |upstream: Upstream| Deployment {
        id: "bench".into(),
        upstream_model: "m".into(),
        timeout: Duration::from_secs(10),
        max_event_bytes: 1 << 20,
        max_response_bytes: 64 << 20,
        upstream,
    };
    let oa = dep(Upstream::OpenAi(Arc::new(OpenAi::new(client.clone(), &openai.base_url, None))));
    let an = dep(Upstream::Anthropic(Arc::new(Anthropic::new(client, anthropic.base_url(), Some("k"), 1024))));
    let body = br#"{"model":"m","max_tokens":64,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello to the fleet."}],"tools":[{"type":"function","function":{"name":"lookup","description":"look up","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}}]}"#;
    let plain = ChatRequest::parse(body)?;
    let mut body = plain.body().clone();
    body.insert("stream".into(), serde_json::Value::Bool(true));
    let mut streamed = ChatRequest::from_body(body);
    streamed.force_stream_usage();

    let (mut oa_full, mut an_full, mut oa_first, mut an_first) = (vec![], vec![], vec![], vec![]);
    for i in 0..calls + calls / 10 {
        let warm = i < calls / 10;
        for (d, full, first) in [(&oa, &mut oa_full, &mut oa_first), (&an, &mut an_full, &mut an_first)] {
            let t = Instant::now();
            d.chat(plain.clone()).await?;
            let whole = t.elapsed().as_secs_f64() * 1e6;
            let t = Instant::now();
            let mut chunks = d.chat_stream(streamed.clone()).await?;
            chunks.next().await.transpose()?;
            let ttfc = t.elapsed().as_secs_f64() * 1e6;
            while chunks.next().await.is_some() {}
            if !warm {
                full.push(whole);
                first.push(ttfc);
            }
        }
    }
    println!("{calls} calls each, alternating; microseconds");
    for (name, o, a) in
        [("non-streaming", &mut oa_full, &mut an_full), ("time to first chunk", &mut oa_first, &mut an_first)]
    {
        let (o50, a50, o90, a90) = (pct(o, 0.5), pct(a, 0.5), pct(o, 0.9), pct(a, 0.9));
        println!(
            "{name:<20} openai p50 {o50:7.1}  anthropic p50 {a50:7.1}  added {:+7.1}   |  p90 {o90:7.1} vs {a90:7.1}  added {:+7.1}",
            a50 - o50,
            a90 - o90
        );
    }
    Ok(())
}
