//! High availability with replicas as separate processes against the real API server: rolling
//! updates (start a new replica, SIGTERM the leader) and crashes (SIGKILL the leader), with a
//! cluster-wide overlap detector: every daemon start and stop is appended to one shared file
//! with its process id and time, the test appends every kill, and the checker fails on any
//! moment where two live processes run a daemon for the same object UID.
//!
//! No libtest harness: this binary is both the test (the parent) and, when
//! `KOPF_HA_CHILD_NAMESPACE` is set, one replica (a child). Lines of the shared log:
//! `start|stop|killed <name> <uid> <pid> <unix nanos>` (`-` for the name and UID of a kill).
//! `KOPF_HA_ROLLS` sets the number of rolling updates (default 20), `KOPF_HA_KILLS` the number of
//! crashes (default 3).

mod faults_common;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use faults_common::*;
use kopf_examples::crd::KopfExample;
use kopf_runtime::{LeaderElection, LogFormat, Operator, Registry, Stopper, daemon};
use kopf_tests::{test_config, wait_until};
use kube::ResourceExt as _;

const CHILD_ENV: &str = "KOPF_HA_CHILD_NAMESPACE";
const LOG_ENV: &str = "KOPF_HA_CHILD_LOG";
const IDENTITY_ENV: &str = "KOPF_HA_CHILD_IDENTITY";
const DAEMON: &str = "ha-daemon";
const LEASE: &str = "kopf-tests-ha";
const LEASE_DURATION: Duration = Duration::from_secs(2);

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

fn append_line(path: &Path, line: &str) {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path);
    // One write per line, in append mode: lines of concurrent processes do not interleave.
    if let Err(err) = file.and_then(|mut f| f.write_all(format!("{line}\n").as_bytes())) {
        eprintln!("cannot append to the shared log: {err}");
    }
}

fn append(kind: &str, obj: &KopfExample) {
    let Some(path) = std::env::var_os(LOG_ENV) else {
        return;
    };
    let uid = obj.metadata.uid.clone().unwrap_or_default();
    let line = format!(
        "{kind} {} {uid} {} {}",
        obj.name_any(),
        std::process::id(),
        now_nanos()
    );
    append_line(Path::new(&path), &line);
}

/// Stops at once when asked (a 1 s grace period lets it log its stop before a cancellation).
#[daemon(id = "ha-daemon", cancellation_backoff = "1s")]
async fn ha_daemon(obj: Arc<KopfExample>, stopper: Stopper) {
    append("start", &obj);
    stopper.stopped().await;
    append("stop", &obj);
}

/// A replica: an elected operator for one namespace, until SIGTERM (or SIGKILL).
fn child(namespace: &str) -> ExitCode {
    let identity = std::env::var(IDENTITY_ENV).unwrap_or_else(|_| "ha-child".to_owned());
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("child: no runtime: {err}");
            return ExitCode::from(3);
        }
    };
    let result: anyhow::Result<()> = runtime.block_on(async {
        let registry = Registry::from_inventory()?.select(&[DAEMON])?;
        let election = LeaderElection::new(LEASE, namespace)
            .lease_duration(LEASE_DURATION)
            .renew_deadline(Duration::from_millis(1500))
            .retry_period(Duration::from_millis(500))
            .identity(identity);
        Operator::builder()
            .name("kopf-tests")
            .log_format(LogFormat::Human)
            .kube_config(test_config().await?)
            .namespaces([namespace])
            .registry(&registry)
            .leader_election(election)
            .shutdown_timeout(Duration::from_secs(10))
            .run()
            .await?;
        Ok(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("child: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// One line of the shared log.
#[derive(Debug, Clone)]
struct Entry {
    kind: String,
    name: String,
    uid: String,
    pid: u32,
    at: u128,
}

fn read_log(path: &Path) -> Vec<Entry> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let mut parts = line.split(' ');
            Some(Entry {
                kind: parts.next()?.to_owned(),
                name: parts.next()?.to_owned(),
                uid: parts.next()?.to_owned(),
                pid: parts.next()?.parse().ok()?,
                at: parts.next()?.parse().ok()?,
            })
        })
        .collect()
}

/// The overlap detector: in the log's order, a daemon runs from its start to its stop, or to
/// its process's kill; two processes running one UID's daemon at once is an overlap. A process
/// frozen by SIGSTOP runs nothing: another may start the UID's daemon meanwhile, and then the
/// only thing the frozen one may do with that UID after it thaws is to stop its daemon. Returns
/// the overlaps found.
fn overlaps(log: &[Entry]) -> Vec<String> {
    // Per UID: the processes holding its daemon.
    let mut holders: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    let mut frozen: Vec<u32> = Vec::new();
    let mut found = Vec::new();
    for entry in log {
        let pid = entry.pid;
        match entry.kind.as_str() {
            "start" => {
                let held = holders.entry(&entry.uid).or_default();
                let others: Vec<u32> = held
                    .iter()
                    .copied()
                    .filter(|p| *p != pid && !frozen.contains(p))
                    .collect();
                if !others.is_empty() {
                    found.push(format!(
                        "{}: started by {pid} while {others:?} ran it",
                        entry.name
                    ));
                }
                if !held.contains(&pid) {
                    held.push(pid);
                }
            }
            "stop" => holders.entry(&entry.uid).or_default().retain(|p| *p != pid),
            "killed" => holders
                .values_mut()
                .for_each(|held| held.retain(|p| *p != pid)),
            "frozen" => frozen.push(pid),
            "thawed" => frozen.retain(|p| *p != pid),
            _ => {}
        }
    }
    found
}

/// Whether `pid`, after it thawed, did anything but stop the daemons it held (any start by it
/// for a UID that another process runs is caught by [`overlaps`]).
fn acted_after_thaw(log: &[Entry], pid: u32) -> Vec<String> {
    let thawed = log
        .iter()
        .rposition(|e| e.kind == "thawed" && e.pid == pid)
        .unwrap_or(log.len());
    log[thawed..]
        .iter()
        .filter(|e| e.pid == pid && e.kind == "start")
        .map(|e| format!("{} started by {pid} after it thawed", e.name))
        .collect()
}

struct Replica {
    process: tokio::process::Child,
    pid: u32,
    output: PathBuf,
}

impl Replica {
    async fn spawn(namespace: &str, log: &Path, dir: &Path, n: usize) -> anyhow::Result<Self> {
        let output = dir.join(format!("replica-{n}.log"));
        let out = std::fs::File::create(&output)?;
        let process = tokio::process::Command::new(std::env::current_exe()?)
            .env(CHILD_ENV, namespace)
            .env(LOG_ENV, log)
            .env(IDENTITY_ENV, format!("replica-{n}"))
            .stdin(std::process::Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true)
            .spawn()?;
        let pid = process
            .id()
            .ok_or_else(|| anyhow::anyhow!("the child has no pid"))?;
        let replica = Self {
            process,
            pid,
            output,
        };
        // Signalled only once it runs (before, SIGTERM would end it with the default action).
        let what = format!("replica {n} to start (see {})", replica.output.display());
        wait_until(what, PROMPTLY, || async {
            replica.said("the operator has started")
        })
        .await;
        Ok(replica)
    }

    fn said(&self, text: &str) -> bool {
        std::fs::read_to_string(&self.output).is_ok_and(|o| o.contains(text))
    }

    async fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let status = tokio::process::Command::new("kill")
            .args([signal, &self.pid.to_string()])
            .status()
            .await?;
        anyhow::ensure!(status.success(), "kill {signal} {} failed", self.pid);
        Ok(())
    }

    async fn exit_code(&mut self) -> anyhow::Result<Option<i32>> {
        let status = tokio::time::timeout(PROMPTLY, self.process.wait()).await??;
        Ok(status.code())
    }
}

/// Waits until `pid` has started the daemon of every object in `names` after `since`; returns
/// when the last of them started.
async fn wait_started(log: &Path, names: &[String], pid: u32, since: u128) -> u128 {
    let what = format!("replica {pid} to start the daemons of {names:?}");
    kopf_tests::wait_for(what, PROMPTLY, || async {
        let entries = read_log(log);
        let starts: Vec<u128> = names
            .iter()
            .filter_map(|n| {
                entries
                    .iter()
                    .find(|e| e.kind == "start" && &e.name == n && e.pid == pid && e.at >= since)
                    .map(|e| e.at)
            })
            .collect();
        if starts.len() == names.len() {
            Ok(starts.into_iter().max().unwrap_or_default())
        } else {
            Err(format!("{} of {} started", starts.len(), names.len()))
        }
    })
    .await
}

fn percentiles(mut gaps: Vec<Duration>) -> String {
    gaps.sort();
    let at = |q: f64| {
        let i = ((gaps.len() as f64 - 1.0) * q).round() as usize;
        gaps.get(i).copied().unwrap_or_default()
    };
    format!(
        "n={} p50={:?} p99={:?} max={:?}",
        gaps.len(),
        at(0.5),
        at(0.99),
        gaps.last().copied().unwrap_or_default()
    )
}

fn count_from_env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The handover after SIGTERM (a rolling update) and after SIGKILL, with no overlap.
async fn handovers_never_overlap() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let dir = std::env::temp_dir().join(format!("kopf-ha-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let log = dir.join("daemons.log");
    let mut n = 0;
    let mut leader = Replica::spawn(ns.name(), &log, &dir, n).await?;
    let names = create_many(&api, "ha", 4).await?;
    wait_started(&log, &names, leader.pid, 0).await;
    n += 1;
    let mut standby = Replica::spawn(ns.name(), &log, &dir, n).await?;

    // Rolling updates: a new replica, then SIGTERM the leader; the old standby takes over.
    let mut graceful = Vec::new();
    for _ in 0..count_from_env("KOPF_HA_ROLLS", 20) {
        n += 1;
        let newest = Replica::spawn(ns.name(), &log, &dir, n).await?;
        let sent = now_nanos();
        leader.signal("-TERM").await?;
        let code = leader.exit_code().await?;
        anyhow::ensure!(
            code == Some(0),
            "exit {code:?}: see {}",
            leader.output.display()
        );
        let next = standby;
        let started = wait_started(&log, &names, next.pid, sent).await;
        graceful.push(Duration::from_nanos(u64::try_from(started - sent)?));
        (leader, standby) = (next, newest);
    }

    // Crashes: SIGKILL the leader; the standby takes over after the lease expires.
    let mut crashed = Vec::new();
    for _ in 0..count_from_env("KOPF_HA_KILLS", 3) {
        let sent = now_nanos();
        leader.signal("-KILL").await?;
        let _ = leader.process.wait().await;
        append_line(&log, &format!("killed - - {} {}", leader.pid, now_nanos()));
        let next = standby;
        let started = wait_started(&log, &names, next.pid, sent).await;
        crashed.push(Duration::from_nanos(u64::try_from(started - sent)?));
        n += 1;
        standby = Replica::spawn(ns.name(), &log, &dir, n).await?;
        leader = next;
    }

    // A frozen leader (SIGSTOP) for longer than the lease: the standby takes over; thawed
    // (SIGCONT), the old leader finds its validity lapsed on its own clock, stops its daemons and
    // becomes a standby.
    let sent = now_nanos();
    leader.signal("-STOP").await?;
    append_line(&log, &format!("frozen - - {} {}", leader.pid, now_nanos()));
    let next = standby;
    let started = wait_started(&log, &names, next.pid, sent).await;
    let frozen_gap = Duration::from_nanos(u64::try_from(started - sent)?);
    tokio::time::sleep(Duration::from_secs(1)).await;
    append_line(&log, &format!("thawed - - {} {}", leader.pid, now_nanos()));
    leader.signal("-CONT").await?;
    let what = format!("the thawed replica {} to stop its daemons", leader.pid);
    wait_until(what, PROMPTLY, || async {
        let entries = read_log(&log);
        names.iter().all(|name| {
            let last = entries
                .iter()
                .rev()
                .find(|e| &e.name == name && e.pid == leader.pid);
            last.is_some_and(|e| e.kind == "stop")
        })
    })
    .await;
    let stray = acted_after_thaw(&read_log(&log), leader.pid);
    anyhow::ensure!(stray.is_empty(), "{stray:?}");
    (leader, standby) = (next, leader);
    println!("handover from a frozen leader: {frozen_gap:?}");

    // Deletion with two replicas: the leader releases every finalizer; nothing leaks.
    delete_all(&api, &names).await?;
    assert_gone(&api, &names).await;
    for mut replica in [leader, standby] {
        replica.signal("-TERM").await?;
        anyhow::ensure!(
            replica.exit_code().await? == Some(0),
            "a replica failed to exit"
        );
    }
    let entries = read_log(&log);
    let found = overlaps(&entries);
    anyhow::ensure!(
        found.is_empty(),
        "overlaps: {found:?} (log: {})",
        log.display()
    );
    let starts = entries.iter().filter(|e| e.kind == "start").count();
    println!(
        "handover after SIGTERM: {}; after SIGKILL: {}; {starts} daemon starts, 0 overlaps",
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

/// The detector itself: it finds an overlap, and a kill ends the killed process's daemons.
fn the_detector_finds_an_overlap_and_honours_kills() {
    let entry = |kind: &str, pid, at| Entry {
        kind: kind.to_owned(),
        name: "o".to_owned(),
        uid: "u".to_owned(),
        pid,
        at,
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
}

fn main() -> ExitCode {
    if let Ok(namespace) = std::env::var(CHILD_ENV) {
        return child(&namespace);
    }
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let name = "handovers_never_overlap";
    if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
        return ExitCode::SUCCESS;
    }
    the_detector_finds_an_overlap_and_honours_kills();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("no runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(handovers_never_overlap())
    }));
    match outcome {
        Ok(Ok(())) => {
            println!("test {name} ... ok");
            ExitCode::SUCCESS
        }
        Ok(Err(err)) => {
            println!("test {name} ... FAILED: {err:#}");
            ExitCode::FAILURE
        }
        Err(_) => {
            println!("test {name} ... FAILED (panicked)");
            ExitCode::FAILURE
        }
    }
}
