//! The API server stopped for 10 s and started again (an independent testenv, so the shared one
//! is not disturbed), during steady state and during a mass deletion. The operator reaches the
//! server through the proxy, which closes its connections while the server is down, as a
//! network would. After each, the four invariants of `faults_common` are checked.

mod faults_common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use faults_common::*;
use kopf_examples::crd::KopfExample;
use kopf_runtime::{Data, Stopper, daemon, timer};
use kopf_tests::TestEnv;
use kopf_tests::proxy::FaultProxy;
use kube::ResourceExt as _;

const DAEMON: &str = "fr-daemon";
const SLOW_STOP: &str = "fr-slow-stop";
const TIMER: &str = "fr-timer";
const INTERVAL: Duration = Duration::from_secs(1);
const OUTAGE: Duration = Duration::from_secs(10);

#[daemon(id = "fr-daemon")]
async fn fr_daemon(obj: Arc<KopfExample>, stopper: Stopper, log: Data<InstanceLog>) {
    let _instance = log.enter(&obj, DAEMON);
    stopper.stopped().await;
}

/// Takes 3 s to clean up after its stop signal, so deletions are still in progress when the
/// server goes down.
#[daemon(id = "fr-slow-stop", cancellation_backoff = "10s")]
async fn fr_slow_stop(obj: Arc<KopfExample>, stopper: Stopper, log: Data<InstanceLog>) {
    let _instance = log.enter(&obj, SLOW_STOP);
    stopper.stopped().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
}

#[timer(id = "fr-timer", interval = "1s")]
async fn fr_timer(obj: Arc<KopfExample>, log: Data<InstanceLog>) -> Result<usize, std::io::Error> {
    let _instance = log.enter(&obj, TIMER);
    log.fire(&obj);
    Ok(log.fires(&obj.name_any()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_down_for_10_s_in_steady_state() -> anyhow::Result<()> {
    let env = TestEnv::start().await?;
    let (ns, api) = example_namespace_in(env.config().await?).await?;
    let proxy = FaultProxy::start(&env.config().await?).await?;
    let log = InstanceLog::default();
    let op = operator_via(&proxy, &ns, &[DAEMON, TIMER], &log)?
        .start()
        .await?;
    let names = create_many(&api, "steady", 5).await?;
    for name in &names {
        log.wait_started(name, DAEMON, 1).await;
    }
    wait_finalized(&api, &names).await;

    env.stop_apiserver().await?;
    let stopped = Instant::now();
    tokio::time::sleep(OUTAGE).await;
    // Positive control: the server was really unreachable meanwhile.
    assert!(
        proxy.handle().counters().upstream_errors >= 1,
        "no request failed during the outage"
    );
    env.start_apiserver().await?;
    let fault_end = Instant::now();
    assert!(fault_end - stopped >= OUTAGE);

    assert_timers_fire(&log, &names, INTERVAL, fault_end).await;
    println!(
        "steady state: timers all fired again {:?} after the restart",
        fault_end.elapsed()
    );
    for name in &names {
        assert_eq!(
            log.starts(name, DAEMON),
            1,
            "{name}: daemon restarted by the outage"
        );
    }
    finish(&op, &api, &log, &names).await?;
    op.shutdown().await;
    ns.cleanup().await?;
    env.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_down_for_10_s_during_a_mass_deletion() -> anyhow::Result<()> {
    let env = TestEnv::start().await?;
    let (ns, api) = example_namespace_in(env.config().await?).await?;
    let proxy = FaultProxy::start(&env.config().await?).await?;
    let log = InstanceLog::default();
    let op = operator_via(&proxy, &ns, &[SLOW_STOP, TIMER], &log)?
        .start()
        .await?;
    let names = create_many(&api, "mass", 30).await?;
    for name in &names {
        log.wait_started(name, SLOW_STOP, 1).await;
    }
    wait_finalized(&api, &names).await;

    // Delete them all, and take the server down while the operator is finalizing them.
    delete_all(&api, &names).await?;
    // Positive control: the deletions are in progress (the daemons take 3 s to clean up).
    let pending = api.list(&Default::default()).await?.items.len();
    assert_eq!(pending, names.len(), "finalized before the outage");
    env.stop_apiserver().await?;
    tokio::time::sleep(OUTAGE).await;
    env.start_apiserver().await?;
    let restarted = Instant::now();

    assert_gone(&api, &names).await;
    println!(
        "mass deletion: all 30 gone {:?} after the restart",
        restarted.elapsed()
    );
    assert_baseline(&op).await;
    for name in &names {
        assert_eq!(log.starts(name, SLOW_STOP), 1, "{name}");
    }
    assert_eq!(log.running(), 0);
    assert_no_overlap(&log);
    op.shutdown().await;
    ns.cleanup().await?;
    env.stop().await
}
