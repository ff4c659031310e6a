//! Scenario 8, the handover between elected replicas (kopf-rs only): a leader runs the daemons of
//! N objects and a standby watches; the leader gets SIGTERM, and the gap is the time until the
//! standby runs every daemon; then a new standby is started and the new leader gets SIGKILL,
//! with the same gap measured. Client-go's default timing (15 s lease, 10 s renew deadline,
//! 2 s retry): a graceful handover waits for the stop ladders and one retry period, a crash for
//! the lease to expire.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use kopf_bench::firelog::unix_nanos;
use tokio::time::{Instant, sleep};

use crate::arms::{Arm, Mode, Running};
use crate::fires::Tail;
use crate::scenarios::{Ctx, Metrics, TrialOutput, secs_since, settle, settle_limit};

/// How long a new standby gets to start and list the objects before the leader is stopped.
const WARM_UP: Duration = Duration::from_secs(5);

/// Starts one replica in `dir/name`, and waits until it has started and warmed up.
async fn replica(
    ctx: &Ctx,
    arm: Arm,
    mode: Mode,
    n: usize,
    dir: &Path,
    name: &str,
) -> anyhow::Result<Running> {
    let dir = dir.join(name);
    std::fs::create_dir_all(&dir)?;
    let run = ctx.programs.spawn(arm, mode, n, &dir)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let started = || {
        std::fs::read_to_string(dir.join("stderr.log"))
            .is_ok_and(|out| out.contains("the operator has started"))
    };
    while !started() {
        anyhow::ensure!(Instant::now() < deadline, "replica {name} did not start");
        sleep(Duration::from_millis(50)).await;
    }
    sleep(WARM_UP).await;
    Ok(run)
}

/// Waits until `run` has run every daemon; the time the last one first ran.
async fn taken_over(run: &mut Running, n: usize, limit: Duration) -> anyhow::Result<u128> {
    let mut tail = Tail::new(&run.fires, n);
    let note = settle(run, &mut tail, None, limit, |t, _| {
        t.objects_with_runs(1) == n
    })
    .await?;
    if let Some(note) = note {
        anyhow::bail!("the standby did not take over: {note}");
    }
    tail.all_first_runs_by().context("no first runs")
}

pub(crate) async fn handover(
    ctx: &Ctx,
    n: usize,
    arm: Arm,
    mode: Mode,
    dir: &Path,
) -> anyhow::Result<TrialOutput> {
    let limit = settle_limit(n);
    let mut first = replica(ctx, arm, mode, n, dir, "a").await?;
    taken_over(&mut first, n, limit).await?;
    let mut second = replica(ctx, arm, mode, n, dir, "b").await?;
    let mut m = Metrics::new();

    let t0 = unix_nanos();
    first.terminate()?;
    let code = first.wait(Duration::from_secs(120)).await?;
    m.insert("exit_code".into(), code.map_or(f64::NAN, f64::from));
    let t1 = taken_over(&mut second, n, limit).await?;
    m.insert("handover_sigterm_s".into(), secs_since(t0, t1));

    let mut third = replica(ctx, arm, mode, n, dir, "c").await?;
    let t2 = unix_nanos();
    second.kill()?;
    let t3 = taken_over(&mut third, n, limit).await?;
    m.insert("handover_sigkill_s".into(), secs_since(t2, t3));
    third.stop(Duration::from_secs(120)).await?;
    Ok(TrialOutput {
        metrics: m,
        notes: Vec::new(),
        lateness_ms: Vec::new(),
    })
}
