//! A reconcile handler with an owned child, handed over between elected replicas (separate
//! processes, against the real API server) in the middle of a run: the leader is stopped
//! gracefully (SIGTERM), crashes (SIGKILL) and is frozen past its lease (SIGSTOP, then SIGCONT
//! while the new leader is in the middle of its own run).
//!
//! Every run sleeps [`MIDDLE`] (a slow call that ignores the stopper, as a call to an external
//! system would), then applies the child ConfigMap `<owner>-config` with the owner's field and
//! its own process id. Each run appends `start`, its apply's outcome (`applied`, `fenced` or
//! `failed`) and `stop` (also when it is cancelled) to the shared log of `ha_cluster`, with its
//! process id; the test appends every signal. After each handover: the run was really in its
//! middle when the signal came; no two processes ran the object at once (the overlap detector);
//! the new leader applies the child with the latest spec and restores an edit of it made by
//! someone else; the old leader sent no write once the new one had written (the proxies in front
//! of the replicas record every request); a thawed leader only finished its run, its write
//! refused by the fence, and started none beside the new leader.
//!
//! No libtest harness: this binary is both the test (the parent) and, when
//! `KOPF_HA_CHILD_NAMESPACE` is set, one replica (a child).

mod faults_common;
mod ha_cluster;
mod process_common;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use faults_common::*;
use ha_cluster::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kopf_examples::crd::KopfExample;
use kopf_runtime::ha::{Fenced, LeaderElection};
use kopf_runtime::{Action, ChildError, Children, HandlerError, Registry, reconcile};
use kopf_tests::wait_until;
use kube::api::{Patch, PatchParams};
use process_common::{Entry, read_log, run_child, run_tests};
use serde_json::json;

const RECONCILE: &str = "rh-slow";
/// The slow middle of every run, before its apply.
const MIDDLE: Duration = Duration::from_millis(1500);
/// The slack on top of every upper bound (the machine is slow and noisy).
const SLACK: Duration = Duration::from_secs(1);

/// A run in progress: logs `start` when created and `stop` when dropped (the run returned or
/// was cancelled).
struct Run(Arc<KopfExample>);

impl Run {
    fn start(obj: &Arc<KopfExample>) -> Self {
        log_event("start", obj);
        Self(Arc::clone(obj))
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        log_event("stop", &self.0);
    }
}

/// The log's name for how an apply ended.
fn outcome(result: &Result<ConfigMap, ChildError>) -> &'static str {
    match result {
        Ok(_) => "applied",
        Err(ChildError::Api {
            source: kube::Error::Service(e),
            ..
        }) if e.downcast_ref::<Fenced>().is_some() => "fenced",
        Err(_) => "failed",
    }
}

/// Sleeps through its middle, then applies the child: `field` from the owner's spec, `replica`
/// this process. The stop ladder lets it finish (5 s before a cancellation).
#[reconcile(
    id = "rh-slow",
    owns(ConfigMap),
    backoff = "1s",
    cancellation_backoff = "5s"
)]
async fn rh_slow(
    obj: Arc<KopfExample>,
    children: Children<KopfExample>,
) -> Result<Action, HandlerError> {
    let _run = Run::start(&obj);
    tokio::time::sleep(MIDDLE).await;
    let data = BTreeMap::from([
        (
            "field".to_owned(),
            obj.spec.field.clone().unwrap_or_default(),
        ),
        ("replica".to_owned(), std::process::id().to_string()),
    ]);
    let config = ConfigMap {
        data: Some(data),
        ..ConfigMap::default()
    };
    let result = children.apply("config", config).await;
    log_event(outcome(&result), &obj);
    result?;
    Ok(Action::await_change())
}

/// A replica: an elected operator for one namespace, until SIGTERM (or SIGKILL).
fn child(namespace: &str) -> ExitCode {
    let identity = std::env::var(IDENTITY_ENV).unwrap_or_else(|_| "rh-child".to_owned());
    run_child(async {
        let registry = Registry::from_inventory()?.select(&[RECONCILE])?;
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

/// The entries of `pid` (of `kind`) at or after `since` (unix nanos).
fn of_pid<'a>(log: &'a [Entry], pid: u32, kind: &str, since: u128) -> Vec<&'a Entry> {
    log.iter()
        .filter(|e| e.pid == pid && e.kind == kind && e.at() >= since)
        .collect()
}

/// Waits until `pid` logged `kind` at or after `since`; returns when it first did.
async fn wait_logged(cluster: &Cluster, pid: u32, kind: &str, since: u128) -> u128 {
    let what = format!("{pid} to log `{kind}` (log: {})", cluster.log.display());
    kopf_tests::wait_for(what, PROMPTLY, || async {
        let log = read_log(&cluster.log);
        of_pid(&log, pid, kind, since)
            .first()
            .map(|e| e.at())
            .ok_or("not yet")
    })
    .await
}

/// The premise of a mid-run handover: `pid`'s run that started at `started` was in its middle
/// at `signalled` (not yet applying, not stopped).
fn ensure_mid_run(log: &[Entry], pid: u32, started: u128, signalled: u128) -> anyhow::Result<()> {
    let into = Duration::from_nanos(u64::try_from(signalled.saturating_sub(started))?);
    anyhow::ensure!(
        into < MIDDLE,
        "the signal came {into:?} into the run, past its middle: the machine is too slow"
    );
    let stopped = of_pid(log, pid, "stop", started)
        .iter()
        .any(|e| e.at() <= signalled);
    anyhow::ensure!(!stopped, "{pid}'s run ended before the signal");
    Ok(())
}

/// How long after `since` (unix nanos) the moment `at` came.
fn after(since: u128, at: u128) -> anyhow::Result<Duration> {
    Ok(Duration::from_nanos(u64::try_from(
        at.saturating_sub(since),
    )?))
}

/// Waits until the leader runs nothing; then changes the spec to `value` and waits until the
/// leader's run for it has started. Returns when it started.
async fn start_a_run(
    cluster: &Cluster,
    api: &kube::Api<KopfExample>,
    value: &str,
) -> anyhow::Result<u128> {
    let pid = cluster.leader.pid;
    let what = format!("the leader {pid} to be between runs");
    wait_until(what, PROMPTLY, || async {
        let log = read_log(&cluster.log);
        let last = log
            .iter()
            .rev()
            .find(|e| e.pid == pid && (e.kind == "start" || e.kind == "stop"));
        last.is_some_and(|e| e.kind == "stop")
    })
    .await;
    let since = now_nanos();
    let patch = json!({"spec": {"field": value}});
    for name in &cluster.names {
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(wait_logged(cluster, pid, "start", since).await)
}

/// The child of the object `name`: its `(field, replica)` (`None` while it does not exist).
async fn child_of(maps: &kube::Api<ConfigMap>, name: &str) -> Option<(String, String)> {
    let data = maps.get_opt(&format!("{name}-config")).await.ok()??.data?;
    Some((data.get("field")?.clone(), data.get("replica")?.clone()))
}

/// Waits until every object's child has `field` and was applied by `pid`.
async fn wait_children(maps: &kube::Api<ConfigMap>, names: &[String], field: &str, pid: u32) {
    let want = Some((field.to_owned(), pid.to_string()));
    let what = format!("the children of {names:?} applied by {pid} with field {field}");
    wait_until(what, PROMPTLY, || async {
        for name in names {
            if child_of(maps, name).await != want {
                return false;
            }
        }
        true
    })
    .await;
}

/// The new leader applied the children with `field` (after `since`), and an edit of them made
/// by someone else runs it again and is undone.
async fn new_leader_reconciles(
    cluster: &Cluster,
    maps: &kube::Api<ConfigMap>,
    field: &str,
    since: u128,
) -> anyhow::Result<()> {
    let pid = cluster.leader.pid;
    wait_logged(cluster, pid, "applied", since).await;
    wait_children(maps, &cluster.names, field, pid).await;
    let edited = now_nanos();
    let edit = json!({"data": {"field": "edited", "replica": "someone"}});
    for name in &cluster.names {
        let child = format!("{name}-config");
        maps.patch(&child, &PatchParams::default(), &Patch::Merge(&edit))
            .await?;
    }
    wait_logged(cluster, pid, "start", edited).await;
    wait_children(maps, &cluster.names, field, pid).await;
    Ok(())
}

/// The writes `replica`'s proxy saw: when, and what.
fn writes(replica: &Replica) -> Vec<(Instant, String)> {
    let log = replica.proxy.handle().log();
    log.into_iter()
        .filter(|r| r.method != http::Method::GET)
        .map(|r| (r.at, format!("{} {}", r.method, r.path)))
        .collect()
}

/// The deposed leader `old` sent no write once the new leader `new` wrote (its Lease taken
/// over) after `since`; `old` wrote before it (the positive control that its proxy records it).
fn ensure_deposed_quiet(old: &Replica, new: &Replica, since: Instant) -> anyhow::Result<()> {
    let first = writes(new).into_iter().find(|(at, _)| *at > since);
    let (took_over, _) = first.ok_or_else(|| anyhow::anyhow!("the new leader never wrote"))?;
    let old_writes = writes(old);
    anyhow::ensure!(
        old_writes.iter().any(|(at, _)| *at < took_over),
        "the old leader {} never wrote",
        old.pid
    );
    let late: Vec<&String> = old_writes
        .iter()
        .filter(|(at, _)| *at >= took_over)
        .map(|(_, what)| what)
        .collect();
    anyhow::ensure!(late.is_empty(), "writes of a deposed leader: {late:?}");
    Ok(())
}

/// The object's runs never overlapped across processes, by the log.
fn ensure_no_overlap(cluster: &Cluster) -> anyhow::Result<()> {
    let found = overlaps(&read_log(&cluster.log));
    let log = cluster.log.display();
    anyhow::ensure!(found.is_empty(), "overlaps: {found:?} (log: {log})");
    Ok(())
}

/// SIGTERM the leader in the middle of a run: it finishes the run (its apply goes through: it
/// still leads while it stops), releases the Lease and exits; the standby takes over. Returns
/// the time from the signal to the new leader's first run.
async fn graceful(cluster: &mut Cluster, api: &kube::Api<KopfExample>) -> anyhow::Result<Duration> {
    let started = start_a_run(cluster, api, "term").await?;
    let old = cluster.leader.pid;
    let (signalled, sent) = (Instant::now(), now_nanos());
    cluster.kill_line("signalled", old);
    cluster.leader.signal("-TERM").await?;
    let code = cluster.leader.exit_code().await?;
    let output = cluster.leader.output.display().to_string();
    anyhow::ensure!(code == Some(0), "exit {code:?}: see {output}");
    let log = read_log(&cluster.log);
    ensure_mid_run(&log, old, started, sent)?;
    let applied = of_pid(&log, old, "applied", sent).len();
    anyhow::ensure!(applied == 1, "{applied} applies of the stopping leader");
    let taken = wait_logged(cluster, cluster.standby.pid, "start", sent).await;
    ensure_no_overlap(cluster)?;
    ensure_deposed_quiet(&cluster.leader, &cluster.standby, signalled)?;
    let newest = cluster.spawn().await?;
    cluster.leader = std::mem::replace(&mut cluster.standby, newest);
    cluster.leader.led = true;
    after(sent, taken)
}

/// SIGKILL the leader in the middle of a run; the standby takes over once the Lease expired.
/// Returns the time from the signal to the new leader's first run.
async fn crash(cluster: &mut Cluster, api: &kube::Api<KopfExample>) -> anyhow::Result<Duration> {
    let started = start_a_run(cluster, api, "kill").await?;
    let old = cluster.leader.pid;
    let (signalled, sent) = (Instant::now(), now_nanos());
    cluster.leader.signal("-KILL").await?;
    cluster.leader.wait_killed().await;
    cluster.kill_line("killed", old);
    let log = read_log(&cluster.log);
    ensure_mid_run(&log, old, started, sent)?;
    let applied = of_pid(&log, old, "applied", started).len();
    anyhow::ensure!(applied == 0, "the killed run applied its child");
    let taken = wait_logged(cluster, cluster.standby.pid, "start", sent).await;
    ensure_no_overlap(cluster)?;
    ensure_deposed_quiet(&cluster.leader, &cluster.standby, signalled)?;
    let newest = cluster.spawn().await?;
    cluster.leader = std::mem::replace(&mut cluster.standby, newest);
    cluster.leader.led = true;
    after(sent, taken)
}

/// SIGSTOP the leader in the middle of a run until the standby's first run has started, then
/// SIGCONT it: the thawed run's apply is refused by the fence, it starts no other, and its
/// proxy sees no write of it. Returns the time from the freeze to the new leader's first run.
async fn freeze(cluster: &mut Cluster, api: &kube::Api<KopfExample>) -> anyhow::Result<Duration> {
    let started = start_a_run(cluster, api, "freeze").await?;
    let old = cluster.leader.pid;
    let (signalled, sent) = (Instant::now(), now_nanos());
    cluster.leader.signal("-STOP").await?;
    cluster.kill_line("frozen", old);
    ensure_mid_run(&read_log(&cluster.log), old, started, now_nanos())?;
    let new = cluster.standby.pid;
    let taken = wait_logged(cluster, new, "start", sent).await;
    // Thawed while the new leader is in the middle of its own run.
    let thawed_at = Instant::now();
    let thawed = now_nanos();
    cluster.kill_line("thawed", old);
    cluster.leader.signal("-CONT").await?;
    wait_logged(cluster, old, "stop", thawed).await;
    let log = read_log(&cluster.log);
    ensure_mid_run(&log, new, taken, thawed)?;
    ensure_no_overlap(cluster)?;
    let mine: Vec<&str> = log[log
        .iter()
        .rposition(|e| e.kind == "thawed" && e.pid == old)
        .unwrap_or(0)..]
        .iter()
        .filter(|e| e.pid == old)
        .map(|e| e.kind.as_str())
        .collect();
    anyhow::ensure!(
        mine == ["thawed", "fenced", "stop"],
        "the thawed replica did {mine:?} (log: {})",
        cluster.log.display()
    );
    // Its reads (the Lease, the watches) are the positive control that its proxy records it.
    wait_until("a read of the thawed replica", PROMPTLY, || async {
        cluster.leader.requests_after(thawed_at).0 > 0
    })
    .await;
    ensure_deposed_quiet(&cluster.leader, &cluster.standby, signalled)?;
    std::mem::swap(&mut cluster.leader, &mut cluster.standby);
    cluster.leader.led = true;
    after(sent, taken)
}

/// The thawed replica `pid` ran nothing after its thaw while the leader ran (the positive
/// control: the leader's runs after it).
fn ensure_thawed_idle(cluster: &Cluster, pid: u32) -> anyhow::Result<()> {
    let log = read_log(&cluster.log);
    let stray = acted_after_thaw(&log, pid);
    anyhow::ensure!(stray.is_empty(), "{stray:?}");
    let thawed = of_pid(&log, pid, "thawed", 0).last().map_or(0, |e| e.at());
    let leader_runs = of_pid(&log, cluster.leader.pid, "start", thawed).len();
    anyhow::ensure!(leader_runs > 0, "the leader never ran after the thaw");
    Ok(())
}

/// Deletes the objects, stops both replicas (exit 0), and checks the whole log: no overlap,
/// and every replica that led ran the object.
async fn finish(cluster: Cluster, api: &kube::Api<KopfExample>, led: &[u32]) -> anyhow::Result<()> {
    delete_all(api, &cluster.names).await?;
    assert_gone(api, &cluster.names).await;
    for mut replica in [cluster.leader, cluster.standby] {
        replica.signal("-TERM").await?;
        let code = replica.exit_code().await?;
        anyhow::ensure!(code == Some(0), "a replica exited with {code:?}");
    }
    let log = read_log(&cluster.log);
    let found = overlaps(&log);
    let path = cluster.log.display();
    anyhow::ensure!(found.is_empty(), "overlaps: {found:?} (log: {path})");
    for pid in led {
        let runs = of_pid(&log, *pid, "start", 0).len();
        anyhow::ensure!(runs > 0, "{pid} led but never ran (log: {path})");
    }
    // Kept for a look when anything above failed.
    std::fs::remove_dir_all(&cluster.dir)?;
    Ok(())
}

/// The three handovers in a row, each followed by the new leader's reconciliation.
async fn a_reconcile_is_handed_over_mid_run() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let maps = ns.api::<ConfigMap>();
    let mut cluster = Cluster::start(ns.name(), &api, 1).await?;
    let mut led = vec![cluster.leader.pid];
    wait_children(&maps, &cluster.names, "x", cluster.leader.pid).await;

    let since = now_nanos();
    let term = graceful(&mut cluster, &api).await?;
    led.push(cluster.leader.pid);
    new_leader_reconciles(&cluster, &maps, "term", since).await?;

    let since = now_nanos();
    let kill = crash(&mut cluster, &api).await?;
    led.push(cluster.leader.pid);
    new_leader_reconciles(&cluster, &maps, "kill", since).await?;

    let since = now_nanos();
    let frozen = freeze(&mut cluster, &api).await?;
    led.push(cluster.leader.pid);
    new_leader_reconciles(&cluster, &maps, "freeze", since).await?;
    ensure_thawed_idle(&cluster, cluster.standby.pid)?;
    ensure_deposed_quiet(&cluster.standby, &cluster.leader, cluster.leader.started)?;

    println!(
        "the first run of the new leader after SIGTERM: {term:?}; SIGKILL: {kill:?}; \
         SIGSTOP: {frozen:?}"
    );
    // A graceful handover: the rest of the old run, the standby's retry period (0.5 s) and
    // the stop; a crash or a freeze: the lease duration and a retry period.
    let retry = Duration::from_millis(500);
    anyhow::ensure!(term < MIDDLE + retry + Duration::from_secs(2) + SLACK);
    anyhow::ensure!(kill < LEASE_DURATION + retry + Duration::from_secs(2) + SLACK);
    anyhow::ensure!(frozen < LEASE_DURATION + retry + Duration::from_secs(2) + SLACK);
    finish(cluster, &api, &led).await?;
    ns.cleanup().await
}

/// The checks on the log themselves: a run in its middle, and one that ended or went too far.
fn the_checks_find_what_they_look_for() {
    let entry = |kind: &str, pid, at: u128| Entry {
        kind: kind.to_owned(),
        name: "o".to_owned(),
        uid: "u".to_owned(),
        pid,
        detail: at.to_string(),
    };
    let ms = 1_000_000;
    let log = [entry("start", 1, 0), entry("stop", 1, 100 * ms)];
    assert!(ensure_mid_run(&log, 1, 0, 50 * ms).is_ok());
    assert!(ensure_mid_run(&log, 1, 0, 150 * ms).is_err());
    assert!(ensure_mid_run(&log[..1], 1, 0, 2000 * ms).is_err());
    assert!(ensure_mid_run(&log, 2, 0, 50 * ms).is_ok());
    assert_eq!(of_pid(&log, 1, "stop", 100 * ms).len(), 1);
    assert!(of_pid(&log, 1, "stop", 101 * ms).is_empty());
}

fn main() -> ExitCode {
    if let Ok(namespace) = std::env::var(CHILD_ENV) {
        return child(&namespace);
    }
    the_checks_find_what_they_look_for();
    run_tests(&[("a_reconcile_is_handed_over_mid_run", || {
        Box::pin(a_reconcile_is_handed_over_mid_run())
    })])
}
