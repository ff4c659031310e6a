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
mod process_common;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use faults_common::*;
use kopf_examples::crd::KopfExample;
use kopf_runtime::{LeaderElection, LogFormat, Operator, Registry, Stopper, daemon};
use kopf_tests::proxy::FaultProxy;
use kopf_tests::{test_config, wait_until};
use kube::ResourceExt as _;
use process_common::{Child, Entry, append_line, read_log, run_tests};

const CHILD_ENV: &str = "KOPF_HA_CHILD_NAMESPACE";
const LOG_ENV: &str = "KOPF_HA_CHILD_LOG";
const IDENTITY_ENV: &str = "KOPF_HA_CHILD_IDENTITY";
/// The URL of the fault proxy in front of the child, and a file with the proxy's CA (DER).
const SERVER_ENV: &str = "KOPF_HA_CHILD_SERVER";
const CA_ENV: &str = "KOPF_HA_CHILD_CA";
const DAEMON: &str = "ha-daemon";
const LEASE: &str = "kopf-tests-ha";
const LEASE_DURATION: Duration = Duration::from_secs(2);

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
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

/// Stops at once when asked (a 5 s grace period lets it log its stop and write before a cancellation),
/// then tries one last write through the operator's client, as a handler cleaning up would, and
/// logs whether it was `written` or `fenced` (refused because the replica no longer leads).
#[daemon(id = "ha-daemon", cancellation_backoff = "5s")]
async fn ha_daemon(obj: Arc<KopfExample>, stopper: Stopper, client: kube::Client) {
    append("start", &obj);
    stopper.stopped().await;
    append("stop", &obj);
    let ns = obj.metadata.namespace.clone().unwrap_or_default();
    let api: kube::Api<KopfExample> = kube::Api::namespaced(client, &ns);
    let patch = serde_json::json!({"metadata": {"labels": {"last-writer": std::process::id().to_string()}}});
    let params = kube::api::PatchParams::default();
    let outcome = match api
        .patch(&obj.name_any(), &params, &kube::api::Patch::Merge(&patch))
        .await
    {
        Ok(_) => "written",
        Err(kube::Error::Service(e)) if e.downcast_ref::<kopf_runtime::Fenced>().is_some() => {
            "fenced"
        }
        Err(_) => "failed",
    };
    append(outcome, &obj);
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
            .kube_config(proxied_config().await?)
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

/// The test server's configuration, pointed at the child's own fault proxy (which records every
/// request the child sends).
async fn proxied_config() -> anyhow::Result<kube::Config> {
    let mut config = test_config().await?;
    if let (Ok(server), Ok(ca)) = (std::env::var(SERVER_ENV), std::env::var(CA_ENV)) {
        config.cluster_url = server.parse()?;
        config.root_cert = Some(vec![std::fs::read(ca)?]);
    }
    Ok(config)
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
    child: Child,
    pid: u32,
    output: PathBuf,
    /// Every request of this replica passes it (and is recorded there).
    proxy: FaultProxy,
    started: std::time::Instant,
    /// Whether it has led (a replica that never led must never have written).
    led: bool,
}

impl Replica {
    async fn spawn(namespace: &str, log: &Path, dir: &Path, n: usize) -> anyhow::Result<Self> {
        let output = dir.join(format!("replica-{n}.log"));
        let proxy = FaultProxy::start(&test_config().await?).await?;
        let proxied = proxy.config();
        let ca = dir.join(format!("proxy-ca-{n}.der"));
        let der = proxied.root_cert.as_ref().and_then(|certs| certs.first());
        std::fs::write(
            &ca,
            der.ok_or_else(|| anyhow::anyhow!("the proxy has no CA"))?,
        )?;
        let env = [
            (CHILD_ENV, OsString::from(namespace)),
            (LOG_ENV, log.as_os_str().to_owned()),
            (IDENTITY_ENV, OsString::from(format!("replica-{n}"))),
            (SERVER_ENV, OsString::from(proxied.cluster_url.to_string())),
            (CA_ENV, ca.into_os_string()),
        ];
        let child = Child::spawn(&env, &output)?;
        let replica = Self {
            pid: child.pid,
            child,
            output,
            proxy,
            started: std::time::Instant::now(),
            led: false,
        };
        // Signalled only once it runs (before, SIGTERM would end it with the default action).
        let what = format!("replica {n} to start (see {})", replica.output.display());
        wait_until(what, PROMPTLY, || async {
            replica.said("the operator has started")
        })
        .await;
        Ok(replica)
    }

    /// The requests of this replica that arrived at its proxy after `since`: `(reads, writes)`.
    fn requests_after(&self, since: std::time::Instant) -> (usize, Vec<String>) {
        let log = self.proxy.handle().log();
        let after: Vec<_> = log.iter().filter(|r| r.at > since).collect();
        let reads = after
            .iter()
            .filter(|r| r.method == http::Method::GET)
            .count();
        let writes = after
            .iter()
            .filter(|r| r.method != http::Method::GET)
            .map(|r| format!("{} {}", r.method, r.path))
            .collect();
        (reads, writes)
    }

    /// A replica that never led sent no write at all (its reads are the positive control).
    fn assert_wrote_nothing_unless_it_led(&self) -> anyhow::Result<()> {
        let (reads, writes) = self.requests_after(self.started);
        anyhow::ensure!(self.led || writes.is_empty(), "a standby wrote: {writes:?}");
        anyhow::ensure!(reads > 0, "replica {} sent no request at all", self.pid);
        Ok(())
    }

    fn said(&self, text: &str) -> bool {
        std::fs::read_to_string(&self.output).is_ok_and(|o| o.contains(text))
    }

    async fn signal(&self, signal: &str) -> anyhow::Result<()> {
        self.child.signal(signal).await
    }

    async fn exit_code(&mut self) -> anyhow::Result<Option<i32>> {
        self.child.exit_code(PROMPTLY).await
    }

    async fn wait_killed(&mut self) {
        let _ = self.child.process.wait().await;
    }
}

/// Waits until `pid` has started the daemon of every object in `names` after `since`; returns
/// when the last of them started.
async fn wait_started(log: &Path, names: &[String], pid: u32, since: u128) -> u128 {
    wait_started_by_one_of(log, names, &[pid], since).await.1
}

/// Waits until one of `pids` has started the daemon of every object in `names` after `since`;
/// returns that pid and when the last of them started.
async fn wait_started_by_one_of(
    log: &Path,
    names: &[String],
    pids: &[u32],
    since: u128,
) -> (u32, u128) {
    let what = format!("one of {pids:?} to start the daemons of {names:?}");
    kopf_tests::wait_for(what, PROMPTLY, || async {
        let entries = read_log(log);
        let started_by = |pid: u32| -> Option<u128> {
            let starts: Vec<u128> = names
                .iter()
                .filter_map(|n| {
                    entries
                        .iter()
                        .find(|e| {
                            e.kind == "start" && &e.name == n && e.pid == pid && e.at() >= since
                        })
                        .map(Entry::at)
                })
                .collect();
            (starts.len() == names.len()).then(|| starts.into_iter().max().unwrap_or_default())
        };
        pids.iter()
            .find_map(|pid| started_by(*pid).map(|at| (*pid, at)))
            .ok_or_else(|| "not yet".to_owned())
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

/// Two replicas of one namespace, the shared log, and the objects that exist.
struct Cluster {
    namespace: String,
    dir: PathBuf,
    log: PathBuf,
    /// Replicas spawned so far (each gets the next number as its identity).
    spawned: usize,
    leader: Replica,
    standby: Replica,
    names: Vec<String>,
}

impl Cluster {
    /// A leader serving the daemons of `names`, and a standby.
    async fn start(
        namespace: &str,
        api: &kube::Api<KopfExample>,
        n: usize,
    ) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("kopf-ha-{}-{namespace}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let log = dir.join("daemons.log");
        let mut leader = Replica::spawn(namespace, &log, &dir, 0).await?;
        leader.led = true;
        let names = create_many(api, "ha", n).await?;
        wait_started(&log, &names, leader.pid, 0).await;
        let standby = Replica::spawn(namespace, &log, &dir, 1).await?;
        Ok(Self {
            namespace: namespace.to_owned(),
            dir,
            log,
            spawned: 2,
            leader,
            standby,
            names,
        })
    }

    async fn spawn(&mut self) -> anyhow::Result<Replica> {
        self.spawned += 1;
        Replica::spawn(&self.namespace, &self.log, &self.dir, self.spawned).await
    }

    fn kill_line(&self, what: &str, pid: u32) {
        append_line(&self.log, &format!("{what} - - {pid} {}", now_nanos()));
    }

    /// Waits until `pid` runs every object's daemon started after `since`; the time it took.
    async fn taken_over(&self, pid: u32, since: u128) -> anyhow::Result<Duration> {
        let started = wait_started(&self.log, &self.names, pid, since).await;
        Ok(Duration::from_nanos(u64::try_from(
            started.saturating_sub(since),
        )?))
    }

    /// A rolling update: a new replica, then SIGTERM the leader; the standby takes over.
    async fn roll(&mut self) -> anyhow::Result<Duration> {
        let newest = self.spawn().await?;
        let sent = now_nanos();
        self.leader.signal("-TERM").await?;
        let code = self.leader.exit_code().await?;
        let output = self.leader.output.display().to_string();
        anyhow::ensure!(code == Some(0), "exit {code:?}: see {output}");
        // A leader that exits gracefully still leads while its daemons stop: their last writes
        // go through (the positive control of the fencing check in `freeze`), and its proxy saw
        // them.
        let pid = self.leader.pid;
        let written = read_log(&self.log)
            .iter()
            .filter(|e| e.kind == "written" && e.pid == pid && e.at() >= sent)
            .count();
        anyhow::ensure!(
            written == self.names.len(),
            "{written} last writes went through"
        );
        let (_, writes) = self.leader.requests_after(self.leader.started);
        anyhow::ensure!(writes.len() >= written, "the proxy saw {writes:?}");
        // Either standby may win the released Lease: the old one or the newest.
        let pids = [self.standby.pid, newest.pid];
        let (winner, started) = wait_started_by_one_of(&self.log, &self.names, &pids, sent).await;
        let gap = Duration::from_nanos(u64::try_from(started.saturating_sub(sent))?);
        let old_standby = std::mem::replace(&mut self.standby, newest);
        let next = if winner == old_standby.pid {
            old_standby
        } else {
            std::mem::replace(&mut self.standby, old_standby)
        };
        self.leader = next;
        self.leader.led = true;
        Ok(gap)
    }

    /// A crash: SIGKILL the leader; the standby takes over once the lease expired.
    async fn crash(&mut self) -> anyhow::Result<Duration> {
        let sent = now_nanos();
        self.leader.signal("-KILL").await?;
        self.leader.wait_killed().await;
        self.kill_line("killed", self.leader.pid);
        let gap = self.taken_over(self.standby.pid, sent).await?;
        let newest = self.spawn().await?;
        self.leader = std::mem::replace(&mut self.standby, newest);
        self.leader.led = true;
        Ok(gap)
    }

    /// SIGKILL the standby and start another.
    async fn crash_standby(&mut self) -> anyhow::Result<()> {
        self.standby.assert_wrote_nothing_unless_it_led()?;
        self.standby.signal("-KILL").await?;
        self.standby.wait_killed().await;
        self.kill_line("killed", self.standby.pid);
        self.standby = self.spawn().await?;
        Ok(())
    }

    /// A frozen leader (SIGSTOP) for longer than the lease: the standby takes over; thawed
    /// (SIGCONT), the old leader finds its validity lapsed on its own clock, only stops its
    /// daemons, and stands by.
    async fn freeze(&mut self) -> anyhow::Result<Duration> {
        let sent = now_nanos();
        self.leader.signal("-STOP").await?;
        self.kill_line("frozen", self.leader.pid);
        let gap = self.taken_over(self.standby.pid, sent).await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        self.kill_line("thawed", self.leader.pid);
        let thawed = std::time::Instant::now();
        self.leader.signal("-CONT").await?;
        let pid = self.leader.pid;
        let what = format!("the thawed replica {pid} to stop its daemons, its last writes refused");
        wait_until(what, PROMPTLY, || async {
            let entries = read_log(&self.log);
            let from = entries
                .iter()
                .rposition(|e| e.kind == "thawed" && e.pid == pid)
                .unwrap_or_default();
            let mine: Vec<&Entry> = entries[from..].iter().filter(|e| e.pid == pid).collect();
            let count = |kind: &str| mine.iter().filter(|e| e.kind == kind).count();
            count("stop") == self.names.len() && count("fenced") == self.names.len()
        })
        .await;
        let stray = acted_after_thaw(&read_log(&self.log), pid);
        anyhow::ensure!(stray.is_empty(), "{stray:?}");
        // Its proxy saw no write of it after the thaw; its reads (the Lease, the watches) are
        // the positive control that the proxy records it.
        wait_until(
            "a read of the thawed replica at its proxy",
            PROMPTLY,
            || async { self.leader.requests_after(thawed).0 > 0 },
        )
        .await;
        let (_, writes) = self.leader.requests_after(thawed);
        anyhow::ensure!(
            writes.is_empty(),
            "writes of a deposed leader after its thaw: {writes:?}"
        );
        std::mem::swap(&mut self.leader, &mut self.standby);
        self.leader.led = true;
        Ok(gap)
    }

    /// Deletes every object (the leader releases the finalizers: nothing leaks), stops both
    /// replicas with SIGTERM (exit 0), and checks the log for overlaps. Returns the daemon starts.
    async fn finish(self, api: &kube::Api<KopfExample>) -> anyhow::Result<usize> {
        delete_all(api, &self.names).await?;
        assert_gone(api, &self.names).await;
        self.standby.assert_wrote_nothing_unless_it_led()?;
        for mut replica in [self.leader, self.standby] {
            replica.signal("-TERM").await?;
            let code = replica.exit_code().await?;
            anyhow::ensure!(code == Some(0), "a replica exited with {code:?}");
        }
        let entries = read_log(&self.log);
        let found = overlaps(&entries);
        let log = self.log.display();
        anyhow::ensure!(found.is_empty(), "overlaps: {found:?} (log: {log})");
        Ok(entries.iter().filter(|e| e.kind == "start").count())
    }
}

/// The handover after SIGTERM (20 rolling updates), after SIGKILL and from a frozen leader.
async fn handovers_never_overlap() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let mut cluster = Cluster::start(ns.name(), &api, 4).await?;
    let mut graceful = Vec::new();
    for _ in 0..count_from_env("KOPF_HA_ROLLS", 20) {
        graceful.push(cluster.roll().await?);
    }
    let mut crashed = Vec::new();
    for _ in 0..count_from_env("KOPF_HA_KILLS", 3) {
        crashed.push(cluster.crash().await?);
    }
    let frozen = cluster.freeze().await?;
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
/// repeats a sequence): no overlap, every object served by the leader after each event, no
/// leaked finalizer, every replica exits cleanly.
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
