//! Scenario 10 (`children`, issue 32): N parents, each owning a ConfigMap, a Secret and a
//! Service (`kopf_bench::children`), made by the arm: kopf-rs's `#[reconcile]` with `Children`,
//! or a kube-rs `Controller` with `.owns(..)` (`bench-kube-controller`).
//!
//! ```text
//!  no parents, no children ─► arm started, idle, its 4 watches open ─► N parents created ── t0
//!     ─► every child in place (content + owner UID, seen by the harness's watch) ── converged
//!     ─► the arm's requests stop (2 s without one) ── requests per converge = t0 … here
//!     ─► rest window (--window): CPU, RSS, requests and writes (must be 0)
//!     ─► K edits, one at a time: another field manager changes a field the arm owns;
//!        restoration = the watch's "wrong" event → its "right" event; p50, p99
//! ```
//!
//! The harness's requests (its user agent) are not counted; the arm's are, from the API
//! server's audit log. No garbage collector runs in the benchmark's testenv, so the harness
//! deletes the children itself before and after a trial.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kopf_bench::children::{ChildKind, child_name};
use kopf_bench::firelog::unix_nanos;
use kopf_bench::names::{NAMESPACE, object_name};
use kopf_bench::procstat;
use kopf_bench::stats::quantile;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use tokio::time::{Instant, sleep};

use crate::arms::{Arm, Mode, Running};
use crate::audit::{AuditLog, Counts};
use crate::childwatch::{ChildWatch, remove_children};
use crate::scenarios::{Ctx, Metrics, POLL, TrialOutput, count_f, mb, secs_since, settle_limit};

/// Child edits timed per trial unless `--edits` says otherwise (at most one per parent).
pub(crate) const DEFAULT_EDITS: usize = 200;
/// How long an edit may stay unrestored before it counts as lost.
const EDIT_LIMIT: Duration = Duration::from_secs(30);
/// The pause between two edits (lets the arm's reaction to the last one end).
const EDIT_GAP: Duration = Duration::from_millis(100);
/// The converge phase ends once the arm has made no request for this long.
const QUIET: Duration = Duration::from_secs(2);
/// … or at this limit after convergence.
const QUIET_LIMIT: Duration = Duration::from_secs(30);
/// The verbs that write.
const WRITES: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

pub(crate) async fn children(
    ctx: &Ctx,
    n: usize,
    arm: Arm,
    dir: &Path,
) -> anyhow::Result<TrialOutput> {
    let client = ctx.cluster.client();
    clean(ctx, &client).await?;
    let watch = ChildWatch::start(&client);
    watch.wait_synced().await?;
    let started = ctx.audit.as_ref().map_or(0, AuditLog::mark);
    let mut run = ctx.programs.spawn(arm, Mode::Children, n, dir)?;
    let out = match wait_ready(ctx, &mut run, started).await {
        Ok(()) => measure(ctx, &client, &watch, &mut run, n).await,
        Err(e) => Err(e),
    };
    let stopped = run.stop(Duration::from_secs(60)).await;
    clean(ctx, &client).await?;
    let mut out = out?;
    if let Err(e) = stopped {
        out.notes.push(format!("stopping: {e}"));
    }
    Ok(out)
}

/// No parents and no children.
async fn clean(ctx: &Ctx, client: &Client) -> anyhow::Result<()> {
    ctx.cluster
        .prepare(0)
        .await
        .context("removing the parents")?;
    remove_children(client)
        .await
        .context("removing the children")
}

async fn measure(
    ctx: &Ctx,
    client: &Client,
    watch: &ChildWatch,
    run: &mut Running,
    n: usize,
) -> anyhow::Result<TrialOutput> {
    let mut m = Metrics::new();
    let mut notes = Vec::new();
    let audit0 = ctx.audit.as_ref().map_or(0, AuditLog::mark);
    let t0 = unix_nanos();
    ctx.cluster
        .prepare(n)
        .await
        .context("creating the parents")?;
    m.insert("create_s".into(), secs_since(t0, unix_nanos()));
    let uids = ctx.cluster.uids().await?;
    if uids.len() != n {
        bail!("{} parents exist after creating {n}", uids.len());
    }
    let Some(t_conv) = converge(run, watch, &uids, settle_limit(n), &mut notes).await? else {
        return Ok(TrialOutput {
            metrics: m,
            notes,
            lateness_ms: Vec::new(),
        });
    };
    let converge_s = secs_since(t0, t_conv);
    m.insert("converge_s".into(), converge_s);
    if let Some(create_s) = m.get("create_s").copied() {
        m.insert("converge_after_create_s".into(), converge_s - create_s);
    }
    m.insert("parents_per_s".into(), count_f(n) / converge_s);
    let audit1 = quiet(ctx).await?;
    if let Some(c) = count(ctx, audit0, audit1)? {
        add_counts(&mut m, "requests_converge", &c);
        m.insert(
            "requests_converge_per_parent".into(),
            c.total_f() / count_f(n),
        );
    }
    rest(ctx, run, &mut m).await?;
    edits(ctx, client, watch, n, &mut m, &mut notes).await?;
    Ok(TrialOutput {
        metrics: m,
        notes,
        lateness_ms: Vec::new(),
    })
}

/// The resources the arm must watch before the parents are created.
const WATCHED: [&str; 4] = ["kopfexamples", "configmaps", "secrets", "services"];

/// Waits up to 60 s until the arm is ready: its watches of the parents and of the three child
/// kinds are open (the audit log has a watch request of each since `from`), then 0.5 s more.
/// Without an audit log: 3 s after the start.
async fn wait_ready(ctx: &Ctx, run: &mut Running, from: u64) -> anyhow::Result<()> {
    let Some(audit) = &ctx.audit else {
        sleep(Duration::from_secs(3)).await;
        return run.check_alive();
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        run.check_alive()?;
        let watched = audit.watched(from, audit.mark())?;
        if WATCHED.iter().all(|r| watched.contains(*r)) {
            break;
        }
        if Instant::now() > deadline {
            bail!("the arm did not watch {WATCHED:?} within 60 s (it watched {watched:?})");
        }
        sleep(POLL).await;
    }
    sleep(Duration::from_millis(500)).await;
    Ok(())
}

/// Polls until every child is in place; the instant the last got there (None and a note at
/// the limit).
async fn converge(
    run: &mut Running,
    watch: &ChildWatch,
    uids: &HashMap<String, String>,
    limit: Duration,
    notes: &mut Vec<String>,
) -> anyhow::Result<Option<u128>> {
    let want = uids.len() * ChildKind::ALL.len();
    let deadline = Instant::now() + limit;
    loop {
        run.check_alive()?;
        let (in_place, last) = watch.in_place(uids);
        if in_place == want {
            return Ok(Some(last));
        }
        if Instant::now() > deadline {
            notes.push(format!(
                "not converged after {limit:?}: {in_place} of {want} children in place, {} seen",
                watch.count()
            ));
            return Ok(None);
        }
        sleep(POLL).await;
    }
}

/// Waits until the arm has made no request for [`QUIET`] (at most [`QUIET_LIMIT`]); the mark
/// of that moment. Without an audit log, waits [`QUIET`].
async fn quiet(ctx: &Ctx) -> anyhow::Result<u64> {
    let Some(audit) = &ctx.audit else {
        sleep(QUIET).await;
        return Ok(0);
    };
    let limit = Instant::now() + QUIET_LIMIT;
    let mut last = audit.mark();
    let mut since = Instant::now();
    loop {
        sleep(Duration::from_millis(100)).await;
        let now = audit.mark();
        if audit.count(last, now)?.total > 0 {
            since = Instant::now();
        }
        last = now;
        if since.elapsed() >= QUIET || Instant::now() >= limit {
            return Ok(now);
        }
    }
}

fn count(ctx: &Ctx, from: u64, to: u64) -> anyhow::Result<Option<Counts>> {
    ctx.audit
        .as_ref()
        .map(|a| a.count(from, to))
        .transpose()
        .context("reading the audit log")
}

fn add_counts(m: &mut Metrics, prefix: &str, c: &Counts) {
    m.insert(prefix.into(), c.total_f());
    for (verb, k) in &c.by_verb {
        #[allow(clippy::cast_precision_loss)]
        m.insert(format!("{prefix}_{verb}"), *k as f64);
    }
}

fn writes(c: &Counts) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let w = WRITES.iter().filter_map(|v| c.by_verb.get(*v)).sum::<u64>() as f64;
    w
}

/// The rest window: CPU, RSS, and the arm's requests and writes (expected: none).
async fn rest(ctx: &Ctx, run: &mut Running, m: &mut Metrics) -> anyhow::Result<()> {
    let pid = run.pid();
    let audit0 = ctx.audit.as_ref().map_or(0, AuditLog::mark);
    let p0 = procstat::read(pid)?;
    let t0 = unix_nanos();
    let end = Instant::now() + ctx.window;
    let mut rss = Vec::new();
    while Instant::now() < end {
        run.check_alive()?;
        rss.push(mb(procstat::read(pid)?.rss));
        sleep(Duration::from_millis(500).min(end - Instant::now())).await;
    }
    let p1 = procstat::read(pid)?;
    let secs = secs_since(t0, unix_nanos());
    let audit1 = ctx.audit.as_ref().map_or(0, AuditLog::mark);
    m.insert("cores".into(), procstat::cpu_between(&p0, &p1) / secs);
    m.insert("rss_mb".into(), quantile(&rss, 0.5).unwrap_or(f64::NAN));
    m.insert("peak_rss_mb".into(), mb(p1.hwm));
    m.insert("window_s".into(), secs);
    if let Some(c) = count(ctx, audit0, audit1)? {
        m.insert("requests_at_rest".into(), c.total_f());
        m.insert("writes_at_rest".into(), writes(&c));
    }
    Ok(())
}

/// Another field manager's edit of a field the arm owns (`ChildKind::edit_patch`).
async fn edit(client: &Client, kind: ChildKind, parent: &str) -> anyhow::Result<()> {
    let name = child_name(parent, kind);
    let (pp, patch) = (PatchParams::default(), Patch::Merge(kind.edit_patch()));
    let c = client.clone();
    match kind {
        ChildKind::ConfigMap => Api::<ConfigMap>::namespaced(c, NAMESPACE)
            .patch(&name, &pp, &patch)
            .await
            .map(drop),
        ChildKind::Secret => Api::<Secret>::namespaced(c, NAMESPACE)
            .patch(&name, &pp, &patch)
            .await
            .map(drop),
        ChildKind::Service => Api::<Service>::namespaced(c, NAMESPACE)
            .patch(&name, &pp, &patch)
            .await
            .map(drop),
    }
    .with_context(|| format!("editing {name}"))
}

/// K edits spread over the parents and kinds, one at a time; the restoration times.
async fn edits(
    ctx: &Ctx,
    client: &Client,
    watch: &ChildWatch,
    n: usize,
    m: &mut Metrics,
    notes: &mut Vec<String>,
) -> anyhow::Result<()> {
    let k = ctx.edits.min(n);
    if k == 0 {
        return Ok(());
    }
    let audit0 = ctx.audit.as_ref().map_or(0, AuditLog::mark);
    let mut restored = Vec::with_capacity(k);
    for j in 0..k {
        let parent = object_name(j * n / k);
        let kind = ChildKind::ALL[j % ChildKind::ALL.len()];
        let from = watch.mark();
        edit(client, kind, &parent).await?;
        let deadline = Instant::now() + EDIT_LIMIT;
        loop {
            if let (Some(broken), Some(ok)) = watch.restoration(from, kind, &parent) {
                restored.push(secs_since(broken, ok) * 1e3);
                break;
            }
            if Instant::now() > deadline {
                let what = child_name(&parent, kind);
                notes.push(format!(
                    "edit {j} ({what}) not restored within {EDIT_LIMIT:?}"
                ));
                break;
            }
            sleep(Duration::from_millis(10)).await;
        }
        sleep(EDIT_GAP).await;
    }
    let audit1 = ctx.audit.as_ref().map_or(0, AuditLog::mark);
    m.insert("edits".into(), count_f(k));
    m.insert("edits_restored".into(), count_f(restored.len()));
    for (name, q) in [
        ("restore_p50_ms", 0.5),
        ("restore_p99_ms", 0.99),
        ("restore_max_ms", 1.0),
    ] {
        m.insert(name.into(), quantile(&restored, q).unwrap_or(f64::NAN));
    }
    if let Some(c) = count(ctx, audit0, audit1)? {
        m.insert("requests_per_edit".into(), c.total_f() / count_f(k));
        m.insert("writes_per_edit".into(), writes(&c) / count_f(k));
    }
    Ok(())
}
