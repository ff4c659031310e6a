//! The operator across an API server restart (an independent test environment whose
//! kube-apiserver is stopped and started): it recovers, no daemon runs twice for one object,
//! timers keep firing and writing, and new work is served.

mod operator_common;

use std::sync::Arc;

use kopf_examples::crd::KopfExample;
use kopf_runtime::{Data, Operator, Registry, Stopper, daemon, timer};
use kopf_tests::{TestEnv, TestNamespace, install_crd, wait_until};
use kube::CustomResourceExt as _;
use operator_common::*;

#[daemon(id = "restart-daemon")]
async fn restart_daemon(obj: Arc<KopfExample>, stopper: Stopper, journal: Data<Journal>) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    journal.record(&name, "started");
    stopper.stopped().await;
    journal.record(&name, format!("stopped: {:?}", stopper.reason()));
}

#[timer(id = "restart-timer", interval = "1s")]
async fn restart_timer(
    obj: Arc<KopfExample>,
    journal: Data<Journal>,
) -> Result<usize, std::io::Error> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    journal.record(&name, "tick");
    Ok(journal.count(&name, "tick"))
}

#[tokio::test]
async fn the_operator_recovers_from_an_api_server_restart() -> anyhow::Result<()> {
    let env = TestEnv::start().await?;
    install_crd(&env.client().await?, &KopfExample::crd()).await?;
    let mut ns = TestNamespace::create_with(env.config().await?).await?;
    ns.strip_finalizers_of::<KopfExample>();
    let api = ns.api::<KopfExample>();
    let journal = Journal::default();
    let registry = Registry::from_inventory()?.select(&["restart-daemon", "restart-timer"])?;
    let op = Operator::builder()
        .name("kopf-tests")
        .kube_config(env.config().await?)
        .namespaces([ns.name()])
        .registry(&registry)
        .data(journal.clone())
        .start()
        .await?;

    let names = ["r1", "r2", "r3"];
    for name in names {
        create(&api, name, "a").await?;
        journal.wait_for(name, "started", 1).await;
        journal.wait_for(name, "tick", 2).await;
    }

    env.restart_apiserver().await?;
    let after: Vec<usize> = names.iter().map(|n| journal.count(n, "tick")).collect();
    for (name, ticks) in names.iter().zip(&after) {
        // Timers keep firing, and their results reach the restarted server.
        journal.wait_for(name, "tick", ticks + 3).await;
        wait_until(
            format!("{name}: a result written after the restart"),
            PROMPTLY,
            || async {
                status(&api, name)
                    .await
                    .get("restart-timer")
                    .and_then(serde_json::Value::as_u64)
                    .unwrap_or_default()
                    > *ticks as u64
            },
        )
        .await;
    }
    for name in names {
        assert_eq!(
            journal.count(name, "started"),
            1,
            "{name}: {:?}",
            journal.of(name)
        );
    }

    // New work is served: a new object starts, a deleted one is finalized.
    create(&api, "r4", "b").await?;
    journal.wait_for("r4", "started", 1).await;
    delete(&api, "r1").await?;
    wait_gone(&api, "r1").await;
    journal
        .wait_for("r1", "stopped: StopReason(RESOURCE_DELETED)", 1)
        .await;

    op.shutdown().await;
    ns.cleanup().await?;
    env.stop().await?;
    Ok(())
}
