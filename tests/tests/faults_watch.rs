//! Watch faults against the real API server, through the fault-injecting proxy: connections
//! dropped repeatedly, watches answered with 410 Gone (a relist), objects created and deleted
//! while the watch was down, and watch streams cut in the middle of an event. After each, the
//! four invariants of `faults_common` are checked.

mod faults_common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use faults_common::*;
use kopf_examples::crd::KopfExample;
use kopf_runtime::{Data, Stopper, daemon, timer};
use kopf_tests::proxy::{Fault, Match, Rule};
use kube::ResourceExt as _;
use kube::api::{DeleteParams, PostParams};

const DAEMON: &str = "fw-daemon";
const TIMER: &str = "fw-timer";
const INTERVAL: Duration = Duration::from_secs(1);

#[daemon(id = "fw-daemon")]
async fn fw_daemon(obj: Arc<KopfExample>, stopper: Stopper, log: Data<InstanceLog>) {
    let _instance = log.enter(&obj, DAEMON);
    stopper.stopped().await;
}

#[timer(id = "fw-timer", interval = "1s")]
async fn fw_timer(obj: Arc<KopfExample>, log: Data<InstanceLog>) -> Result<usize, std::io::Error> {
    let _instance = log.enter(&obj, TIMER);
    log.fire(&obj);
    Ok(log.fires(&obj.name_any()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_connection_drops_neither_restart_nor_lose_anything() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let proxy = start_proxy().await?;
    let log = InstanceLog::default();
    let op = operator_via(&proxy, &ns, &[DAEMON, TIMER], &log)?
        .start()
        .await?;

    let mut alive = create_many(&api, "steady", 6).await?;
    for name in &alive {
        log.wait_started(name, DAEMON, 1).await;
    }
    wait_finalized(&api, &alive).await;

    // Five drops, one second apart; between them one object is created and one deleted.
    let mut deleted = Vec::new();
    let mut created = Vec::new();
    for round in 0..5 {
        assert!(
            proxy.handle().drop_connections() >= 1,
            "round {round}: nothing was open"
        );
        let name = format!("during-{round}");
        api.create(&PostParams::default(), &example(&name)).await?;
        created.push(name);
        let victim = alive.remove(0);
        api.delete(&victim, &DeleteParams::default()).await?;
        deleted.push(victim);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let fault_end = Instant::now();
    assert_eq!(proxy.handle().counters().drops, 5);

    assert_gone(&api, &deleted).await;
    for name in &created {
        log.wait_started(name, DAEMON, 1).await;
    }
    alive.extend(created);
    assert_timers_fire(&log, &alive, INTERVAL, fault_end).await;
    // A drop is not a reason to restart a daemon: each one started exactly once.
    for name in alive.iter().chain(&deleted) {
        assert_eq!(log.starts(name, DAEMON), 1, "{name}");
    }
    finish(&op, &api, &log, &alive).await?;
    op.shutdown().await;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_while_the_watch_is_down_are_found_by_the_relist_after_410() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let proxy = start_proxy().await?;
    let log = InstanceLog::default();
    let op = operator_via(&proxy, &ns, &[DAEMON, TIMER], &log)?
        .start()
        .await?;
    let before = vec!["kept".to_owned(), "removed".to_owned()];
    for name in &before {
        api.create(&PostParams::default(), &example(name)).await?;
        log.wait_started(name, DAEMON, 1).await;
    }
    wait_finalized(&api, &before).await;

    // The watch goes down: every watch request is held without an answer.
    let stall = proxy
        .handle()
        .inject(Rule::new(Match::watches(), Fault::Stall));
    // Counted before the drop: a watch restarted at once (a stream that ended cleanly restarts
    // without a backoff) may reach the proxy before a count taken after the drop.
    let stalled = Match::watches();
    let watches = proxy.handle().count(&stalled);
    proxy.handle().drop_connections();
    kopf_tests::wait_until("a new, stalled watch", PROMPTLY, || async {
        proxy.handle().count(&stalled) > watches
    })
    .await;
    api.create(&PostParams::default(), &example("appeared"))
        .await?;
    api.delete("removed", &DeleteParams::default()).await?;
    // Positive control that the watch is down: neither change is seen for 2 s.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(log.starts("appeared", DAEMON), 0, "the watch was not down");
    assert!(
        api.get_opt("removed").await?.is_some(),
        "removed without the operator"
    );

    // The watch comes back with 410 Gone: the operator must relist to find both changes.
    proxy.handle().remove(stall);
    proxy
        .handle()
        .inject(Rule::new(Match::watches(), Fault::WatchGone).times(1));
    proxy.handle().drop_connections();
    let fault_end = Instant::now();
    log.wait_started("appeared", DAEMON, 1).await;
    assert_gone(&api, &["removed".to_owned()]).await;
    assert_eq!(proxy.handle().rules(), 0, "the 410 was answered");
    let alive = vec!["kept".to_owned(), "appeared".to_owned()];
    assert_timers_fire(&log, &alive, INTERVAL, fault_end).await;
    assert_eq!(
        log.starts("kept", DAEMON),
        1,
        "a relist restarted a running daemon"
    );
    finish(&op, &api, &log, &alive).await?;
    op.shutdown().await;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_cut_mid_event_lose_no_object() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let proxy = start_proxy().await?;
    let log = InstanceLog::default();
    let op = operator_via(&proxy, &ns, &[DAEMON, TIMER], &log)?
        .start()
        .await?;
    let first = create_many(&api, "first", 2).await?;
    for name in &first {
        log.wait_started(name, DAEMON, 1).await;
    }
    // The next three watches are cut inside their first event (the timers' status writes
    // cause events, so the cuts happen promptly); the drop makes the operator watch anew.
    proxy
        .handle()
        .inject(Rule::new(Match::watches(), Fault::CutWatch { after_events: 0 }).times(3));
    proxy.handle().drop_connections();
    let later = create_many(&api, "later", 4).await?;
    let waited = kopf_tests::try_wait_for("three cut watches", PROMPTLY, || async {
        if proxy.handle().rules() == 0 {
            Ok(())
        } else {
            Err("not yet")
        }
    })
    .await;
    if let Err(err) = waited {
        let log: Vec<_> = proxy
            .handle()
            .log()
            .into_iter()
            .map(|r| (r.at.elapsed(), r.method, r.path, r.fault))
            .collect();
        panic!("{err}: {log:#?}");
    }
    let fault_end = Instant::now();
    for name in &later {
        log.wait_started(name, DAEMON, 1).await;
    }
    let alive: Vec<String> = first.into_iter().chain(later).collect();
    assert_timers_fire(&log, &alive, INTERVAL, fault_end).await;
    for name in &alive {
        assert_eq!(log.starts(name, DAEMON), 1, "{name}");
    }
    finish(&op, &api, &log, &alive).await?;
    op.shutdown().await;
    ns.cleanup().await
}
