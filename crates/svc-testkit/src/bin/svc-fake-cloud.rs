//! `svc-fake-cloud --cloud gemini|vertex|bedrock|azure`: one of svc-testkit's cloud fakes (`svc_testkit::clouds`)
//! as a process, for benchmarks and tests in other languages. It binds an ephemeral port of 127.0.0.1 and says so
//! on stderr, in one line: `svc-fake-cloud listening on http://127.0.0.1:PORT`. Its credentials are the
//! fakes' constants (the Gemini API key, Bedrock's access key, secret and region; Azure: key `az-key`,
//! deployment `up-mini`). It runs until killed.

use clap::{Parser, ValueEnum};
use svc_testkit::clouds::{azure::FakeAzure, bedrock::FakeBedrock, vertex::FakeVertex};

/// Which cloud.
#[derive(Clone, Copy, ValueEnum)]
enum Cloud {
    /// Google's Gemini API (and Vertex AI, with its token endpoint).
    Gemini,
    /// Vertex AI (the same server).
    Vertex,
    /// Bedrock's runtime.
    Bedrock,
    /// Azure OpenAI.
    Azure,
}

/// A fake cloud of svc's tests, on 127.0.0.1, until killed.
#[derive(Parser)]
#[command(name = "svc-fake-cloud", version)]
struct Args {
    /// The cloud to be.
    #[arg(long, value_enum)]
    cloud: Cloud,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    rt.block_on(async move {
        // Each fake stops when dropped: they are held until the process is killed.
        let url = match args.cloud {
            Cloud::Gemini | Cloud::Vertex => Box::leak(Box::new(FakeVertex::start().await?)).base_url.clone(),
            Cloud::Bedrock => Box::leak(Box::new(FakeBedrock::start(None).await?)).base_url.clone(),
            Cloud::Azure => {
                Box::leak(Box::new(FakeAzure::start("az-key", "az-token", &["up-mini"]).await?)).base_url.clone()
            }
        };
        eprintln!("svc-fake-cloud listening on {url}");
        std::future::pending::<()>().await;
        Ok(())
    })
}
