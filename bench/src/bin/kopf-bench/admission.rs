//! Scenario 11: the admission round trip. Each arm's server (`bench-admission kopf-rs|axum`)
//! runs as a child; the harness, in its own process, posts `AdmissionReview`s to it over TLS as
//! the API server would (see `webclient`), at `--admission-rate` per second for the window, and
//! times each from the instant it was due to the last byte of its answer. Before the window, a
//! warm-up at the same rate, and a check that both arms refuse an object without an owner with
//! the same message and admit one with an owner. The child's CPU and RSS are read from `/proc`
//! over the window.
//!
//! The trial's `n` is the rate (requests per second).

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use kopf_bench::procstat;
use kopf_bench::stats::quantile;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

use crate::arms::Programs;
use crate::results::{Started, Trial};
use crate::scenarios::Metrics;
use crate::webclient::{Client, Load, load, review, write_certificates};

/// The scenario's name in the results.
pub(crate) const SCENARIO: &str = "admission";

/// The rate the issue sets the goal at, requests per second.
pub(crate) const DEFAULT_RATE: usize = 200;

/// The arms: a kopf-rs operator's webhook server, and a bare axum handler (the reference).
const ARMS: [&str; 2] = ["kopf-rs", "axum"];

/// The warm-up before the window: connections open, allocators settled.
const WARMUP: Duration = Duration::from_secs(3);

/// How long a server may take to say it is ready.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// The message both arms refuse an object without an owner with.
const NO_OWNER: &str = "spec.field must name the object's owner";

/// Starts `bench-admission arm certs` and waits for its port.
async fn start(programs: &Programs, arm: &str, dir: &Path) -> anyhow::Result<(Child, u16)> {
    let exe = programs.bin_dir.join("bench-admission");
    anyhow::ensure!(
        exe.exists(),
        "{} is missing; build it with `cargo build -p kopf-bench --bins`",
        exe.display()
    );
    let mut child = Command::new(exe)
        .args([arm, &dir.display().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join("stderr.log"))?)
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().context("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let ready = tokio::time::timeout(READY_WITHIN, lines.next_line())
        .await
        .context("the server did not say it was ready")??
        .context("the server exited before it was ready")?;
    let port = ready
        .strip_prefix("ready ")
        .and_then(|p| p.trim().parse().ok())
        .with_context(|| format!("not a ready line: {ready:?}"))?;
    Ok((child, port))
}

/// Both answers the check gives: a refusal with its message, and an admission.
async fn check_answers(client: &Client) -> anyhow::Result<()> {
    let refused = client.post("refuse", review("refuse", false)).await?;
    anyhow::ensure!(
        !refused.allowed && refused.message.contains(NO_OWNER),
        "an object without an owner was not refused with {NO_OWNER:?}: {:?}",
        refused.message
    );
    let admitted = client.post("admit", review("admit", true)).await?;
    anyhow::ensure!(admitted.allowed, "an object with an owner was refused");
    Ok(())
}

/// The window's latencies, failures and the child's CPU and RSS, as metrics.
fn metrics(window: &Load, (rate, secs): (usize, f64), cpu_s: f64, rss: u64) -> Metrics {
    let mut m = Metrics::new();
    let lat = &window.latencies_ms;
    for (name, q) in [
        ("p50_ms", 0.5),
        ("p90_ms", 0.9),
        ("p99_ms", 0.99),
        ("max_ms", 1.0),
    ] {
        if let Some(v) = quantile(lat, q) {
            m.insert(name.into(), v);
        }
    }
    #[allow(clippy::cast_precision_loss)]
    {
        let answered = lat.len() as f64;
        m.insert("answered".into(), answered);
        m.insert("failed".into(), window.failed as f64);
        m.insert("rate_expected".into(), rate as f64);
        m.insert("rate".into(), answered / secs);
        m.insert("cores".into(), cpu_s / secs);
        if answered > 0.0 {
            m.insert("cpu_us_per_request".into(), cpu_s / answered * 1e6);
        }
        m.insert("rss_mb".into(), rss as f64 / 1e6);
    }
    m
}

/// One arm: start, check, warm up, measure the window, stop.
async fn measure(
    programs: &Programs,
    arm: &str,
    (rate, window): (usize, Duration),
    dir: &Path,
) -> anyhow::Result<(Metrics, Vec<String>)> {
    std::fs::create_dir_all(dir)?;
    let ca = write_certificates(dir)?;
    let (mut child, port) = start(programs, arm, dir).await?;
    let pid = child.id().context("the server exited")?;
    let client = Arc::new(Client::new(port, &ca)?);
    check_answers(&client).await?;
    let warm = load(&client, rate, WARMUP).await;
    anyhow::ensure!(warm.failed == 0, "warm-up: {:?}", warm.first_failure);
    let p0 = procstat::read(pid)?;
    let t0 = tokio::time::Instant::now();
    let run = load(&client, rate, window).await;
    let secs = t0.elapsed().as_secs_f64();
    let p1 = procstat::read(pid)?;
    let notes = run
        .first_failure
        .iter()
        .map(|f| format!("{} failed, the first: {f}", run.failed));
    let notes = notes.collect();
    let m = metrics(&run, (rate, secs), procstat::cpu_between(&p0, &p1), p1.rss);
    let _sent = Command::new("kill").arg(pid.to_string()).status().await;
    let exited = tokio::time::timeout(Duration::from_secs(15), child.wait()).await;
    anyhow::ensure!(
        matches!(exited, Ok(Ok(status)) if status.success()),
        "the server did not exit cleanly after SIGTERM: {exited:?} (see {}/stderr.log)",
        dir.display()
    );
    Ok((m, notes))
}

/// Runs one pair index of scenario 11: both arms, in the pair's order (A B, then B A).
pub(crate) async fn trial(
    programs: &Programs,
    rate: usize,
    pair: usize,
    window: Duration,
    tmp: &Path,
) -> Vec<Trial> {
    let mut order = ARMS.to_vec();
    if pair % 2 == 1 {
        order.reverse();
    }
    let mut out = Vec::new();
    for arm in order {
        let dir = tmp.join(format!("{SCENARIO}-{rate}-{arm}-{pair}"));
        let started = Started::now();
        let res = measure(programs, arm, (rate, window), &dir).await;
        let mut trial = Trial::ended(SCENARIO, rate, arm, pair, started);
        match res {
            Ok((m, notes)) => (trial.metrics, trial.notes) = (m, notes),
            Err(e) => trial.error = Some(format!("{e:#}")),
        }
        out.push(trial);
    }
    out
}
