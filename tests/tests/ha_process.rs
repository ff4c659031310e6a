//! High availability with replicas as separate processes against the real API server: rolling
//! updates (start a new replica, SIGTERM the leader), crashes (SIGKILL the leader or the
//! standby), freezes (SIGSTOP the leader past its lease), with a cluster-wide overlap detector
//! (see `ha_cluster`).
//!
//! No libtest harness: this binary is both the test (the parent) and, when
//! `KOPF_HA_CHILD_NAMESPACE` is set, one replica (a child). `KOPF_HA_ROLLS` sets the number of
//! rolling updates (default 20), `KOPF_HA_KILLS` the number of crashes (default 3),
//! `KOPF_HA_SOAK_EVENTS` the soak's length (default 12) and `KOPF_HA_SEED` repeats a soak.

mod faults_common;
mod ha_cluster;
mod process_common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use faults_common::*;
use ha_cluster::*;
use kopf_examples::crd::KopfExample;
use kopf_runtime::ha::LeaderElection;
use kopf_runtime::{Occurrence, Registry, Stopper, daemon, timer};
use kube::ResourceExt as _;
use process_common::{Entry, append_line, run_child, run_tests};

const DAEMON: &str = "ha-daemon";
const TIMER: &str = "ha-timer";
const CRON: &str = "ha-cron";

/// Stops at once when asked (a 5 s grace period lets it log its stop and write before a cancellation),
/// then tries one last write through the operator's client, as a handler cleaning up would, and
/// logs whether it was `written` or `fenced` (refused because the replica no longer leads).
#[daemon(id = "ha-daemon", cancellation_backoff = "5s")]
async fn ha_daemon(obj: Arc<KopfExample>, stopper: Stopper, client: kube::Client) {
    log_event("start", &obj);
    stopper.stopped().await;
    log_event("stop", &obj);
    let outcome = last_write(client, &obj).await;
    log_event(outcome, &obj);
}

/// Logs every fire (invariant 3: timers fire again after every handover; a thawed replica whose
/// validity lapsed fires none).
#[timer(id = "ha-timer", interval = "1s")]
async fn ha_timer(obj: Arc<KopfExample>) {
    log_event("tick", &obj);
}

/// Logs every occurrence it runs (`cron <name> <uid> <pid> <occurrence>`): no occurrence may
/// run twice across handovers.
#[timer(id = "ha-cron", cron = "* * * * * *")]
async fn ha_cron(obj: Arc<KopfExample>, occurrence: Occurrence) {
    let Some(path) = std::env::var_os(LOG_ENV) else {
        return;
    };
    let uid = obj.metadata.uid.clone().unwrap_or_default();
    let (name, pid) = (obj.name_any(), std::process::id());
    append_line(
        Path::new(&path),
        &format!("cron {name} {uid} {pid} {}", occurrence.0),
    );
}

/// A replica: an elected operator for one namespace, until SIGTERM (or SIGKILL); meanwhile it
/// rewrites its stats file every 200 ms.
fn child(namespace: &str) -> ExitCode {
    let identity = std::env::var(IDENTITY_ENV).unwrap_or_else(|_| "ha-child".to_owned());
    run_child(async {
        let registry = Registry::from_inventory()?.select(&[DAEMON, TIMER, CRON])?;
        let election = LeaderElection::new(LEASE, namespace)
            .lease_duration(LEASE_DURATION)
            .renew_deadline(Duration::from_millis(1500))
            .retry_period(Duration::from_millis(500))
            .identity(identity);
        let builder = child_builder(namespace, &registry)
            .await?
            .leader_election(election);
        serve_until_sigterm(builder, Counts::line).await
    })
}

/// The handover after SIGTERM (20 rolling updates), after SIGKILL and from a frozen leader.
async fn handovers_never_overlap() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let mut cluster = Cluster::start(ns.name(), &api, 4).await?;
    let mut graceful = Vec::new();
    for _ in 0..count_from_env("KOPF_HA_ROLLS", 20) {
        graceful.push(cluster.roll().await?);
    }
    cluster.ticking(now_nanos()).await;
    let mut crashed = Vec::new();
    for _ in 0..count_from_env("KOPF_HA_KILLS", 3) {
        crashed.push(cluster.crash().await?);
    }
    let frozen = cluster.freeze().await?;
    cluster.ticking(now_nanos()).await;
    let starts = cluster.finish(&api).await?;
    println!(
        "handover after SIGTERM: {}; after SIGKILL: {}; from a frozen leader: {frozen:?}; \
         {starts} daemon starts, 0 overlaps",
        percentiles(graceful.clone()),
        percentiles(crashed.clone())
    );
    // The bounds, with 1 s of slack for a noisy machine: a graceful handover within the
    // standby's retry period (0.5 s) after the old leader's (instant) ladder; a crash within the
    // lease duration and a retry period.
    let slack = Duration::from_secs(1);
    let worst = |gaps: &[Duration]| gaps.iter().max().copied().unwrap_or_default();
    anyhow::ensure!(worst(&graceful) < Duration::from_millis(500) + Duration::from_secs(2) + slack);
    anyhow::ensure!(worst(&crashed) < LEASE_DURATION + Duration::from_secs(2) + slack);
    ns.cleanup().await
}

/// A random sequence of rolling updates, crashes of either replica, freezes of the leader and
/// objects created and deleted meanwhile (`KOPF_HA_SOAK_EVENTS`, default 12; `KOPF_HA_SEED`
/// repeats a sequence) with the four invariants of docs/reliability.md (no overlap, no leaked
/// finalizer, every timer fires again after each event, the counts back to the baseline at the
/// end), no write from a replica that never led, and every replica exits cleanly.
async fn a_random_soak_keeps_the_invariants() -> anyhow::Result<()> {
    let events = count_from_env("KOPF_HA_SOAK_EVENTS", 12);
    let seed = std::env::var("KOPF_HA_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| u64::try_from(now_nanos() % 1_000_000).unwrap_or_default());
    println!("soak: {events} events, KOPF_HA_SEED={seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let (ns, api) = example_namespace().await?;
    let mut cluster = Cluster::start(ns.name(), &api, 3).await?;
    let mut counts = BTreeMap::new();
    let mut next = 0;
    for _ in 0..events {
        let event = match rng.u8(0..10) {
            0..=2 => cluster.roll().await.map(|_| "roll")?,
            3 | 4 => cluster.crash().await.map(|_| "crash")?,
            5 => cluster.freeze().await.map(|_| "freeze")?,
            6 => cluster.crash_standby().await.map(|()| "crash standby")?,
            7 if cluster.names.len() > 1 => {
                let name = cluster.names.swap_remove(rng.usize(..cluster.names.len()));
                delete_all(&api, std::slice::from_ref(&name)).await?;
                assert_gone(&api, std::slice::from_ref(&name)).await;
                "delete"
            }
            _ => {
                next += 1;
                let name = format!("soak-{next}");
                let since = now_nanos();
                api.create(&kube::api::PostParams::default(), &example(&name))
                    .await?;
                wait_started(
                    &cluster.log,
                    std::slice::from_ref(&name),
                    cluster.leader.pid,
                    since,
                )
                .await;
                cluster.names.push(name);
                "create"
            }
        };
        *counts.entry(event).or_insert(0) += 1;
        cluster.ticking(now_nanos()).await;
    }
    let starts = cluster.finish(&api).await?;
    println!("soak: {counts:?}; {starts} daemon starts, 0 overlaps, 0 leaked finalizers");
    ns.cleanup().await
}

/// The detector itself: it finds an overlap, and a kill ends the killed process's daemons.
fn the_detector_finds_an_overlap_and_honours_kills() {
    let entry = |kind: &str, pid, at: u32| Entry {
        kind: kind.to_owned(),
        name: "o".to_owned(),
        uid: "u".to_owned(),
        pid,
        detail: at.to_string(),
    };
    let clean = [
        entry("start", 1, 1),
        entry("stop", 1, 2),
        entry("start", 2, 3),
    ];
    assert!(overlaps(&clean).is_empty());
    let killed = [
        entry("start", 1, 1),
        entry("killed", 1, 2),
        entry("start", 2, 3),
    ];
    assert!(overlaps(&killed).is_empty());
    let overlapping = [
        entry("start", 1, 1),
        entry("start", 2, 2),
        entry("stop", 1, 3),
    ];
    assert_eq!(overlaps(&overlapping).len(), 1);
    let cron = |pid, occurrence: &str| Entry {
        kind: "cron".to_owned(),
        detail: occurrence.to_owned(),
        ..entry("cron", pid, 0)
    };
    let handed_over = [cron(1, "12:00:01"), cron(2, "12:00:02")];
    assert!(cron_runs_twice(&handed_over).is_empty());
    let again = [cron(1, "12:00:01"), cron(2, "12:00:01")];
    assert_eq!(cron_runs_twice(&again).len(), 1);
}

fn main() -> ExitCode {
    if let Ok(namespace) = std::env::var(CHILD_ENV) {
        return child(&namespace);
    }
    the_detector_finds_an_overlap_and_honours_kills();
    run_tests(&[
        ("handovers_never_overlap", || {
            Box::pin(handovers_never_overlap())
        }),
        ("a_random_soak_keeps_the_invariants", || {
            Box::pin(a_random_soak_keeps_the_invariants())
        }),
    ])
}
