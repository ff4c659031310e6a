//! Handler faults against the real API server: daemons that panic, timers that fail on every
//! call, an async daemon that ignores its stop signal, a blocking daemon that never checks its
//! flag, and one whose label filter flaps while its abandoned thread still runs. Each is
//! contained: the operator and the other handlers keep running, deletion completes, and the
//! four invariants of `faults_common` hold.

mod faults_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use faults_common::*;
use kopf_examples::crd::KopfExample;
use kopf_runtime::{Data, Stopper, daemon, timer};
use kopf_tests::wait_until;
use kube::ResourceExt as _;
use kube::api::{Api, Patch, PatchParams, PostParams};

const HEALTHY_DAEMON: &str = "fh-daemon";
const HEALTHY_TIMER: &str = "fh-timer";
const PANICS: &str = "fh-panics";
const ERRORS: &str = "fh-errors";
const IGNORES_STOP: &str = "fh-ignores-stop";
const BLOCKING: &str = "fh-blocking";
const FLAPPING: &str = "fh-flapping";
const INTERVAL: Duration = Duration::from_secs(1);

#[daemon(id = "fh-daemon")]
async fn fh_daemon(obj: Arc<KopfExample>, stopper: Stopper, log: Data<InstanceLog>) {
    let _instance = log.enter(&obj, HEALTHY_DAEMON);
    stopper.stopped().await;
}

#[timer(id = "fh-timer", interval = "1s")]
async fn fh_timer(obj: Arc<KopfExample>, log: Data<InstanceLog>) -> Result<usize, std::io::Error> {
    let _instance = log.enter(&obj, HEALTHY_TIMER);
    log.fire(&obj);
    Ok(log.fires(&obj.name_any()))
}

#[daemon(id = "fh-panics", backoff = "1s")]
async fn fh_panics(obj: Arc<KopfExample>, log: Data<InstanceLog>) {
    let _instance = log.enter(&obj, PANICS);
    tokio::task::yield_now().await;
    panic!("fh-panics: a deliberate panic for {}", obj.name_any());
}

#[timer(id = "fh-errors", interval = "1s", backoff = "1s")]
async fn fh_errors(obj: Arc<KopfExample>, log: Data<InstanceLog>) -> Result<u32, std::io::Error> {
    let _instance = log.enter(&obj, ERRORS);
    Err(std::io::Error::other(format!(
        "fh-errors: fails every time for {}",
        obj.name_any()
    )))
}

#[daemon(id = "fh-ignores-stop", cancellation_timeout = "1s")]
async fn fh_ignores_stop(obj: Arc<KopfExample>, log: Data<InstanceLog>) {
    let _instance = log.enter(&obj, IGNORES_STOP);
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Lets the blocking daemons return (at the end of the test that abandons them).
static RELEASE_BLOCKING: AtomicBool = AtomicBool::new(false);

#[daemon(id = "fh-blocking", cancellation_timeout = "1s")]
#[allow(clippy::needless_pass_by_value)] // handler parameters are injected by value
fn fh_blocking(obj: Arc<KopfExample>, log: Data<InstanceLog>) {
    let _instance = log.enter(&obj, BLOCKING);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !RELEASE_BLOCKING.load(Ordering::SeqCst) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Lets the flapping daemon's first instance return.
static RELEASE_FLAPPING: AtomicBool = AtomicBool::new(false);

#[daemon(id = "fh-flapping", labels(run = "yes"), cancellation_timeout = "1s")]
#[allow(clippy::needless_pass_by_value)] // handler parameters are injected by value
fn fh_flapping(obj: Arc<KopfExample>, log: Data<InstanceLog>) {
    let _instance = log.enter(&obj, FLAPPING);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !RELEASE_FLAPPING.load(Ordering::SeqCst) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
}

async fn set_run_label(api: &Api<KopfExample>, name: &str, run: &str) -> anyhow::Result<()> {
    let patch = serde_json::json!({"metadata": {"labels": {"run": run}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

fn thread_waits(op: &kopf_runtime::Operator) -> u64 {
    op.stats()
        .kinds
        .iter()
        .map(|k| k.supervisor.thread_waits)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_daemon_abandoned_by_a_flapping_filter_never_runs_twice() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let proxy = start_proxy().await?;
    let log = InstanceLog::default();
    let op = operator_via(&proxy, &ns, &[FLAPPING, HEALTHY_DAEMON], &log)?
        .start()
        .await?;
    let mut flap = example("flap");
    flap.metadata.labels = Some([("run".to_owned(), "yes".to_owned())].into());
    api.create(&PostParams::default(), &flap).await?;
    log.wait_started("flap", FLAPPING, 1).await;

    // Off: signalled, then abandoned after its cancellation_timeout while its thread runs on.
    set_run_label(&api, "flap", "no").await?;
    wait_until("the daemon to be abandoned", PROMPTLY, || async {
        op.stats()
            .kinds
            .iter()
            .map(|k| k.supervisor.daemons_abandoned)
            .sum::<u64>()
            == 1
    })
    .await;
    assert_eq!(thread_waits(&op), 0, "positive control: nothing waits yet");
    // On again, and flapping: a respawn is wanted, and waits for the abandoned thread.
    for run in ["yes", "no", "yes", "no", "yes"] {
        set_run_label(&api, "flap", run).await?;
    }
    wait_until("the respawn to wait for the thread", PROMPTLY, || async {
        thread_waits(&op) >= 1
    })
    .await;
    // The supervisor has seen the re-match and still runs nothing beside the thread.
    api.create(&PostParams::default(), &example("control"))
        .await?;
    log.wait_started("control", HEALTHY_DAEMON, 1).await;
    assert_eq!(
        log.starts("flap", FLAPPING),
        1,
        "a second thread beside the abandoned one"
    );
    assert_eq!(
        log.running(),
        3,
        "the abandoned thread and the healthy daemons of both objects"
    );

    RELEASE_FLAPPING.store(true, Ordering::SeqCst);
    log.wait_started("flap", FLAPPING, 2).await; // the respawn, once the thread returned
    assert_no_overlap(&log);
    finish(&op, &api, &log, &["flap".to_owned(), "control".to_owned()]).await?;
    op.shutdown().await;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panics_and_failing_timers_are_retried_and_contained() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let proxy = start_proxy().await?;
    let log = InstanceLog::default();
    let ids = [PANICS, ERRORS, HEALTHY_DAEMON, HEALTHY_TIMER];
    let op = operator_via(&proxy, &ns, &ids, &log)?.start().await?;
    let names = create_many(&api, "faulty", 3).await?;

    // The panicking daemon is restarted after its backoff; the failing timer is called again.
    for name in &names {
        log.wait_started(name, PANICS, 3).await;
        log.wait_started(name, ERRORS, 3).await;
        log.wait_started(name, HEALTHY_DAEMON, 1).await;
    }
    let since = Instant::now();
    assert_timers_fire(&log, &names, INTERVAL, since).await;
    let failures: u64 = op.stats().kinds.iter().map(|k| k.supervisor.failures).sum();
    assert!(failures >= 18, "{failures} failures counted");
    // The healthy daemon of the same objects was never restarted by its neighbours' faults.
    for name in &names {
        assert_eq!(log.starts(name, HEALTHY_DAEMON), 1, "{name}");
    }
    finish(&op, &api, &log, &names).await?;
    op.shutdown().await;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemons_that_ignore_the_stop_signal_do_not_block_deletion() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let proxy = start_proxy().await?;
    let log = InstanceLog::default();
    let ids = [IGNORES_STOP, BLOCKING, HEALTHY_TIMER];
    let op = operator_via(&proxy, &ns, &ids, &log)?.start().await?;
    let names = create_many(&api, "stubborn", 2).await?;
    for name in &names {
        log.wait_started(name, IGNORES_STOP, 1).await;
        log.wait_started(name, BLOCKING, 1).await;
    }
    wait_finalized(&api, &names).await;

    let deleted = Instant::now();
    delete_all(&api, &names).await?;
    assert_gone(&api, &names).await;
    let took = deleted.elapsed();
    // The ladder waits `cancellation_timeout` (1 s) before it gives up on an instance.
    assert!(took >= Duration::from_secs(1), "gone after {took:?}");
    // The async one was cancelled at an await; the blocking ones were abandoned, still running.
    let abandoned: u64 = op
        .stats()
        .kinds
        .iter()
        .map(|k| k.supervisor.daemons_abandoned)
        .sum();
    assert_eq!(abandoned, 2, "{:?}", op.stats());
    wait_until("the async daemons to be cancelled", PROMPTLY, || async {
        log.running() == 2
    })
    .await;
    // Positive control: the abandoned threads really still run until released.
    assert_eq!(log.running(), 2);
    RELEASE_BLOCKING.store(true, Ordering::SeqCst);
    wait_until("the abandoned threads to return", PROMPTLY, || async {
        log.running() == 0
    })
    .await;
    finish(&op, &api, &log, &names).await?;
    op.shutdown().await;
    ns.cleanup().await
}
