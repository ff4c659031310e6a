//! A leader's exit against the real API server: it gives its Lease up only when every handler
//! has stopped. A leader that had to abandon a daemon at its shutdown timeout (a blocking
//! daemon whose thread ignores its flag) keeps the Lease until it expires, so a standby cannot
//! start that object's daemon while the abandoned thread may still run; a clean exit releases
//! it at once (the positive control).

mod operator_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kopf_examples::crd::KopfExample;
use kopf_runtime::{Data, Operator, Stopper, daemon};
use kopf_tests::{TestNamespace, wait_until};
use kube::api::Api;
use operator_common::*;

const LEASE: &str = "kopf-tests-exit";

/// Lets the stubborn daemon's thread return (set at the end of a test).
#[derive(Debug, Clone, Default)]
struct Gate(Arc<AtomicBool>);

/// Returns when stopped.
#[daemon(id = "exit-polite", cancellation_backoff = "200ms")]
async fn exit_polite(_obj: Arc<KopfExample>, stopper: Stopper) {
    stopper.stopped().await;
}

/// Ignores its stop flag until the test opens the gate: the shutdown abandons it.
#[daemon(
    id = "exit-stubborn",
    cancellation_backoff = "200ms",
    cancellation_timeout = "300ms"
)]
#[allow(clippy::needless_pass_by_value)] // handler parameters are injected by value
fn exit_stubborn(_obj: Arc<KopfExample>, gate: Data<Gate>) {
    while !gate.0.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A leader with `handler`, serving one object, until it leads and runs the daemon.
async fn leader(ns: &TestNamespace, handler: &str, gate: &Gate) -> anyhow::Result<Operator> {
    let op = operator(ns, &[handler])
        .await?
        .shutdown_timeout(Duration::from_secs(2))
        .data(gate.clone())
        .leader_election(short_election(LEASE, ns, "exit-leader"))
        .start()
        .await?;
    let what = format!("{handler} to run as the leader");
    wait_until(what, PROMPTLY, || async {
        op.stats()
            .kinds
            .iter()
            .any(|k| k.supervisor.daemons_running > 0)
    })
    .await;
    Ok(op)
}

/// The Lease's holder now.
async fn holder(ns: &TestNamespace) -> anyhow::Result<Option<String>> {
    let api: Api<Lease> = Api::namespaced(client().await, ns.name());
    let lease = api.get(LEASE).await?;
    Ok(lease.spec.and_then(|s| s.holder_identity))
}

async fn exit_with(handler: &str) -> anyhow::Result<(Option<String>, Duration)> {
    let (ns, api) = example_namespace().await?;
    let gate = Gate::default();
    create(&api, "exit-a", "x").await?;
    let op = leader(&ns, handler, &gate).await?;
    let begun = Instant::now();
    op.shutdown().await;
    let took = begun.elapsed();
    let held = holder(&ns).await?;
    gate.0.store(true, Ordering::SeqCst);
    ns.cleanup().await?;
    Ok((held, took))
}

#[tokio::test]
async fn a_clean_exit_releases_the_lease_at_once() -> anyhow::Result<()> {
    let (held, _) = exit_with("exit-polite").await?;
    assert_eq!(held, None, "a clean exit gives the Lease up");
    Ok(())
}

#[tokio::test]
async fn an_exit_that_abandoned_a_daemon_keeps_the_lease_until_it_expires() -> anyhow::Result<()> {
    let (held, took) = exit_with("exit-stubborn").await?;
    // The shutdown waited for the ladder (0.5 s) and abandoned the thread; at most the shutdown
    // timeout, with 1 s of slack.
    assert!(took < Duration::from_secs(3), "the shutdown took {took:?}");
    assert_eq!(
        held.as_deref(),
        Some("exit-leader"),
        "the Lease was released while an abandoned daemon may still run"
    );
    Ok(())
}
