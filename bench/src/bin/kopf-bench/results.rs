//! The machine-readable results: every trial, the machine, and their summaries.

use std::collections::BTreeMap;
use std::path::Path;

use kopf_bench::procstat::load_average;

use kopf_bench::stats::{Summary, summarize};
use serde::{Deserialize, Serialize};

use crate::inproc::{Kind, parse_label};
use crate::scenarios::Scenario;

/// The quantiles (in %) at which each trial's lateness distribution is kept for the plots.
pub(crate) const LATENESS_GRID: [f64; 15] = [
    1.0, 5.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 98.0, 99.0, 99.5, 99.8, 99.9, 99.95, 100.0,
];

/// One trial: one scenario, one N, one arm, one pair index.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Trial {
    /// The scenario's name; scenario 7 at an interval other than 1 s is labelled
    /// `inproc-timers@10s` (see `inproc::label`), so each interval is its own group.
    pub(crate) scenario: String,
    /// The interval the instances ran at, in seconds (scenario 7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) interval_s: Option<f64>,
    pub(crate) n: usize,
    pub(crate) arm: String,
    pub(crate) pair: usize,
    pub(crate) started_unix: u64,
    pub(crate) load_before: [f64; 3],
    pub(crate) load_after: [f64; 3],
    pub(crate) metrics: BTreeMap<String, f64>,
    /// Lateness in ms at [`LATENESS_GRID`] (timer scenarios).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) lateness_ms: Vec<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) notes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
}

/// When a trial began, and the machine's load then.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Started {
    unix: u64,
    load: [f64; 3],
}

impl Started {
    /// Now.
    pub(crate) fn now() -> Self {
        Self {
            unix: crate::now_unix(),
            load: load_average(),
        }
    }
}

impl Trial {
    /// A trial of `arm` in `scenario` at `n`, round `pair`, begun at `started` and ended now,
    /// with no metric yet.
    pub(crate) fn ended(
        scenario: impl Into<String>,
        n: usize,
        arm: impl Into<String>,
        pair: usize,
        started: Started,
    ) -> Self {
        Self {
            scenario: scenario.into(),
            interval_s: None,
            n,
            arm: arm.into(),
            pair,
            started_unix: started.unix,
            load_before: started.load,
            load_after: load_average(),
            metrics: BTreeMap::new(),
            lateness_ms: Vec::new(),
            notes: Vec::new(),
            error: None,
        }
    }
}

/// The machine the run was on.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Machine {
    pub(crate) date: String,
    pub(crate) nproc: usize,
    pub(crate) memory_gb: f64,
    pub(crate) cpu_model: String,
    pub(crate) kernel: String,
    pub(crate) rustc: String,
    pub(crate) python: String,
    pub(crate) kube_apiserver: String,
    pub(crate) build_profile: String,
    /// The commit measured (`+dirty` when the work tree had changes).
    #[serde(default)]
    pub(crate) commit: String,
}

fn cmd_line(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

impl Machine {
    pub(crate) fn describe(bench_dir: &Path) -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_kb: f64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(f64::NAN);
        let apiserver = bench_dir.join("../target/kube-bin/kube-apiserver");
        Self {
            date: cmd_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
            nproc: std::thread::available_parallelism().map_or(0, usize::from),
            memory_gb: (mem_kb / 1024.0 / 1024.0 * 10.0).round() / 10.0,
            cpu_model: cpuinfo
                .lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
                .unwrap_or_default(),
            kernel: cmd_line("uname", &["-r"]),
            rustc: cmd_line("rustc", &["--version"]),
            python: cmd_line(
                &bench_dir.join(".venv/bin/python").to_string_lossy(),
                &["--version"],
            ),
            kube_apiserver: cmd_line(&apiserver.to_string_lossy(), &["--version"]),
            build_profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
            .to_owned(),
            commit: {
                let dir = bench_dir.to_string_lossy();
                let head = cmd_line("git", &["-C", &dir, "rev-parse", "--short", "HEAD"]);
                let status = ["-C", &dir, "status", "--porcelain", "--untracked-files=no"];
                if cmd_line("git", &status).is_empty() {
                    head
                } else {
                    format!("{head}+dirty")
                }
            },
        }
    }
}

/// Everything a run produced (`results.json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Results {
    pub(crate) machine: Machine,
    pub(crate) trials: Vec<Trial>,
}

/// A summary of one metric of one arm, or of the per-pair ratio of two arms.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SummaryRow {
    pub(crate) scenario: String,
    pub(crate) n: usize,
    /// An arm, or `a/b` for a ratio.
    pub(crate) arm: String,
    pub(crate) metric: String,
    #[serde(flatten)]
    pub(crate) summary: Summary,
}

impl Results {
    pub(crate) fn load(path: &Path) -> anyhow::Result<Self> {
        Ok(serde_json::from_str(&std::fs::read_to_string(path)?)?)
    }

    /// The (scenario, n) groups, in scenario order (1-9; scenario 7 timers, then daemons, each
    /// by interval), then by N; the trials are kept in run order, which is whatever order the
    /// runs were made in.
    pub(crate) fn groups(&self) -> Vec<(String, usize)> {
        let mut out: Vec<(String, usize)> = Vec::new();
        for t in &self.trials {
            if !out.iter().any(|(s, n)| *s == t.scenario && *n == t.n) {
                out.push((t.scenario.clone(), t.n));
            }
        }
        let rank = |s: &str| match (Scenario::parse(s), parse_label(s)) {
            (Ok(scenario), _) => (scenario.number(), 0, 0.0),
            (_, Some((kind, interval_s))) => (7, u8::from(kind == Kind::Daemons), interval_s),
            _ => (u8::MAX, 0, 0.0),
        };
        out.sort_by(|(a, m), (b, n)| {
            let ((a0, a1, a2), (b0, b1, b2)) = (rank(a), rank(b));
            (a0, a1)
                .cmp(&(b0, b1))
                .then(a2.total_cmp(&b2))
                .then(a.cmp(b))
                .then(m.cmp(n))
        });
        out
    }

    /// The arms of a group, in run order.
    pub(crate) fn arms(&self, scenario: &str, n: usize) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for t in self
            .trials
            .iter()
            .filter(|t| t.scenario == scenario && t.n == n)
        {
            if !out.contains(&t.arm) {
                out.push(t.arm.clone());
            }
        }
        out
    }

    /// The values of one metric for one arm (all pairs).
    pub(crate) fn values(&self, scenario: &str, n: usize, arm: &str, metric: &str) -> Vec<f64> {
        self.trials
            .iter()
            .filter(|t| t.scenario == scenario && t.n == n && t.arm == arm)
            .filter_map(|t| t.metrics.get(metric).copied())
            .collect()
    }

    pub(crate) fn summary(
        &self,
        scenario: &str,
        n: usize,
        arm: &str,
        metric: &str,
    ) -> Option<Summary> {
        summarize(&self.values(scenario, n, arm, metric))
    }

    /// Per pair: `f(metrics of a, metrics of b)` where both trials exist.
    pub(crate) fn pairwise(
        &self,
        scenario: &str,
        n: usize,
        a: &str,
        b: &str,
        f: impl Fn(&BTreeMap<String, f64>, &BTreeMap<String, f64>) -> Option<f64>,
    ) -> Vec<f64> {
        let find = |arm: &str, pair: usize| {
            self.trials
                .iter()
                .find(|t| t.scenario == scenario && t.n == n && t.arm == arm && t.pair == pair)
        };
        let pairs: std::collections::BTreeSet<usize> = self
            .trials
            .iter()
            .filter(|t| t.scenario == scenario && t.n == n)
            .map(|t| t.pair)
            .collect();
        pairs
            .into_iter()
            .filter_map(|p| Some((find(a, p)?, find(b, p)?)))
            .filter_map(|(x, y)| f(&x.metrics, &y.metrics))
            .filter(|v| v.is_finite())
            .collect()
    }

    /// Per-pair ratio `metric(a) / metric(b)`.
    pub(crate) fn ratios(
        &self,
        scenario: &str,
        n: usize,
        a: &str,
        b: &str,
        metric: &str,
    ) -> Vec<f64> {
        self.pairwise(scenario, n, a, b, |x, y| {
            Some(x.get(metric)? / y.get(metric)?)
        })
    }

    /// Every summary: per arm and metric, and per-pair ratios of kopf-rs to each other arm.
    pub(crate) fn summaries(&self) -> Vec<SummaryRow> {
        let mut out = Vec::new();
        for (scenario, n) in self.groups() {
            let arms = self.arms(&scenario, n);
            let mut metrics: Vec<String> = self
                .trials
                .iter()
                .filter(|t| t.scenario == scenario && t.n == n)
                .flat_map(|t| t.metrics.keys().cloned())
                .collect();
            metrics.sort();
            metrics.dedup();
            for metric in &metrics {
                for arm in &arms {
                    if let Some(summary) = self.summary(&scenario, n, arm, metric) {
                        let (scenario, metric, arm) =
                            (scenario.clone(), metric.clone(), arm.clone());
                        out.push(SummaryRow {
                            scenario,
                            n,
                            arm,
                            metric,
                            summary,
                        });
                    }
                }
                for other in arms.iter().filter(|a| *a != "kopf-rs") {
                    let ratios = self.ratios(&scenario, n, "kopf-rs", other, metric);
                    if let Some(summary) = summarize(&ratios) {
                        out.push(SummaryRow {
                            scenario: scenario.clone(),
                            n,
                            arm: format!("kopf-rs/{other}"),
                            metric: metric.clone(),
                            summary,
                        });
                    }
                }
            }
        }
        out
    }

    /// Writes `results.json`, `trials.csv` and `summary.csv` into `dir`.
    pub(crate) fn save(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(
            dir.join("results.json"),
            serde_json::to_string_pretty(self)?,
        )?;
        let mut csv = String::from("scenario,n,arm,pair,metric,value\n");
        for t in &self.trials {
            for (k, v) in &t.metrics {
                csv.push_str(&format!(
                    "{},{},{},{},{k},{v}\n",
                    t.scenario, t.n, t.arm, t.pair
                ));
            }
        }
        std::fs::write(dir.join("trials.csv"), csv)?;
        let mut csv = String::from("scenario,n,arm,metric,median,min,max,count\n");
        for r in self.summaries() {
            let s = r.summary;
            csv.push_str(&format!(
                "{},{},{},{},{},{},{},{}\n",
                r.scenario, r.n, r.arm, r.metric, s.median, s.min, s.max, s.count
            ));
        }
        std::fs::write(dir.join("summary.csv"), csv)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial(scenario: &str, n: usize, fires_per_s: f64) -> Trial {
        Trial {
            scenario: scenario.into(),
            interval_s: None,
            n,
            arm: "kopf-rs".into(),
            pair: 0,
            started_unix: 0,
            load_before: [0.0; 3],
            load_after: [0.0; 3],
            metrics: [("fires_per_s".to_owned(), fires_per_s)].into(),
            lateness_ms: Vec::new(),
            notes: Vec::new(),
            error: None,
        }
    }

    /// Scenario 7 at another interval is a group of its own, after the 1 s one of its kind.
    #[test]
    fn each_interval_of_scenario_7_is_its_own_group_in_order() {
        let r = Results {
            machine: Machine::default(),
            trials: vec![
                trial("inproc-daemons", 1000, 1000.0),
                trial("inproc-timers@10s", 1000, 100.0),
                trial("inproc-timers@2.5s", 1000, 400.0),
                trial("inproc-timers", 1000, 1000.0),
                trial("inproc-timers", 100, 100.0),
                trial("shards", 100, 100.0),
                trial("timers", 100, 100.0),
            ],
        };
        let groups = r.groups();
        let groups: Vec<(&str, usize)> = groups.iter().map(|(s, n)| (s.as_str(), *n)).collect();
        assert_eq!(
            groups,
            [
                ("timers", 100),
                ("inproc-timers", 100),
                ("inproc-timers", 1000),
                ("inproc-timers@2.5s", 1000),
                ("inproc-timers@10s", 1000),
                ("inproc-daemons", 1000),
                ("shards", 100),
            ]
        );
        assert_eq!(
            r.values("inproc-timers", 1000, "kopf-rs", "fires_per_s"),
            [1000.0]
        );
        assert_eq!(
            r.values("inproc-timers@10s", 1000, "kopf-rs", "fires_per_s"),
            [100.0]
        );
    }
}
