//! Scenario 7: in-process scale, no API server. Runs `bench-inproc` as a child and reads its
//! CPU and RSS from outside at the phases it announces on stdout:
//!
//! - `baseline`: the objects and the bookkeeping exist, nothing is supervised yet;
//! - `spawned <seconds>`: every instance runs (the time it took to start them all);
//! - `window-start` / `window-end`: the measurement window;
//! - `result <json>`: lateness quantiles and counts measured inside the child;
//! - `stopped <seconds>`: the time it took to stop everything.
//!
//! The interval of every timer and daemon is `--inproc-interval` (passed as `BENCH_INTERVAL_S`);
//! trials at an interval other than 1 s are labelled `inproc-timers@10s` (see [`label`]), so
//! they neither replace nor mix with the 1 s trials.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use kopf_bench::procstat;

use crate::arms::Programs;
use crate::results::{Started, Trial};
use crate::scenarios::Metrics;

/// Which population scenario 7 runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Timers,
    Daemons,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Timers => "inproc-timers",
            Self::Daemons => "inproc-daemons",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "inproc-timers" | "7" | "inproc" => Some(Self::Timers),
            "inproc-daemons" => Some(Self::Daemons),
            _ => None,
        }
    }
}

/// The interval the instances run at unless `--inproc-interval` says otherwise, in seconds.
pub(crate) const DEFAULT_INTERVAL_S: f64 = 1.0;

/// The scenario label of `kind` at `interval_s`: the kind's name at the default interval (as
/// before the interval was an option), else `<name>@<interval>s`, e.g. `inproc-timers@10s`.
#[allow(clippy::float_cmp)]
pub(crate) fn label(kind: Kind, interval_s: f64) -> String {
    if interval_s == DEFAULT_INTERVAL_S {
        kind.as_str().to_owned()
    } else {
        format!("{}@{interval_s}s", kind.as_str())
    }
}

/// The kind and interval (seconds) of a scenario label made by [`label`]; `None` for any other
/// scenario.
pub(crate) fn parse_label(scenario: &str) -> Option<(Kind, f64)> {
    let (name, interval_s) = match scenario.split_once('@') {
        Some((name, at)) => (name, at.strip_suffix('s')?.parse().ok()?),
        None => (scenario, DEFAULT_INTERVAL_S),
    };
    let kind = [Kind::Timers, Kind::Daemons]
        .into_iter()
        .find(|k| k.as_str() == name)?;
    Some((kind, interval_s))
}

/// Parses `--inproc-interval`: finite, positive seconds.
pub(crate) fn parse_interval(s: &str) -> anyhow::Result<f64> {
    let secs: f64 = s
        .parse()
        .map_err(|e| anyhow::anyhow!("--inproc-interval {s:?}: not a number of seconds ({e})"))?;
    anyhow::ensure!(
        secs.is_finite() && secs > 0.0,
        "--inproc-interval {s:?}: the interval must be a positive number of seconds"
    );
    Ok(secs)
}

/// The arms of scenario 7: the supervisor, bare tokio tasks doing the same, and the supervisor
/// with the same objects but no handler matching (the object cache alone).
const ARMS: [&str; 3] = ["kopf-rs", "tokio", "objects"];

/// Runs `bench-inproc` for one arm and reads its phases into the trial's metrics.
fn measure(
    programs: &Programs,
    kind: Kind,
    arm: &str,
    n: usize,
    (interval_s, window): (f64, Duration),
    dir: &Path,
) -> anyhow::Result<Metrics> {
    std::fs::create_dir_all(dir)?;
    let mode = match (arm, kind) {
        ("kopf-rs", Kind::Timers) => "timers",
        ("kopf-rs", Kind::Daemons) => "daemons",
        ("objects", _) => "objects",
        (_, Kind::Timers) => "tokio-timers",
        (_, Kind::Daemons) => "tokio-daemons",
    };
    let exe = programs.bin_dir.join("bench-inproc");
    anyhow::ensure!(
        exe.exists(),
        "{} is missing; build it with `cargo build -p kopf-bench --bins`",
        exe.display()
    );
    let mut child = Command::new(exe)
        .args([mode, &n.to_string(), &window.as_secs_f64().to_string()])
        .env("BENCH_INTERVAL_S", interval_s.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join("stderr.log"))?)
        .spawn()?;
    let pid = child.id();
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let mut m = Metrics::new();
    if arm != "objects" {
        // Every instance fires once per interval (the `objects` arm runs none).
        #[allow(clippy::cast_precision_loss)]
        m.insert("fires_expected_per_s".into(), n as f64 / interval_s);
    }
    let (mut base, mut w0) = (None, None);
    let mut rss = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        let (word, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        match word {
            "baseline" => base = Some(procstat::read(pid)?),
            "spawned" => {
                m.insert("spawn_s".into(), rest.parse().unwrap_or(f64::NAN));
            }
            "sample" => rss.push(procstat::read(pid)?.rss),
            "window-start" => w0 = Some((procstat::read(pid)?, std::time::Instant::now())),
            "window-end" => {
                let p1 = procstat::read(pid)?;
                let (p0, t0) =
                    w0.ok_or_else(|| anyhow::anyhow!("window-end before window-start"))?;
                let secs = t0.elapsed().as_secs_f64();
                let cores = procstat::cpu_between(&p0, &p1) / secs;
                m.insert("cores".into(), cores);
                #[allow(clippy::cast_precision_loss)]
                let per_1000 = cores / (n as f64 / 1000.0);
                m.insert("cores_per_1000".into(), per_1000);
                rss.push(p1.rss);
                rss.sort_unstable();
                let steady = rss[rss.len() / 2];
                #[allow(clippy::cast_precision_loss)]
                {
                    m.insert("rss_mb".into(), steady as f64 / 1e6);
                    m.insert("peak_rss_mb".into(), p1.hwm as f64 / 1e6);
                    if let Some(b) = base {
                        let per = (steady.saturating_sub(b.rss)) as f64 / n as f64;
                        m.insert("bytes_per_instance".into(), per);
                        m.insert("baseline_rss_mb".into(), b.rss as f64 / 1e6);
                    }
                }
            }
            "result" => {
                let v: serde_json::Value = serde_json::from_str(rest)?;
                if let Some(obj) = v.as_object() {
                    for (k, val) in obj {
                        if let Some(x) = val.as_f64() {
                            m.insert(k.clone(), x);
                        }
                    }
                }
            }
            "stopped" => {
                m.insert("stop_all_s".into(), rest.parse().unwrap_or(f64::NAN));
            }
            _ => {}
        }
    }
    let status = child.wait()?;
    anyhow::ensure!(
        status.success(),
        "bench-inproc exited with {status} (see {}/stderr.log)",
        dir.display()
    );
    Ok(m)
}

/// Runs one pair index of scenario 7 at `interval_s`: every arm in turn, one trial each.
pub(crate) async fn trial(
    programs: &Programs,
    kind: Kind,
    n: usize,
    pair: usize,
    (interval_s, window): (f64, Duration),
    tmp: &Path,
) -> Vec<Trial> {
    let scenario = label(kind, interval_s);
    let mut out = Vec::new();
    for arm in ARMS {
        let dir = tmp.join(format!("{scenario}-{n}-{arm}-{pair}"));
        let started = Started::now();
        let (p, k, a, d) = (programs.clone(), kind, arm, dir.clone());
        let timing = (interval_s, window);
        let res = tokio::task::spawn_blocking(move || measure(&p, k, a, n, timing, &d)).await;
        let mut trial = Trial::ended(scenario.clone(), n, arm, pair, started);
        trial.interval_s = Some(interval_s);
        match res {
            Ok(Ok(m)) => trial.metrics = m,
            Ok(Err(e)) => trial.error = Some(format!("{e:#}")),
            Err(e) => trial.error = Some(e.to_string()),
        }
        out.push(trial);
    }
    subtract_object_cache(&mut out);
    out
}

/// Adds `bytes_per_instance_excl_objects` to the kopf-rs trial: its bytes per instance minus
/// the `objects` arm's (what the supervisor keeps per object whether or not anything runs:
/// the entry, the latest snapshot, its change channel).
fn subtract_object_cache(trials: &mut [Trial]) {
    let per = |arm: &str| {
        trials
            .iter()
            .find(|t| t.arm == arm && t.error.is_none())
            .and_then(|t| t.metrics.get("bytes_per_instance").copied())
    };
    let (Some(all), Some(objects)) = (per("kopf-rs"), per("objects")) else {
        return;
    };
    if let Some(t) = trials.iter_mut().find(|t| t.arm == "kopf-rs") {
        t.metrics
            .insert("bytes_per_instance_excl_objects".into(), all - objects);
        t.metrics.insert("object_cache_bytes".into(), objects);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_interval_keeps_the_plain_name_and_others_are_labelled() {
        assert_eq!(label(Kind::Timers, 1.0), "inproc-timers");
        assert_eq!(label(Kind::Timers, 10.0), "inproc-timers@10s");
        assert_eq!(label(Kind::Daemons, 2.5), "inproc-daemons@2.5s");
        for (kind, interval) in [
            (Kind::Timers, 1.0),
            (Kind::Timers, 10.0),
            (Kind::Daemons, 0.5),
        ] {
            assert_eq!(parse_label(&label(kind, interval)), Some((kind, interval)));
        }
    }

    #[test]
    fn other_scenarios_are_not_labels() {
        for s in [
            "timers",
            "7",
            "inproc",
            "inproc-timers@",
            "inproc-timers@10",
            "x@10s",
        ] {
            assert_eq!(parse_label(s), None, "{s}");
        }
    }

    #[test]
    fn the_interval_must_be_positive_seconds() {
        assert!(matches!(parse_interval("10"), Ok(v) if v == 10.0));
        assert!(matches!(parse_interval("0.5"), Ok(v) if v == 0.5));
        for bad in ["0", "-1", "ten", "", "inf", "NaN"] {
            assert!(parse_interval(bad).is_err(), "{bad:?}");
        }
    }
}
