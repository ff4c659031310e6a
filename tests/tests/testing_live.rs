//! `kopf_runtime::testing::LiveOperator` against the real API server: the handlers' outcomes as
//! a stream to wait on, and a start that fails at once when a resource kind cannot be served.

mod operator_common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kopf_examples::crd::KopfExample;
use kopf_runtime::testing::{LiveOperator, Outcome, START_TIMEOUT, StartError};
use kopf_runtime::{HandlerError, HandlerResult, timer};
use kube::api::DynamicObject;
use operator_common::{PROMPTLY, create, example_namespace, operator};
use serde_json::json;

#[timer(id = "live-counter", interval = "1s")]
async fn live_counter(obj: Arc<KopfExample>) -> HandlerResult<usize> {
    Ok(obj.spec.items.len())
}

#[timer(id = "live-failing", interval = "1s", finalizer = false)]
async fn live_failing(_obj: Arc<KopfExample>) -> HandlerResult {
    Err(HandlerError::permanent("the backend said no"))
}

/// A resource no CRD defines.
#[timer(
    id = "live-ghost",
    group = "missing.kopf.dev",
    version = "v1",
    plural = "ghosts",
    kind = "Ghost",
    interval = "1m"
)]
async fn live_ghost(_obj: Arc<DynamicObject>) {}

#[tokio::test]
async fn the_outcomes_of_a_real_operator_can_be_waited_for() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let builder = operator(&ns, &["live-counter", "live-failing"]).await?;
    let mut op = LiveOperator::start(builder).await?;
    create(&api, "a", "x").await?;
    let stored = op
        .wait_for(PROMPTLY, |o| {
            o.handler() == "live-counter" && matches!(o, Outcome::Succeeded { .. })
        })
        .await;
    let Some(Outcome::Succeeded { object, result, .. }) = stored else {
        anyhow::bail!("no result of live-counter: {stored:?}");
    };
    assert_eq!((object.name.as_ref(), result), ("a", Some(json!(0))));
    let failed = op
        .wait_for(PROMPTLY, |o| o.handler() == "live-failing")
        .await;
    let Some(Outcome::Failed { message, fatal, .. }) = failed else {
        anyhow::bail!("no failure of live-failing: {failed:?}");
    };
    assert!(
        message.contains("the backend said no") && fatal,
        "{message}"
    );
    op.stop().await;
    ns.cleanup().await
}

#[tokio::test]
async fn a_kind_that_cannot_be_served_fails_the_start_at_once() -> anyhow::Result<()> {
    let (ns, _api) = example_namespace().await?;
    let builder = operator(&ns, &["live-ghost"]).await?;
    let started = Instant::now();
    let result = LiveOperator::start(builder).await;
    let elapsed = started.elapsed();
    match result {
        Err(StartError::Unavailable(kind)) => assert!(kind.contains("ghosts"), "{kind}"),
        other => anyhow::bail!("expected the ghosts to be unavailable: {other:?}"),
    }
    // Within the start timeout, with a second of slack for a busy machine.
    assert!(
        elapsed < START_TIMEOUT + Duration::from_secs(1),
        "{elapsed:?}"
    );
    ns.cleanup().await
}
