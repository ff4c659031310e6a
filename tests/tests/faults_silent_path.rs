//! The whole path to the API server goes silent in both directions without closing, for a
//! long while (a half-open TCP connection, a stuck proxy or load balancer), against the real
//! API server through the fault proxy: every response — of the streams open and of those to
//! come — is muted and every new request is held without an answer. Meanwhile objects are
//! deleted, created and changed directly on the API server. The operator must take its watches
//! as dead within `watch_idle_timeout` and ask again, fail `/readyz`, then `/healthz` once they
//! have not recovered within `watch_recovery_timeout`; its pending writes must time out and be
//! sent again; and once the path is back, nothing is lost: the deleted objects' finalizers are
//! released, the created ones get their daemons, the changed one is seen, timers fire again,
//! both probes pass, no daemon ran twice at once and nothing leaked.
//!
//! The silence lasts `KOPF_SILENT_PATH_SECS` seconds (default 25, the scaled-down "several
//! minutes"; at least the bounds plus their slack), so a longer run is one variable away.

mod faults_common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use faults_common::*;
use http::Method;
use kopf_examples::crd::KopfExample;
use kopf_runtime::{Data, Stopper, daemon, timer};
use kopf_tests::proxy::{Fault, FaultProxy, Match, ProxyHandle, Rule};
use kopf_tests::{TestNamespace, wait_until};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

const DAEMON: &str = "sp-daemon";
const TIMER: &str = "sp-timer";
/// The operator's request deadline.
const DEADLINE: Duration = Duration::from_secs(2);
/// The operator's silence bound for a watch.
const IDLE: Duration = Duration::from_secs(5);
/// How long a watch may stay down before `/healthz` fails.
const RECOVERY: Duration = Duration::from_secs(8);
/// The slack on the bounds: the restart's backoff (kube's first one is up to 1.6 s with its
/// jitter) and a slow machine.
const SLACK: Duration = Duration::from_secs(3);
/// How long a watch may take to be back once the path is: kube's watch backoff, doubling from
/// 0.8 s up to 30 s plus a jitter of up to as much again, then `SLACK`.
const WATCH_BACKOFF: Duration = Duration::from_secs(63);
/// How long the path stays silent unless `KOPF_SILENT_PATH_SECS` says otherwise.
const DEFAULT_SILENCE: Duration = Duration::from_secs(25);
/// The value of `spec.field` the test writes during the silence.
const CHANGED: &str = "changed-while-silent";

#[daemon(id = "sp-daemon")]
async fn sp_daemon(obj: Arc<KopfExample>, stopper: Stopper, log: Data<InstanceLog>) {
    let _instance = log.enter(&obj, DAEMON);
    stopper.stopped().await;
}

/// Returns the object's `spec.field` as the timer saw it: its result, stored in the status.
#[timer(id = "sp-timer", interval = "1s")]
async fn sp_timer(obj: Arc<KopfExample>, log: Data<InstanceLog>) -> Result<String, std::io::Error> {
    let _instance = log.enter(&obj, TIMER);
    log.fire(&obj);
    Ok(obj.spec.field.clone().unwrap_or_default())
}

/// How long the path stays silent: `KOPF_SILENT_PATH_SECS`, at least long enough for both
/// probes to fail within the silence.
fn silence() -> Duration {
    let asked = std::env::var("KOPF_SILENT_PATH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(DEFAULT_SILENCE, Duration::from_secs);
    asked.max(IDLE + RECOVERY + SLACK * 2)
}

/// `GET path` of the probe server over plain HTTP/1.0: the status code and body (0 and empty
/// if unreachable).
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
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
    (code.parse().unwrap_or(0), response)
}

/// The status code of `GET path` on the probe server.
async fn probe(addr: SocketAddr, path: &str) -> u16 {
    get(addr, path).await.0
}

/// The sum of the operator's `kopf_watch_restarts` counters on `/metrics`.
async fn watch_restarts(addr: SocketAddr) -> f64 {
    let (_, response) = get(addr, "/metrics").await;
    assert!(response.contains("kopf_watch_restarts_total"), "{response}");
    (response.lines())
        .filter(|l| l.starts_with("kopf_watch_restarts_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// When the proxy received each PATCH of `name` itself (not of its status): its finalizer
/// removal and the attempts to send it again.
fn patches_of(handle: &ProxyHandle, name: &str) -> Vec<Instant> {
    let path = format!("/kopfexamples/{name}");
    (handle.log().into_iter())
        .filter(|r| r.method == Method::PATCH)
        .filter(|r| r.path.split('?').next().is_some_and(|p| p.ends_with(&path)))
        .map(|r| r.at)
        .collect()
}

/// The timer's result last stored for `name` (the `spec.field` it saw), if any.
async fn stored(api: &Api<KopfExample>, name: &str) -> Option<String> {
    let obj = api.get_opt(name).await.ok()??;
    let status = serde_json::to_value(obj.status).ok()?;
    Some(status.get(TIMER)?.as_str()?.to_owned())
}

/// The objects of the test, by what happens to them.
struct Objects {
    /// Alive throughout.
    kept: Vec<String>,
    /// Deleted just before the silence, its finalizer removal held: the pending write.
    pending: String,
    /// Deleted during the silence.
    deleted: Vec<String>,
    /// Changed during the silence.
    changed: String,
    /// Created during the silence.
    created: Vec<String>,
}

/// Creates the objects present before the silence and waits until the operator serves them:
/// daemons running, finalizers on, timers' results stored.
async fn serve_objects(api: &Api<KopfExample>, log: &InstanceLog) -> anyhow::Result<Objects> {
    let objects = Objects {
        kept: create_many(api, "kept", 2).await?,
        pending: create_many(api, "pending", 1).await?.remove(0),
        deleted: create_many(api, "deleted", 2).await?,
        changed: create_many(api, "changed", 1).await?.remove(0),
        created: vec!["created-0".to_owned(), "created-1".to_owned()],
    };
    let mut all = objects.kept.clone();
    all.extend(objects.deleted.iter().cloned());
    all.push(objects.pending.clone());
    all.push(objects.changed.clone());
    for name in &all {
        log.wait_started(name, DAEMON, 1).await;
    }
    wait_finalized(api, &all).await;
    wait_until("every timer's first result stored", PROMPTLY, || async {
        for name in &all {
            if stored(api, name).await.is_none() {
                return false;
            }
        }
        true
    })
    .await;
    Ok(objects)
}

/// Deletes the pending object with its PATCHes held, and waits until the operator sent its
/// finalizer removal into the hold. Returns the hold's rule id and the number of the object's
/// PATCHes before the removal.
async fn hold_a_finalizer_removal(
    handle: &ProxyHandle,
    api: &Api<KopfExample>,
    name: &str,
) -> anyhow::Result<(u64, usize)> {
    let before = patches_of(handle, name).len();
    let rule = Rule::new(Match::method(Method::PATCH).path(name), Fault::Stall);
    let held = handle.inject(rule);
    api.delete(name, &DeleteParams::default()).await?;
    wait_until(
        "the finalizer removal sent into the hold",
        PROMPTLY,
        || async { patches_of(handle, name).len() > before },
    )
    .await;
    Ok((held, before))
}

/// Deletes, creates and changes objects directly on the API server.
async fn change_behind_its_back(api: &Api<KopfExample>, objects: &Objects) -> anyhow::Result<()> {
    delete_all(api, &objects.deleted).await?;
    for name in &objects.created {
        api.create(&PostParams::default(), &example(name)).await?;
    }
    let change = serde_json::json!({"spec": {"field": CHANGED}});
    let patch = Patch::Merge(&change);
    api.patch(&objects.changed, &PatchParams::default(), &patch)
        .await?;
    Ok(())
}

/// Checks that the silent watches are detected and restarted within the bound and that the
/// probes fail as they should; returns when `/readyz` and `/healthz` failed.
async fn detected(
    handle: &ProxyHandle,
    ns: &TestNamespace,
    addr: SocketAddr,
    restarts: f64,
    silenced: Instant,
) -> (Duration, Duration, Duration) {
    let watches = Match::watches().path(format!("/namespaces/{}/kopfexamples", ns.name()));
    let sent = handle.count(&watches);
    let within = (IDLE + SLACK).saturating_sub(silenced.elapsed());
    wait_until(
        "the silent watch given up and asked again",
        within,
        || async { handle.count(&watches) > sent && watch_restarts(addr).await > restarts },
    )
    .await;
    let restarted = silenced.elapsed();
    let within = (IDLE + SLACK).saturating_sub(silenced.elapsed());
    wait_until("/readyz to fail", within, || async {
        probe(addr, "/readyz").await == 503
    })
    .await;
    let unready = silenced.elapsed();
    // Down, but not for longer than the recovery bound yet: still alive.
    if unready < RECOVERY {
        assert_eq!(probe(addr, "/healthz").await, 200, "after {unready:?}");
    }
    let within = (IDLE + RECOVERY + SLACK).saturating_sub(silenced.elapsed());
    wait_until("/healthz to fail", within, || async {
        probe(addr, "/healthz").await == 503
    })
    .await;
    let dead = silenced.elapsed();
    assert!(dead > RECOVERY, "/healthz failed after {dead:?}");
    (restarted, unready, dead)
}

/// Checks that the held finalizer removal is given up after its deadline and sent again, at
/// least twice, each attempt only after the previous one's deadline, while nothing reaches the
/// API server; returns the gaps between the attempts.
async fn retried(
    handle: &ProxyHandle,
    api: &Api<KopfExample>,
    name: &str,
    (removal, before): (usize, usize),
) -> Vec<Duration> {
    let what = "the held finalizer removal sent again twice";
    wait_until(what, DEADLINE * 3 + PROMPTLY, || async {
        patches_of(handle, name).len() >= before + 2
    })
    .await;
    assert!(
        api.get_opt(name).await.ok().flatten().is_some(),
        "{name} went while the path was silent"
    );
    let attempts = patches_of(handle, name).split_off(removal);
    let gaps: Vec<_> = attempts.windows(2).map(|w| w[1] - w[0]).collect();
    // Given up at the deadline, not refused sooner (the timer's granularity aside).
    let deadline = DEADLINE - Duration::from_millis(100);
    assert!(gaps.iter().all(|gap| *gap >= deadline), "{gaps:?}");
    gaps
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_path_is_detected_writes_are_retried_and_nothing_is_lost() -> anyhow::Result<()> {
    let silence = silence();
    let (ns, api) = example_namespace().await?;
    let proxy: FaultProxy = start_proxy().await?;
    let handle = proxy.handle().clone();
    let log = InstanceLog::default();
    let op = operator_via(&proxy, &ns, &[DAEMON, TIMER], &log)?
        .request_timeout(DEADLINE)
        .watch_idle_timeout(IDLE)
        .watch_recovery_timeout(RECOVERY)
        .health_addr(([127, 0, 0, 1], 0).into())
        .start()
        .await?;
    let addr = op.health_addr().expect("a probe address");
    let objects = serve_objects(&api, &log).await?;
    // Positive controls: both probes pass and nothing failed before the silence.
    wait_until("/readyz and /healthz to pass", PROMPTLY, || async {
        probe(addr, "/readyz").await == 200 && probe(addr, "/healthz").await == 200
    })
    .await;
    let restarts = watch_restarts(addr).await;
    let (hold, removal) = hold_a_finalizer_removal(&handle, &api, &objects.pending).await?;

    // The whole path goes silent: every response muted, every new request held.
    let silenced = Instant::now();
    let mute = handle.mute(Match::any());
    let stall = handle.inject(Rule::new(Match::any(), Fault::Stall));
    assert!(handle.remove(hold));
    let pending_before = patches_of(&handle, &objects.pending).len();
    change_behind_its_back(&api, &objects).await?;
    let (restarted, unready, dead) = detected(&handle, &ns, addr, restarts, silenced).await;
    let span = (removal, pending_before);
    let gaps = retried(&handle, &api, &objects.pending, span).await;
    eprintln!(
        "silent path: watch restarted after {restarted:?}, /readyz failed after {unready:?}, \
         /healthz after {dead:?}; finalizer removal attempts {gaps:?} apart"
    );

    // The silence lasts as long as asked; nothing got through meanwhile (the positive control
    // is below: the deletions complete once the path is back).
    tokio::time::sleep(silence.saturating_sub(silenced.elapsed())).await;
    let mut waiting = objects.deleted.clone();
    waiting.push(objects.pending.clone());
    for name in &waiting {
        assert!(
            api.get_opt(name).await?.is_some(),
            "{name} went while silent"
        );
    }
    assert_eq!(
        probe(addr, "/healthz").await,
        503,
        "alive after the silence"
    );
    let written = patches_of(&handle, &objects.pending).len() - pending_before;
    eprintln!("silent for {silence:?}: the finalizer removal was sent {written} more times");

    back_and_nothing_lost(&op, &handle, &api, &log, addr, (mute, stall), &objects).await?;
    op.shutdown().await;
    proxy.stop().await;
    ns.cleanup().await
}

/// Brings the path back and checks that nothing was lost, then deletes everything and checks
/// the invariants.
async fn back_and_nothing_lost(
    op: &kopf_runtime::Operator,
    handle: &ProxyHandle,
    api: &Api<KopfExample>,
    log: &InstanceLog,
    addr: SocketAddr,
    (mute, stall): (u64, u64),
    objects: &Objects,
) -> anyhow::Result<()> {
    assert!(handle.remove(stall));
    assert!(handle.unmute(mute));
    handle.release_stalled();
    let back = Instant::now();
    wait_until("both probes to pass again", WATCH_BACKOFF, || async {
        probe(addr, "/healthz").await == 200 && probe(addr, "/readyz").await == 200
    })
    .await;
    let healthy = back.elapsed();
    let mut gone = objects.deleted.clone();
    gone.push(objects.pending.clone());
    assert_gone(api, &gone).await;
    let deleted = back.elapsed();
    for name in &objects.created {
        log.wait_started(name, DAEMON, 1).await;
    }
    let created = back.elapsed();
    wait_until(
        "the change seen and its result stored",
        PROMPTLY,
        || async { stored(api, &objects.changed).await.as_deref() == Some(CHANGED) },
    )
    .await;
    let changed = back.elapsed();
    let mut alive = objects.kept.clone();
    alive.push(objects.changed.clone());
    alive.extend(objects.created.iter().cloned());
    assert_timers_fire(log, &alive, Duration::from_secs(1), back).await;
    eprintln!(
        "path back: probes passed after {healthy:?}, deletions completed after {deleted:?}, \
         created objects' daemons after {created:?}, the change stored after {changed:?}"
    );
    // No daemon was restarted by the silence (nor run twice at once: checked by `finish`).
    for name in &alive {
        assert_eq!(log.starts(name, DAEMON), 1, "{name}");
    }
    assert_no_overlap(log);
    finish(op, api, log, &alive).await
}
