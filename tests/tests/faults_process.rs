//! The operator as a separate process, killed and signalled: SIGKILL mid-run and a restart
//! (daemons resume once per object, objects deleted meanwhile are finalized without their
//! daemons being started, no instance runs twice), and SIGTERM during a mass deletion (exit 0
//! within the shutdown timeout, every daemon sees its stop reason, a restarted operator
//! finishes the deletion).
//!
//! No libtest harness: this binary is both the test (the parent) and, when
//! `KOPF_FAULTS_CHILD_NAMESPACE` is set, the operator under test (the child). The child's
//! handlers append what they do to the file named by `KOPF_FAULTS_CHILD_LOG`, one line per
//! event: `start|stop|fire <name> <uid> <pid> [<stop reason>]`.

mod faults_common;
mod process_common;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use faults_common::*;
use kopf_examples::crd::KopfExample;
use kopf_runtime::{LogFormat, Operator, Registry, Stopper, daemon, timer};
use kopf_tests::{test_config, wait_until};
use kube::ResourceExt as _;
use kube::api::{DeleteParams, PostParams};
use process_common::{Child, Entry, Test, append_line, read_log, run_child, run_tests};

const CHILD_ENV: &str = "KOPF_FAULTS_CHILD_NAMESPACE";
/// Set in the child: build the client from the environment (`KUBECONFIG`), as a user's `main`
/// does, instead of from the test's configuration.
const INFER_ENV: &str = "KOPF_FAULTS_CHILD_INFER";
const LOG_ENV: &str = "KOPF_FAULTS_CHILD_LOG";
const DAEMON: &str = "fp-daemon";
const TIMER: &str = "fp-timer";
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);
/// A spec value that must never appear in the operator's logs.
const SPEC_MARKER: &str = "spec-contents-must-not-be-logged";

fn append(kind: &str, obj: &KopfExample, extra: &str) {
    let Some(path) = std::env::var_os(LOG_ENV) else {
        return;
    };
    let uid = obj.metadata.uid.clone().unwrap_or_default();
    let line = format!(
        "{kind} {} {uid} {} {extra}",
        obj.name_any(),
        std::process::id()
    );
    append_line(Path::new(&path), &line);
}

/// Records `stop … dropped` if the daemon's future is dropped before it saw its stop.
struct Dropped(Option<Arc<KopfExample>>);

impl Drop for Dropped {
    fn drop(&mut self) {
        if let Some(obj) = self.0.take() {
            append("stop", &obj, "dropped");
        }
    }
}

/// With a `cancellation_backoff`, the daemon is never cancelled before it sees its stop
/// request: every instance must log exactly one stop with its reason.
#[daemon(id = "fp-daemon", cancellation_backoff = "5s")]
async fn fp_daemon(obj: Arc<KopfExample>, stopper: Stopper) {
    append("start", &obj, "");
    let mut guard = Dropped(Some(Arc::clone(&obj)));
    stopper.stopped().await;
    guard.0 = None;
    append("stop", &obj, &stopper.reason().to_string());
}

#[timer(id = "fp-timer", interval = "1s")]
async fn fp_timer(obj: Arc<KopfExample>) -> Result<u32, std::io::Error> {
    append("fire", &obj, "");
    Ok(std::process::id())
}

/// The child: an operator for one namespace, until SIGTERM (or SIGKILL).
fn child(namespace: String) -> ExitCode {
    run_child(async {
        let registry = Registry::from_inventory()?.select(&[DAEMON, TIMER])?;
        let mut builder = Operator::builder()
            .name("kopf-tests")
            .log_format(LogFormat::Human);
        if std::env::var_os(INFER_ENV).is_none() {
            builder = builder.kube_config(test_config().await?);
        }
        builder
            .namespaces([namespace])
            .registry(&registry)
            .shutdown_timeout(SHUTDOWN_TIMEOUT)
            .run()
            .await?;
        Ok(())
    })
}

fn count(log: &[Entry], kind: &str, name: &str, pid: u32) -> usize {
    log.iter()
        .filter(|e| e.kind == kind && e.name == name && e.pid == pid)
        .count()
}

/// Invariant 1 over the log: per object uid, starts and stops alternate (a killed process's
/// instances end with it, so a start by a new process closes them).
fn assert_no_overlap_in(log: &[Entry]) {
    let mut running: BTreeMap<&str, Option<u32>> = BTreeMap::new();
    for entry in log {
        let slot = running.entry(entry.uid.as_str()).or_default();
        match entry.kind.as_str() {
            "start" => {
                if let Some(pid) = *slot {
                    assert_ne!(
                        pid, entry.pid,
                        "two daemons at once for {}: {log:?}",
                        entry.name
                    );
                }
                *slot = Some(entry.pid);
            }
            "stop" => *slot = None,
            _ => {}
        }
    }
}

async fn spawn_child(namespace: &str, log: &Path, output: &Path) -> anyhow::Result<Child> {
    spawn_child_with(namespace, log, output, None).await
}

/// Spawns the operator child; with `kubeconfig`, it finds its client through `KUBECONFIG`.
async fn spawn_child_with(
    namespace: &str,
    log: &Path,
    output: &Path,
    kubeconfig: Option<&Path>,
) -> anyhow::Result<Child> {
    let mut env = vec![
        (CHILD_ENV, OsString::from(namespace)),
        (LOG_ENV, log.as_os_str().to_owned()),
    ];
    if let Some(path) = kubeconfig {
        env.push((INFER_ENV, OsString::from("1")));
        env.push(("KUBECONFIG", path.as_os_str().to_owned()));
    }
    Child::spawn(&env, output)
}

/// Waits until `pid` logged `kind` for every one of `names`.
async fn wait_logged(log: &Path, kind: &str, names: &[String], pid: u32, timeout: Duration) {
    let what = format!("`{kind}` by {pid} for {names:?}");
    wait_until(what, timeout, || async {
        let entries = read_log(log);
        names.iter().all(|n| count(&entries, kind, n, pid) >= 1)
    })
    .await;
}

/// Waits until the children writing to `output` have started `n` operators in all.
async fn wait_for_operators(output: &Path, n: usize) {
    let what = format!("{n} operators started (see {})", output.display());
    wait_until(what, PROMPTLY, || async {
        let text = std::fs::read_to_string(output).unwrap_or_default();
        text.matches("the operator has started").count() >= n
    })
    .await;
}

struct Paths {
    log: PathBuf,
    output: PathBuf,
}

fn paths(test: &str) -> anyhow::Result<Paths> {
    let dir = std::env::temp_dir().join(format!("kopf-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(Paths {
        log: dir.join("handlers.log"),
        output: dir.join("operator.log"),
    })
}

async fn sigkill_mid_run_and_restart() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let files = paths("sigkill")?;
    let mut first = spawn_child(ns.name(), &files.log, &files.output).await?;
    let names = create_many(&api, "killed", 6).await?;
    wait_logged(&files.log, "start", &names, first.pid, PROMPTLY).await;
    wait_finalized(&api, &names).await;

    first.process.start_kill()?;
    assert_eq!(
        first.exit_code(PROMPTLY).await?,
        None,
        "not killed by a signal"
    );
    // While no operator runs: two objects are deleted, one is created.
    let (deleted, survivors) = names.split_at(2);
    for name in deleted {
        api.delete(name, &DeleteParams::default()).await?;
    }
    let mut meanwhile = example("created-meanwhile");
    meanwhile.spec.field = Some(SPEC_MARKER.to_owned());
    api.create(&PostParams::default(), &meanwhile).await?;
    // Positive control: with no operator, the finalizer holds the deleted objects.
    for name in deleted {
        assert!(
            api.get_opt(name).await?.is_some(),
            "{name} went without an operator"
        );
    }

    let mut second = spawn_child(ns.name(), &files.log, &files.output).await?;
    let restarted = Instant::now();
    assert_gone(&api, deleted).await;
    let mut alive = survivors.to_vec();
    alive.push("created-meanwhile".to_owned());
    wait_logged(&files.log, "start", &alive, second.pid, PROMPTLY).await;
    let fire_deadline = Duration::from_secs(1) + TIMER_SLACK;
    wait_logged(&files.log, "fire", &alive, second.pid, fire_deadline).await;
    println!(
        "sigkill: survivors resumed {:?} after the restart",
        restarted.elapsed()
    );

    second.signal("-TERM").await?;
    let code = second
        .exit_code(SHUTDOWN_TIMEOUT + Duration::from_secs(5))
        .await?;
    assert_eq!(code, Some(0), "see {}", files.output.display());
    let log = read_log(&files.log);
    for name in &alive {
        assert_eq!(
            count(&log, "start", name, second.pid),
            1,
            "{name} resumed more than once"
        );
        assert_eq!(
            count(&log, "stop", name, second.pid),
            1,
            "{name}: no stop seen"
        );
    }
    for name in deleted {
        assert_eq!(
            count(&log, "start", name, second.pid),
            0,
            "{name} restarted while deleting"
        );
    }
    assert!(
        log.iter()
            .filter(|e| e.kind == "stop" && e.pid == second.pid)
            .all(|e| e.detail.contains("operator exiting")),
        "{log:?}"
    );
    assert_no_overlap_in(&log);
    // Finalizers stay on the survivors after a graceful exit (their daemons resume later).
    wait_finalized(&api, &alive).await;
    // No object contents in the logs at the default level (the object was served: see above).
    let output = std::fs::read_to_string(&files.output)?;
    assert!(
        !output.contains(SPEC_MARKER),
        "object contents logged: {}",
        files.output.display()
    );
    ns.cleanup().await
}

async fn sigterm_during_a_mass_deletion() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let files = paths("sigterm")?;
    let mut first = spawn_child(ns.name(), &files.log, &files.output).await?;
    let names = create_many(&api, "mass", 20).await?;
    wait_logged(&files.log, "start", &names, first.pid, PROMPTLY).await;
    wait_finalized(&api, &names).await;

    delete_all(&api, &names).await?;
    let signalled = Instant::now();
    first.signal("-TERM").await?;
    let code = first
        .exit_code(SHUTDOWN_TIMEOUT + Duration::from_secs(5))
        .await?;
    println!("sigterm: exited {:?} after the signal", signalled.elapsed());
    assert_eq!(code, Some(0), "see {}", files.output.display());
    let log = read_log(&files.log);
    for name in &names {
        assert_eq!(
            count(&log, "stop", name, first.pid),
            1,
            "{name}: no stop seen"
        );
    }
    let dropped: Vec<&Entry> = log.iter().filter(|e| e.detail == "dropped").collect();
    assert!(
        dropped.is_empty(),
        "cancelled before seeing the stop: {dropped:?}"
    );

    // Whatever the first one left is finished by the next one, without starting daemons.
    let mut second = spawn_child(ns.name(), &files.log, &files.output).await?;
    assert_gone(&api, &names).await;
    // Signal it only once it runs (before, SIGTERM would end it with the default action).
    wait_for_operators(&files.output, 2).await;
    second.signal("-TERM").await?;
    let code = second
        .exit_code(SHUTDOWN_TIMEOUT + Duration::from_secs(5))
        .await?;
    assert_eq!(code, Some(0), "see {}", files.output.display());
    let log = read_log(&files.log);
    for name in &names {
        assert_eq!(
            count(&log, "start", name, second.pid),
            0,
            "{name} restarted while deleting"
        );
    }
    assert_no_overlap_in(&log);
    ns.cleanup().await
}

/// Runs the child with `kubeconfig` and returns its exit code and output; it must exit by
/// itself within [`PROMPTLY`].
async fn run_with_kubeconfig(
    test: &str,
    kubeconfig: &Path,
) -> anyhow::Result<(Option<i32>, String)> {
    let files = paths(test)?;
    let mut child =
        spawn_child_with("default", &files.log, &files.output, Some(kubeconfig)).await?;
    let code = child.exit_code(PROMPTLY).await?;
    Ok((code, std::fs::read_to_string(&files.output)?))
}

async fn an_unreadable_or_invalid_kubeconfig_is_a_clear_error() -> anyhow::Result<()> {
    let files = paths("kubeconfig")?;
    let missing = files.log.with_file_name("no-such-kubeconfig");
    let (code, output) = run_with_kubeconfig("kubeconfig-missing", &missing).await?;
    assert_eq!(code, Some(2), "{output}");
    assert!(
        output.contains("no-such-kubeconfig"),
        "the path is not named: {output}"
    );
    println!(
        "unreadable kubeconfig: {}",
        output.trim_end().lines().last().unwrap_or_default()
    );

    let garbage = files.log.with_file_name("garbage-kubeconfig");
    std::fs::write(&garbage, "clusters: [ { this is: not yaml")?;
    let (code, output) = run_with_kubeconfig("kubeconfig-garbage", &garbage).await?;
    assert_eq!(code, Some(2), "{output}");
    assert!(
        output.to_lowercase().contains("kubeconfig"),
        "not named as the cause: {output}"
    );
    println!(
        "invalid kubeconfig: {}",
        output.trim_end().lines().last().unwrap_or_default()
    );
    Ok(())
}

/// Writes a copy of the test kubeconfig that authenticates only with `token`.
fn kubeconfig_with_token(path: &Path, token: &str) -> anyhow::Result<()> {
    let good = std::env::var_os("KUBECONFIG").ok_or_else(|| anyhow::anyhow!("KUBECONFIG unset"))?;
    let mut config: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(good)?)?;
    for user in config["users"].as_sequence_mut().into_iter().flatten() {
        user["user"] = serde_yaml::to_value(serde_json::json!({ "token": token }))?;
    }
    std::fs::write(path, serde_yaml::to_string(&config)?)?;
    Ok(())
}

/// Writes a copy of the test kubeconfig whose server is `url`.
fn kubeconfig_with_server(path: &Path, url: &str) -> anyhow::Result<()> {
    let good = std::env::var_os("KUBECONFIG").ok_or_else(|| anyhow::anyhow!("KUBECONFIG unset"))?;
    let mut config: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(good)?)?;
    for cluster in config["clusters"].as_sequence_mut().into_iter().flatten() {
        cluster["cluster"]["server"] = serde_yaml::Value::from(url);
    }
    std::fs::write(path, serde_yaml::to_string(&config)?)?;
    Ok(())
}

/// An API server that does not answer (a closed port): the operator says so in a few lines of
/// its own — not an error per connection attempt from kube's client (~60 in 10 s before) — and,
/// writing to a file, without terminal colours.
async fn an_unreachable_api_server_is_reported_in_a_few_plain_lines() -> anyhow::Result<()> {
    let files = paths("unreachable")?;
    let kubeconfig = files.log.with_file_name("unreachable-kubeconfig");
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    kubeconfig_with_server(&kubeconfig, &format!("https://{closed}"))?;
    let mut child =
        spawn_child_with("default", &files.log, &files.output, Some(&kubeconfig)).await?;
    let read = || std::fs::read_to_string(&files.output).unwrap_or_default();
    // Positive control: the operator reports the outage…
    kopf_tests::wait_until(
        "the operator to report the unreachable server",
        PROMPTLY,
        || async { read().contains("cannot discover") },
    )
    .await;
    // …and over the next 10 s of retries says nothing more about it.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let _ = child.signal("-TERM").await;
    let code = child
        .exit_code(SHUTDOWN_TIMEOUT + Duration::from_secs(5))
        .await?;
    let output = read();
    assert!(code.is_some(), "ended by a signal: {output}");
    let noisy: Vec<&str> = output
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    assert!(
        noisy.len() <= 3,
        "{} warnings and errors in 10 s:\n{output}",
        noisy.len()
    );
    assert!(
        !output.contains("kube_client"),
        "kube's client logs:\n{output}"
    );
    assert!(
        !output.contains('\u{1b}'),
        "terminal colours in a file:\n{output}"
    );
    println!(
        "unreachable server: {}",
        noisy.first().copied().unwrap_or_default()
    );
    Ok(())
}

/// Runs the operator child with `kubeconfig` until its output has a line with all of
/// `needles`, then SIGTERMs it; returns that line.
async fn reported_line(
    test: &str,
    namespace: &str,
    kubeconfig: &Path,
    needles: &[&str],
    secret: &str,
) -> anyhow::Result<String> {
    let files = paths(test)?;
    let mut child =
        spawn_child_with(namespace, &files.log, &files.output, Some(kubeconfig)).await?;
    let what = format!("the operator to report {needles:?}");
    let reported = kopf_tests::try_wait_for(what, PROMPTLY, || async {
        let output = std::fs::read_to_string(&files.output).unwrap_or_default();
        let line = output
            .lines()
            .find(|l| needles.iter().all(|n| l.contains(n)));
        line.map(str::to_owned)
            .ok_or_else(|| format!("output so far: {output}"))
    })
    .await;
    // Whether it exits on its own or keeps retrying, SIGTERM ends it cleanly.
    let _ = child.signal("-TERM").await;
    let code = child
        .exit_code(SHUTDOWN_TIMEOUT + Duration::from_secs(5))
        .await?;
    let line = reported?;
    assert!(code.is_some(), "ended by a signal");
    // The token is never logged (at the default level).
    let output = std::fs::read_to_string(&files.output)?;
    assert!(
        !output.contains(secret),
        "the token is in {}",
        files.output.display()
    );
    Ok(line)
}

async fn a_revoked_token_is_reported_as_unauthorized() -> anyhow::Result<()> {
    let files = paths("revoked")?;
    let revoked = files.log.with_file_name("revoked-kubeconfig");
    kubeconfig_with_token(&revoked, "revoked-token")?;
    let line = reported_line(
        "revoked",
        "default",
        &revoked,
        &[
            "kopf_runtime",
            "401",
            "Unauthorized",
            "credentials",
            "kopfexamples",
        ],
        "revoked-token",
    )
    .await?;
    println!("revoked token: {line}");
    Ok(())
}

async fn a_role_without_the_verbs_is_reported_as_forbidden() -> anyhow::Result<()> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;

    let (ns, _api) = example_namespace().await?;
    let accounts: kube::Api<ServiceAccount> = ns.api();
    let mut account = ServiceAccount::default();
    account.metadata.name = Some("no-verbs".to_owned());
    accounts.create(&PostParams::default(), &account).await?;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = accounts
        .create_token_request("no-verbs", &PostParams::default(), &request)
        .await?
        .status
        .and_then(|s| s.token)
        .unwrap_or_default();
    anyhow::ensure!(!token.is_empty(), "no token issued");
    let files = paths("forbidden")?;
    let kubeconfig = files.log.with_file_name("no-verbs-kubeconfig");
    kubeconfig_with_token(&kubeconfig, &token)?;
    // Authenticated (not 401) but not permitted: the error names 403 and the resource.
    let needles = ["kopf_runtime", "403", "kopfexamples", "cannot list"];
    let line = reported_line("forbidden", ns.name(), &kubeconfig, &needles, &token).await?;
    println!("role without verbs: {line}");
    ns.cleanup().await
}

fn main() -> ExitCode {
    if let Ok(namespace) = std::env::var(CHILD_ENV) {
        return child(namespace);
    }
    let tests: [(&str, Test); 6] = [
        ("sigkill_mid_run_and_restart", || {
            Box::pin(sigkill_mid_run_and_restart())
        }),
        ("sigterm_during_a_mass_deletion", || {
            Box::pin(sigterm_during_a_mass_deletion())
        }),
        (
            "an_unreadable_or_invalid_kubeconfig_is_a_clear_error",
            || Box::pin(an_unreadable_or_invalid_kubeconfig_is_a_clear_error()),
        ),
        ("a_revoked_token_is_reported_as_unauthorized", || {
            Box::pin(a_revoked_token_is_reported_as_unauthorized())
        }),
        ("a_role_without_the_verbs_is_reported_as_forbidden", || {
            Box::pin(a_role_without_the_verbs_is_reported_as_forbidden())
        }),
        (
            "an_unreachable_api_server_is_reported_in_a_few_plain_lines",
            || Box::pin(an_unreachable_api_server_is_reported_in_a_few_plain_lines()),
        ),
    ];
    run_tests(&tests)
}
