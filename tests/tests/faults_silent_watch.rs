//! Watches that go silent, against the real API server through the fault proxy: the proxy
//! mutes the operator's watch streams (they stay open and deliver nothing, as over a half-open
//! TCP connection or through a stuck load balancer). The operator must take a silent stream
//! as dead within its `watch_idle_timeout`, restart it and lose nothing; `/readyz` must fail
//! while the watch is down and `/healthz` once it has not recovered within
//! `watch_recovery_timeout`; a quiet but healthy watch must never be taken as dead.

mod faults_common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use faults_common::*;
use kopf_examples::crd::KopfExample;
use kopf_runtime::{Data, Operator, Stopper, daemon};
use kopf_tests::proxy::{FaultProxy, Match};
use kopf_tests::{TestNamespace, wait_until};
use kube::api::{DeleteParams, PostParams};

const DAEMON: &str = "sw-daemon";
/// The operator's silence bound: its watches ask for `timeoutSeconds` = 2.
const IDLE: Duration = Duration::from_secs(5);
/// How long a watch may stay down before `/healthz` fails.
const RECOVERY: Duration = Duration::from_secs(8);
/// The slack on the bounds: the restart's backoff (kube's first one is up to 1.6 s with its
/// jitter) and a slow machine.
const SLACK: Duration = Duration::from_secs(3);

#[daemon(id = "sw-daemon")]
async fn sw_daemon(obj: Arc<KopfExample>, stopper: Stopper, log: Data<InstanceLog>) {
    let _instance = log.enter(&obj, DAEMON);
    stopper.stopped().await;
}

/// `GET path` of the probe server over plain HTTP/1.0: the status code (0 if unreachable).
async fn probe(addr: SocketAddr, path: &str) -> u16 {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: probe\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = exchange.await.unwrap_or_default();
    let code = response.split_whitespace().nth(1).unwrap_or_default();
    code.parse().unwrap_or(0)
}

/// The sum of the operator's `kopf_watch_restarts` counters on `/metrics`.
async fn watch_restarts(addr: SocketAddr) -> f64 {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = "GET /metrics HTTP/1.0\r\nHost: probe\r\n\r\n";
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    assert!(response.contains("kopf_watch_restarts_total"), "{response}");
    (response.lines())
        .filter(|l| l.starts_with("kopf_watch_restarts_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The operator through `proxy`, with short watch bounds and a probe server.
async fn start(
    proxy: &FaultProxy,
    ns: &TestNamespace,
    log: &InstanceLog,
) -> anyhow::Result<(Operator, SocketAddr)> {
    let op = operator_via(proxy, ns, &[DAEMON], log)?
        .watch_idle_timeout(IDLE)
        .watch_recovery_timeout(RECOVERY)
        .health_addr(([127, 0, 0, 1], 0).into())
        .start()
        .await?;
    let addr = op.health_addr().expect("a probe address");
    wait_until("/readyz to be 200", PROMPTLY, || async {
        probe(addr, "/readyz").await == 200
    })
    .await;
    Ok((op, addr))
}

/// The operator's watches of the test's kind in `ns`.
fn watches(ns: &TestNamespace) -> Match {
    Match::watches().path(format!("/namespaces/{}/kopfexamples", ns.name()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_watch_is_restarted_within_the_bound_and_nothing_is_lost() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let proxy = start_proxy().await?;
    let log = InstanceLog::default();
    let (op, _addr) = start(&proxy, &ns, &log).await?;
    let mut alive = create_many(&api, "before", 2).await?;
    for name in &alive {
        log.wait_started(name, DAEMON, 1).await;
    }
    wait_finalized(&api, &alive).await;

    // The open watch goes silent; meanwhile an object is created and one is deleted.
    let handle = proxy.handle();
    let watches = watches(&ns);
    let sent = handle.count(&watches);
    let silenced = Instant::now();
    let mute = handle.mute(watches.clone());
    api.create(&PostParams::default(), &example("during"))
        .await?;
    let deleted = vec![alive.remove(0)];
    api.delete(&deleted[0], &DeleteParams::default()).await?;

    // The operator gives the silent stream up and asks again within the bound.
    wait_until("the silent watch to be restarted", IDLE + SLACK, || async {
        handle.count(&watches) > sent
    })
    .await;
    let detected = silenced.elapsed();
    eprintln!("silent watch restarted {detected:?} after the silence began");
    // The restarted watch gets through (the path is back): nothing was lost.
    assert!(handle.unmute(mute));
    log.wait_started("during", DAEMON, 1).await;
    assert_gone(&api, &deleted).await;
    alive.push("during".to_owned());
    for name in &alive {
        assert_eq!(log.starts(name, DAEMON), 1, "{name}");
    }
    finish(&op, &api, &log, &alive).await?;
    op.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_fail_while_a_watch_cannot_recover_and_pass_once_it_does() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let proxy = start_proxy().await?;
    let log = InstanceLog::default();
    let (op, addr) = start(&proxy, &ns, &log).await?;
    let mut alive = create_many(&api, "before", 2).await?;
    wait_finalized(&api, &alive).await;

    // Every watch, the open one and those that restart it, stays silent.
    let handle = proxy.handle();
    let silenced = Instant::now();
    let mute = handle.mute(watches(&ns));
    api.create(&PostParams::default(), &example("during"))
        .await?;
    let deleted = vec![alive.remove(0)];
    api.delete(&deleted[0], &DeleteParams::default()).await?;
    wait_until("/readyz to fail", IDLE + SLACK, || async {
        probe(addr, "/readyz").await == 503
    })
    .await;
    let unready = silenced.elapsed();
    // Down, but not for longer than the recovery bound yet: still alive.
    assert_eq!(probe(addr, "/healthz").await, 200, "after {unready:?}");
    wait_until("/healthz to fail", IDLE + RECOVERY + SLACK, || async {
        probe(addr, "/healthz").await == 503
    })
    .await;
    let dead = silenced.elapsed();
    eprintln!("silent: /readyz failed after {unready:?}, /healthz after {dead:?}");
    assert!(dead > RECOVERY, "/healthz failed after {dead:?}");
    assert!(
        handle.count(&watches(&ns)) >= 2,
        "the watch was not restarted"
    );
    assert!(
        watch_restarts(addr).await >= 1.0,
        "no watch failure counted"
    );

    // The path is back: the watch recovers, both probes pass, and nothing was lost.
    assert!(handle.unmute(mute));
    let back = Instant::now();
    wait_until("both probes to pass again", PROMPTLY, || async {
        probe(addr, "/healthz").await == 200 && probe(addr, "/readyz").await == 200
    })
    .await;
    eprintln!("probes passed {:?} after the path was back", back.elapsed());
    log.wait_started("during", DAEMON, 1).await;
    assert_gone(&api, &deleted).await;
    alive.push("during".to_owned());
    finish(&op, &api, &log, &alive).await?;
    op.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_healthy_watch_is_never_taken_as_dead() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let proxy = start_proxy().await?;
    let log = InstanceLog::default();
    let (op, addr) = start(&proxy, &ns, &log).await?;
    let alive = create_many(&api, "quiet", 1).await?;
    log.wait_started("quiet-0", DAEMON, 1).await;
    wait_finalized(&api, &alive).await;

    // Nothing changes for four silence bounds: the server ends each watch every 2 s and the
    // operator watches again, never failing, ready and alive throughout.
    let handle = proxy.handle();
    let sent = handle.count(&watches(&ns));
    let restarts = watch_restarts(addr).await;
    let quiet = Instant::now();
    while quiet.elapsed() < IDLE * 4 {
        assert_eq!(
            probe(addr, "/readyz").await,
            200,
            "after {:?}",
            quiet.elapsed()
        );
        assert_eq!(probe(addr, "/healthz").await, 200);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(watch_restarts(addr).await, restarts, "a quiet watch failed");
    // Positive control: the watch was running all along (renewed by the server's timeout).
    let renewed = handle.count(&watches(&ns)) - sent;
    assert!(
        renewed >= 4,
        "only {renewed} watch requests in {:?}",
        IDLE * 4
    );
    finish(&op, &api, &log, &alive).await?;
    op.shutdown().await;
    Ok(())
}
