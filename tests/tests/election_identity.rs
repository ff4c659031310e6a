//! Multi-replica configurations that used to fail silently, against the real API server with
//! replicas in one process (each its own operator with its own clients): two replicas given the
//! same identity (leader election and sharding) never lead or serve at once and the second says
//! why; a Lease that cannot be written (its namespace does not exist) is warned about, rate-
//! limited, and reported in `/readyz` and `/metrics`, while a working election reports nothing;
//! and so is a Lease the replica's account may not touch (no RBAC for leases).

mod operator_common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role as RbacRole, RoleBinding};
use kopf_examples::crd::KopfExample;
use kopf_runtime::ha::{LeaderElection, Role, ShardWatch, Sharding};
use kopf_runtime::{Data, Operator, Stopper, daemon};
use kopf_tests::{TestNamespace, wait_until};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use operator_common::*;
use serde_json::json;

/// Which replica a handler runs in.
#[derive(Debug, Clone)]
struct Replica(&'static str);

#[daemon(id = "twin-daemon")]
async fn twin_daemon(
    obj: Arc<KopfExample>,
    stopper: Stopper,
    journal: Data<Journal>,
    replica: Data<Replica>,
) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    journal.record(&name, format!("started by {}", replica.0));
    stopper.stopped().await;
    journal.record(&name, format!("stopped by {}", replica.0));
}

/// The replicas whose daemon of `name` runs now.
fn running(journal: &Journal, name: &str) -> Vec<&'static str> {
    ["a", "b"]
        .into_iter()
        .filter(|r| {
            journal.count(name, &format!("started by {r}"))
                > journal.count(name, &format!("stopped by {r}"))
        })
        .collect()
}

/// Short settings: 2 s lease, 1.5 s renew deadline, 0.5 s retry.
fn elected(lease: &str, namespace: &str, identity: &str) -> LeaderElection {
    LeaderElection::new(lease, namespace)
        .lease_duration(Duration::from_secs(2))
        .renew_deadline(Duration::from_millis(1500))
        .retry_period(Duration::from_millis(500))
        .identity(identity)
}

async fn replica(
    ns: &TestNamespace,
    election: LeaderElection,
    name: &'static str,
    journal: &Journal,
) -> anyhow::Result<Operator> {
    Ok(operator(ns, &["twin-daemon"])
        .await?
        .health_addr(([127, 0, 0, 1], 0).into())
        .data(journal.clone())
        .data(Replica(name))
        .leader_election(election)
        .start()
        .await?)
}

async fn member(
    ns: &TestNamespace,
    identity: &str,
    name: &'static str,
    journal: &Journal,
) -> anyhow::Result<Operator> {
    let sharding = Sharding::new("kopf-tests-twins", ns.name())
        .lease_duration(Duration::from_secs(2))
        .renew_deadline(Duration::from_millis(1500))
        .retry_period(Duration::from_millis(300))
        .identity(identity)
        .watch(ShardWatch::ClientSide);
    Ok(operator(ns, &["twin-daemon"])
        .await?
        .health_addr(([127, 0, 0, 1], 0).into())
        .data(journal.clone())
        .data(Replica(name))
        .sharding(sharding)
        .start()
        .await?)
}

fn role(op: &Operator) -> Option<Role> {
    op.stats().leadership.map(|l| l.role)
}

fn conflict(op: &Operator) -> bool {
    op.stats().leadership.is_some_and(|l| l.identity_conflict)
}

fn held(op: &Operator) -> usize {
    op.stats().sharding.map_or(0, |m| m.held)
}

async fn scrape(op: &Operator, path: &str) -> String {
    let addr = op.health_addr().expect("a probe address");
    match probe(addr, path).await {
        Ok((_, body)) => body,
        Err(err) => format!("no answer: {err}"),
    }
}

/// Every shard range.
const ALL: usize = kopf_runtime::ha::SHARD_RANGES as usize;

/// How long the twins are watched: several lease durations, so that a second leader would have
/// had every chance to take over or renew.
const WATCH: Duration = Duration::from_secs(6);

#[tokio::test]
async fn two_replicas_with_one_identity_never_lead_at_once() -> anyhow::Result<()> {
    let logs = Logs::installed();
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let lease = "kopf-tests-twin-election";
    let a = replica(&ns, elected(lease, ns.name(), "twin"), "a", &journal).await?;
    wait_until("a leads", PROMPTLY, || async {
        role(&a) == Some(Role::Leader)
    })
    .await;
    create(&api, "t1", "x").await?;
    journal.wait_for("t1", "started by a", 1).await;
    let b = replica(&ns, elected(lease, ns.name(), "twin"), "b", &journal).await?;
    b.ready().await;
    let started = Instant::now();
    while started.elapsed() < WATCH {
        let (ra, rb) = (role(&a), role(&b));
        assert!(
            !(ra == Some(Role::Leader) && rb == Some(Role::Leader)),
            "two replicas named `twin` lead at once"
        );
        assert!(running(&journal, "t1").len() < 2, "{:?}", journal.of("t1"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        journal.count("t1", "started by b"),
        0,
        "{:?}",
        journal.of("t1")
    );
    assert_eq!(role(&a), Some(Role::Leader), "the first one keeps leading");
    assert!(conflict(&b), "{:?}", b.stats().leadership);
    assert!(!conflict(&a), "the leader sees only its own incarnation");
    let errors = logs.lines_with("another replica with this replica's identity holds the Lease");
    assert!(
        errors
            .iter()
            .any(|l| l.contains(lease) && l.contains("ERROR")),
        "{errors:?}"
    );
    let ready = scrape(&b, "/readyz").await;
    assert!(
        ready.contains("another process with this identity"),
        "{ready}"
    );
    let metrics = scrape(&b, "/metrics").await;
    assert!(
        metrics.contains("\nkopf_lease_identity_conflict 1\n"),
        "{metrics}"
    );
    // Positive control: once the first one is gone (its Lease released), the second leads,
    // and no longer reports a conflict.
    a.shutdown().await;
    wait_until("b leads once a is gone", PROMPTLY, || async {
        role(&b) == Some(Role::Leader)
    })
    .await;
    journal.wait_for("t1", "started by b", 1).await;
    assert!(!conflict(&b));
    b.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn two_members_with_one_identity_never_serve_at_once() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let a = member(&ns, "twin", "a", &journal).await?;
    wait_until("a serves every range", PROMPTLY, || async {
        held(&a) == ALL
    })
    .await;
    create(&api, "t1", "x").await?;
    journal.wait_for("t1", "started by a", 1).await;
    let b = member(&ns, "twin", "b", &journal).await?;
    b.ready().await;
    let started = Instant::now();
    while started.elapsed() < WATCH {
        let (ha, hb) = (held(&a), held(&b));
        assert!(
            ha == 0 || hb == 0,
            "two members named `twin` serve at once: {ha} and {hb} ranges"
        );
        assert!(running(&journal, "t1").len() < 2, "{:?}", journal.of("t1"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        journal.count("t1", "started by b"),
        0,
        "{:?}",
        journal.of("t1")
    );
    assert_eq!(held(&a), ALL, "the first one keeps serving");
    let ready = scrape(&b, "/readyz").await;
    assert!(
        ready.contains("another process with this identity"),
        "{ready}"
    );
    let metrics = scrape(&b, "/metrics").await;
    assert!(
        metrics.contains("\nkopf_lease_identity_conflict 1\n"),
        "{metrics}"
    );
    // Positive control: once the first one is gone, the second serves every range.
    a.shutdown().await;
    wait_until("b serves every range once a is gone", PROMPTLY, || async {
        held(&b) == ALL
    })
    .await;
    journal.wait_for("t1", "started by b", 1).await;
    b.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_lease_that_cannot_be_written_is_warned_about_and_reported() -> anyhow::Result<()> {
    let logs = Logs::installed();
    let (ns, _api) = example_namespace().await?;
    let journal = Journal::default();
    // A namespace that does not exist: every read finds nothing and every create gets a 404.
    let nowhere = format!("{}-missing", ns.name());
    let election = elected("kopf-tests-broken", &nowhere, "broken");
    let broken = replica(&ns, election, "a", &journal).await?;
    // Positive control: a working election beside it.
    let election = elected("kopf-tests-working", ns.name(), "working");
    let working = replica(&ns, election, "b", &journal).await?;
    wait_until("the working replica leads", PROMPTLY, || async {
        role(&working) == Some(Role::Leader)
    })
    .await;
    // Several retry periods of failures.
    wait_until("five failed attempts", PROMPTLY, || async {
        broken
            .stats()
            .leadership
            .is_some_and(|l| l.lease_errors >= 5)
    })
    .await;
    let leadership = broken.stats().leadership.expect("an election");
    let error = leadership.lease_error.unwrap_or_default();
    assert!(error.contains(&nowhere), "{error}");
    assert_eq!(role(&broken), Some(Role::Standby));
    // Warned once (at the first failure), not at every retry period.
    let warnings: Vec<_> = logs
        .lines_with("the Lease cannot be read or written")
        .into_iter()
        .filter(|l| l.contains(&nowhere))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("WARN"), "{warnings:?}");
    let ready = scrape(&broken, "/readyz").await;
    assert!(
        ready.contains(&format!(
            "lease {nowhere}/kopf-tests-broken: cannot be read or written"
        )),
        "{ready}"
    );
    let metrics = scrape(&broken, "/metrics").await;
    assert!(metrics.contains("\nkopf_lease_failing 1\n"), "{metrics}");
    assert!(
        !metrics.contains("\nkopf_lease_errors_total 0\n"),
        "{metrics}"
    );
    // The working one: no warning, nothing in /readyz, nothing failing in /metrics.
    let lease = format!("{}/kopf-tests-working", ns.name());
    let warned: Vec<_> = logs
        .lines_with("the Lease cannot be read or written")
        .into_iter()
        .filter(|l| l.contains(&lease))
        .collect();
    assert!(warned.is_empty(), "{warned:?}");
    let ready = scrape(&working, "/readyz").await;
    assert!(ready.contains("leader election working: leader"), "{ready}");
    assert!(!ready.contains("cannot be read or written"), "{ready}");
    let metrics = scrape(&working, "/metrics").await;
    assert!(metrics.contains("\nkopf_lease_failing 0\n"), "{metrics}");
    assert!(
        metrics.contains("\nkopf_lease_errors_total 0\n"),
        "{metrics}"
    );
    broken.shutdown().await;
    working.shutdown().await;
    Ok(())
}

/// A client configuration for a ServiceAccount of `ns` that may run the operator on the
/// examples there, but may not touch leases.
async fn without_lease_rbac(ns: &TestNamespace) -> anyhow::Result<kube::Config> {
    let admin = client().await;
    let name = "no-leases";
    let pp = PostParams::default();
    let account: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    Api::<ServiceAccount>::namespaced(admin.clone(), ns.name())
        .create(&pp, &account)
        .await?;
    let role: RbacRole = serde_json::from_value(json!({
        "metadata": {"name": name},
        "rules": [
            {"apiGroups": ["kopf.dev"], "resources": ["kopfexamples"],
             "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": ["kopf.dev"], "resources": ["kopfexamples/status"], "verbs": ["patch"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        ],
    }))?;
    Api::<RbacRole>::namespaced(admin.clone(), ns.name())
        .create(&pp, &role)
        .await?;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns.name()}],
    }))?;
    Api::<RoleBinding>::namespaced(admin.clone(), ns.name())
        .create(&pp, &binding)
        .await?;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = Api::<ServiceAccount>::namespaced(admin, ns.name())
        .create_token_request(name, &pp, &request)
        .await?
        .status
        .map(|s| s.token)
        .unwrap_or_default();
    let path = std::env::var("KUBECONFIG")?;
    let mut yaml: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(path)?)?;
    for user in yaml["users"].as_sequence_mut().into_iter().flatten() {
        user["user"] = serde_yaml::to_value(json!({ "token": token }))?;
    }
    let kubeconfig = Kubeconfig::from_yaml(&serde_yaml::to_string(&yaml)?)?;
    Ok(kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?)
}

#[tokio::test]
async fn a_lease_the_account_may_not_touch_is_warned_about_and_reported() -> anyhow::Result<()> {
    let logs = Logs::installed();
    let (ns, _api) = example_namespace().await?;
    let journal = Journal::default();
    let config = without_lease_rbac(&ns).await?;
    let lease = "kopf-tests-forbidden";
    let op = operator(&ns, &["twin-daemon"])
        .await?
        .kube_config(config)
        .health_addr(([127, 0, 0, 1], 0).into())
        .data(journal.clone())
        .data(Replica("a"))
        .leader_election(elected(lease, ns.name(), "forbidden"))
        .start()
        .await?;
    // The account works for the objects: the replica gets ready (a standby with warm caches).
    op.ready().await;
    wait_until("a failed attempt", PROMPTLY, || async {
        op.stats().leadership.is_some_and(|l| l.lease_errors >= 1)
    })
    .await;
    let error = op.stats().leadership.and_then(|l| l.lease_error);
    let error = error.unwrap_or_default();
    assert!(
        error.contains("forbidden: the replica's account needs"),
        "{error}"
    );
    let needle = format!("{}/{lease}", ns.name());
    let warnings: Vec<_> = logs
        .lines_with("the Lease cannot be read or written")
        .into_iter()
        .filter(|l| l.contains(&needle))
        .collect();
    assert!(
        warnings
            .iter()
            .any(|l| l.contains("WARN") && l.contains("forbidden")),
        "{warnings:?}"
    );
    let ready = scrape(&op, "/readyz").await;
    assert!(
        ready.contains(&format!("lease {needle}: cannot be read")),
        "{ready}"
    );
    let metrics = scrape(&op, "/metrics").await;
    assert!(metrics.contains("\nkopf_lease_failing 1\n"), "{metrics}");
    // It never leads. (The positive control, a replica whose election works, is in the test
    // above.)
    assert_eq!(role(&op), Some(Role::Standby));
    op.shutdown().await;
    Ok(())
}
