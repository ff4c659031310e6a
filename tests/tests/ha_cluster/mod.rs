//! The replicas of the high-availability tests, the cluster they form, and the checks on their
//! shared log: every daemon start and stop, every timer tick and every write of a replica's last
//! cleanup is appended to one file with its process id and time, and the test appends every
//! kill, freeze and thaw. The checker fails on any moment where two live processes run a daemon
//! for the same object UID.
//!
//! Lines of the shared log: `<kind> <name> <uid> <pid> <unix nanos>`, where the kind is `start`,
//! `stop`, `tick`, `cron`, `written`, `fenced`, `failed`, `killed`, `frozen` or `thawed` (`-` for the
//! name and UID of the last three). Each replica also rewrites a stats file with its
//! [`Operator::stats`](kopf_runtime::Operator::stats) every 200 ms (see [`Counts`]).
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kopf_examples::crd::KopfExample;
use kopf_tests::proxy::FaultProxy;
use kopf_tests::{test_config, wait_until};

use crate::faults_common::*;
use crate::process_common::{Child, Entry, append_line, read_log};

/// Set in a child: the namespace it serves.
pub const CHILD_ENV: &str = "KOPF_HA_CHILD_NAMESPACE";
/// The shared log.
pub const LOG_ENV: &str = "KOPF_HA_CHILD_LOG";
/// The child's identity in the Lease.
pub const IDENTITY_ENV: &str = "KOPF_HA_CHILD_IDENTITY";
/// The URL of the fault proxy in front of the child, and a file with the proxy's CA (DER).
pub const SERVER_ENV: &str = "KOPF_HA_CHILD_SERVER";
pub const CA_ENV: &str = "KOPF_HA_CHILD_CA";
/// The child's stats file.
pub const STATS_ENV: &str = "KOPF_HA_CHILD_STATS";
pub const LEASE: &str = "kopf-tests-ha";
pub const LEASE_DURATION: Duration = Duration::from_secs(2);

/// One last write through the operator's client, as a stopping handler cleaning up would: the
/// `last-writer` label set to this process; `written`, `fenced` (refused: this replica no
/// longer leads or holds the object) or `failed`.
pub async fn last_write(client: kube::Client, obj: &KopfExample) -> &'static str {
    use kube::ResourceExt as _;
    let ns = obj.namespace().unwrap_or_default();
    let api: kube::Api<KopfExample> = kube::Api::namespaced(client, &ns);
    let pid = std::process::id().to_string();
    let patch = serde_json::json!({"metadata": {"labels": {"last-writer": pid}}});
    let params = kube::api::PatchParams::default();
    match api
        .patch(&obj.name_any(), &params, &kube::api::Patch::Merge(&patch))
        .await
    {
        Ok(_) => "written",
        Err(kube::Error::Service(e)) if e.downcast_ref::<kopf_runtime::ha::Fenced>().is_some() => {
            "fenced"
        }
        Err(_) => "failed",
    }
}

/// A child replica's operator: its handlers in `namespace`, through its fault proxy.
pub async fn child_builder(
    namespace: &str,
    registry: &kopf_runtime::Registry,
) -> anyhow::Result<kopf_runtime::OperatorBuilder> {
    Ok(kopf_runtime::Operator::builder()
        .name("kopf-tests")
        .log_format(kopf_runtime::LogFormat::Human)
        .kube_config(proxied_config().await?)
        .namespaces([namespace])
        .registry(registry)
        .shutdown_timeout(Duration::from_secs(10)))
}

/// Runs a child's operator until SIGTERM, rewriting its stats file (`STATS_ENV`) with `line`
/// every 200 ms, then shuts it down.
pub async fn serve_until_sigterm(
    builder: kopf_runtime::OperatorBuilder,
    line: fn(&kopf_runtime::stats::OperatorStats) -> String,
) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let operator = builder.start().await?;
    let stats = std::env::var_os(STATS_ENV);
    loop {
        tokio::select! {
            _ = terminate.recv() => break,
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        if let Some(path) = &stats {
            let partial = Path::new(path).with_extension("partial");
            std::fs::write(&partial, line(&operator.stats()))?;
            std::fs::rename(&partial, path)?;
        }
    }
    operator.shutdown().await;
    Ok(())
}

/// The test server's configuration (`KUBECONFIG`), pointed at a child's own fault proxy (which
/// records every request the child sends) when the parent passed its address.
pub async fn proxied_config() -> anyhow::Result<kube::Config> {
    let mut config = test_config().await?;
    if let (Ok(server), Ok(ca)) = (std::env::var(SERVER_ENV), std::env::var(CA_ENV)) {
        config.cluster_url = server.parse()?;
        config.root_cert = Some(vec![std::fs::read(ca)?]);
    }
    Ok(config)
}

/// Appends `<kind> <name> <uid> <pid> <unix nanos>` for `obj` to the shared log named by
/// [`LOG_ENV`] (nothing outside a child).
pub fn log_event(kind: &str, obj: &KopfExample) {
    log_event_at(kind, obj, now_nanos());
}

/// Like [`log_event`], with the time given (unix nanos) instead of now.
pub fn log_event_at(kind: &str, obj: &KopfExample, at: u128) {
    use kube::ResourceExt as _;
    let Some(path) = std::env::var_os(LOG_ENV) else {
        return;
    };
    let uid = obj.metadata.uid.clone().unwrap_or_default();
    let line = format!(
        "{kind} {} {uid} {} {at}",
        obj.name_any(),
        std::process::id(),
    );
    append_line(Path::new(&path), &line);
}

pub fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

/// The overlap detector: in the log's order, a daemon runs from its start to its stop, or to
/// its process's kill; two processes running one UID's daemon at once is an overlap. A process
/// frozen by SIGSTOP runs nothing: another may start the UID's daemon meanwhile, and then the
/// only thing the frozen one may do with that UID after it thaws is to stop its daemon. Returns
/// the overlaps found.
pub fn overlaps(log: &[Entry]) -> Vec<String> {
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

/// The cron occurrences (`cron` lines) that ran more than once for one object, across every
/// replica.
pub fn cron_runs_twice(log: &[Entry]) -> Vec<String> {
    let mut seen: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for entry in log.iter().filter(|e| e.kind == "cron") {
        *seen.entry((&entry.uid, &entry.detail)).or_default() += 1;
    }
    seen.into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|((uid, occurrence), n)| format!("{uid} {occurrence}: {n} runs"))
        .collect()
}

/// Whether `pid`, after it thawed, did anything but stop the daemons it held: started a daemon
/// or fired a timer (any start by it for a UID that another process runs is also caught by
/// [`overlaps`]).
pub fn acted_after_thaw(log: &[Entry], pid: u32) -> Vec<String> {
    let thawed = log
        .iter()
        .rposition(|e| e.kind == "thawed" && e.pid == pid)
        .unwrap_or(log.len());
    log[thawed..]
        .iter()
        .filter(|e| e.pid == pid && (e.kind == "start" || e.kind == "tick"))
        .map(|e| format!("{} {} by {pid} after it thawed", e.name, e.kind))
        .collect()
}

/// A replica's counts from its stats file: `<kind objects> <supervisor objects> <daemons>
/// <timers>`, the daemons and timers being those running, stopping or queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    pub objects: usize,
    pub tracked: usize,
    pub daemons: usize,
    pub timers: usize,
}

impl Counts {
    /// The line a child writes for `stats`.
    pub fn line(stats: &kopf_runtime::stats::OperatorStats) -> String {
        let mut counts = Self::default();
        for kind in &stats.kinds {
            let s = &kind.supervisor;
            counts.objects += kind.objects;
            counts.tracked += s.objects;
            counts.daemons += s.daemons_running + s.daemons_stopping + s.daemons_queued;
            counts.timers += s.timers_running + s.timers_stopping + s.timers_queued;
        }
        let Self {
            objects,
            tracked,
            daemons,
            timers,
        } = counts;
        format!("{objects} {tracked} {daemons} {timers}")
    }

    pub fn parse(line: &str) -> Option<Self> {
        let mut numbers = line.split_whitespace().map(str::parse);
        let mut next = || numbers.next()?.ok();
        Some(Self {
            objects: next()?,
            tracked: next()?,
            daemons: next()?,
            timers: next()?,
        })
    }
}

pub struct Replica {
    pub child: Child,
    pub pid: u32,
    pub output: PathBuf,
    /// Its counts, rewritten every 200 ms.
    pub stats: PathBuf,
    /// Every request of this replica passes it (and is recorded there).
    pub proxy: FaultProxy,
    pub started: std::time::Instant,
    /// Whether it has led (a replica that never led must never have written).
    pub led: bool,
}

impl Replica {
    pub async fn spawn(namespace: &str, log: &Path, dir: &Path, n: usize) -> anyhow::Result<Self> {
        Self::spawn_with(namespace, log, dir, n, &test_config().await?, &[]).await
    }

    /// Like [`spawn`](Self::spawn), with its proxy in front of the API server of `upstream`
    /// and `extra` added to the child's environment (e.g. a `KUBECONFIG` for that server).
    pub async fn spawn_with(
        namespace: &str,
        log: &Path,
        dir: &Path,
        n: usize,
        upstream: &kube::Config,
        extra: &[(&str, OsString)],
    ) -> anyhow::Result<Self> {
        let output = dir.join(format!("replica-{n}.log"));
        let stats = dir.join(format!("replica-{n}.stats"));
        let proxy = FaultProxy::start(upstream).await?;
        let proxied = proxy.config();
        let ca = dir.join(format!("proxy-ca-{n}.der"));
        let der = proxied.root_cert.as_ref().and_then(|certs| certs.first());
        std::fs::write(
            &ca,
            der.ok_or_else(|| anyhow::anyhow!("the proxy has no CA"))?,
        )?;
        let mut env = vec![
            (CHILD_ENV, OsString::from(namespace)),
            (LOG_ENV, log.as_os_str().to_owned()),
            (IDENTITY_ENV, OsString::from(format!("replica-{n}"))),
            (SERVER_ENV, OsString::from(proxied.cluster_url.to_string())),
            (CA_ENV, ca.into_os_string()),
            (STATS_ENV, stats.clone().into_os_string()),
        ];
        env.extend(extra.iter().cloned());
        let child = Child::spawn(&env, &output)?;
        let replica = Self {
            pid: child.pid,
            child,
            output,
            stats,
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
    pub fn requests_after(&self, since: std::time::Instant) -> (usize, Vec<String>) {
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
    pub fn assert_wrote_nothing_unless_it_led(&self) -> anyhow::Result<()> {
        let (reads, writes) = self.requests_after(self.started);
        anyhow::ensure!(self.led || writes.is_empty(), "a standby wrote: {writes:?}");
        anyhow::ensure!(reads > 0, "replica {} sent no request at all", self.pid);
        Ok(())
    }

    /// Its latest counts (none before it wrote them).
    pub fn counts(&self) -> Option<Counts> {
        Counts::parse(&std::fs::read_to_string(&self.stats).ok()?)
    }

    /// Waits until its counts are `expected`.
    pub async fn wait_counts(&self, expected: Counts) {
        let what = format!("replica {}'s counts to be {expected:?}", self.pid);
        kopf_tests::wait_for(what, PROMPTLY, || async {
            match self.counts() {
                Some(counts) if counts == expected => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    }

    pub fn said(&self, text: &str) -> bool {
        std::fs::read_to_string(&self.output).is_ok_and(|o| o.contains(text))
    }

    pub async fn signal(&self, signal: &str) -> anyhow::Result<()> {
        self.child.signal(signal).await
    }

    pub async fn exit_code(&mut self) -> anyhow::Result<Option<i32>> {
        self.child.exit_code(PROMPTLY).await
    }

    pub async fn wait_killed(&mut self) {
        let _ = self.child.process.wait().await;
    }
}

/// Waits until `pid` has started the daemon of every object in `names` after `since`; returns
/// when the last of them started.
pub async fn wait_started(log: &Path, names: &[String], pid: u32, since: u128) -> u128 {
    wait_started_by_one_of(log, names, &[pid], since).await.1
}

/// Waits until one of `pids` has started the daemon of every object in `names` after `since`;
/// returns that pid and when the last of them started.
pub async fn wait_started_by_one_of(
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

pub fn percentiles(mut gaps: Vec<Duration>) -> String {
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

pub fn count_from_env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Two replicas of one namespace, the shared log, and the objects that exist.
pub struct Cluster {
    pub namespace: String,
    pub dir: PathBuf,
    pub log: PathBuf,
    /// Replicas spawned so far (each gets the next number as its identity).
    pub spawned: usize,
    pub leader: Replica,
    pub standby: Replica,
    pub names: Vec<String>,
}

impl Cluster {
    /// A leader serving the daemons of `names`, and a standby.
    pub async fn start(
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

    pub async fn spawn(&mut self) -> anyhow::Result<Replica> {
        self.spawned += 1;
        Replica::spawn(&self.namespace, &self.log, &self.dir, self.spawned).await
    }

    pub fn kill_line(&self, what: &str, pid: u32) {
        append_line(&self.log, &format!("{what} - - {pid} {}", now_nanos()));
    }

    /// Waits until `pid` runs every object's daemon started after `since`; the time it took.
    pub async fn taken_over(&self, pid: u32, since: u128) -> anyhow::Result<Duration> {
        let started = wait_started(&self.log, &self.names, pid, since).await;
        Ok(Duration::from_nanos(u64::try_from(
            started.saturating_sub(since),
        )?))
    }

    /// A rolling update: a new replica, then SIGTERM the leader; the standby takes over.
    pub async fn roll(&mut self) -> anyhow::Result<Duration> {
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
    pub async fn crash(&mut self) -> anyhow::Result<Duration> {
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
    pub async fn crash_standby(&mut self) -> anyhow::Result<()> {
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
    pub async fn freeze(&mut self) -> anyhow::Result<Duration> {
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

    /// Invariant 3: waits until the leader has fired every object's timer after `since`.
    pub async fn ticking(&self, since: u128) {
        let pid = self.leader.pid;
        let what = format!("invariant 3: {pid} to fire the timers of {:?}", self.names);
        wait_until(what, PROMPTLY, || async {
            let entries = read_log(&self.log);
            self.names.iter().all(|name| {
                entries
                    .iter()
                    .any(|e| e.kind == "tick" && &e.name == name && e.pid == pid && e.at() >= since)
            })
        })
        .await;
    }

    /// Deletes every object (the leader releases the finalizers: nothing leaks), waits for both
    /// replicas' counts to come back to the baseline (invariant 4: before the deletion the
    /// leader's counts show every object, the positive control), stops both replicas with
    /// SIGTERM (exit 0), and checks the log for overlaps. Returns the daemon starts.
    pub async fn finish(self, api: &kube::Api<KopfExample>) -> anyhow::Result<usize> {
        let n = self.names.len();
        let serving = Counts {
            objects: n,
            tracked: n,
            daemons: n,
            timers: 2 * n, // an interval timer and a cron timer
        };
        self.leader.wait_counts(serving).await;
        delete_all(api, &self.names).await?;
        assert_gone(api, &self.names).await;
        for replica in [&self.leader, &self.standby] {
            replica.wait_counts(Counts::default()).await;
        }
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
        let cron_runs = entries.iter().filter(|e| e.kind == "cron").count();
        anyhow::ensure!(cron_runs > 0, "no cron occurrence ran (log: {log})");
        println!("{cron_runs} cron occurrences, none twice");
        let twice = cron_runs_twice(&entries);
        anyhow::ensure!(
            twice.is_empty(),
            "cron occurrences run twice: {twice:?} (log: {log})"
        );
        // Kept for a look when anything above failed.
        std::fs::remove_dir_all(&self.dir)?;
        Ok(entries.iter().filter(|e| e.kind == "start").count())
    }
}
