//! Leader election against the real API server, with replicas in one process (each its own
//! operator with its own clients): one leads, a standby runs and writes nothing, a graceful exit
//! hands over without overlap, and a leader whose lease is taken over steps down at once.

mod operator_common;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kopf_examples::crd::KopfExample;
use kopf_runtime::ha::{LeaderElection, Role};
use kopf_runtime::{Data, Operator, Stopper, daemon};
use kopf_tests::proxy::{Fault, FaultProxy, Match, Rule};
use kopf_tests::{TestNamespace, test_config, wait_until};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use operator_common::*;
use std::time::Instant;

/// Which replica a handler runs in.
#[derive(Debug, Clone)]
struct Replica(&'static str);

#[daemon(id = "election-daemon", cancellation_backoff = "5s")]
async fn election_daemon(
    obj: Arc<KopfExample>,
    stopper: Stopper,
    client: kube::Client,
    journal: Data<Journal>,
    replica: Data<Replica>,
) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    journal.record(&name, format!("started by {}", replica.0));
    stopper.stopped().await;
    journal.record(&name, format!("stopped by {}", replica.0));
    // One last write through the operator's client, as a handler cleaning up would.
    let ns = obj.metadata.namespace.clone().unwrap_or_default();
    let api: Api<KopfExample> = Api::namespaced(client, &ns);
    let patch = serde_json::json!({"metadata": {"labels": {"last-writer": replica.0}}});
    let outcome = match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => "written".to_owned(),
        Err(kube::Error::Service(e)) if e.downcast_ref::<kopf_runtime::ha::Fenced>().is_some() => {
            "fenced".to_owned()
        }
        Err(err) => format!("failed: {err}"),
    };
    journal.record(&name, format!("final write by {}: {outcome}", replica.0));
}

/// Short settings, as the multi-replica tests use: 2 s lease, 1.5 s renew deadline, 0.5 s retry.
fn election(ns: &TestNamespace, identity: &str) -> LeaderElection {
    short_election("kopf-tests-election", ns, identity)
}

async fn replica(
    ns: &TestNamespace,
    name: &'static str,
    journal: &Journal,
) -> anyhow::Result<Operator> {
    replica_via(ns, name, journal, None).await
}

/// A replica whose requests (its Lease's included) go through `config` when given.
async fn replica_via(
    ns: &TestNamespace,
    name: &'static str,
    journal: &Journal,
    config: Option<kube::Config>,
) -> anyhow::Result<Operator> {
    let mut builder = operator(ns, &["election-daemon"]).await?;
    if let Some(config) = config {
        builder = builder.kube_config(config);
    }
    Ok(builder
        .data(journal.clone())
        .data(Replica(name))
        .leader_election(election(ns, name))
        .start()
        .await?)
}

fn role(op: &Operator) -> Option<Role> {
    op.stats().leadership.map(|l| l.role)
}

async fn wait_role(op: &Operator, what: &str, want: Role) {
    wait_until(what, PROMPTLY, || async { role(op) == Some(want) }).await;
}

/// The `[start, stop)` intervals of the daemon per replica for one object.
fn intervals(journal: &Journal, name: &str, replica: &str) -> Vec<(Instant, Option<Instant>)> {
    let starts = journal.instants(name, &format!("started by {replica}"));
    let stops = journal.instants(name, &format!("stopped by {replica}"));
    starts
        .iter()
        .enumerate()
        .map(|(i, s)| (*s, stops.get(i).copied()))
        .collect()
}

/// Fails if two replicas ran the daemon of `name` at the same time.
fn assert_no_overlap(journal: &Journal, name: &str, replicas: &[&str]) {
    let mut all: Vec<(Instant, Option<Instant>, &str)> = Vec::new();
    for r in replicas {
        for (start, stop) in intervals(journal, name, r) {
            all.push((start, stop, r));
        }
    }
    all.sort_by_key(|(start, _, _)| *start);
    for pair in all.windows(2) {
        let (_, stop, first) = pair[0];
        let (start, _, second) = pair[1];
        let stop =
            stop.unwrap_or_else(|| panic!("{name}: {first} never stopped, {second} started"));
        assert!(
            stop <= start,
            "{name}: {first} ran until {stop:?}, {second} from {start:?}"
        );
    }
}

#[tokio::test]
async fn a_standby_writes_nothing_and_takes_over_after_a_graceful_exit() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let a = replica(&ns, "a", &journal).await?;
    wait_role(&a, "a leads", Role::Leader).await;
    let b = replica(&ns, "b", &journal).await?;
    b.ready().await;
    assert_eq!(role(&b), Some(Role::Standby));
    let names = ["e1", "e2"];
    for name in names {
        create(&api, name, "x").await?;
        journal.wait_for(name, "started by a", 1).await;
    }
    // The standby evaluated the same objects and ran and wrote nothing; the leader did write.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (writes_a, writes_b) = (writes(&a), writes(&b));
    assert!(
        writes_a > 0,
        "the leader writes (finalizers, the Lease not counted)"
    );
    assert_eq!(writes_b, 0, "a standby sends no write");
    for name in names {
        assert_eq!(journal.count(name, "started by b"), 0);
        assert!(finalizers(&api, name).await.contains(&FINALIZER.to_owned()));
    }
    let leadership = b.stats().leadership.expect("election is on");
    assert_eq!(leadership.holder.as_deref(), Some("a"));

    // Graceful exit of the leader: its daemons stop, then it releases the Lease.
    let exit = Instant::now();
    a.shutdown().await;
    let released = Instant::now();
    for name in names {
        journal.wait_for(name, "started by b", 1).await;
        assert_no_overlap(&journal, name, &["a", "b"]);
        // Positive control for the fencing test below: a leader that exits gracefully still
        // leads while its daemons stop, so their last writes go through.
        assert_eq!(
            journal.count(name, "final write by a: written"),
            1,
            "{:?}",
            journal.of(name)
        );
    }
    let taken = journal.instants("e1", "started by b")[0];
    // The standby tries every 0.5 s: the gap after the release is at most that and slack.
    assert!(
        taken.duration_since(released) < Duration::from_millis(500) + Duration::from_secs(1),
        "handover took {:?} after the release ({:?} after the exit began)",
        taken.duration_since(released),
        taken.duration_since(exit)
    );
    wait_role(&b, "b leads", Role::Leader).await;
    // The new leader serves deletions: the finalizer is removed and the object goes.
    api.delete("e1", &DeleteParams::default()).await?;
    journal.wait_for("e1", "stopped by b", 1).await;
    wait_until("e1 is gone", PROMPTLY, || async {
        api.get_opt("e1").await.ok().flatten().is_none()
    })
    .await;
    b.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn a_leader_whose_lease_is_taken_steps_down_and_is_fenced() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let a = replica(&ns, "a", &journal).await?;
    wait_role(&a, "a leads", Role::Leader).await;
    create(&api, "f1", "x").await?;
    journal.wait_for("f1", "started by a", 1).await;
    // Another party takes the Lease over (as a replica that saw it expire would).
    let leases: Api<Lease> = Api::namespaced(ns.client().clone(), ns.name());
    let patch =
        serde_json::json!({"spec": {"holderIdentity": "intruder", "leaseDurationSeconds": 60}});
    leases
        .patch(
            "kopf-tests-election",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    let taken = Instant::now();
    wait_role(&a, "a stands by", Role::Standby).await;
    journal.wait_for("f1", "stopped by a", 1).await;
    let stepped_down = journal.instants("f1", "stopped by a")[0];
    // It notices at its next renewal (0.5 s), then its daemon goes through its ladder.
    assert!(
        stepped_down.duration_since(taken) < Duration::from_millis(500) + Duration::from_secs(1)
    );
    // Fenced: the daemon's last write, tried after the step-down, is refused by its own client.
    journal.wait_for("f1", "final write by a: fenced", 1).await;
    let writes_before = writes(&a);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(writes(&a), writes_before, "a deposed leader sends no write");
    // Positive control: the Lease shows the intruder, and the daemon did not start again.
    assert_eq!(
        a.stats().leadership.and_then(|l| l.holder).as_deref(),
        Some("intruder")
    );
    assert_eq!(journal.count("f1", "started by a"), 1);
    a.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

fn writes(op: &Operator) -> u64 {
    op.stats().requests.map(|r| r.writes).unwrap_or_default()
}

#[tokio::test]
async fn a_leader_cut_off_from_the_api_server_pauses_and_sends_no_write() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let proxy = FaultProxy::start(&test_config().await?).await?;
    let journal = Journal::default();
    let a = replica_via(&ns, "a", &journal, Some(proxy.config())).await?;
    wait_role(&a, "a leads", Role::Leader).await;
    let b = replica(&ns, "b", &journal).await?;
    b.ready().await;
    create(&api, "c1", "x").await?;
    journal.wait_for("c1", "started by a", 1).await;
    // Cut a off: every request it sends from now on is held, and every open one dropped.
    proxy.handle().inject(Rule::new(Match::any(), Fault::Stall));
    proxy.handle().drop_connections();
    let cut = Instant::now();
    // a pauses on its own clock (renew deadline 1.5 s); b takes over once the Lease expired.
    journal.wait_for("c1", "stopped by a", 1).await;
    journal.wait_for("c1", "started by b", 1).await;
    assert_no_overlap(&journal, "c1", &["a", "b"]);
    let stopped = journal.instants("c1", "stopped by a")[0];
    assert!(stopped.duration_since(cut) < Duration::from_millis(1500) + Duration::from_secs(1));
    // Its daemon's last write, tried after the pause, was refused by its own client.
    journal.wait_for("c1", "final write by a: fenced", 1).await;
    // Reconnected: held requests are dropped, not delivered late; a stays a standby.
    proxy.handle().drop_connections();
    proxy.handle().clear();
    wait_until("a sees b's Lease", PROMPTLY, || async {
        a.stats().leadership.and_then(|l| l.holder).as_deref() == Some("b")
    })
    .await;
    assert_eq!(role(&a), Some(Role::Standby));
    // No write of a's arrived at the proxy after its pause (reads did: positive control).
    let log = proxy.handle().log();
    let after: Vec<_> = log.iter().filter(|r| r.at > stopped).collect();
    assert!(
        after.iter().any(|r| r.method == http::Method::GET),
        "{after:?}"
    );
    let writes: Vec<_> = after
        .iter()
        .filter(|r| r.method != http::Method::GET)
        .collect();
    assert!(writes.is_empty(), "writes of a deposed leader: {writes:?}");
    assert_eq!(journal.count("c1", "started by a"), 1);
    a.shutdown().await;
    b.shutdown().await;
    proxy.stop().await;
    ns.cleanup().await?;
    Ok(())
}
