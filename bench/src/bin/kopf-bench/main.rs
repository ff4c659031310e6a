//! `kopf-bench`: runs the benchmark scenarios for every arm in turn and writes the report.
//!
//! ```text
//! kopf-bench run [--scenarios timers,startup,...] [--n 100,1000] [--pairs 3] [--window 30]
//!                [--arms kopf-rs,kopf-py,tokio,kube-loop,kube-store,kube-controller] [--out DIR] [--fresh] [--strict]
//!                [--inproc-n 100k,1M] [--inproc-interval 1] [--edits 200]
//!                [--admission-rate 200]
//! kopf-bench report DIR
//! ```
//!
//! `run` needs `KUBECONFIG` (the benchmark's own kube-testenv) and `BENCH_AUDIT_LOG` (its audit
//! log); `bench/run` sets both up. See `bench/README.md`.

mod admission;
mod arms;
mod audit;
mod children;
mod childwatch;
mod cluster;
mod fires;
mod handover;
mod inproc;
mod report;
mod results;
mod scenarios;
mod shardlog;
mod shards;
mod steady;
mod targets;
mod webclient;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};

use crate::arms::{Arm, Programs};
use crate::results::{Machine, Results, Started, Trial};
use crate::scenarios::{Ctx, Scenario};

/// Parsed `run` options.
struct RunArgs {
    scenarios: Vec<Scenario>,
    inproc: Vec<inproc::Kind>,
    ns: Vec<usize>,
    inproc_ns: Vec<usize>,
    /// The interval of scenario 7's timers and daemons, in seconds.
    inproc_interval_s: f64,
    pairs: usize,
    window: Duration,
    /// Scenario 10's child edits.
    edits: usize,
    /// Whether scenario 11 (admission) runs.
    admission: bool,
    /// Scenario 11's rates, requests per second.
    admission_rates: Vec<usize>,
    arms: Option<Vec<Arm>>,
    out: PathBuf,
    fresh: bool,
    strict: bool,
}

fn list<T>(v: &str, f: impl Fn(&str) -> anyhow::Result<T>) -> anyhow::Result<Vec<T>> {
    v.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| f(s.trim()))
        .collect()
}

fn parse_n(s: &str) -> anyhow::Result<usize> {
    let s = s.replace('_', "");
    let (digits, mult) = match s.strip_suffix('k') {
        Some(d) => (d.to_owned(), 1000),
        None => match s.strip_suffix('M') {
            Some(d) => (d.to_owned(), 1_000_000),
            None => (s.clone(), 1),
        },
    };
    Ok(digits
        .parse::<usize>()
        .with_context(|| format!("bad N {s:?}"))?
        * mult)
}

fn parse_run(args: &[String]) -> anyhow::Result<RunArgs> {
    let mut r = RunArgs {
        scenarios: vec![Scenario::Timers],
        inproc: Vec::new(),
        ns: vec![100],
        inproc_ns: vec![100_000],
        inproc_interval_s: inproc::DEFAULT_INTERVAL_S,
        pairs: 3,
        window: Duration::from_secs(30),
        edits: children::DEFAULT_EDITS,
        admission: false,
        admission_rates: vec![admission::DEFAULT_RATE],
        arms: None,
        out: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("results/latest"),
        fresh: false,
        strict: false,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--scenarios" => {
                let v = value()?.clone();
                r.scenarios = Vec::new();
                for s in v.split(',') {
                    match inproc::Kind::parse(s) {
                        Some(k) => r.inproc.push(k),
                        None if s == admission::SCENARIO || s == "11" => r.admission = true,
                        None => r.scenarios.push(Scenario::parse(s)?),
                    }
                }
            }
            "--n" => r.ns = list(value()?, parse_n)?,
            "--inproc-n" => r.inproc_ns = list(value()?, parse_n)?,
            "--inproc-interval" => r.inproc_interval_s = inproc::parse_interval(value()?)?,
            "--pairs" => r.pairs = value()?.parse()?,
            "--window" => r.window = Duration::from_secs_f64(value()?.parse()?),
            "--edits" => r.edits = value()?.parse().context("--edits needs a count")?,
            "--admission-rate" => r.admission_rates = list(value()?, parse_n)?,
            "--arms" => r.arms = Some(list(value()?, Arm::parse)?),
            "--out" => r.out = PathBuf::from(value()?),
            "--fresh" => r.fresh = true,
            "--strict" => r.strict = true,
            other => bail!("unknown option {other:?}"),
        }
    }
    Ok(r)
}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Writes the results and `report.md`; a hand-written `analysis.md` in the same directory (the
/// explanation of misses) is appended to the report.
fn save(results: &Results, out: &Path) -> anyhow::Result<()> {
    results.save(out)?;
    let mut md = report::render(results);
    if let Ok(analysis) = std::fs::read_to_string(out.join("analysis.md")) {
        md.push('\n');
        md.push_str(&analysis);
    }
    std::fs::write(out.join("report.md"), md)?;
    Ok(())
}

fn record(results: &mut Results, mut trial: Trial, strict_failures: &mut usize) {
    trial.metrics.retain(|_, v| v.is_finite());
    let status = trial.error.as_deref().unwrap_or("ok");
    eprintln!(
        "kopf-bench: {} N={} {} pair {}: {status} {:?} {:?}",
        trial.scenario, trial.n, trial.arm, trial.pair, trial.metrics, trial.notes
    );
    if trial.error.is_some() || !trial.notes.is_empty() {
        *strict_failures += 1;
    }
    results.trials.push(trial);
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let programs = Programs::locate()?;
    let results_path = args.out.join("results.json");
    let mut results = if !args.fresh && results_path.exists() {
        Results::load(&results_path)?
    } else {
        Results::default()
    };
    let earlier_python = std::mem::take(&mut results.machine.python);
    results.machine = Machine::describe(&programs.bench_dir);
    if results.machine.python.is_empty() {
        // No venv this time (no kopf-py arm ran): the kept trials' Python is the one to show.
        results.machine.python = earlier_python;
    }
    let tmp = programs.bench_dir.join("results/tmp");
    let mut failures = 0;
    if !args.scenarios.is_empty() {
        let cluster = cluster::Cluster::connect().await?;
        cluster.setup().await?;
        let audit = audit::AuditLog::from_env();
        if audit.is_none() {
            eprintln!("kopf-bench: BENCH_AUDIT_LOG is not set; API requests will not be counted");
        }
        let ctx = Ctx {
            cluster,
            programs: programs.clone(),
            audit,
            window: args.window,
            edits: args.edits,
        };
        for &scenario in &args.scenarios {
            for &n in &args.ns {
                results
                    .trials
                    .retain(|t| !(t.scenario == scenario.as_str() && t.n == n));
                let arms: Vec<Arm> = scenario
                    .arms()
                    .iter()
                    .copied()
                    .filter(|a| args.arms.as_ref().is_none_or(|list| list.contains(a)))
                    .collect();
                for pair in 0..args.pairs {
                    // A B, then B A, …: no arm always runs first, right after the objects
                    // were made or their finalizers stripped (the API server is busiest then).
                    let order: Vec<Arm> = if pair % 2 == 0 {
                        arms.clone()
                    } else {
                        arms.iter().rev().copied().collect()
                    };
                    for &arm in &order {
                        let dir = scenarios::trial_dir(&tmp, scenario, n, arm, pair);
                        let started = Started::now();
                        let out = scenarios::trial(&ctx, scenario, n, arm, &dir).await;
                        let mut trial =
                            Trial::ended(scenario.as_str(), n, arm.as_str(), pair, started);
                        match out {
                            Ok(o) => {
                                trial.metrics = o.metrics;
                                trial.notes = o.notes;
                                trial.lateness_ms = o.lateness_ms;
                            }
                            Err(e) => trial.error = Some(format!("{e:#}")),
                        }
                        record(&mut results, trial, &mut failures);
                        save(&results, &args.out)?;
                    }
                }
            }
        }
        ctx.cluster
            .remove_all()
            .await
            .context("removing the benchmark objects")?;
        if args.scenarios.contains(&Scenario::Children) {
            childwatch::remove_children(&ctx.cluster.client())
                .await
                .context("removing the children of scenario 10")?;
        }
    }
    let timing = (args.inproc_interval_s, args.window);
    for &kind in &args.inproc {
        // Only the trials at the same interval are replaced: each interval has its own label.
        let scenario = inproc::label(kind, args.inproc_interval_s);
        for &n in &args.inproc_ns {
            results
                .trials
                .retain(|t| !(t.scenario == scenario && t.n == n));
            for pair in 0..args.pairs {
                for trial in inproc::trial(&programs, kind, n, pair, timing, &tmp).await {
                    record(&mut results, trial, &mut failures);
                }
                save(&results, &args.out)?;
            }
        }
    }
    if args.admission {
        for &rate in &args.admission_rates {
            results
                .trials
                .retain(|t| !(t.scenario == admission::SCENARIO && t.n == rate));
            for pair in 0..args.pairs {
                for trial in admission::trial(&programs, rate, pair, args.window, &tmp).await {
                    record(&mut results, trial, &mut failures);
                }
                save(&results, &args.out)?;
            }
        }
    }
    save(&results, &args.out)?;
    eprintln!(
        "kopf-bench: report written to {}",
        args.out.join("report.md").display()
    );
    if args.strict && failures > 0 {
        bail!("{failures} trial(s) failed or did not settle (see the notes in the report)");
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.split_first() {
        Some((cmd, rest)) if cmd == "run" => run(parse_run(rest)?).await,
        Some((cmd, [dir])) if cmd == "report" => {
            let dir = PathBuf::from(dir);
            save(&Results::load(&dir.join("results.json"))?, &dir)
        }
        _ => bail!("usage: kopf-bench run [options] | kopf-bench report DIR (see bench/README.md)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> anyhow::Result<RunArgs> {
        parse_run(&v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn the_inproc_interval_defaults_to_one_second() -> anyhow::Result<()> {
        let r = args(&["--scenarios", "inproc-timers", "--inproc-n", "1M"])?;
        assert_eq!(r.inproc, [inproc::Kind::Timers]);
        assert_eq!(r.inproc_ns, [1_000_000]);
        assert!((r.inproc_interval_s - 1.0).abs() < f64::EPSILON);
        Ok(())
    }

    #[test]
    fn the_inproc_interval_is_parsed_and_checked() -> anyhow::Result<()> {
        let r = args(&["--inproc-interval", "10", "--window", "60"])?;
        assert!((r.inproc_interval_s - 10.0).abs() < f64::EPSILON);
        for bad in ["0", "-2", "x"] {
            assert!(args(&["--inproc-interval", bad]).is_err(), "{bad}");
        }
        assert!(args(&["--inproc-interval"]).is_err());
        Ok(())
    }
}
