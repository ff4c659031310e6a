//! API error faults against the real API server, through the fault-injecting proxy: throttling
//! (429 + `Retry-After`) on every write for a while, 409/422 on status writes, and a burst of
//! 5xx on every request including lists and watches. After each, the four invariants of
//! `faults_common` are checked, and the request counts show there was no retry storm.

mod faults_common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use faults_common::*;
use http::Method;
use kopf_examples::crd::KopfExample;
use kopf_runtime::{Data, Stopper, daemon, timer};
use kopf_tests::proxy::{Fault, Match, Rule};
use kube::ResourceExt as _;

const DAEMON: &str = "fa-daemon";
const TIMER: &str = "fa-timer";
const INTERVAL: Duration = Duration::from_secs(1);

#[daemon(id = "fa-daemon")]
async fn fa_daemon(obj: Arc<KopfExample>, stopper: Stopper, log: Data<InstanceLog>) {
    let _instance = log.enter(&obj, DAEMON);
    stopper.stopped().await;
}

#[timer(id = "fa-timer", interval = "1s")]
async fn fa_timer(obj: Arc<KopfExample>, log: Data<InstanceLog>) -> Result<usize, std::io::Error> {
    let _instance = log.enter(&obj, TIMER);
    log.fire(&obj);
    Ok(log.fires(&obj.name_any()))
}

/// The status value the timer last wrote for `name`, if any.
async fn written(api: &kube::Api<KopfExample>, name: &str) -> Option<u64> {
    let obj = api.get_opt(name).await.ok().flatten()?;
    let status = serde_json::to_value(obj.status).ok()?;
    status.get(TIMER)?.as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_writes_wait_for_retry_after_without_a_storm() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let proxy = start_proxy().await?;
    let log = InstanceLog::default();
    let op = operator_via(&proxy, &ns, &[DAEMON, TIMER], &log)?
        .start()
        .await?;
    let names = create_many(&api, "throttled", 4).await?;
    for name in &names {
        log.wait_started(name, DAEMON, 1).await;
    }
    wait_finalized(&api, &names).await;

    // For 6 s every write is answered 429 with Retry-After: 2.
    let patches = Match::method(Method::PATCH);
    let rule = proxy
        .handle()
        .inject(Rule::new(patches.clone(), Fault::too_many_requests(2)));
    let throttled_from = Instant::now();
    tokio::time::sleep(Duration::from_secs(6)).await;
    proxy.handle().remove(rule);
    let fault_end = Instant::now();

    // Per object: after each 429, its next write came no earlier than Retry-After.
    let mut per_path: BTreeMap<String, Vec<(Instant, bool)>> = BTreeMap::new();
    for record in proxy.handle().log() {
        if record.method == Method::PATCH && record.at >= throttled_from {
            let path = record.path.split('?').next().unwrap_or_default().to_owned();
            per_path
                .entry(path)
                .or_default()
                .push((record.at, record.fault.is_some()));
        }
    }
    let mut throttled = 0;
    for (path, writes) in &per_path {
        for pair in writes.windows(2) {
            let ((first, was_throttled), (next, _)) = (pair[0], pair[1]);
            if was_throttled {
                throttled += 1;
                let waited = next - first;
                assert!(
                    waited >= Duration::from_secs(2),
                    "{path}: next write {waited:?} after a 429 with Retry-After: 2"
                );
            }
        }
    }
    assert!(
        throttled >= 4,
        "positive control: {throttled} throttled writes seen"
    );
    // No storm: at most one write per object path per Retry-After period (+1 in flight).
    let during = proxy
        .handle()
        .log()
        .iter()
        .filter(|r| r.method == Method::PATCH && r.at >= throttled_from && r.at <= fault_end)
        .count();
    let bound = per_path.len() * (6 / 2 + 1);
    assert!(
        during <= bound,
        "{during} writes in 6 s of throttling (bound {bound})"
    );

    assert_timers_fire(&log, &names, INTERVAL, fault_end).await;
    let what = "every timer result written after the throttling";
    kopf_tests::wait_until(what, INTERVAL + TIMER_SLACK, || async {
        for name in &names {
            if written(&api, name).await.is_none() {
                return false;
            }
        }
        true
    })
    .await;
    for name in &names {
        assert_eq!(log.starts(name, DAEMON), 1, "{name}");
    }
    finish(&op, &api, &log, &names).await?;
    op.shutdown().await;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_and_failed_guards_on_status_writes_are_retried() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let proxy = start_proxy().await?;
    let log = InstanceLog::default();
    let op = operator_via(&proxy, &ns, &[DAEMON, TIMER], &log)?
        .start()
        .await?;
    let status_writes = Match::method(Method::PATCH).path("/status");
    proxy
        .handle()
        .inject(Rule::new(status_writes.clone(), Fault::conflict()).times(3));
    proxy
        .handle()
        .inject(Rule::new(status_writes.clone(), Fault::failed_test_guard()).times(3));
    let names = create_many(&api, "guarded", 2).await?;
    kopf_tests::wait_until("all six faults answered", PROMPTLY, || async {
        proxy.handle().rules() == 0
    })
    .await;
    let fault_end = Instant::now();
    let what = "timer results written despite the conflicts";
    kopf_tests::wait_until(what, INTERVAL + TIMER_SLACK, || async {
        for name in &names {
            if written(&api, name).await.is_none() {
                return false;
            }
        }
        true
    })
    .await;
    assert_timers_fire(&log, &names, INTERVAL, fault_end).await;
    finish(&op, &api, &log, &names).await?;
    op.shutdown().await;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_server_errors_on_every_request_is_survived() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let proxy = start_proxy().await?;
    let log = InstanceLog::default();
    let op = operator_via(&proxy, &ns, &[DAEMON, TIMER], &log)?
        .start()
        .await?;
    let names = create_many(&api, "burst", 3).await?;
    for name in &names {
        log.wait_started(name, DAEMON, 1).await;
    }
    wait_finalized(&api, &names).await;

    // 4 s of 500s and 503s to everything, lists and (re)watches included.
    let errors = [
        proxy.handle().inject(Rule::new(
            Match::any().path("/kopfexamples"),
            Fault::internal_error(),
        )),
        proxy
            .handle()
            .inject(Rule::new(Match::any(), Fault::unavailable())),
    ];
    proxy.handle().drop_connections();
    let created_during = "during-burst".to_owned();
    api.create(&kube::api::PostParams::default(), &example(&created_during))
        .await?;
    api.delete(&names[0], &kube::api::DeleteParams::default())
        .await?;
    tokio::time::sleep(Duration::from_secs(4)).await;
    for id in errors {
        proxy.handle().remove(id);
    }
    let fault_end = Instant::now();
    let faults = proxy.handle().counters().faults;
    assert!(
        faults >= 2,
        "positive control: {faults} requests answered with 5xx"
    );

    assert_gone(&api, &names[..1]).await;
    log.wait_started(&created_during, DAEMON, 1).await;
    let alive = vec![names[1].clone(), names[2].clone(), created_during];
    assert_timers_fire(&log, &alive, INTERVAL, fault_end).await;
    for name in &alive {
        assert_eq!(log.starts(name, DAEMON), 1, "{name}");
    }
    finish(&op, &api, &log, &alive).await?;
    op.shutdown().await;
    ns.cleanup().await
}
