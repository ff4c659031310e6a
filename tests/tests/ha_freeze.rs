//! A leader frozen past its lease never runs another loop of its daemons: replicas as separate
//! processes against the real API server, the leader frozen (SIGSTOP) until the standby has
//! taken its daemons over, then thawed (SIGCONT), again and again.
//!
//! Every replica's daemon loops `while !stopper.sleep(50 ms).await { body }` and appends each
//! body to a shared log with its process id and the time of its go-ahead (taken right before a
//! last check of the flag). A process frozen in the middle of its sleep wakes up with that sleep
//! overdue; the body after it must not run, since the new leader runs the same objects' daemons
//! by then. The detector counts every body of the thawed process whose go-ahead came after its
//! thaw: it must find none, over `KOPF_HA_FREEZES` freezes (default 20). A body whose check
//! passed before the freeze may still finish after the thaw: no check can stop what already
//! passed it, which is why writes go through the fence. The sleep's own check is held to
//! account by the `caught` bodies (the last check had to stop them): fewer than one per freeze,
//! where a sleep that ignored the lapse lets every daemon's body through at every thaw. The
//! bodies of the new leader after each handover are the positive control that bodies are
//! logged at all.
//!
//! The same with sharding (`KOPF_HA_SHARD_FREEZES`, default 8): two members share the objects;
//! each freeze stops one of them until the other runs every daemon, and after the thaw the
//! frozen member stops its daemons without another body, then rejoins and takes its ranges back.
//!
//! No libtest harness: this binary is both the test (the parent) and, when
//! `KOPF_HA_CHILD_NAMESPACE` is set, one replica (a child).

mod faults_common;
mod ha_cluster;
mod process_common;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use faults_common::*;
use ha_cluster::*;
use kopf_examples::crd::KopfExample;
use kopf_runtime::ha::{LeaderElection, Sharding};
use kopf_runtime::{Registry, Stopper, daemon};
use process_common::{Entry, append_line, read_log, run_child, run_tests};

const DAEMON: &str = "ha-loop";
/// Set in a child: `shard` makes it a sharding member instead of an elected replica.
const MODE_ENV: &str = "KOPF_HA_FREEZE_MODE";
/// The sharding group's Leases.
const GROUP: &str = "kopf-tests-freeze";
/// A daemon's sleep between two bodies.
const TICK: Duration = Duration::from_millis(50);

/// The loop of a typical polling daemon. Each body is logged with the time of its go-ahead:
/// taken right before a last check of the flag, so a body whose check passed before a freeze
/// (frozen between the check and the body, which no check can prevent) counts as begun before
/// it. A sleep that let a body through only for that last check to stop it is logged as
/// `caught`: the sleep's own check at its end missed a lapse (or the freeze fell between the
/// two checks, which is rare).
#[daemon(id = "ha-loop", cancellation_backoff = "5s")]
async fn ha_loop(obj: Arc<KopfExample>, stopper: Stopper) {
    log_event("start", &obj);
    while !stopper.sleep(TICK).await {
        let go_ahead = now_nanos();
        if stopper.is_stopped() {
            log_event("caught", &obj);
            break;
        }
        log_event_at("body", &obj, go_ahead);
    }
    log_event("stop", &obj);
}

/// A replica: an elected operator for one namespace, until SIGTERM.
fn child(namespace: &str) -> ExitCode {
    let identity = std::env::var(IDENTITY_ENV).unwrap_or_else(|_| "ha-child".to_owned());
    run_child(async {
        let registry = Registry::from_inventory()?.select(&[DAEMON])?;
        let builder = child_builder(namespace, &registry).await?;
        let builder = if std::env::var(MODE_ENV).is_ok_and(|m| m == "shard") {
            let sharding = Sharding::new(GROUP, namespace)
                .lease_duration(LEASE_DURATION)
                .renew_deadline(Duration::from_millis(1500))
                .retry_period(Duration::from_millis(300))
                .identity(identity);
            builder.sharding(sharding)
        } else {
            let election = LeaderElection::new(LEASE, namespace)
                .lease_duration(LEASE_DURATION)
                .renew_deadline(Duration::from_millis(1500))
                .retry_period(Duration::from_millis(500))
                .identity(identity);
            builder.leader_election(election)
        };
        serve_until_sigterm(builder, Counts::line).await
    })
}

/// The bodies of `pid` that began after `since` (unix nanos).
fn bodies_after(log: &[Entry], pid: u32, since: u128) -> Vec<&Entry> {
    log.iter()
        .filter(|e| e.kind == "body" && e.pid == pid && e.at() > since)
        .collect()
}

/// Waits until `pid` has run a body of every object in `names` after `since`.
async fn wait_bodies(log: &Path, names: &[String], pid: u32, since: u128) {
    let what = format!("{pid} to run a body of every daemon of {names:?}");
    kopf_tests::wait_until(what, PROMPTLY, || async {
        let log = read_log(log);
        let mine = bodies_after(&log, pid, since);
        names
            .iter()
            .all(|name| mine.iter().any(|e| &e.name == name))
    })
    .await;
}

/// The bodies of `pid` that began after `thawed`, described.
fn stray_bodies(log: &Path, pid: u32, thawed: u128) -> Vec<String> {
    bodies_after(&read_log(log), pid, thawed)
        .iter()
        .map(|e| {
            let after = (e.at() - thawed) / 1_000_000;
            format!("{} by {pid} {after} ms after its thaw", e.name)
        })
        .collect()
}

/// The bodies a sleep let through and the last check stopped.
fn count_caught(log: &[Entry]) -> usize {
    log.iter().filter(|e| e.kind == "caught").count()
}

/// The sleep's own check stopped the thawed daemons: fewer than one body per freeze was left
/// for the last check (a sleep that ignored the lapse leaves it every frozen daemon's body).
fn ensure_sleeps_checked(caught: usize, freezes: usize, log: &Path) -> anyhow::Result<()> {
    anyhow::ensure!(
        caught < freezes.max(1),
        "{caught} bodies over {freezes} freezes passed the sleep's check and were stopped only \
         by the last one: the sleep ignores the lapse (log: {})",
        log.display()
    );
    Ok(())
}

/// Who runs each object's daemon now, by the log (name → pids).
fn holders(log: &[Entry]) -> BTreeMap<String, BTreeSet<u32>> {
    let mut held: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    for entry in log {
        match entry.kind.as_str() {
            "start" => {
                held.entry(entry.name.clone())
                    .or_default()
                    .insert(entry.pid);
            }
            "stop" => {
                held.entry(entry.name.clone())
                    .or_default()
                    .remove(&entry.pid);
            }
            _ => {}
        }
    }
    held
}

/// One freeze: SIGSTOP the leader; once the standby runs every daemon (and a body of each),
/// SIGCONT it and wait until its daemons have stopped. Returns the bodies the thawed process
/// began after its thaw (there must be none).
async fn freeze_once(cluster: &mut Cluster) -> anyhow::Result<Vec<String>> {
    let pid = cluster.leader.pid;
    let sent = now_nanos();
    cluster.leader.signal("-STOP").await?;
    cluster.kill_line("frozen", pid);
    cluster.taken_over(cluster.standby.pid, sent).await?;
    wait_bodies(&cluster.log, &cluster.names, cluster.standby.pid, sent).await;
    let thawed = now_nanos();
    cluster.kill_line("thawed", pid);
    cluster.leader.signal("-CONT").await?;
    let what = format!("the thawed replica {pid} to stop its daemons");
    kopf_tests::wait_until(what, PROMPTLY, || async {
        let log = read_log(&cluster.log);
        let stops = log
            .iter()
            .filter(|e| e.kind == "stop" && e.pid == pid && e.at() > thawed)
            .count();
        stops == cluster.names.len()
    })
    .await;
    let stray = stray_bodies(&cluster.log, pid, thawed);
    std::mem::swap(&mut cluster.leader, &mut cluster.standby);
    cluster.leader.led = true;
    Ok(stray)
}

/// `KOPF_HA_FREEZES` freezes of the leader past its lease: no body after any thaw.
async fn a_thawed_leader_runs_no_loop_of_its_daemons() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let mut cluster = Cluster::start(ns.name(), &api, 8).await?;
    // The positive control: the first leader's bodies are logged.
    wait_bodies(&cluster.log, &cluster.names, cluster.leader.pid, 0).await;
    let freezes = count_from_env("KOPF_HA_FREEZES", 20);
    let mut stray = Vec::new();
    for _ in 0..freezes {
        stray.extend(freeze_once(&mut cluster).await?);
    }
    let log = read_log(&cluster.log);
    let bodies = log.iter().filter(|e| e.kind == "body").count();
    let caught = count_caught(&log);
    println!(
        "{freezes} freezes, {bodies} bodies logged, {} after a thaw, {caught} caught",
        stray.len()
    );
    anyhow::ensure!(
        stray.is_empty(),
        "bodies run by a thawed replica: {stray:?} (log: {})",
        cluster.log.display()
    );
    ensure_sleeps_checked(caught, freezes, &cluster.log)?;
    let found = overlaps(&log);
    anyhow::ensure!(found.is_empty(), "overlaps: {found:?}");
    delete_all(&api, &cluster.names).await?;
    assert_gone(&api, &cluster.names).await;
    for mut replica in [cluster.leader, cluster.standby] {
        replica.signal("-TERM").await?;
        let code = replica.exit_code().await?;
        anyhow::ensure!(code == Some(0), "a replica exited with {code:?}");
    }
    std::fs::remove_dir_all(&cluster.dir)?;
    ns.cleanup().await
}

/// Waits until every object's daemon runs on exactly one of `pids`, and each of them runs some.
async fn wait_shared(log: &Path, names: &[String], pids: &[u32]) {
    let what = format!("the daemons of {names:?} shared by {pids:?}, each run once");
    kopf_tests::wait_until(what, Duration::from_secs(90), || async {
        let held = holders(&read_log(log));
        let once = names
            .iter()
            .all(|n| held.get(n).is_some_and(|p| p.len() == 1));
        let each = pids
            .iter()
            .all(|pid| held.values().any(|p| p.contains(pid)));
        once && each
    })
    .await;
}

/// Freezes `members[victim]` until `members[other]` runs every daemon it ran (and a body of
/// each), thaws it, and waits until it stopped them. Returns its bodies after the thaw.
async fn freeze_member(
    log: &Path,
    members: &[Replica],
    victim: usize,
    other: usize,
) -> anyhow::Result<Vec<String>> {
    let pid = members[victim].pid;
    let sent = now_nanos();
    members[victim].signal("-STOP").await?;
    append_line(log, &format!("frozen - - {pid} {}", now_nanos()));
    let theirs: Vec<String> = holders(&read_log(log))
        .into_iter()
        .filter(|(_, pids)| pids.contains(&pid))
        .map(|(name, _)| name)
        .collect();
    anyhow::ensure!(
        !theirs.is_empty(),
        "member {pid} ran no daemon to take over"
    );
    wait_started(log, &theirs, members[other].pid, sent).await;
    wait_bodies(log, &theirs, members[other].pid, sent).await;
    let thawed = now_nanos();
    append_line(log, &format!("thawed - - {pid} {thawed}"));
    members[victim].signal("-CONT").await?;
    let what = format!("the thawed member {pid} to stop its daemons");
    kopf_tests::wait_until(what, PROMPTLY, || async {
        holders(&read_log(log)).values().all(|p| !p.contains(&pid))
    })
    .await;
    Ok(stray_bodies(log, pid, thawed))
}

/// Two sharding members; `KOPF_HA_SHARD_FREEZES` freezes of one or the other past its lease:
/// no body after any thaw, and the thawed member takes its share back.
async fn a_thawed_member_runs_no_loop_of_its_daemons() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let dir =
        std::env::temp_dir().join(format!("kopf-freeze-{}-{}", std::process::id(), ns.name()));
    std::fs::create_dir_all(&dir)?;
    let log = dir.join("daemons.log");
    let upstream = kopf_tests::test_config().await?;
    let extra = [(MODE_ENV, OsString::from("shard"))];
    let first = Replica::spawn_with(ns.name(), &log, &dir, 0, &upstream, &extra).await?;
    let names = create_many(&api, "shard", 16).await?;
    wait_started(&log, &names, first.pid, 0).await;
    let second = Replica::spawn_with(ns.name(), &log, &dir, 1, &upstream, &extra).await?;
    let members = [first, second];
    let pids: Vec<u32> = members.iter().map(|m| m.pid).collect();
    wait_shared(&log, &names, &pids).await;
    let freezes = count_from_env("KOPF_HA_SHARD_FREEZES", 8);
    let mut stray = Vec::new();
    for k in 0..freezes {
        stray.extend(freeze_member(&log, &members, k % 2, (k + 1) % 2).await?);
        wait_shared(&log, &names, &pids).await;
    }
    let entries = read_log(&log);
    let bodies = entries.iter().filter(|e| e.kind == "body").count();
    let caught = count_caught(&entries);
    println!(
        "{freezes} freezes of a member, {bodies} bodies logged, {} after a thaw, {caught} caught",
        stray.len()
    );
    anyhow::ensure!(
        stray.is_empty(),
        "bodies run by a thawed member: {stray:?} (log: {})",
        log.display()
    );
    ensure_sleeps_checked(caught, freezes, &log)?;
    let found = overlaps(&entries);
    anyhow::ensure!(found.is_empty(), "overlaps: {found:?}");
    delete_all(&api, &names).await?;
    assert_gone(&api, &names).await;
    for mut member in members {
        member.signal("-TERM").await?;
        let code = member.exit_code().await?;
        anyhow::ensure!(code == Some(0), "a member exited with {code:?}");
    }
    std::fs::remove_dir_all(&dir)?;
    ns.cleanup().await
}

/// The detector itself finds a body after a thaw, and only after it.
fn the_detector_finds_a_body_after_the_thaw() {
    let body = |pid, at: u32| Entry {
        kind: "body".to_owned(),
        name: "o".to_owned(),
        uid: "u".to_owned(),
        pid,
        detail: at.to_string(),
    };
    let log = [body(1, 1), body(2, 5), body(1, 10)];
    assert!(bodies_after(&log, 1, 10).is_empty());
    assert_eq!(bodies_after(&log, 1, 9).len(), 1);
    assert!(bodies_after(&log, 3, 0).is_empty());
    let line = |kind: &str, pid| Entry {
        kind: kind.to_owned(),
        ..body(pid, 0)
    };
    let held = holders(&[line("start", 1), line("start", 2), line("stop", 1)]);
    assert_eq!(held["o"], BTreeSet::from([2]));
}

fn main() -> ExitCode {
    if let Ok(namespace) = std::env::var(CHILD_ENV) {
        return child(&namespace);
    }
    the_detector_finds_a_body_after_the_thaw();
    run_tests(&[
        ("a_thawed_leader_runs_no_loop_of_its_daemons", || {
            Box::pin(a_thawed_leader_runs_no_loop_of_its_daemons())
        }),
        ("a_thawed_member_runs_no_loop_of_its_daemons", || {
            Box::pin(a_thawed_member_runs_no_loop_of_its_daemons())
        }),
    ])
}
