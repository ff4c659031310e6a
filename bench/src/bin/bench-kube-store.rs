//! The memory reference arm: a raw kube-rs watch + store of the benchmark objects, nothing else.
//!
//! `bench-kube-store N` keeps every `KopfExample` of the benchmark's namespace in a
//! `kube::runtime::reflector` store fed by `kube::runtime::watcher` (default configuration and
//! backoff, as a plain kube-rs controller keeps its cache), and does nothing with them: no
//! timers, no writes, no fire log. Once the store holds `N` objects it prints `synced <count>`
//! on stdout (the harness waits for that line instead of fires). Runs until SIGTERM, then exits
//! 0. Logging is installed as in the kopf-rs arm (`kopf_runtime::init_logging`, human lines at
//! INFO), so both carry the same subscriber.

use std::io::Write as _;

use anyhow::{Context as _, bail};
use futures::StreamExt as _;
use kopf_bench::kubeutil::client;
use kopf_bench::names::NAMESPACE;
use kopf_examples::crd::KopfExample;
use kopf_runtime::{LogFormat, init_logging};
use kube::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use tokio::signal::unix::{SignalKind, signal};

/// The line the harness waits for, followed by the number of objects in the store.
const SYNCED: &str = "synced";

/// Prints `synced <count>` once the store holds at least `n` objects; true once printed.
fn report_synced(store: &Store<KopfExample>, n: usize) -> anyhow::Result<bool> {
    let count = store.len();
    if count < n {
        return Ok(false);
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "{SYNCED} {count}")?;
    out.flush()?;
    Ok(true)
}

/// Watches the benchmark objects into a store until the stream ends (it does not, normally).
async fn watch(n: usize) -> anyhow::Result<()> {
    let api: Api<KopfExample> = Api::namespaced(client(None).await?, NAMESPACE);
    let (store, writer) = reflector::store();
    let events = watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer);
    let mut events = std::pin::pin!(events);
    let mut synced = false;
    while let Some(event) = events.next().await {
        if let Err(e) = event {
            eprintln!("watching: {e}");
            continue;
        }
        if !synced {
            synced = report_synced(&store, n)?;
        }
    }
    bail!("the watch stream ended")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [n] = args.as_slice() else {
        bail!("usage: bench-kube-store N");
    };
    let n: usize = n.parse().context("N must be a number")?;
    init_logging(LogFormat::Human)?;
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        r = watch(n) => r?,
        _ = term.recv() => {}
    }
    Ok(())
}
