//! The `daemons_and_timers` example (`kopf-examples/src/bin/daemons_and_timers.rs`) against
//! the real API server: the blocking daemon flushes its progress while it runs, the idle timer
//! waits its 10 s of quiet, and deletion waits for the cancellation-reliant daemon's
//! `cancellation_backoff` (1 s) before it is cancelled.

#[allow(dead_code, unreachable_pub)]
#[path = "../../kopf-examples/src/bin/daemons_and_timers.rs"]
mod daemons_and_timers;
mod operator_common;

use std::time::{Duration, Instant};

use kopf_examples::crd::{KopfExample, KopfExampleSpec};
use kube::api::PostParams;
use operator_common::{PROMPTLY, delete, example_namespace, operator, status, wait_gone};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_four_shapes_run_and_stop() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let ids = ["pinger", "blocking_worker", "sharp_tick", "idle_refresh"];
    let op = operator(&ns, &ids).await?.start().await?;
    let spec = KopfExampleSpec {
        items: vec!["a".into(), "b".into(), "c".into()],
        ..KopfExampleSpec::default()
    };
    let created = Instant::now();
    api.create(&PostParams::default(), &KopfExample::new("shapes", spec))
        .await?;

    kopf_tests::wait_until(
        "status.idle_refresh after 10 s of quiet",
        PROMPTLY,
        || async { status(&api, "shapes").await.get("idle_refresh") == Some(&json!({"items": 3})) },
    )
    .await;
    assert!(
        created.elapsed() >= Duration::from_secs(10),
        "idle timer ran early"
    );
    // The blocking daemon reports every 5 rounds of 2 s, without exiting.
    kopf_tests::wait_until(
        "status.worker from the blocking daemon",
        PROMPTLY,
        || async { status(&api, "shapes").await["worker"]["rounds"].as_u64() >= Some(5) },
    )
    .await;

    // `pinger` ignores its stop flag: it is cancelled after its 1 s cancellation_backoff, and
    // only then is the finalizer released.
    let deleted = Instant::now();
    delete(&api, "shapes").await?;
    wait_gone(&api, "shapes").await;
    let latency = deleted.elapsed();
    assert!(latency >= Duration::from_secs(1), "gone after {latency:?}");
    assert!(
        latency < Duration::from_secs(1) + PROMPTLY,
        "gone after {latency:?}"
    );
    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}
