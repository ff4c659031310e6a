//! Sharding (issue 15) with members as separate processes against the real API server: the
//! objects are spread over the live members by the FNV-1a-64 hash of their UID, and a range
//! moves between members without ever running a daemon twice. Every member reaches the API
//! server through its own fault proxy (which records its requests and counts what it
//! receives); every daemon start and stop and every timer tick goes to a shared log (see
//! `shard_cluster`).
//!
//! Proven here, with `KOPF_SHARD_OBJECTS` objects (default 1000), each with a daemon and a 1 s
//! timer, in `ShardWatch::Auto` mode on a server with the `ShardedListAndWatch` gate (the
//! members must report `Server`):
//! 1. scaling 1 → 2 → 3 → 2 → 1 members: after every step each object's daemon runs exactly
//!    once, on the holder of its range (the log and every member's stats agree), and for the
//!    moved daemons the gap from the old instance's stop to the new one's start has a p99 within
//!    the stop ladder + 3 s (+1 s of slack for the noisy machine);
//! 2. SIGKILL of one of three members: its objects run again on the others within the lease
//!    duration + 5 s;
//! 3. a member cut off from the API server by its proxy, then reconnected: its daemons stop
//!    ("operator pausing", their last writes fenced), nothing but Leases is written by it after
//!    its validity lapsed, no write of it arrives after another member took over, and once
//!    reconnected it serves its ranges again (objects created in them get their daemons); the
//!    same for the last member alone (it gets back the very ranges it had);
//! 4. a fifth of the objects deleted while a joining member rebalances: all gone in time, so no
//!    finalizer is left, and no member keeps a record of them;
//! 5. balance at three members: each member's count of daemons is exactly the split the UIDs
//!    give, and within 5 standard deviations of its block's share;
//! 6. watch traffic: a change of every object reaches each member as ≈ its share of events,
//!    and each member's bytes are ≤ 0.6 of a client-side member's;
//! 7. a shorter run with `ShardWatch::ClientSide` (each member watches everything), and on a
//!    second API server without the gate (`KOPF_SHARD_SKIP_NOGATE` skips it) `Auto` falls back
//!    to client-side filtering, scaling 1 → 2 → 1.
//!
//! Over every run: no daemon overlap, and no timer tick while another process ran the object's
//! daemon. No libtest harness: this binary is the test (the parent) and, with
//! `KOPF_HA_CHILD_NAMESPACE` set, one member (a child).

mod faults_common;
mod ha_cluster;
mod process_common;
mod shard_cluster;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use faults_common::*;
use ha_cluster::{CHILD_ENV, IDENTITY_ENV, LEASE_DURATION, LOG_ENV};
use ha_cluster::{child_builder, count_from_env, now_nanos, serve_until_sigterm};
use kopf_examples::crd::KopfExample;
use kopf_runtime::ha::{ShardWatch, Sharding};
use kopf_runtime::stats::OperatorStats;
use kopf_runtime::{Registry, Stopper, daemon, timer};
use kopf_tests::{config_from_file, test_config};
use kube::ResourceExt as _;
use process_common::{Entry, append_line, run_child, run_tests};
use shard_cluster::*;

const DAEMON: &str = "shard-daemon";
const TIMER: &str = "shard-timer";

fn append(kind: &str, obj: &KopfExample, extra: &str) {
    let Some(log) = std::env::var_os(LOG_ENV) else {
        return;
    };
    let path = if kind == "tick" {
        tick_log(Path::new(&log))
    } else {
        PathBuf::from(log)
    };
    let (name, uid) = (obj.name_any(), obj.uid().unwrap_or_default());
    let line = format!(
        "{kind} {name} {uid} {} {}{extra}",
        std::process::id(),
        now_nanos()
    );
    append_line(&path, &line);
}

/// Logs the daemon's stop, with its reason, when the daemon ends (returns or is cancelled).
struct Running {
    obj: Arc<KopfExample>,
    stopper: Stopper,
}

impl Drop for Running {
    fn drop(&mut self) {
        let reason = self.stopper.reason().to_string();
        let reason = reason.replace(", ", "+").replace(' ', "_");
        append("stop", &self.obj, &format!(" {reason}"));
    }
}

/// Runs until stopped; objects labelled [`WRITER_LABEL`] then try one last write through the
/// operator's client, and log whether it was `written` or `fenced` (refused: the range is no
/// longer held validly) or `failed`.
#[daemon(id = "shard-daemon", cancellation_backoff = "300ms")]
async fn shard_daemon(obj: Arc<KopfExample>, stopper: Stopper, client: kube::Client) {
    append("start", &obj, "");
    let _running = Running {
        obj: Arc::clone(&obj),
        stopper: stopper.clone(),
    };
    stopper.stopped().await;
    if !obj.labels().contains_key(WRITER_LABEL) {
        return;
    }
    let outcome = ha_cluster::last_write(client, &obj).await;
    append(outcome, &obj, "");
}

#[timer(id = "shard-timer", interval = "1s")]
async fn shard_timer(obj: Arc<KopfExample>) {
    append("tick", &obj, "");
}

/// The stats line of a member (see [`Seen`]).
fn stats_line(stats: &OperatorStats) -> String {
    let (mut objects, mut tracked, mut daemons, mut timers) = (0, 0, 0, 0);
    for kind in &stats.kinds {
        let s = &kind.supervisor;
        objects += kind.objects;
        tracked += s.objects;
        daemons += s.daemons_running + s.daemons_stopping + s.daemons_queued;
        timers += s.timers_running + s.timers_stopping + s.timers_queued;
    }
    let shard = stats.sharding.as_ref();
    serde_json::json!({
        "objects": objects, "tracked": tracked, "daemons": daemons, "timers": timers,
        "identity": shard.map(|s| s.identity.clone()).unwrap_or_default(),
        "members": shard.map(|s| s.members.clone()).unwrap_or_default(),
        "ranges": shard.map(|s| s.ranges.clone()).unwrap_or_default(),
        "held": shard.map_or(0, |s| s.held),
        "served": shard.map_or(0, |s| s.objects),
        "watch": shard.and_then(|s| s.watch).map(|w| format!("{w:?}")),
    })
    .to_string()
}

/// A member: a sharded operator for one namespace (its Leases there too), until SIGTERM (or
/// SIGKILL); meanwhile it rewrites its stats file every 200 ms.
fn child(namespace: &str) -> ExitCode {
    let identity = std::env::var(IDENTITY_ENV).unwrap_or_else(|_| "shard-child".to_owned());
    let client_side = std::env::var(WATCH_ENV).is_ok_and(|w| w == "client-side");
    run_child(async {
        let registry = Registry::from_inventory()?.select(&[DAEMON, TIMER])?;
        let mut sharding = Sharding::new(GROUP, namespace)
            .lease_duration(LEASE_DURATION)
            .renew_deadline(RENEW_DEADLINE)
            .retry_period(RETRY_PERIOD)
            .identity(identity);
        if client_side {
            sharding = sharding.watch(ShardWatch::ClientSide);
        }
        let builder = child_builder(namespace, &registry)
            .await?
            .sharding(sharding);
        serve_until_sigterm(builder, stats_line).await
    })
}

/// The full proof in `Auto` mode on the suite's server (which has the gate: `Server` mode).
async fn sharding_in_auto_mode() -> anyhow::Result<()> {
    let n = count_from_env("KOPF_SHARD_OBJECTS", 1000);
    let begun = Instant::now();
    let (ns, api) = example_namespace().await?;
    let mut c = Cluster::start(ns.name(), &api, n, "Server", test_config().await?, vec![]).await?;
    c.join().await?;
    c.join().await?;
    balance(&c, n >= 1000)?;
    traffic(&c, &api).await?;
    let killed = c.kill(2).await?;
    report(format!(
        "Server: SIGKILL of a member: its objects ran on the others after {killed:?}"
    ));
    anyhow::ensure!(
        killed <= LEASE_DURATION + Duration::from_secs(5),
        "takeover after SIGKILL: {killed:?}"
    );
    delete_while_joining(&mut c, &api).await?;
    cut_and_reconnect(&mut c, &api, 1).await?;
    c.leave(2).await?;
    c.leave(1).await?;
    cut_alone(&mut c, &api).await?;
    report_steps("Server", &c.steps)?;
    let (starts, ticks) = c.finish(&api).await?;
    report(format!(
        "Server: {n} objects: {starts} daemon starts, {ticks} ticks, 0 overlaps; {:?}",
        begun.elapsed()
    ));
    ns.cleanup().await
}

/// A shorter run with client-side filtering forced: 1 → 2 → 3 → 2 → 1; each member tracks
/// every object but runs only its share.
async fn sharding_with_client_side_filtering() -> anyhow::Result<()> {
    let n = count_from_env("KOPF_SHARD_CLIENT_OBJECTS", 300);
    let begun = Instant::now();
    let (ns, api) = example_namespace().await?;
    let extra = vec![(WATCH_ENV, OsString::from("client-side"))];
    let mut c = Cluster::start(
        ns.name(),
        &api,
        n,
        "ClientSide",
        test_config().await?,
        extra,
    )
    .await?;
    c.join().await?;
    c.join().await?;
    balance(&c, false)?;
    traffic(&c, &api).await?;
    c.leave(0).await?;
    c.leave(1).await?;
    report_steps("ClientSide", &c.steps)?;
    let (starts, ticks) = c.finish(&api).await?;
    report(format!(
        "ClientSide: {n} objects: {starts} daemon starts, {ticks} ticks, 0 overlaps; {:?}",
        begun.elapsed()
    ));
    compare_traffic()?;
    ns.cleanup().await
}

/// `Auto` on a server without the gate falls back to client-side filtering: 1 → 2 → 1.
async fn auto_falls_back_without_the_feature_gate() -> anyhow::Result<()> {
    if std::env::var_os("KOPF_SHARD_SKIP_NOGATE").is_some() {
        report("no-gate server: skipped (KOPF_SHARD_SKIP_NOGATE is set)".to_owned());
        return Ok(());
    }
    let n = count_from_env("KOPF_SHARD_NOGATE_OBJECTS", 100);
    let begun = Instant::now();
    let env = shard_cluster::nogate::NoGateEnv::start().await?;
    let config = config_from_file(env.kubeconfig()).await?;
    let (ns, api) = example_namespace_in(config.clone()).await?;
    let extra = vec![("KUBECONFIG", env.kubeconfig().as_os_str().to_owned())];
    let mut c = Cluster::start(ns.name(), &api, n, "ClientSide", config, extra).await?;
    c.join().await?;
    c.leave(0).await?;
    report_steps("no gate", &c.steps)?;
    let (starts, _) = c.finish(&api).await?;
    report(format!(
        "no gate: Auto fell back to ClientSide; {n} objects, {starts} daemon starts, 0 overlaps; {:?}",
        begun.elapsed()
    ));
    ns.cleanup().await?;
    env.stop().await
}

/// The checkers find what they look for: a tick inside another process's run, the processes
/// running a daemon, the outcome of a last write, the blocks of three members.
fn the_checkers_find_what_they_look_for() {
    let entry = |kind: &str, pid, at: u32| Entry {
        kind: kind.to_owned(),
        name: "o".to_owned(),
        uid: "u".to_owned(),
        pid,
        detail: format!("{at} operator_pausing"),
    };
    let log = [
        entry("start", 1, 1),
        entry("stop", 1, 5),
        entry("start", 2, 6),
        entry("killed", 2, 9),
    ];
    assert!(ticks_inside_others(&log, &[entry("tick", 1, 4), entry("tick", 2, 7)]).is_empty());
    assert_eq!(ticks_inside_others(&log, &[entry("tick", 1, 7)]).len(), 1);
    assert_eq!(ticks_inside_others(&log, &[entry("tick", 2, 3)]).len(), 1);
    assert!(ticks_inside_others(&log, &[entry("tick", 1, 10)]).is_empty());
    assert_eq!(holders(&log[..3]).get("u"), Some(&vec![2]));
    assert_eq!(holders(&log).get("u"), Some(&vec![]));
    let obj = Obj {
        name: "o".to_owned(),
        uid: "u".to_owned(),
        range: 0,
        writes: true,
    };
    let stop = |reason: &str| Entry {
        detail: format!("5 {reason}"),
        ..entry("stop", 1, 5)
    };
    let written = [
        entry("start", 1, 1),
        entry("written", 1, 4),
        stop("operator_pausing"),
    ];
    assert!(last_write(&written, &obj, 1, 0).is_ok_and(|w| w));
    let cut_short = [
        entry("start", 1, 1),
        stop("operator_pausing+signalled+cancelled"),
    ];
    assert!(last_write(&cut_short, &obj, 1, 0).is_ok_and(|w| !w));
    let fenced = [entry("fenced", 1, 4), stop("operator_pausing")];
    assert!(last_write(&fenced, &obj, 1, 0).is_err());
    assert!(last_write(&[stop("operator_pausing")], &obj, 1, 0).is_err());
    let blocks: Vec<String> = (0..3).map(|i| block_text(block(i, 3))).collect();
    assert_eq!(blocks, ["0-340", "341-681", "682-1023"]);
}

fn main() -> ExitCode {
    if let Ok(namespace) = std::env::var(CHILD_ENV) {
        return child(&namespace);
    }
    the_checkers_find_what_they_look_for();
    let code = run_tests(&[
        (
            "sharding_in_auto_mode",
            || Box::pin(sharding_in_auto_mode()),
        ),
        ("sharding_with_client_side_filtering", || {
            Box::pin(sharding_with_client_side_filtering())
        }),
        ("auto_falls_back_without_the_feature_gate", || {
            Box::pin(auto_falls_back_without_the_feature_gate())
        }),
    ]);
    println!("summary:");
    for line in SUMMARY.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        println!("  {line}");
    }
    code
}
