//! The sharded replicas of `shard_process`, the cluster they form, and what the test checks on
//! them: the expected owner of every object (from [`shard_of`] of its UID and the contiguous
//! assignment of the 1024 ranges to the live members in identity order), the shared log of
//! every daemon start and stop (with the process id, the time and the stop reason), the log of
//! every timer tick, and each member's stats file.
//!
//! Lines of the daemon log: `<kind> <name> <uid> <pid> <unix nanos> [<stop reason>]`, the kinds
//! of `ha_cluster` (`start`, `stop`, `written`, `fenced`, `failed`, `killed`), so its
//! [`overlaps`] detector applies. The tick log (`<log>.ticks`): `tick <name> <uid> <pid> <nanos>`.
#![allow(dead_code, unreachable_pub)]

pub mod episodes;
pub mod logs;
pub mod nogate;

pub use episodes::*;
pub use logs::*;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kopf_examples::crd::KopfExample;
use kopf_tests::wait_for;
use serde::Deserialize;

use crate::faults_common::*;
use crate::ha_cluster::{Replica, now_nanos, overlaps};
use crate::process_common::{append_line, read_log};

/// The Leases' group.
pub const GROUP: &str = "kopf-tests-shards";
pub const RENEW_DEADLINE: Duration = Duration::from_millis(1500);
pub const RETRY_PERIOD: Duration = Duration::from_millis(300);
/// The daemon's `cancellation_backoff`: the longest its stop ladder takes.
pub const STOP_LADDER: Duration = Duration::from_millis(300);
/// Set in a child: `client-side` forces client-side filtering (default: auto).
pub const WATCH_ENV: &str = "KOPF_SHARD_CHILD_WATCH";
/// Objects with this label write once more when their daemon stops (the fencing's control).
pub const WRITER_LABEL: &str = "kopf-tests/last-write";
/// How long a rebalance, a creation of every object or a deletion may take on the noisy
/// machine before the test gives up.
pub const SETTLE: Duration = Duration::from_secs(90);

/// What a member reports in its stats file (see the child of `shard_process`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Seen {
    pub objects: usize,
    pub tracked: usize,
    /// The objects its membership says it serves.
    pub served: usize,
    pub daemons: usize,
    pub timers: usize,
    pub identity: String,
    pub members: Vec<String>,
    pub ranges: String,
    pub held: usize,
    pub watch: Option<String>,
}

/// An object of the test, with its range.
#[derive(Debug, Clone)]
pub struct Obj {
    pub name: String,
    pub uid: String,
    pub range: u16,
    pub writes: bool,
}

/// One member: a replica and whether the test has cut it off from the API server.
pub struct Member {
    pub replica: Replica,
    pub identity: String,
    pub cut: bool,
}

impl Member {
    pub fn seen(&self) -> Option<Seen> {
        serde_json::from_str(&std::fs::read_to_string(&self.replica.stats).ok()?).ok()
    }

    pub fn pid(&self) -> u32 {
        self.replica.pid
    }

    /// How often its validity has lapsed so far (its Lease not renewed in time: on this noisy
    /// machine, a busy member), as its log says.
    pub fn lapses(&self) -> usize {
        let output = std::fs::read_to_string(&self.replica.output).unwrap_or_default();
        output.matches(LAPSE).count()
    }
}

/// What a member logs when its validity lapses.
pub const LAPSE: &str = "not renewed within the renew deadline";

/// The figures of one rebalance.
#[derive(Debug, Clone)]
pub struct Step {
    pub what: String,
    /// Daemons that moved from one live member to another (graceful handovers).
    pub gaps: Vec<Duration>,
    /// From the change (spawn, signal, cut) to the last start of a moved daemon.
    pub took: Duration,
    /// The last writes of the moved daemons that write on their stop: (went through, cut
    /// short by the end of the stop ladder).
    pub writes: (usize, usize),
    /// Members whose validity lapsed during the step.
    pub lapsed: usize,
}

/// The owner (pid) of every object, by UID.
pub type Owners = BTreeMap<String, u32>;
/// Each live member's block of ranges (`start..end`), by pid.
pub type Blocks = Vec<(u32, (u16, u16))>;

/// The owners (pids per UID) before a change, and when it began.
#[derive(Debug, Clone)]
pub struct Mark {
    pub before: Owners,
    pub begun: u128,
    /// Each member's lapses so far, by pid.
    pub lapses: BTreeMap<u32, usize>,
}

/// The members of one namespace, the objects that exist, and the logs.
pub struct Cluster {
    pub namespace: String,
    pub dir: PathBuf,
    pub log: PathBuf,
    upstream: kube::Config,
    extra: Vec<(&'static str, OsString)>,
    pub spawned: usize,
    pub members: Vec<Member>,
    pub objs: Vec<Obj>,
    /// The watch mode every member must report (`Server` or `ClientSide`).
    pub mode: &'static str,
    pub steps: Vec<Step>,
}

impl Cluster {
    /// One member, then `n` objects (every tenth writes on its stop), all served by it.
    pub async fn start(
        namespace: &str,
        api: &kube::Api<KopfExample>,
        n: usize,
        mode: &'static str,
        upstream: kube::Config,
        extra: Vec<(&'static str, OsString)>,
    ) -> anyhow::Result<Self> {
        let dir =
            std::env::temp_dir().join(format!("kopf-shard-{}-{namespace}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let mut cluster = Self {
            namespace: namespace.to_owned(),
            log: dir.join("daemons.log"),
            dir,
            upstream,
            extra,
            spawned: 0,
            members: Vec::new(),
            objs: Vec::new(),
            mode,
            steps: Vec::new(),
        };
        let member = cluster.spawn().await?;
        let what = format!("{}'s watch mode", member.identity);
        let watch = wait_for(what, PROMPTLY, || async {
            member
                .seen()
                .and_then(|s| s.watch)
                .ok_or("not reported yet")
        })
        .await;
        let hint = " (the server needs the feature gate: start the testenv with \
                    KUBE_TESTENV_FEATURE_GATES=ShardedListAndWatch=true)";
        let hint = if mode == "Server" { hint } else { "" };
        anyhow::ensure!(
            watch == mode,
            "the member watches in mode {watch}, not {mode}{hint}"
        );
        cluster.members.push(member);
        let created = now_nanos();
        cluster.objs = create_objects(api, n).await?;
        cluster
            .settle(&format!("{n} objects served by one member"))
            .await?;
        let took = since(created, now_nanos());
        println!("{n} objects created and their daemons started by one member in {took:?}");
        Ok(cluster)
    }

    pub fn ticks(&self) -> PathBuf {
        tick_log(&self.log)
    }

    pub async fn spawn(&mut self) -> anyhow::Result<Member> {
        let n = self.spawned;
        self.spawned += 1;
        let replica = Replica::spawn_with(
            &self.namespace,
            &self.log,
            &self.dir,
            n,
            &self.upstream,
            &self.extra,
        )
        .await?;
        let identity = format!("replica-{n}");
        Ok(Member {
            replica,
            identity,
            cut: false,
        })
    }

    /// The live members (not cut off) in identity order.
    pub fn live(&self) -> Vec<&Member> {
        let mut live: Vec<&Member> = self.members.iter().filter(|m| !m.cut).collect();
        live.sort_by(|a, b| a.identity.cmp(&b.identity));
        live
    }

    /// The expected owner (pid) of every object and each live member's expected block.
    pub fn expected(&self) -> (Owners, Blocks) {
        let live = self.live();
        let blocks: Vec<(u32, (u16, u16))> = live
            .iter()
            .enumerate()
            .map(|(i, m)| (m.pid(), block(i, live.len())))
            .collect();
        let owners = self
            .objs
            .iter()
            .filter_map(|o| {
                let owner = blocks
                    .iter()
                    .find(|(_, (start, end))| (*start..*end).contains(&o.range))?;
                Some((o.uid.clone(), owner.0))
            })
            .collect();
        (owners, blocks)
    }

    /// What is not yet as expected: every live member sees the live members, holds its block
    /// and runs the daemons of exactly the objects in it (its stats and the log agree); a cut
    /// member runs none.
    pub fn unsettled(&self) -> Option<String> {
        let (owners, blocks) = self.expected();
        let live: Vec<String> = self.live().iter().map(|m| m.identity.clone()).collect();
        for member in &self.members {
            let Some(seen) = member.seen() else {
                return Some(format!("{} wrote no stats yet", member.identity));
            };
            let mine = owners.values().filter(|p| **p == member.pid()).count();
            if member.cut {
                if seen.daemons + seen.timers > 0 {
                    return Some(format!("the cut member still runs: {seen:?}"));
                }
                continue;
            }
            let block = blocks.iter().find(|(p, _)| *p == member.pid()).map(|b| b.1);
            let ranges = block.map(block_text).unwrap_or_default();
            let objects = if self.mode == "Server" {
                mine
            } else {
                self.objs.len()
            };
            let expected = Seen {
                objects,
                tracked: objects,
                served: mine,
                daemons: mine,
                timers: mine,
                identity: member.identity.clone(),
                members: live.clone(),
                held: block.map_or(0, |(s, e)| usize::from(e - s)),
                ranges,
                watch: Some(self.mode.to_owned()),
            };
            if seen != expected {
                return Some(format!(
                    "{} sees {seen:?}, expected {expected:?}",
                    member.identity
                ));
            }
        }
        let log = read_log(&self.log);
        let running = holders(&log);
        for obj in &self.objs {
            let held = running.get(obj.uid.as_str()).cloned().unwrap_or_default();
            let expected: Vec<u32> = owners.get(&obj.uid).copied().into_iter().collect();
            if held != expected {
                let name = &obj.name;
                return Some(format!(
                    "{name}'s daemon runs in {held:?}, not {expected:?}"
                ));
            }
        }
        None
    }

    /// Waits until the cluster is settled (see [`unsettled`](Self::unsettled)).
    pub async fn settle(&self, what: &str) -> anyhow::Result<()> {
        let what = format!("{what}: every object's daemon on its range's holder, exactly once");
        wait_for(what, SETTLE, || async {
            self.unsettled().map_or(Ok(()), Err)
        })
        .await;
        Ok(())
    }

    /// The owners before a change, and when it began.
    pub fn mark(&self) -> Mark {
        Mark {
            before: self.expected().0,
            begun: now_nanos(),
            lapses: self.members.iter().map(|m| (m.pid(), m.lapses())).collect(),
        }
    }

    /// After a change (a spawn, a signal, a cut) begun at `mark`: waits until settled, and
    /// measures the handovers between members that stopped gracefully (not in `lost`): for
    /// every moved daemon, its old instance's stop to the new instance's start; the old
    /// holder's last write, if the object writes on its stop, was not refused (see
    /// [`last_write`]).
    pub async fn measure(&mut self, what: &str, mark: Mark, lost: &[u32]) -> anyhow::Result<Step> {
        self.settle(what).await?;
        let (after, _) = self.expected();
        // A member whose validity lapsed meanwhile stopped its daemons as a lost member does
        // (their last writes refused): its moves are timed, their writes not checked.
        let lapsed: Vec<u32> = (self.members.iter())
            .filter(|m| m.lapses() > mark.lapses.get(&m.pid()).copied().unwrap_or_default())
            .map(Member::pid)
            .collect();
        let log = read_log(&self.log);
        let (mut gaps, mut last, mut writes) = (Vec::new(), mark.begun, (0, 0));
        for obj in &self.objs {
            let new = after[&obj.uid];
            let old = mark.before.get(&obj.uid).copied();
            if old == Some(new) {
                continue;
            }
            let find = |kind: &str, pid: u32| {
                log.iter().find(|e| {
                    e.kind == kind && e.uid == obj.uid && e.pid == pid && at(e) >= mark.begun
                })
            };
            let name = &obj.name;
            let started = find("start", new)
                .map(at)
                .ok_or_else(|| anyhow::anyhow!("{name}: no start by {new} after the change"))?;
            last = last.max(started);
            let Some(old) = old.filter(|p| !lost.contains(p)) else {
                continue;
            };
            let stop = find("stop", old)
                .ok_or_else(|| anyhow::anyhow!("{name}: no stop by {old} after the change"))?;
            // A member that stays stops what moves away from it with "operator pausing".
            let stays = self.members.iter().any(|m| m.pid() == old);
            let pausing = stop.detail.contains("operator_pausing");
            anyhow::ensure!(!stays || pausing, "{name}: stopped by {old} for {stop:?}");
            let stopped = at(stop);
            anyhow::ensure!(
                stopped <= started,
                "{name}: started by {new} before {old} stopped"
            );
            gaps.push(since(stopped, started));
            if obj.writes && !lapsed.contains(&old) {
                let written = last_write(&log, obj, old, mark.begun)?;
                *if written {
                    &mut writes.0
                } else {
                    &mut writes.1
                } += 1;
            }
        }
        let step = Step {
            lapsed: lapsed.len(),
            what: what.to_owned(),
            gaps,
            took: since(mark.begun, last),
            writes,
        };
        self.steps.push(step.clone());
        Ok(step)
    }

    /// A new member joins.
    pub async fn join(&mut self) -> anyhow::Result<Step> {
        let n = self.live().len();
        let mark = self.mark();
        let member = self.spawn().await?;
        self.members.push(member);
        self.measure(&format!("join {n}→{}", n + 1), mark, &[])
            .await
    }

    /// The member at `index` leaves by SIGTERM, and exits 0.
    pub async fn leave(&mut self, index: usize) -> anyhow::Result<Step> {
        let n = self.live().len();
        let mark = self.mark();
        let mut member = self.members.remove(index);
        member.replica.signal("-TERM").await?;
        let code = member.replica.exit_code().await?;
        let output = member.replica.output.display().to_string();
        anyhow::ensure!(code == Some(0), "exit {code:?}: see {output}");
        self.measure(&format!("leave {n}→{}", n - 1), mark, &[])
            .await
    }

    /// SIGKILL of the member at `index`: the time from the kill to the last start of its
    /// objects' daemons on the others.
    pub async fn kill(&mut self, index: usize) -> anyhow::Result<Duration> {
        let n = self.live().len();
        let mark = self.mark();
        let (owners, begun) = (mark.before.clone(), mark.begun);
        let mut member = self.members.remove(index);
        let pid = member.pid();
        member.replica.signal("-KILL").await?;
        member.replica.wait_killed().await;
        append_line(&self.log, &format!("killed - - {pid} {}", now_nanos()));
        self.measure(&format!("SIGKILL {n}→{}", n - 1), mark, &[pid])
            .await?;
        Ok(self.taken_over(&owners, pid, begun))
    }

    /// From `sent` to the last start, after it, of the daemons `pid` ran per `owners`.
    pub fn taken_over(&self, owners: &Owners, pid: u32, sent: u128) -> Duration {
        let log = read_log(&self.log);
        let last = owners
            .iter()
            .filter(|(_, p)| **p == pid)
            .filter_map(|(uid, _)| {
                log.iter()
                    .find(|e| e.kind == "start" && &e.uid == uid && e.pid != pid && at(e) >= sent)
                    .map(at)
            })
            .max()
            .unwrap_or(sent);
        since(sent, last)
    }

    /// Requests of a member that arrived at its proxy between `from` and `to`: `(reads,
    /// writes to Leases, other writes)`.
    pub fn requests(member: &Member, from: Instant, to: Instant) -> (usize, usize, Vec<String>) {
        let log = member.replica.proxy.handle().log();
        let window: Vec<_> = log.iter().filter(|r| r.at > from && r.at < to).collect();
        let reads = window
            .iter()
            .filter(|r| r.method == http::Method::GET)
            .count();
        let (mut leases, mut others) = (0, Vec::new());
        for r in window.iter().filter(|r| r.method != http::Method::GET) {
            if r.path.contains("/leases") {
                leases += 1;
            } else {
                others.push(format!("{} {}", r.method, r.path));
            }
        }
        (reads, leases, others)
    }

    /// Deletes the objects, waits until they are gone (no finalizer left) and every member's
    /// counts are zero, stops every member by SIGTERM (exit 0), and checks both logs: no
    /// daemon overlap, no tick while another process ran the object's daemon. Returns the
    /// daemon starts and the ticks.
    pub async fn finish(mut self, api: &kube::Api<KopfExample>) -> anyhow::Result<(usize, usize)> {
        let names: Vec<String> = self.objs.iter().map(|o| o.name.clone()).collect();
        delete_all(api, &names).await?;
        assert_gone(api, &names).await;
        self.objs.clear();
        self.settle("after the deletion of every object").await?;
        for mut member in std::mem::take(&mut self.members) {
            member.replica.signal("-TERM").await?;
            let code = member.replica.exit_code().await?;
            anyhow::ensure!(code == Some(0), "{} exited with {code:?}", member.identity);
        }
        let (log, ticks) = (read_log(&self.log), read_log(&self.ticks()));
        let shown = self.log.display();
        let found = overlaps(&log);
        anyhow::ensure!(found.is_empty(), "overlaps: {found:?} (log: {shown})");
        let found = ticks_inside_others(&log, &ticks);
        anyhow::ensure!(
            found.is_empty(),
            "ticks inside others' runs: {found:?} (log: {shown})"
        );
        anyhow::ensure!(!ticks.is_empty(), "no timer ticked (log: {shown})");
        if std::env::var_os("KOPF_SHARD_KEEP_LOGS").is_some() {
            println!(
                "KOPF_SHARD_KEEP_LOGS: the logs are kept in {}",
                self.dir.display()
            );
        } else {
            std::fs::remove_dir_all(&self.dir)?;
        }
        Ok((
            log.iter().filter(|e| e.kind == "start").count(),
            ticks.len(),
        ))
    }
}

/// The tick log next to the shared daemon log at `log`.
pub fn tick_log(log: &Path) -> PathBuf {
    log.with_extension("ticks")
}
