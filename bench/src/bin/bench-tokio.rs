//! The floor arm: a bare tokio program with one task per object, no Kubernetes at all.
//!
//! `bench-tokio timers N` runs N loops of "record a fire, sleep 1 s" (kopf's soft interval:
//! the next run starts one interval after the end of the previous one); `bench-tokio daemons N`
//! runs N loops of "record a tick, wait up to 1 s for the stop signal". SIGTERM stops it (daemons
//! record their stop). Fires go to the fire log at `$BENCH_FIRES`, as in every other arm.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use kopf_bench::names::object_name;
use kopf_bench::{FireLog, Tag};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Waits up to `d`; true if stopped.
async fn sleep(stop: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        () = stop.cancelled() => true,
        () = tokio::time::sleep(d) => stop.is_cancelled(),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, n] = args.as_slice() else {
        bail!("usage: bench-tokio timers|daemons N");
    };
    let n: usize = n.parse().context("N must be a number")?;
    let log = Arc::new(FireLog::from_env()?);
    let stop_all = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    let interval = Duration::from_secs(1);
    for i in 0..n {
        let name = object_name(i);
        let log = Arc::clone(&log);
        let stop = stop_all.clone();
        match mode.as_str() {
            "timers" => tasks.spawn(async move {
                loop {
                    log.record(Tag::Fire, &name);
                    if sleep(&stop, interval).await {
                        break;
                    }
                }
            }),
            "daemons" => tasks.spawn(async move {
                loop {
                    log.record(Tag::Tick, &name);
                    if sleep(&stop, interval).await {
                        break;
                    }
                }
                log.record(Tag::Stop, &name);
            }),
            other => bail!("unknown mode {other:?}"),
        };
    }
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    stop_all.cancel();
    while tasks.join_next().await.is_some() {}
    log.flush();
    Ok(())
}
