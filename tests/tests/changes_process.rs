//! A SIGKILL between two handlers of one change: the finished one is not run again, the other
//! is. Two `#[on_create]` handlers of one kind, `first` then `second`; the operator, a child
//! process, is killed while `second` runs (after `first`'s success is on the object); the
//! restarted operator runs `second` only, and ends the change (progress removed, diff base
//! written).
//!
//! This binary is both the test (the parent) and, when `KOPF_CHANGES_CHILD_NAMESPACE` is set,
//! the operator (a child): it runs with libtest's harness, and the child is this binary
//! started again without arguments, where the test returns at once and [`child_operator`] runs
//! the operator until it is signalled. The handlers append to the file named by
//! `KOPF_CHANGES_CHILD_LOG` one line per run: `first|second <name> <uid> <pid>`.

mod faults_common;
mod process_common;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use faults_common::{PROMPTLY, example, example_namespace};
use kopf_examples::crd::KopfExample;
use kopf_runtime::{HandlerError, LogFormat, Operator, Registry, on_create};
use kopf_tests::{test_config, try_wait_for};
use kube::ResourceExt as _;
use kube::api::{Api, PostParams};
use process_common::{Child, Entry, append_line, read_log, run_child};
use serde_json::Value;

const CHILD_ENV: &str = "KOPF_CHANGES_CHILD_NAMESPACE";
const LOG_ENV: &str = "KOPF_CHANGES_CHILD_LOG";
/// Set in the first child only: there `second` never returns (it is killed in flight).
const BLOCK_ENV: &str = "KOPF_CHANGES_CHILD_BLOCK";
const FIRST: &str = "first";
const SECOND: &str = "second";
/// The operator's annotations (its name is `kopf-tests`).
const PROGRESS: &str = "kopf.dev/kopf-tests.progress";
const BASE: &str = "kopf.dev/kopf-tests.last-handled";
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);
const NAME: &str = "two-steps";

fn append(kind: &str, obj: &KopfExample) {
    let Some(path) = std::env::var_os(LOG_ENV) else {
        return;
    };
    let uid = obj.metadata.uid.clone().unwrap_or_default();
    let line = format!("{kind} {} {uid} {}", obj.name_any(), std::process::id());
    append_line(Path::new(&path), &line);
}

/// Returns at once; its result (the process id) is stored under `status.first`.
#[on_create(id = "first")]
async fn first(obj: Arc<KopfExample>) -> Result<u32, HandlerError> {
    append(FIRST, &obj);
    Ok(std::process::id())
}

/// Never returns in the first child (it is killed there); returns at once in the second.
#[on_create(id = "second")]
async fn second(obj: Arc<KopfExample>) -> Result<u32, HandlerError> {
    append(SECOND, &obj);
    if std::env::var_os(BLOCK_ENV).is_some() {
        std::future::pending::<()>().await;
    }
    Ok(std::process::id())
}

/// The child: an operator for one namespace, until SIGKILL or SIGTERM. In the parent's run
/// (no `KOPF_CHANGES_CHILD_NAMESPACE`) it does nothing.
#[test]
fn child_operator() -> ExitCode {
    let Ok(namespace) = std::env::var(CHILD_ENV) else {
        return ExitCode::SUCCESS;
    };
    run_child(async {
        let registry = Registry::from_inventory()?.select(&[FIRST, SECOND])?;
        Operator::builder()
            .name("kopf-tests")
            .log_format(LogFormat::Human)
            .kube_config(test_config().await?)
            .namespaces([namespace])
            .registry(&registry)
            .shutdown_timeout(SHUTDOWN_TIMEOUT)
            .run()
            .await?;
        Ok(())
    })
}

/// Starts the operator child; with `block`, its `second` handler never returns.
fn spawn_child(namespace: &str, dir: &Path, block: bool) -> anyhow::Result<Child> {
    let mut env = vec![
        (CHILD_ENV, OsString::from(namespace)),
        (LOG_ENV, dir.join("handlers.log").into_os_string()),
    ];
    if block {
        env.push((BLOCK_ENV, OsString::from("1")));
    }
    Child::spawn(&env, &dir.join("operator.log"))
}

/// The runs of `kind` by `pid` in `log`.
fn runs(log: &[Entry], kind: &str, pid: u32) -> usize {
    log.iter()
        .filter(|e| e.kind == kind && e.name == NAME && e.pid == pid)
        .count()
}

/// The first value under the key `key`, at any depth of `json`.
fn find_key<'a>(json: &'a Value, key: &str) -> Option<&'a Value> {
    match json {
        Value::Object(map) => map
            .get(key)
            .or_else(|| map.values().find_map(|v| find_key(v, key))),
        Value::Array(items) => items.iter().find_map(|v| find_key(v, key)),
        _ => None,
    }
}

/// Whether the handler `id`'s record in the progress `json` is in the state `done`.
fn is_done(json: &Value, id: &str) -> bool {
    find_key(json, id)
        .and_then(Value::as_object)
        .is_some_and(|record| record.values().any(|v| v == "done"))
}

/// The annotation `key` of `obj`.
fn annotation<'a>(obj: &'a KopfExample, key: &str) -> Option<&'a str> {
    obj.annotations().get(key).map(String::as_str)
}

/// The result stored under `status.<id>`.
fn result_of(obj: &KopfExample, id: &str) -> Option<u64> {
    obj.status.as_ref()?.0.get(id)?.as_u64()
}

#[tokio::test]
async fn a_sigkill_between_two_handlers_reruns_only_the_unfinished_one() -> anyhow::Result<()> {
    if std::env::var_os(CHILD_ENV).is_some() {
        return Ok(()); // this process is the operator child: `child_operator` runs it
    }
    let (ns, api): (_, Api<KopfExample>) = example_namespace().await?;
    let dir = std::env::temp_dir().join(format!("kopf-changes-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let log_path: PathBuf = dir.join("handlers.log");
    let output = dir.join("operator.log");

    let mut one = spawn_child(ns.name(), &dir, true)?;
    api.create(&PostParams::default(), &example(NAME)).await?;
    // Positive control: the record captures runs (`first`'s line is required here).
    let what = format!("`first` done and `second` started by {}", one.pid);
    try_wait_for(what, PROMPTLY, || async {
        let log = read_log(&log_path);
        if runs(&log, FIRST, one.pid) == 1 && runs(&log, SECOND, one.pid) == 1 {
            Ok(())
        } else {
            Err(format!("record: {log:?} (see {})", output.display()))
        }
    })
    .await?;

    one.signal("-KILL").await?;
    let code = one.exit_code(PROMPTLY).await?;
    anyhow::ensure!(
        code.is_none(),
        "not ended by the signal: exit code {code:?}"
    );
    let killed = Instant::now();

    // What the killed operator left: `first` done (with its result), `second` not; no base.
    let left = api.get(NAME).await?;
    let progress = annotation(&left, PROGRESS)
        .ok_or_else(|| anyhow::anyhow!("no progress annotation: {:?}", left.annotations()))?;
    let json: Value = serde_json::from_str(progress)?;
    anyhow::ensure!(is_done(&json, FIRST), "`first` not done in {progress}");
    anyhow::ensure!(!is_done(&json, SECOND), "`second` done in {progress}");
    anyhow::ensure!(
        annotation(&left, BASE).is_none(),
        "the change is over already: {:?}",
        left.annotations()
    );
    anyhow::ensure!(
        result_of(&left, FIRST) == Some(u64::from(one.pid)),
        "`first`'s result is not stored: {:?}",
        left.status
    );

    let mut two = spawn_child(ns.name(), &dir, false)?;
    let what = format!(
        "`second` run by {} and the change over, with its result",
        two.pid
    );
    try_wait_for(what, PROMPTLY, || async {
        let ran = runs(&read_log(&log_path), SECOND, two.pid) >= 1;
        let obj = api.get(NAME).await.map_err(|e| e.to_string())?;
        let over = annotation(&obj, PROGRESS).is_none() && annotation(&obj, BASE).is_some();
        // With a status subresource, the result is a write after the annotations'.
        let stored = result_of(&obj, SECOND) == Some(u64::from(two.pid));
        if ran && over && stored {
            Ok(())
        } else {
            Err(format!(
                "second ran: {ran}; annotations: {:?}; status: {:?} (see {})",
                obj.annotations(),
                obj.status,
                output.display()
            ))
        }
    })
    .await?;
    println!(
        "the restarted operator ended the change {:?} after the kill",
        killed.elapsed()
    );

    // The record is final once the operator has exited.
    two.signal("-TERM").await?;
    let code = two
        .exit_code(SHUTDOWN_TIMEOUT + Duration::from_secs(5))
        .await?;
    anyhow::ensure!(
        code == Some(0),
        "exit code {code:?}: see {}",
        output.display()
    );
    let log = read_log(&log_path);
    let first_runs: Vec<u32> = (log.iter().filter(|e| e.kind == FIRST))
        .map(|e| e.pid)
        .collect();
    anyhow::ensure!(
        first_runs == [one.pid],
        "`first` ran in {first_runs:?}: {log:?}"
    );
    let second_runs: Vec<u32> = (log.iter().filter(|e| e.kind == SECOND))
        .map(|e| e.pid)
        .collect();
    anyhow::ensure!(
        second_runs == [one.pid, two.pid],
        "`second` ran in {second_runs:?}: {log:?}"
    );
    let done = api.get(NAME).await?;
    anyhow::ensure!(
        result_of(&done, FIRST) == Some(u64::from(one.pid))
            && result_of(&done, SECOND) == Some(u64::from(two.pid)),
        "results: {:?}",
        done.status
    );

    std::fs::remove_dir_all(&dir)?;
    ns.cleanup().await
}
