//! Cron timers across crashes: the operator as a child process, SIGKILLed and restarted 20 times
//! while two every-5-seconds cron timers run for three objects: one with `missed = "skip"`, one
//! with `missed = "run_once"`. Half of the kills come just after an occurrence ran (once its
//! record is on the object; the operator is restarted at once, before the next occurrence), half
//! just before the next one (restarted after it: it falls into the downtime).
//!
//! Checked over the whole run, per object: no occurrence of either timer ran twice; the
//! `run_once` timer ran every occurrence from its first to its last (each downtime covered one,
//! caught up after the restart); the `skip` timer missed those (the positive control that the
//! downtimes covered occurrences).
//!
//! No libtest harness: this binary is both the test (the parent) and, when
//! `KOPF_CRON_CHILD_NAMESPACE` is set, the operator (a child). Lines of the shared log:
//! `skip|once <name> <uid> <pid> <occurrence>`. `KOPF_CRON_KILLS` sets the number of kills.

mod faults_common;
mod process_common;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use faults_common::*;
use kopf_examples::crd::KopfExample;
use kopf_runtime::{LogFormat, Occurrence, Operator, Registry, timer};
use kopf_tests::test_config;
use kube::ResourceExt as _;
use process_common::{Child, Entry, append_line, read_log, run_child, run_tests};

const CHILD_ENV: &str = "KOPF_CRON_CHILD_NAMESPACE";
const LOG_ENV: &str = "KOPF_CRON_CHILD_LOG";
const SKIP: &str = "cron-skip";
const ONCE: &str = "cron-once";
/// The schedules' period.
const PERIOD: u64 = 5;

fn append(kind: &str, obj: &KopfExample, occurrence: Occurrence) {
    let Some(path) = std::env::var_os(LOG_ENV) else {
        return;
    };
    let uid = obj.metadata.uid.clone().unwrap_or_default();
    let line = format!(
        "{kind} {} {uid} {} {}",
        obj.name_any(),
        std::process::id(),
        occurrence.0
    );
    append_line(Path::new(&path), &line);
}

#[timer(id = "cron-skip", cron = "*/5 * * * * *")]
async fn cron_skip(obj: Arc<KopfExample>, occurrence: Occurrence) {
    append("skip", &obj, occurrence);
}

#[timer(id = "cron-once", cron = "*/5 * * * * *", missed = "run_once")]
async fn cron_once(obj: Arc<KopfExample>, occurrence: Occurrence) {
    append("once", &obj, occurrence);
}

/// The child: an operator for one namespace, until SIGKILL (or SIGTERM).
fn child(namespace: String) -> ExitCode {
    run_child(async {
        let registry = Registry::from_inventory()?.select(&[SKIP, ONCE])?;
        Operator::builder()
            .name("kopf-tests")
            .log_format(LogFormat::Human)
            .kube_config(test_config().await?)
            .namespaces([namespace])
            .registry(&registry)
            .run()
            .await?;
        Ok(())
    })
}

/// The wall clock, in milliseconds since the epoch.
fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or_default())
        .unwrap_or_default()
}

/// Sleeps until the wall clock is `offset_ms` past the next multiple of the period.
async fn sleep_to_phase(offset_ms: u64) {
    let period = PERIOD * 1000;
    let now = wall_ms();
    let mut at = now - now % period + offset_ms;
    if at <= now {
        at += period;
    }
    tokio::time::sleep(Duration::from_millis(at - now)).await;
}

/// The occurrences each (kind, object) ran, with how often.
fn runs(log: &[Entry]) -> BTreeMap<(String, String), BTreeMap<String, usize>> {
    let mut runs: BTreeMap<(String, String), BTreeMap<String, usize>> = BTreeMap::new();
    for entry in log.iter().filter(|e| e.kind == "skip" || e.kind == "once") {
        let object = runs
            .entry((entry.kind.clone(), entry.name.clone()))
            .or_default();
        *object.entry(entry.detail.clone()).or_default() += 1;
    }
    runs
}

/// The operator and the shared log.
struct Run {
    dir: PathBuf,
    log: PathBuf,
    namespace: String,
    child: Child,
    spawned: usize,
}

impl Run {
    async fn start(namespace: &str) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("kopf-cron-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let log = dir.join("runs.log");
        let child = Self::spawn_child(namespace, &log, &dir, 0)?;
        Ok(Self {
            dir,
            log,
            namespace: namespace.to_owned(),
            child,
            spawned: 1,
        })
    }

    fn spawn_child(namespace: &str, log: &Path, dir: &Path, n: usize) -> anyhow::Result<Child> {
        let env = [
            (CHILD_ENV, OsString::from(namespace)),
            (LOG_ENV, log.as_os_str().to_owned()),
        ];
        Child::spawn(&env, &dir.join(format!("operator-{n}.log")))
    }

    /// Waits until the current child has run both timers for every object in `names`.
    async fn serving(&self, names: &[String]) {
        let pid = self.child.pid;
        let what = format!("operator {pid} to run both timers of {names:?}");
        kopf_tests::wait_until(what, PROMPTLY, || async {
            let log = read_log(&self.log);
            names.iter().all(|name| {
                ["skip", "once"].iter().all(|kind| {
                    log.iter()
                        .any(|e| e.kind == *kind && &e.name == name && e.pid == pid)
                })
            })
        })
        .await;
    }

    /// Whether every object carries the record of the latest occurrence each timer ran.
    async fn recorded(&self, api: &kube::Api<KopfExample>) -> anyhow::Result<bool> {
        let log = read_log(&self.log);
        for (kind, id) in [("skip", SKIP), ("once", ONCE)] {
            for object in api.list(&Default::default()).await? {
                let name = object.name_any();
                let latest = log
                    .iter()
                    .filter(|e| e.kind == kind && e.name == name)
                    .map(|e| e.detail.as_str())
                    .max();
                let key = format!("kopf.dev/kopf-tests.{id}.cron");
                if object.annotations().get(&key).map(String::as_str) != latest {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// SIGKILL the operator; restart it at once, or once the next occurrence has passed.
    async fn crash(&mut self, names: &[String], miss_one: bool) -> anyhow::Result<()> {
        self.child.signal("-KILL").await?;
        let _ = self.child.process.wait().await;
        if miss_one {
            sleep_to_phase(300).await;
        }
        self.child = Self::spawn_child(&self.namespace, &self.log, &self.dir, self.spawned)?;
        self.spawned += 1;
        self.serving(names).await;
        Ok(())
    }
}

async fn killed_across_occurrences_no_run_twice_none_forgotten() -> anyhow::Result<()> {
    let kills: usize = std::env::var("KOPF_CRON_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let (ns, api) = example_namespace().await?;
    let names = create_many(&api, "cron", 3).await?;
    let mut run = Run::start(ns.name()).await?;
    run.serving(&names).await;
    let mut after_a_run = 0;
    for round in 0..kills {
        let miss_one = round % 2 == 1;
        if miss_one {
            sleep_to_phase(PERIOD * 1000 - 700).await; // just before the next occurrence
        } else {
            // Just after an occurrence ran, once its record is on every object; the restarted
            // operator starts before the next one (`run_once` must not run this one again).
            loop {
                sleep_to_phase(600).await;
                if run.recorded(&api).await? {
                    break;
                }
            }
            after_a_run += 1;
        }
        run.crash(&names, miss_one).await?;
    }
    delete_all(&api, &names).await?;
    assert_gone(&api, &names).await;
    run.child.signal("-TERM").await?;
    let code = run.child.exit_code(PROMPTLY).await?;
    anyhow::ensure!(code == Some(0), "the operator exited with {code:?}");
    let log = read_log(&run.log);
    let mut twice = Vec::new();
    let (mut forgotten, mut skipped) = (Vec::new(), 0);
    for ((kind, name), occurrences) in runs(&log) {
        twice.extend(
            occurrences
                .iter()
                .filter(|(_, n)| **n > 1)
                .map(|(o, n)| format!("{kind} {name} {o} ran {n} times")),
        );
        let times: BTreeSet<u64> = occurrences
            .keys()
            .filter_map(|o| o.parse::<jiff::Timestamp>().ok())
            .map(|t| u64::try_from(t.as_second()).unwrap_or_default())
            .collect();
        let (Some(first), Some(last)) = (times.first(), times.last()) else {
            anyhow::bail!("{kind} {name} never ran");
        };
        let gaps = (*first..=*last)
            .step_by(usize::try_from(PERIOD)?)
            .filter(|t| !times.contains(t))
            .count();
        match kind.as_str() {
            "once" if gaps > 0 => forgotten.push(format!("{name}: {gaps} occurrences")),
            "skip" => skipped += gaps,
            _ => {}
        }
    }
    anyhow::ensure!(twice.is_empty(), "ran twice: {twice:?}");
    anyhow::ensure!(forgotten.is_empty(), "run_once forgot: {forgotten:?}");
    anyhow::ensure!(
        skipped >= kills / 2 * names.len(),
        "the downtimes covered only {skipped} occurrences"
    );
    println!(
        "{kills} kills ({after_a_run} just after a run): {} runs, 0 twice, 0 forgotten with \
         run_once; {skipped} skipped with skip",
        log.len()
    );
    std::fs::remove_dir_all(&run.dir)?;
    ns.cleanup().await
}

fn main() -> ExitCode {
    if let Ok(namespace) = std::env::var(CHILD_ENV) {
        return child(namespace);
    }
    run_tests(&[(
        "killed_across_occurrences_no_run_twice_none_forgotten",
        || Box::pin(killed_across_occurrences_no_run_twice_none_forgotten()),
    )])
}
