//! Soak: create/update/delete objects at a steady rate, each with a daemon and a timer, with
//! periodic watch drops and 410 relists through the fault-injecting proxy; then check the
//! invariants of `faults_common` and report objects churned, faults injected, invariant
//! violations (must be 0) and RSS at start and end.
//!
//! Bounded by default (`KOPF_SOAK_SECONDS`, default 60 s of churn, about 80 s in all);
//! longer on demand, e.g. `KOPF_SOAK_SECONDS=3600 cargo test -p kopf-tests --test soak --
//! --nocapture`. `KOPF_SOAK_RATE` (operations per second, default 25) and `KOPF_SOAK_LIVE`
//! (objects alive at once, default 300) shape the load.

mod faults_common;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use faults_common::*;
use kopf_examples::crd::KopfExample;
use kopf_runtime::{Data, Stopper, daemon, timer};
use kopf_tests::proxy::{Fault, Match, Rule};
use kopf_tests::wait_until;
use kube::ResourceExt as _;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};

const DAEMON: &str = "soak-daemon";
const TIMER: &str = "soak-timer";
const INTERVAL: Duration = Duration::from_secs(5);
/// A watch drop this often; every third one is followed by a 410 on the next watch.
const FAULT_EVERY: Duration = Duration::from_secs(6);

#[daemon(id = "soak-daemon")]
async fn soak_daemon(obj: Arc<KopfExample>, stopper: Stopper, log: Data<InstanceLog>) {
    let _instance = log.enter(&obj, DAEMON);
    stopper.stopped().await;
}

#[timer(id = "soak-timer", interval = "5s")]
async fn soak_timer(
    obj: Arc<KopfExample>,
    log: Data<InstanceLog>,
) -> Result<usize, std::io::Error> {
    let _instance = log.enter(&obj, TIMER);
    log.fire(&obj);
    Ok(log.fires(&obj.name_any()))
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// This process's resident set size in KiB (the operator runs in-process).
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[derive(Debug, Default)]
struct Churn {
    created: u64,
    updated: u64,
    deleted: u64,
    errors: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_churn_with_watch_faults() -> anyhow::Result<()> {
    let seconds = env_number("KOPF_SOAK_SECONDS", 60);
    let rate = env_number("KOPF_SOAK_RATE", 25).max(1);
    let max_live = usize::try_from(env_number("KOPF_SOAK_LIVE", 300))?.max(1);
    let (ns, api) = example_namespace().await?;
    let proxy = start_proxy().await?;
    let log = InstanceLog::default();
    let op = operator_via(&proxy, &ns, &[DAEMON, TIMER], &log)?
        .start()
        .await?;
    wait_until("the operator to be ready", PROMPTLY, || async {
        op.is_ready()
    })
    .await;
    let rss_start = rss_kib();

    let mut live: VecDeque<String> = VecDeque::new();
    let mut churn = Churn::default();
    let mut drops = 0_u64;
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let started = Instant::now();
    let mut next_fault = started + FAULT_EVERY;
    let mut last_fault = started;
    let mut step = 0_u64;
    while started.elapsed() < Duration::from_secs(seconds) {
        ticker.tick().await;
        step += 1;
        let result = match step % 4 {
            // Create twice as often as delete, until the live set is full.
            0 | 1 if live.len() < max_live => {
                let name = format!("soak-{}", churn.created);
                let created = api.create(&PostParams::default(), &example(&name)).await;
                if created.is_ok() {
                    churn.created += 1;
                    live.push_back(name);
                }
                created.map(|_| ())
            }
            2 if !live.is_empty() => {
                let name = &live[usize::try_from(step)? % live.len()];
                let patch = serde_json::json!({ "spec": { "field": format!("v{step}") } });
                let updated = api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
                churn.updated += u64::from(updated.is_ok());
                updated.map(|_| ())
            }
            _ => match live.pop_front() {
                Some(name) => {
                    let deleted = api.delete(&name, &DeleteParams::default()).await;
                    churn.deleted += u64::from(deleted.is_ok());
                    deleted.map(|_| ())
                }
                None => Ok(()),
            },
        };
        if let Err(err) = result {
            churn.errors += 1;
            eprintln!("soak: the test's own request failed: {err}");
        }
        if Instant::now() >= next_fault {
            drops += 1;
            if drops.is_multiple_of(3) {
                proxy
                    .handle()
                    .inject(Rule::new(Match::watches(), Fault::WatchGone).times(1));
            }
            proxy.handle().drop_connections();
            last_fault = Instant::now();
            next_fault = last_fault + FAULT_EVERY;
        }
    }
    let churned_for = started.elapsed();

    // Invariant 2 during the run: nothing deleted more than GRACE ago is still there.
    let leaked: Vec<String> = api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|o| {
            o.metadata.deletion_timestamp.as_ref().is_some_and(|t| {
                let age = k8s_openapi::jiff::Timestamp::now().duration_since(t.0);
                age.as_secs() > i64::try_from(GRACE.as_secs()).unwrap_or(i64::MAX)
            })
        })
        .map(kube::ResourceExt::name_any)
        .collect();
    assert!(leaked.is_empty(), "finalizers leaked: {leaked:?}");
    // Invariant 3: every live object's timer fires after the last fault.
    let live: Vec<String> = live.into_iter().collect();
    assert_timers_fire(&log, &live, INTERVAL, last_fault).await;
    let faults = proxy.handle().counters();
    // Invariants 1, 2 (for the rest), 4.
    finish(&op, &api, &log, &live).await?;
    let rss_end = rss_kib();
    let violations = log.violations().len();
    println!(
        "soak: {:?} of churn at {rate}/s target: {} created, {} updated, {} deleted \
         ({} ops, {:.1}/s achieved, {} failed requests of the test itself); \
         faults injected: {} connection drops, {} faulted requests; invariant violations: {}; \
         RSS start {} MiB, end {} MiB",
        churned_for,
        churn.created,
        churn.updated,
        churn.deleted,
        churn.created + churn.updated + churn.deleted,
        (churn.created + churn.updated + churn.deleted) as f64 / churned_for.as_secs_f64(),
        churn.errors,
        faults.drops,
        faults.faults,
        violations,
        rss_start / 1024,
        rss_end / 1024,
    );
    assert_eq!(violations, 0);
    // One drop per FAULT_EVERY of churn, the last one possibly cut off by the end.
    let expected = (seconds / FAULT_EVERY.as_secs()).saturating_sub(1).max(1);
    assert!(
        faults.drops >= expected,
        "positive control: {} connection drops injected",
        faults.drops
    );
    op.shutdown().await;
    ns.cleanup().await
}
