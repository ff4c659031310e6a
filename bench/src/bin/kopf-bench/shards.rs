//! Scenario 9, sharding (kopf-rs only): the daemons of N objects spread over the members of the
//! group `kopf-bench-shards` (client-go's default timing: 15 s lease, 10 s renew deadline, 2 s
//! retry), each member watching its share (`shardSelector` when the API server has the feature
//! gate `ShardedListAndWatch`, which `bench/run` turns on).
//!
//! 1. One member, objects without finalizers: time to all first fires (the finalizer writes
//!    included); stopped.
//! 2. One member again, finalizers in place: time to all first fires, then the steady window
//!    (CPU and RSS, as scenario 2); stopped.
//! 3. Three members started together: time until every object's daemon runs exactly once
//!    across them, on the holder of its range, the ranges balanced; the steady window, per
//!    member.
//! 4. A fourth member joins: the rebalancing time (from its start until the same holds over
//!    four members), how many daemons moved, and the gaps between a moved daemon's stop on its
//!    old member and its first tick on the new one; overlaps (a daemon started before its run
//!    elsewhere stopped) over steps 3-4.
//!
//! The members' fire logs and logs are the only sources (see `shardlog`).

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use kopf_bench::firelog::unix_nanos;
use kopf_bench::procstat;
use kopf_bench::stats::quantile;
use tokio::time::{Instant, sleep};

use crate::arms::{Arm, Mode, Running};
use crate::scenarios::{Ctx, Metrics, TrialOutput, count_f, secs_since, settle_limit};
use crate::shardlog::{self, Member};

/// The members' identities, in identity order (the order of their blocks of ranges).
const NAMES: [&str; 4] = ["a", "b", "c", "d"];
const POLL: Duration = Duration::from_millis(100);

/// One member: its process and what its files say.
struct Replica {
    run: Running,
    seen: Member,
}

fn start(ctx: &Ctx, arm: Arm, n: usize, dir: &Path, name: &str) -> anyhow::Result<Replica> {
    std::fs::create_dir_all(dir)?;
    let identity = format!("shard-{name}");
    let env = [("BENCH_IDENTITY", identity.as_str())];
    let run = ctx
        .programs
        .spawn_env(arm, Mode::DaemonsShard, n, dir, &env)?;
    Ok(Replica {
        run,
        seen: Member::new(dir, n),
    })
}

fn seen(group: &[Replica]) -> Vec<&Member> {
    group.iter().map(|r| &r.seen).collect()
}

/// A settled group: the member running each object's daemon, and the instant it settled (the
/// last daemon start or stop stamped).
struct Settled {
    holders: Vec<usize>,
    at: u128,
}

/// Polls the group until every object's daemon runs exactly once, on the member holding its
/// range, the ranges balanced over the whole group.
async fn converge(
    group: &mut [Replica],
    shards: &[u16],
    limit: Duration,
) -> anyhow::Result<Settled> {
    let deadline = Instant::now() + limit;
    loop {
        for r in group.iter_mut() {
            r.run.check_alive()?;
            r.seen.poll()?;
        }
        let members = seen(group);
        if let Some(holders) = shardlog::settled(&members, shards) {
            let at = members.iter().map(|m| m.last_change()).max().unwrap_or(0);
            return Ok(Settled { holders, at });
        }
        if Instant::now() >= deadline {
            let (none, many) = shardlog::coverage(&members, shards.len());
            let held: Vec<String> = members
                .iter()
                .map(|m| {
                    m.ranges
                        .as_ref()
                        .map_or(0, |r| r.iter().filter(|x| **x).count())
                })
                .map(|h| h.to_string())
                .collect();
            anyhow::bail!(
                "not settled after {limit:?}: {none} daemons run nowhere, {many} on more than one \
                 member; ranges held: {}",
                held.join(", ")
            );
        }
        sleep(POLL).await;
    }
}

/// One member's usage over the steady window.
struct Usage {
    cores: f64,
    rss_mb: f64,
    peak_mb: f64,
    ticks_per_s: f64,
}

/// Measures every member of the group over the window, as scenario 2 does for one process.
async fn measure(group: &mut [Replica], window: Duration) -> anyhow::Result<Vec<Usage>> {
    let p0 = group
        .iter()
        .map(|r| procstat::read(r.run.pid()))
        .collect::<Result<Vec<_>, _>>()?;
    let t0 = unix_nanos();
    group
        .iter_mut()
        .for_each(|r| r.seen.count_from(t0, u128::MAX));
    let end = Instant::now() + window;
    let mut rss = vec![Vec::new(); group.len()];
    while Instant::now() < end {
        for (r, samples) in group.iter_mut().zip(&mut rss) {
            r.run.check_alive()?;
            samples.push(mb(procstat::read(r.run.pid())?.rss));
            r.seen.poll()?;
        }
        sleep(Duration::from_millis(500).min(end - Instant::now())).await;
    }
    let p1 = group
        .iter()
        .map(|r| procstat::read(r.run.pid()))
        .collect::<Result<Vec<_>, _>>()?;
    let t1 = unix_nanos();
    let secs = secs_since(t0, t1);
    group.iter_mut().for_each(|r| r.seen.count_from(t0, t1));
    // The fire logs are flushed every 250 ms.
    sleep(Duration::from_millis(600)).await;
    let mut out = Vec::new();
    for (i, r) in group.iter_mut().enumerate() {
        r.seen.poll()?;
        let ticks_per_s = r.seen.tick_rate();
        out.push(Usage {
            cores: procstat::cpu_between(&p0[i], &p1[i]) / secs,
            rss_mb: quantile(&rss[i], 0.5).unwrap_or(f64::NAN),
            peak_mb: mb(p1[i].hwm),
            ticks_per_s,
        });
    }
    Ok(out)
}

fn mb(bytes: u64) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let m = bytes as f64 / 1e6;
    m
}

/// SIGTERM to every member at once, then waits for each; a note per unclean exit.
async fn stop_all(group: &mut [Replica], notes: &mut Vec<String>) {
    for r in group.iter() {
        let _ = r.run.terminate();
    }
    for (r, name) in group.iter_mut().zip(NAMES) {
        match r.run.wait(Duration::from_secs(120)).await {
            Ok(Some(0)) => {}
            Ok(code) => notes.push(format!("member {name} exited with {code:?}")),
            Err(e) => notes.push(format!("member {name}: {e}")),
        }
    }
}

/// One member alone, in `dir/step`; settled, and the seconds from its start.
async fn alone(
    ctx: &Ctx,
    arm: Arm,
    shards: &[u16],
    dir: &Path,
    step: &str,
) -> anyhow::Result<(Vec<Replica>, f64)> {
    let t0 = unix_nanos();
    let mut group = vec![start(ctx, arm, shards.len(), &dir.join(step), "a")?];
    let settled = converge(&mut group, shards, settle_limit(shards.len())).await?;
    Ok((group, secs_since(t0, settled.at)))
}

/// Steps 1 and 2: one member, cold, then warm with the steady window.
async fn one(
    ctx: &Ctx,
    arm: Arm,
    shards: &[u16],
    dir: &Path,
    out: &mut TrialOutput,
) -> anyhow::Result<Usage> {
    let (mut group, secs) = alone(ctx, arm, shards, dir, "1-cold").await?;
    out.metrics.insert("startup_cold_1_s".into(), secs);
    stop_all(&mut group, &mut out.notes).await;
    let (mut group, secs) = alone(ctx, arm, shards, dir, "1-warm").await?;
    out.metrics.insert("startup_1_s".into(), secs);
    // Every daemon has ticked at least twice before the window, as in scenario 2.
    sleep(Duration::from_secs(2)).await;
    let usage = measure(&mut group, ctx.window).await?.remove(0);
    let m = &mut out.metrics;
    m.insert("cores_1".into(), usage.cores);
    m.insert("rss_1_mb".into(), usage.rss_mb);
    m.insert("peak_rss_1_mb".into(), usage.peak_mb);
    m.insert("ticks_1_per_s".into(), usage.ticks_per_s);
    stop_all(&mut group, &mut out.notes).await;
    Ok(usage)
}

/// Step 3: three members started together; their holders once settled.
async fn three(
    ctx: &Ctx,
    arm: Arm,
    shards: &[u16],
    dir: &Path,
    one: &Usage,
    group: &mut Vec<Replica>,
    m: &mut Metrics,
) -> anyhow::Result<Vec<usize>> {
    let n = shards.len();
    let t0 = unix_nanos();
    for name in &NAMES[..3] {
        group.push(start(ctx, arm, n, &dir.join(format!("3-{name}")), name)?);
    }
    let settled = converge(group, shards, settle_limit(n)).await?;
    let members = seen(group);
    let first = shardlog::first_runs_by(&members, n).context("no first runs")?;
    m.insert("first_fires_3_s".into(), secs_since(t0, first));
    m.insert("startup_3_s".into(), secs_since(t0, settled.at));
    let handed: usize = members.iter().map(|s| s.closed.len()).sum();
    m.insert("handed_over_3".into(), count_f(handed));
    sleep(Duration::from_secs(2)).await;
    let usage = measure(group, ctx.window).await?;
    for (i, (u, name)) in usage.iter().zip(NAMES).enumerate() {
        let objects = settled.holders.iter().filter(|h| **h == i).count();
        m.insert(format!("objects_3_{name}"), count_f(objects));
        m.insert(format!("cores_3_{name}"), u.cores);
        m.insert(format!("rss_3_{name}_mb"), u.rss_mb);
        m.insert(format!("peak_rss_3_{name}_mb"), u.peak_mb);
    }
    let mean = |f: fn(&Usage) -> f64| usage.iter().map(f).sum::<f64>() / count_f(usage.len());
    let (cores, rss) = (mean(|u| u.cores), mean(|u| u.rss_mb));
    m.insert("cores_3_mean".into(), cores);
    m.insert("rss_3_mean_mb".into(), rss);
    m.insert("cores_3_ratio".into(), cores / one.cores);
    m.insert("rss_3_ratio".into(), rss / one.rss_mb);
    let ticks: f64 = usage.iter().map(|u| u.ticks_per_s).sum();
    m.insert("ticks_3_per_s".into(), ticks);
    Ok(settled.holders)
}

/// Step 4: a fourth member joins the settled three.
async fn join(
    ctx: &Ctx,
    arm: Arm,
    shards: &[u16],
    dir: &Path,
    before: &[usize],
    group: &mut Vec<Replica>,
    m: &mut Metrics,
) -> anyhow::Result<()> {
    let n = shards.len();
    let t0 = unix_nanos();
    group.push(start(ctx, arm, n, &dir.join("4-d"), "d")?);
    let settled = converge(group, shards, settle_limit(n)).await?;
    m.insert("rebalance_s".into(), secs_since(t0, settled.at));
    let joined = settled.holders.iter().filter(|h| **h == 3).count();
    m.insert("objects_4_d".into(), count_f(joined));
    let moves = shardlog::moves(&seen(group), before, &settled.holders, t0);
    m.insert("moved".into(), count_f(moves.moved));
    m.insert("moved_unmatched".into(), count_f(moves.unmatched));
    m.insert("stopped_in_place".into(), count_f(moves.stopped_in_place));
    for (metric, q) in [("gap_p50_s", 0.5), ("gap_p99_s", 0.99), ("gap_max_s", 1.0)] {
        m.insert(
            metric.into(),
            quantile(&moves.gaps_s, q).unwrap_or(f64::NAN),
        );
    }
    Ok(())
}

pub(crate) async fn shards(
    ctx: &Ctx,
    n: usize,
    arm: Arm,
    dir: &Path,
) -> anyhow::Result<TrialOutput> {
    ctx.cluster.delete_leases().await?;
    let shards = ctx.cluster.shard_ranges(n).await?;
    let mut out = TrialOutput {
        metrics: Metrics::new(),
        notes: Vec::new(),
        lateness_ms: Vec::new(),
    };
    let alone = one(ctx, arm, &shards, dir, &mut out).await?;
    let mut group = Vec::new();
    let m = &mut out.metrics;
    let before = three(ctx, arm, &shards, dir, &alone, &mut group, m).await?;
    join(ctx, arm, &shards, dir, &before, &mut group, m).await?;
    // Every run so far, with the members still running: a daemon that started before its
    // previous run elsewhere stopped.
    for r in &mut group {
        r.seen.poll()?;
    }
    let (overlaps, first) = shardlog::overlaps(&seen(&group), &NAMES);
    m.insert("overlaps".into(), count_f(overlaps));
    let server_side = group.iter().all(|r| r.seen.server_side);
    m.insert("server_side".into(), f64::from(u8::from(server_side)));
    if let Some(first) = first {
        out.notes.push(format!(
            "{overlaps} daemons ran twice at once; first: {first}"
        ));
    }
    if !server_side {
        out.notes
            .push("a member watched every object (no shardSelector): client-side mode".into());
    }
    stop_all(&mut group, &mut out.notes).await;
    Ok(out)
}
