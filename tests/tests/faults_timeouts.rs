//! Writes whose connection goes silent, against the real API server through the fault proxy:
//! the proxy holds every PATCH without an answer and without closing its connection (what a
//! half-open connection or a stuck load balancer does). The operator's request deadline fails
//! them, they are retried, and once new requests get through again every finalizer is released
//! and every deletion completes — while the held requests are never answered. And a held write
//! delivered late, after another writer changed the object (as a new leader would), is refused
//! by the API server: the status writes' resourceVersion precondition.

mod faults_common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use faults_common::*;
use http::Method;
use kopf_examples::crd::KopfExample;
use kopf_runtime::{Data, Stopper, daemon, timer};
use kopf_tests::proxy::{Fault, Match, Rule};
use kopf_tests::wait_until;
use kube::ResourceExt as _;

const DAEMON: &str = "ft-daemon";
const TIMER: &str = "ft-timer";
/// The operator's request deadline in these tests.
const DEADLINE: Duration = Duration::from_secs(2);

#[daemon(id = "ft-daemon")]
async fn ft_daemon(obj: Arc<KopfExample>, stopper: Stopper, log: Data<InstanceLog>) {
    let _instance = log.enter(&obj, DAEMON);
    stopper.stopped().await;
}

/// Returns how many times it ran for its object: its result, stored in the status.
#[timer(id = "ft-timer", interval = "1s")]
async fn ft_timer(obj: Arc<KopfExample>, log: Data<InstanceLog>) -> Result<usize, std::io::Error> {
    let _instance = log.enter(&obj, TIMER);
    log.fire(&obj);
    Ok(log.fires(&obj.name_any()))
}

/// The result the timer last stored for `name`, if any.
async fn stored(api: &kube::Api<KopfExample>, name: &str) -> anyhow::Result<Option<u64>> {
    let Some(obj) = api.get_opt(name).await? else {
        return Ok(None);
    };
    let status = serde_json::to_value(obj.status)?;
    Ok(status.get(TIMER).and_then(serde_json::Value::as_u64))
}

/// The PATCH requests the proxy has seen for the object `name`.
fn patches_of(proxy: &kopf_tests::proxy::FaultProxy, name: &str) -> u64 {
    let path = format!("/kopfexamples/{name}");
    proxy
        .handle()
        .log()
        .iter()
        .filter(|r| r.method == Method::PATCH)
        .filter(|r| r.path.split('?').next().is_some_and(|p| p.ends_with(&path)))
        .count() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_finalizer_patches_time_out_are_retried_and_land_once_the_path_is_back()
-> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let proxy = start_proxy().await?;
    let log = InstanceLog::default();
    // Two write slots: without a deadline, two held patches would stall every write.
    let op = operator_via(&proxy, &ns, &[DAEMON], &log)?
        .request_timeout(DEADLINE)
        .max_writes_in_flight(2)
        .start()
        .await?;
    let names = create_many(&api, "stalled", 3).await?;
    for name in &names {
        log.wait_started(name, DAEMON, 1).await;
    }
    wait_finalized(&api, &names).await;
    let before: Vec<u64> = names.iter().map(|n| patches_of(&proxy, n)).collect();

    // Every PATCH is held from now on, never answered, its connection left open.
    let held = proxy
        .handle()
        .inject(Rule::new(Match::method(Method::PATCH), Fault::Stall));
    delete_all(&api, &names).await?;
    // Each object's finalizer removal is sent, times out, and is sent again.
    let what = "every object's finalizer removal sent at least twice while held";
    wait_until(what, DEADLINE * 3 + PROMPTLY, || async {
        (names.iter().zip(&before)).all(|(name, before)| patches_of(&proxy, name) >= before + 2)
    })
    .await;
    // Nothing got through meanwhile: the objects still wait for their finalizer.
    for name in &names {
        assert!(api.get_opt(name).await?.is_some(), "{name} went while held");
    }

    // The path is back for new requests; the held ones stay held (never answered).
    proxy.handle().remove(held);
    let back = Instant::now();
    assert_gone(&api, &names).await;
    let took = back.elapsed();
    eprintln!("every deletion completed {took:?} after the path was back");
    assert_baseline(&op).await;
    assert_eq!(log.running(), 0, "daemons still running");
    assert_no_overlap(&log);
    op.shutdown().await;
    proxy.stop().await;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_status_patches_time_out_are_retried_and_land_once_the_path_is_back()
-> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let proxy = start_proxy().await?;
    let log = InstanceLog::default();
    let op = operator_via(&proxy, &ns, &[TIMER], &log)?
        .request_timeout(DEADLINE)
        .max_writes_in_flight(2)
        .start()
        .await?;
    let names = create_many(&api, "results", 3).await?;
    let what = "every timer's first result stored";
    wait_until(what, PROMPTLY, || async {
        for name in &names {
            if !matches!(stored(&api, name).await, Ok(Some(_))) {
                return false;
            }
        }
        true
    })
    .await;

    // Every status write is held from now on, never answered, its connection left open.
    let status_writes = Match::method(Method::PATCH).path("/status");
    let held = proxy
        .handle()
        .inject(Rule::new(status_writes.clone(), Fault::Stall));
    let stalled_from = proxy.handle().count(&status_writes);
    let mut frozen = Vec::new();
    for name in &names {
        frozen.push(stored(&api, name).await?);
    }
    // Three objects' results, each held, timed out and sent again: more than two writes per
    // object (two write slots: without a deadline, the first two would hold them for good).
    let what = "status writes sent again after their deadline";
    wait_until(what, DEADLINE * 3 + PROMPTLY, || async {
        proxy.handle().count(&status_writes) >= stalled_from + 2 * names.len() as u64
    })
    .await;
    // Nothing got through meanwhile (positive control below: the results move once it can).
    for (name, was) in names.iter().zip(&frozen) {
        assert_eq!(
            stored(&api, name).await?,
            *was,
            "{name}: written while held"
        );
    }

    // The path is back for new requests; the held ones stay held (never answered).
    proxy.handle().remove(held);
    let back = Instant::now();
    let what = "every object's result stored again after the path was back";
    wait_until(what, PROMPTLY, || async {
        for (name, was) in names.iter().zip(&frozen) {
            match stored(&api, name).await {
                Ok(Some(now)) if Some(now) > *was => {}
                _ => return false,
            }
        }
        true
    })
    .await;
    eprintln!(
        "results stored again {:?} after the path was back",
        back.elapsed()
    );
    assert_timers_fire(&log, &names, Duration::from_secs(1), back).await;
    finish(&op, &api, &log, &names).await?;
    op.shutdown().await;
    proxy.stop().await;
    ns.cleanup().await
}

/// The stored result of the timer, written by the test (as a new leader would).
const MARKER: u64 = 1_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_write_delivered_late_is_refused_once_another_writer_changed_the_object()
-> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let proxy = start_proxy().await?;
    let handle = proxy.handle();
    let log = InstanceLog::default();
    let op = operator_via(&proxy, &ns, &[TIMER], &log)?
        .request_timeout(DEADLINE)
        .start()
        .await?;
    let names = create_many(&api, "late", 1).await?;
    let name = &names[0];
    wait_until("the timer's first result stored", PROMPTLY, || async {
        matches!(stored(&api, name).await, Ok(Some(_)))
    })
    .await;
    let status_writes = Match::method(Method::PATCH).path("/status");
    let held = handle.inject(Rule::new(status_writes.clone(), Fault::Hold));

    // Holds status writes until the operator gave up on one (it sent another), then lets the
    // held ones through, late; returns once the API server answered one of them.
    let deliver_late = || async {
        let sent = handle.count(&status_writes);
        wait_until(
            "a status write given up and sent again",
            PROMPTLY,
            || async { handle.count(&status_writes) >= sent + 2 },
        )
        .await;
        // Every write held so far is let through: one of them answered is one the API server
        // applied or refused before answering.
        let answered = handle.received(&status_writes).responses;
        handle.release_stalled();
        wait_until("a late status write answered", PROMPTLY, || async {
            handle.received(&status_writes).responses > answered
        })
        .await;
    };

    // Positive control: delivered late, with nothing written in between, it lands.
    let before = stored(&api, name).await?;
    deliver_late().await;
    wait_until("the late write landed", PROMPTLY, || async {
        matches!(stored(&api, name).await, Ok(now) if now > before)
    })
    .await;

    // Another writer changes the object in between: the late write is refused (its
    // resourceVersion precondition no longer holds).
    let marker = serde_json::json!({"status": {TIMER: MARKER}});
    let patch = kube::api::Patch::Merge(&marker);
    api.patch_status(name, &kube::api::PatchParams::default(), &patch)
        .await?;
    deliver_late().await;
    assert_eq!(
        stored(&api, name).await?,
        Some(MARKER),
        "a late write landed"
    );

    // The path is back: the operator, still the writer, reads the object and writes anew.
    handle.remove(held);
    wait_until("the operator's result stored again", PROMPTLY, || async {
        matches!(stored(&api, name).await, Ok(Some(now)) if now != MARKER)
    })
    .await;
    finish(&op, &api, &log, &names).await?;
    op.shutdown().await;
    proxy.stop().await;
    ns.cleanup().await
}
