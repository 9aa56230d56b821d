//! `svc-fake-upstream --port N`: the test upstream as a process, for benchmarks (recording off).

use std::time::Duration;
use svc_testkit::upstream::{Behaviour, Upstream};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let mut port = 9000u16;
    let mut threads = 1usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--port" => port = args.next().unwrap_or_default().parse()?,
            "--threads" => threads = args.next().unwrap_or_default().parse()?,
            other => anyhow::bail!("unknown argument `{other}` (use --port N --threads N)"),
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build()?;
    rt.block_on(async move {
        let b = Behaviour { record: false, ..Behaviour::default() };
        let up = Upstream::start_on(&format!("127.0.0.1:{port}"), b).await?;
        eprintln!("svc-fake-upstream listening on {}", up.base_url);
        loop {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
    })
}
