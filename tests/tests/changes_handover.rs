//! A change handed over between two elected replicas in one process: the leader finished the
//! change's first handler and was stopped in its second; after a graceful handover the new
//! leader goes on with the second only, after the old one stopped.

mod operator_common;

use std::sync::Arc;

use kopf_examples::crd::KopfExample;
use kopf_runtime::ha::Role;
use kopf_runtime::{Data, HandlerError, Operator, Stopper, on_create};
use kopf_tests::{TestNamespace, wait_until};
use operator_common::*;

/// Which replica a handler runs in.
#[derive(Debug, Clone)]
struct Replica(&'static str);

fn name(obj: &KopfExample) -> String {
    obj.metadata.name.clone().unwrap_or_default()
}

#[on_create(id = "handover-first")]
async fn handover_first(obj: Arc<KopfExample>, journal: Data<Journal>, replica: Data<Replica>) {
    journal.record(&name(&obj), format!("first by {}", replica.0));
}

/// In replica `a`, runs until stopped (and so never finishes); in `b`, finishes at once.
#[on_create(id = "handover-second")]
async fn handover_second(
    obj: Arc<KopfExample>,
    stopper: Stopper,
    journal: Data<Journal>,
    replica: Data<Replica>,
) -> Result<(), HandlerError> {
    let name = name(&obj);
    journal.record(&name, format!("second started by {}", replica.0));
    if replica.0 == "a" {
        stopper.stopped().await;
        journal.record(&name, "second stopped by a");
        return Err(HandlerError::msg("stopped before it finished"));
    }
    journal.record(&name, format!("second done by {}", replica.0));
    Ok(())
}

async fn replica(
    ns: &TestNamespace,
    id: &'static str,
    journal: &Journal,
) -> anyhow::Result<Operator> {
    Ok(operator(ns, &["handover-first", "handover-second"])
        .await?
        .data(journal.clone())
        .data(Replica(id))
        .leader_election(short_election("kopf-tests-changes", ns, id))
        .start()
        .await?)
}

async fn wait_role(op: &Operator, what: &str, want: Role) {
    let role = || op.stats().leadership.map(|l| l.role);
    wait_until(what, PROMPTLY, || async { role() == Some(want) }).await;
}

#[tokio::test]
async fn a_handed_over_change_goes_on_without_rerunning_its_finished_handler() -> anyhow::Result<()>
{
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let a = replica(&ns, "a", &journal).await?;
    wait_role(&a, "a to lead", Role::Leader).await;
    let b = replica(&ns, "b", &journal).await?;
    wait_role(&b, "b to stand by", Role::Standby).await;

    create(&api, "moved", "x").await?;
    journal.wait_for("moved", "first by a", 1).await;
    journal.wait_for("moved", "second started by a", 1).await;
    a.shutdown().await;
    assert_eq!(journal.count("moved", "second stopped by a"), 1);
    wait_role(&b, "b to lead", Role::Leader).await;
    journal.wait_for("moved", "second done by b", 1).await;

    let events = journal.of("moved");
    let first: Vec<_> = events
        .iter()
        .filter(|e| e.starts_with("first by"))
        .collect();
    assert_eq!(first, ["first by a"], "not rerun by b: {events:?}");
    let stopped = events.iter().position(|e| e == "second stopped by a");
    let resumed = events.iter().position(|e| e == "second started by b");
    assert!(stopped < resumed, "b went on after a stopped: {events:?}");
    wait_until("the change to be over", PROMPTLY, || async {
        let obj = api.get_opt("moved").await.ok().flatten();
        let annotations = obj.and_then(|o| o.metadata.annotations).unwrap_or_default();
        annotations.contains_key("kopf.dev/kopf-tests.last-handled")
            && !annotations.contains_key("kopf.dev/kopf-tests.progress")
    })
    .await;
    b.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}
