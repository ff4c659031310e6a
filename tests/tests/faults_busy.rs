//! An async daemon that loops without ever awaiting. Async handlers run as tasks on the
//! operator's tokio runtime, so such a daemon occupies one runtime worker thread for as long as
//! it spins (it cannot be cancelled either: cancellation happens at an `.await`). With at least
//! one other worker free, the watches and every other handler keep running — this test proves
//! it on a 2-worker runtime. With as many spinning daemons as worker threads the operator
//! stalls; CPU-bound work belongs in a blocking (`fn`) daemon, which gets its own thread.
//! docs/reliability.md says so too.

mod faults_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use faults_common::*;
use kopf_examples::crd::KopfExample;
use kopf_runtime::{Data, Stopper, daemon, timer};
use kopf_tests::wait_until;
use kube::ResourceExt as _;
use kube::api::{DeleteParams, PostParams};

const BUSY: &str = "fb-busy";
const DAEMON: &str = "fb-daemon";
const TIMER: &str = "fb-timer";
const INTERVAL: Duration = Duration::from_secs(1);

static RELEASE: AtomicBool = AtomicBool::new(false);
static SPINS: AtomicU64 = AtomicU64::new(0);

#[daemon(id = "fb-busy", labels(busy = "yes"), cancellation_timeout = "1s")]
async fn fb_busy(obj: Arc<KopfExample>, log: Data<InstanceLog>) {
    let _instance = log.enter(&obj, BUSY);
    // Never awaits; bounded so that a failing test cannot spin forever.
    let deadline = Instant::now() + Duration::from_secs(90);
    while !RELEASE.load(Ordering::SeqCst) && Instant::now() < deadline {
        SPINS.fetch_add(1, Ordering::Relaxed);
        std::hint::spin_loop();
    }
}

#[daemon(id = "fb-daemon")]
async fn fb_daemon(obj: Arc<KopfExample>, stopper: Stopper, log: Data<InstanceLog>) {
    let _instance = log.enter(&obj, DAEMON);
    stopper.stopped().await;
}

#[timer(id = "fb-timer", interval = "1s")]
async fn fb_timer(obj: Arc<KopfExample>, log: Data<InstanceLog>) -> Result<usize, std::io::Error> {
    let _instance = log.enter(&obj, TIMER);
    log.fire(&obj);
    Ok(log.fires(&obj.name_any()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_that_never_awaits_does_not_stall_the_others() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let proxy = start_proxy().await?;
    let log = InstanceLog::default();
    let op = operator_via(&proxy, &ns, &[BUSY, DAEMON, TIMER], &log)?
        .start()
        .await?;
    let mut calm = create_many(&api, "calm", 3).await?;
    let mut busy = example("busy");
    busy.metadata.labels = Some([("busy".to_owned(), "yes".to_owned())].into());
    api.create(&PostParams::default(), &busy).await?;
    log.wait_started("busy", BUSY, 1).await;
    let spinning_since = Instant::now();

    // While it spins: a new object gets its daemon, another is deleted, the timers fire.
    api.create(&PostParams::default(), &example("calm-new"))
        .await?;
    log.wait_started("calm-new", DAEMON, 1).await;
    api.delete("calm-0", &DeleteParams::default()).await?;
    assert_gone(&api, &["calm-0".to_owned()]).await;
    calm.remove(0);
    calm.push("calm-new".to_owned());
    assert_timers_fire(&log, &calm, INTERVAL, Instant::now()).await;
    wait_until(
        "three timer runs of each object while it spins",
        PROMPTLY,
        || async {
            calm.iter()
                .all(|name| log.fires_since(name, spinning_since) >= 3)
        },
    )
    .await;
    // Positive control: it was spinning all along, never returned.
    let spins = SPINS.load(Ordering::Relaxed);
    wait_until("the busy daemon to keep spinning", PROMPTLY, || async {
        SPINS.load(Ordering::Relaxed) > spins
    })
    .await;
    assert_eq!(log.starts("busy", BUSY), 1);
    assert!(log.running() > calm.len() as u32);
    let spun = spinning_since.elapsed();

    RELEASE.store(true, Ordering::SeqCst);
    calm.push("busy".to_owned());
    finish(&op, &api, &log, &calm).await?;
    op.shutdown().await;
    println!("the busy daemon spun for {spun:?} while the others ran");
    ns.cleanup().await
}
