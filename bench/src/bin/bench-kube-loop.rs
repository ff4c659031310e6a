//! The capacity arm: a raw kube-rs loop doing the same writes as the operators, no framework.
//!
//! - `bench-kube-loop finalize`: watch the benchmark objects; add a finalizer to every object
//!   that has none, remove it from every object being deleted (scenarios 3 and 4).
//! - `bench-kube-loop status N`: N tasks, each writing `status.tick = {"at": <ns>}` to its
//!   object, then sleeping 1 s (scenario 6: a timer that writes its result).
//!
//! Up to 32 requests are in flight at once (kube-rs itself sets no client-side limit). Runs until
//! SIGTERM. Fires are recorded into `$BENCH_FIRES` like in every other arm.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use futures::{StreamExt as _, TryStreamExt as _};
use kopf_bench::firelog::unix_nanos;
use kopf_bench::kubeutil::{client, objects};
use kopf_bench::names::{HANDLER_ID, object_name};
use kopf_bench::{FireLog, Tag};
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt as _};
use serde_json::json;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::Semaphore;

const FINALIZER: &str = "kopf.dev/bench-raw";
const IN_FLIGHT: usize = 32;

fn spawn_patch(
    api: &Api<DynamicObject>,
    gate: &Arc<Semaphore>,
    name: String,
    finalizers: serde_json::Value,
) {
    let api = api.clone();
    let gate = Arc::clone(gate);
    tokio::spawn(async move {
        let Ok(_permit) = gate.acquire_owned().await else {
            return;
        };
        let patch = json!({"metadata": {"finalizers": finalizers}});
        if let Err(e) = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            eprintln!("patching {name}: {e}");
        }
    });
}

async fn finalize(api: Api<DynamicObject>) -> anyhow::Result<()> {
    let gate = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    while let Some(event) = events.try_next().await? {
        let (watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) = event else {
            continue;
        };
        let ours = obj.finalizers().iter().any(|f| f == FINALIZER);
        if obj.metadata.deletion_timestamp.is_some() {
            if ours {
                spawn_patch(&api, &gate, obj.name_any(), serde_json::Value::Null);
            }
        } else if obj.finalizers().is_empty() {
            spawn_patch(&api, &gate, obj.name_any(), json!([FINALIZER]));
        }
    }
    Ok(())
}

async fn status(api: Api<DynamicObject>, n: usize, log: Arc<FireLog>) -> anyhow::Result<()> {
    let gate = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let (api, gate, log) = (api.clone(), Arc::clone(&gate), Arc::clone(&log));
        tasks.spawn(async move {
            let name = object_name(i);
            loop {
                log.record(Tag::Fire, &name);
                let patch = json!({"status": {HANDLER_ID: {"at": u64::try_from(unix_nanos()).unwrap_or(0)}}});
                {
                    let Ok(_permit) = gate.acquire().await else { return };
                    let pp = PatchParams::default();
                    if let Err(e) = api.patch_status(&name, &pp, &Patch::Merge(&patch)).await {
                        eprintln!("patching the status of {name}: {e}");
                    }
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let api = objects(client(None).await?);
    let log = Arc::new(FireLog::from_env()?);
    let work = async {
        match args
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice()
        {
            ["finalize"] => finalize(api).await,
            ["status", n] => {
                status(api, n.parse().context("N must be a number")?, log.clone()).await
            }
            _ => bail!("usage: bench-kube-loop finalize | status N"),
        }
    };
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        r = work => r?,
        _ = term.recv() => {}
    }
    log.flush();
    Ok(())
}
