//! `svc-fake-upstream [--port N] [--threads N]`: the test upstream as a process, for benchmarks (recording off).

use clap::Parser;
use std::time::Duration;
use svc_testkit::upstream::{Behaviour, Upstream};

/// The fake OpenAI-compatible upstream (chat completions, Responses, embeddings) of svc's tests and benchmarks,
/// on 127.0.0.1. It says where it listens on stderr and runs until killed.
#[derive(Parser)]
#[command(name = "svc-fake-upstream", version)]
struct Args {
    /// The port to listen on (0: any free one).
    #[arg(long, default_value_t = 9000)]
    port: u16,
    /// Tokio worker threads.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    threads: u16,
}

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let Args { port, threads } = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(usize::from(threads)).enable_all().build()?;
    rt.block_on(async move {
        let b = Behaviour { record: false, ..Behaviour::default() };
        let up = Upstream::start_on(&format!("127.0.0.1:{port}"), b).await?;
        eprintln!("svc-fake-upstream listening on {}", up.base_url);
        loop {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
    })
}
