//! One trial of one scenario with one arm: set up, run the arm as a child, measure, tear down.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use kopf_bench::firelog::unix_nanos;
use tokio::time::{Instant, sleep};

use crate::arms::{Arm, Mode, Programs, Running};
use crate::audit::{AuditLog, audit_metrics};
use crate::cluster::{Cluster, Watch};
use crate::fires::Tail;

/// The measured values of one trial, by metric name.
pub(crate) type Metrics = BTreeMap<String, f64>;

/// How often the harness looks at an arm's progress.
pub(crate) const POLL: Duration = Duration::from_millis(50);

/// The scenarios that run against the API server (scenario 7 is in-process: see `inproc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Scenario {
    Timers,
    Daemons,
    Startup,
    Deletion,
    Shutdown,
    TimersWrite,
    Handover,
    Shards,
    Children,
}

impl Scenario {
    pub(crate) const ALL: [Self; 9] = [
        Self::Timers,
        Self::Daemons,
        Self::Startup,
        Self::Deletion,
        Self::Shutdown,
        Self::TimersWrite,
        Self::Handover,
        Self::Shards,
        Self::Children,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Timers => "timers",
            Self::Daemons => "daemons",
            Self::Startup => "startup",
            Self::Deletion => "deletion",
            Self::Shutdown => "shutdown",
            Self::TimersWrite => "timers-write",
            Self::Handover => "handover",
            Self::Shards => "shards",
            Self::Children => "children",
        }
    }

    pub(crate) fn parse(s: &str) -> anyhow::Result<Self> {
        Self::ALL
            .into_iter()
            .find(|x| x.as_str() == s || x.number().to_string() == s)
            .with_context(|| format!("unknown scenario {s:?}"))
    }

    /// The scenario's number (issue 7; 10 is issue 32's).
    pub(crate) fn number(self) -> u8 {
        match self {
            Self::Timers => 1,
            Self::Daemons => 2,
            Self::Startup => 3,
            Self::Deletion => 4,
            Self::Shutdown => 5,
            Self::TimersWrite => 6,
            Self::Handover => 8,
            Self::Shards => 9,
            Self::Children => 10,
        }
    }

    /// The arms that apply, in A B A B order.
    pub(crate) fn arms(self) -> &'static [Arm] {
        match self {
            // `kube-store` records no fires: the memory reference of the steady scenarios.
            Self::Timers | Self::Daemons => &[Arm::KopfRs, Arm::KopfPy, Arm::Tokio, Arm::KubeStore],
            Self::Shutdown => &[Arm::KopfRs, Arm::KopfPy, Arm::Tokio],
            Self::Startup | Self::Deletion | Self::TimersWrite => {
                &[Arm::KopfRs, Arm::KopfPy, Arm::KubeLoop]
            }
            // kopf has no leader election (its peering pauses, it does not hand over) and no
            // sharding.
            Self::Handover | Self::Shards => &[Arm::KopfRs],
            // Owned children: against kube-rs's own `Controller` (kopf has no such helper).
            Self::Children => &[Arm::KopfRs, Arm::KubeController],
        }
    }

    pub(crate) fn mode(self) -> Mode {
        match self {
            Self::Timers | Self::Startup | Self::Deletion => Mode::Timers,
            Self::Daemons | Self::Shutdown => Mode::Daemons,
            Self::TimersWrite => Mode::TimersWrite,
            Self::Handover => Mode::DaemonsHa,
            Self::Shards => Mode::DaemonsShard,
            Self::Children => Mode::Children,
        }
    }
}

/// What every trial needs.
pub(crate) struct Ctx {
    pub(crate) cluster: Cluster,
    pub(crate) programs: Programs,
    pub(crate) audit: Option<AuditLog>,
    /// The measurement window of the steady scenarios (and scenario 10's rest window).
    pub(crate) window: Duration,
    /// How many child edits scenario 10 times (at most one per parent).
    pub(crate) edits: usize,
}

/// One trial's outcome.
pub(crate) struct TrialOutput {
    pub(crate) metrics: Metrics,
    pub(crate) notes: Vec<String>,
    /// Lateness (ms) at `results::LATENESS_GRID` (timer scenarios only).
    pub(crate) lateness_ms: Vec<f64>,
}

pub(crate) fn secs_since(t0: u128, t1: u128) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let s = t1.saturating_sub(t0) as f64 / 1e9;
    s
}

/// Bytes in MB.
pub(crate) fn mb(bytes: u64) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let m = bytes as f64 / 1e6;
    m
}

pub(crate) fn count_f(x: usize) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let f = x as f64;
    f
}

/// Time limit for the arm to bring `n` objects into shape (generous: only a safety net).
pub(crate) fn settle_limit(n: usize) -> Duration {
    Duration::from_secs(60 + (n as u64) / 10)
}

/// Polls the fire log (and the watch) until `done` holds; a note if the limit passes first.
pub(crate) async fn settle(
    run: &mut Running,
    tail: &mut Tail,
    watch: Option<&Watch>,
    limit: Duration,
    mut done: impl FnMut(&Tail, Option<(usize, usize)>) -> bool,
) -> anyhow::Result<Option<String>> {
    let deadline = Instant::now() + limit;
    loop {
        run.check_alive()?;
        tail.poll()?;
        let counts = watch.and_then(Watch::counts);
        if done(tail, counts) {
            return Ok(None);
        }
        if Instant::now() >= deadline {
            return Ok(Some(format!(
                "not settled after {limit:?}: {} objects ran, {} ran twice, watch {counts:?}",
                tail.objects_with_runs(1),
                tail.objects_with_runs(2)
            )));
        }
        sleep(POLL).await;
    }
}

pub(crate) async fn trial(
    ctx: &Ctx,
    scenario: Scenario,
    n: usize,
    arm: Arm,
    dir: &Path,
) -> anyhow::Result<TrialOutput> {
    std::fs::create_dir_all(dir)?;
    if scenario == Scenario::Children {
        // The parents are created while the arm runs: the scenario prepares its own.
        return crate::children::children(ctx, n, arm, dir).await;
    }
    ctx.cluster
        .prepare(n)
        .await
        .context("preparing the objects")?;
    let mode = scenario.mode();
    match scenario {
        Scenario::Timers | Scenario::Daemons | Scenario::TimersWrite => {
            crate::steady::steady(ctx, scenario, n, arm, dir).await
        }
        Scenario::Startup => startup(ctx, n, arm, mode, dir).await,
        Scenario::Deletion => deletion(ctx, n, arm, mode, dir).await,
        Scenario::Shutdown => shutdown(ctx, n, arm, mode, dir).await,
        Scenario::Handover => crate::handover::handover(ctx, n, arm, mode, dir).await,
        Scenario::Shards => crate::shards::shards(ctx, n, arm, dir).await,
        Scenario::Children => unreachable!("handled above"),
    }
}

async fn startup(
    ctx: &Ctx,
    n: usize,
    arm: Arm,
    mode: Mode,
    dir: &Path,
) -> anyhow::Result<TrialOutput> {
    let mut notes = Vec::new();
    let watch = ctx.cluster.watch();
    wait_synced(&watch, n).await?;
    let audit0 = ctx.audit.as_ref().map_or(0, AuditLog::mark);
    let t0 = unix_nanos();
    let mut run = ctx.programs.spawn(arm, mode, n, dir)?;
    let mut tail = Tail::new(&run.fires, n);
    let fires_expected = arm != Arm::KubeLoop;
    let mut t_fin = None;
    let note = settle(
        &mut run,
        &mut tail,
        Some(&watch),
        settle_limit(n),
        |t, c| {
            if t_fin.is_none() && c.is_some_and(|(_, f)| f == n) {
                t_fin = Some(unix_nanos());
            }
            t_fin.is_some() && (!fires_expected || t.objects_with_runs(1) == n)
        },
    )
    .await?;
    notes.extend(note);
    let t_end = unix_nanos();
    let mut m = Metrics::new();
    let fin_s = t_fin.map_or(f64::NAN, |t| secs_since(t0, t));
    m.insert("finalizers_s".into(), fin_s);
    m.insert("objects_per_s".into(), count_f(n) / fin_s);
    let mut total = fin_s;
    if fires_expected {
        let fire_s = tail
            .all_first_runs_by()
            .map_or(f64::NAN, |t| secs_since(t0, t));
        m.insert("first_fires_s".into(), fire_s);
        total = total.max(fire_s);
    }
    m.insert("startup_s".into(), total);
    audit_metrics(ctx, audit0, &mut m, 0, secs_since(t0, t_end));
    if let Err(e) = run.stop(Duration::from_secs(60)).await {
        notes.push(format!("stopping: {e}"));
    }
    Ok(TrialOutput {
        metrics: m,
        notes,
        lateness_ms: Vec::new(),
    })
}

/// Waits until the harness watch sees `n` objects (60 s at most).
pub(crate) async fn wait_synced(watch: &Watch, n: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some((objects, _)) = watch.counts()
            && objects == n
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "the harness watch did not see {n} objects within 60 s: {:?}",
                watch.counts()
            );
        }
        sleep(POLL).await;
    }
}

async fn deletion(
    ctx: &Ctx,
    n: usize,
    arm: Arm,
    mode: Mode,
    dir: &Path,
) -> anyhow::Result<TrialOutput> {
    let mut notes = Vec::new();
    let watch = ctx.cluster.watch();
    wait_synced(&watch, n).await?;
    let mut run = ctx.programs.spawn(arm, mode, n, dir)?;
    let mut tail = Tail::new(&run.fires, n);
    let fires_expected = arm != Arm::KubeLoop;
    let note = settle(
        &mut run,
        &mut tail,
        Some(&watch),
        settle_limit(n),
        |t, c| c.is_some_and(|(_, f)| f == n) && (!fires_expected || t.objects_with_runs(1) == n),
    )
    .await?;
    notes.extend(note);
    sleep(Duration::from_secs(1)).await;
    let audit0 = ctx.audit.as_ref().map_or(0, AuditLog::mark);
    let t0 = unix_nanos();
    ctx.cluster.delete_all().await?;
    let gone = settle(
        &mut run,
        &mut tail,
        Some(&watch),
        settle_limit(n),
        |_, c| c.is_some_and(|(objects, _)| objects == 0),
    )
    .await?;
    let t_gone = unix_nanos();
    let mut m = Metrics::new();
    let secs = secs_since(t0, t_gone);
    if let Some(note) = gone {
        notes.push(format!("deletion incomplete: {note}"));
        m.insert(
            "left_objects".into(),
            count_f(watch.counts().map_or(n, |c| c.0)),
        );
    } else {
        m.insert("deletion_s".into(), secs);
        m.insert("objects_per_s".into(), count_f(n) / secs);
        m.insert("left_objects".into(), 0.0);
    }
    audit_metrics(ctx, audit0, &mut m, 0, secs);
    // Nothing left behind: no timer of a deleted object fires after it is gone (100 ms slack
    // for the watch that told the harness).
    sleep(Duration::from_secs(2)).await;
    tail.poll()?;
    let late = tail
        .all
        .iter()
        .filter(|f| f.at > t_gone + 100_000_000)
        .count();
    m.insert("fires_after_gone".into(), count_f(late));
    if let Err(e) = run.stop(Duration::from_secs(60)).await {
        notes.push(format!("stopping: {e}"));
    }
    Ok(TrialOutput {
        metrics: m,
        notes,
        lateness_ms: Vec::new(),
    })
}

async fn shutdown(
    ctx: &Ctx,
    n: usize,
    arm: Arm,
    mode: Mode,
    dir: &Path,
) -> anyhow::Result<TrialOutput> {
    let mut notes = Vec::new();
    let watch = (arm != Arm::Tokio).then(|| ctx.cluster.watch());
    let mut run = ctx.programs.spawn(arm, mode, n, dir)?;
    let mut tail = Tail::new(&run.fires, n);
    let note = settle(
        &mut run,
        &mut tail,
        watch.as_ref(),
        settle_limit(n),
        |t, c| t.objects_with_runs(1) == n && (arm == Arm::Tokio || c.is_some_and(|(_, f)| f == n)),
    )
    .await?;
    notes.extend(note);
    sleep(Duration::from_secs(2)).await;
    let t0 = unix_nanos();
    run.terminate()?;
    let code = run.wait(Duration::from_secs(120)).await;
    let t1 = unix_nanos();
    tail.poll()?;
    let mut m = Metrics::new();
    match code {
        Ok(code) => {
            m.insert("shutdown_s".into(), secs_since(t0, t1));
            m.insert("exit_code".into(), code.map_or(f64::NAN, f64::from));
        }
        Err(e) => notes.push(e.to_string()),
    }
    m.insert("daemons_stopped".into(), count_f(tail.objects_stopped()));
    m.insert(
        "all_stopped".into(),
        if tail.objects_stopped() == n {
            1.0
        } else {
            0.0
        },
    );
    Ok(TrialOutput {
        metrics: m,
        notes,
        lateness_ms: Vec::new(),
    })
}

/// The directory of one trial's files.
pub(crate) fn trial_dir(
    root: &Path,
    scenario: Scenario,
    n: usize,
    arm: Arm,
    pair: usize,
) -> PathBuf {
    root.join(format!("{}-{n}-{}-{pair}", scenario.as_str(), arm.as_str()))
}
