//! The steady scenarios (1, 2 and 6): once the arm has settled, CPU and RSS over the window,
//! and what its handlers fired in it.

use std::path::Path;
use std::time::Duration;

use kopf_bench::firelog::unix_nanos;
use kopf_bench::procstat;
use kopf_bench::stats::quantile;
use tokio::time::{Instant, sleep};

use crate::arms::{Arm, Running};
use crate::audit::{AuditLog, audit_metrics};
use crate::fires::Tail;
use crate::results::LATENESS_GRID;
use crate::scenarios::{
    Ctx, Metrics, POLL, Scenario, TrialOutput, count_f, mb, secs_since, settle, settle_limit,
    wait_synced,
};

/// Scenarios 1, 2 and 6: once the arm is settled, CPU and RSS over the window, and what its
/// handlers fired (absent for an arm that records no fires).
pub(crate) async fn steady(
    ctx: &Ctx,
    scenario: Scenario,
    n: usize,
    arm: Arm,
    dir: &Path,
) -> anyhow::Result<TrialOutput> {
    let mut notes = Vec::new();
    // The operators must also have put their finalizers on every object, so the window
    // measures the steady state, not the start-up.
    let operator = matches!(arm, Arm::KopfRs | Arm::KopfPy);
    let watch = operator.then(|| ctx.cluster.watch());
    if let Some(w) = &watch {
        wait_synced(w, n).await?;
    }
    let mut run = ctx.programs.spawn(arm, scenario.mode(), n, dir)?;
    let mut tail = Tail::new(&run.fires, n);
    let limit = settle_limit(n);
    let note = if arm.records_fires() {
        settle(&mut run, &mut tail, watch.as_ref(), limit, |t, c| {
            (!operator || c.is_some_and(|(_, f)| f == n)) && t.objects_with_runs(2) == n
        })
        .await?
    } else {
        settle_listed(&mut run, n, limit).await?
    };
    notes.extend(note);
    drop(watch);
    let pid = run.pid();
    let audit0 = ctx.audit.as_ref().map_or(0, AuditLog::mark);
    let p0 = procstat::read(pid)?;
    let t0 = unix_nanos();
    let end = Instant::now() + ctx.window;
    let mut rss = Vec::new();
    while Instant::now() < end {
        run.check_alive()?;
        rss.push(mb(procstat::read(pid)?.rss));
        tail.poll()?;
        sleep(Duration::from_millis(500).min(end - Instant::now())).await;
    }
    let p1 = procstat::read(pid)?;
    let t1 = unix_nanos();
    let secs = secs_since(t0, t1);
    let mut m = Metrics::new();
    audit_metrics(ctx, audit0, &mut m, 0, secs);
    let code = run.stop(Duration::from_secs(60)).await;
    tail.poll()?;
    let cores = procstat::cpu_between(&p0, &p1) / secs;
    m.insert("cores".into(), cores);
    m.insert("rss_mb".into(), quantile(&rss, 0.5).unwrap_or(f64::NAN));
    m.insert("peak_rss_mb".into(), mb(p1.hwm));
    m.insert("window_s".into(), secs);
    let lateness_ms = if arm.records_fires() {
        fire_metrics(&tail, scenario, n, (t0, t1), cores, &mut m)
    } else {
        Vec::new()
    };
    if let Err(e) = code {
        notes.push(format!("stopping: {e}"));
    }
    Ok(TrialOutput {
        metrics: m,
        notes,
        lateness_ms,
    })
}

/// Waits until an arm that records no fires has listed `n` objects (its `synced` line); a note
/// if the limit passes first.
async fn settle_listed(
    run: &mut Running,
    n: usize,
    limit: Duration,
) -> anyhow::Result<Option<String>> {
    let deadline = Instant::now() + limit;
    loop {
        run.check_alive()?;
        if run.synced().is_some_and(|count| count >= n) {
            return Ok(None);
        }
        if Instant::now() >= deadline {
            return Ok(Some(format!(
                "not settled after {limit:?}: the arm did not report {n} objects listed"
            )));
        }
        sleep(POLL).await;
    }
}

/// The fire-based metrics of a steady window `(t0, t1)` (Unix ns) into `m`: fires/s, CPU and
/// requests per fire, and (timer scenarios) lateness; returns the lateness at
/// [`LATENESS_GRID`] (ms).
fn fire_metrics(
    tail: &Tail,
    scenario: Scenario,
    n: usize,
    (t0, t1): (u128, u128),
    cores: f64,
    m: &mut Metrics,
) -> Vec<f64> {
    let secs = secs_since(t0, t1);
    let per_s = tail.rate(t0, t1, 1.0);
    m.insert("fires_per_s".into(), per_s);
    m.insert("fires_in_window".into(), count_f(tail.runs_between(t0, t1)));
    m.insert("fires_expected_per_s".into(), count_f(n));
    if per_s > 0.0 {
        m.insert("cpu_us_per_fire".into(), cores / per_s * 1e6);
        if let Some(total) = m.get("requests").copied() {
            m.insert("requests_per_fire".into(), total / (per_s * secs));
        }
    }
    if scenario == Scenario::Daemons {
        return Vec::new();
    }
    let lat = tail.lateness(t0, t1, 1.0);
    for (name, q) in [
        ("lat_p50_ms", 0.5),
        ("lat_p99_ms", 0.99),
        ("lat_p999_ms", 0.999),
    ] {
        m.insert(name.into(), quantile(&lat, q).unwrap_or(f64::NAN) * 1e3);
    }
    LATENESS_GRID
        .iter()
        .filter_map(|q| quantile(&lat, q / 100.0).map(|v| v * 1e3))
        .collect()
}
