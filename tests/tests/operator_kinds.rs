//! Resource kinds against a real API server: a cluster-scoped CRD, a CRD that is missing at
//! start-up (reported, the other kinds served, served itself once installed, with a warning
//! about a schema that would prune results), and the health probes.

mod operator_common;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kopf_examples::crd::{KopfCluster, KopfClusterSpec, KopfExample};
use kopf_runtime::stats::WatchPhase;
use kopf_runtime::{Data, Stopper, daemon, timer};
use kopf_tests::proxy::{Fault, FaultProxy, Match, Rule};
use kopf_tests::{install_crd, is_not_found, test_config, wait_until};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{CustomResource, CustomResourceExt as _};
use operator_common::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A resource whose CRD is installed only in the middle of a test. Its status schema declares
/// `phase` only, so a handler's result under `status.<id>` would be pruned.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "ghost.kopf.dev",
    version = "v1",
    kind = "Ghost",
    plural = "ghosts",
    namespaced,
    status = "GhostStatus"
)]
struct GhostSpec {
    #[serde(default)]
    size: u32,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
struct GhostStatus {
    #[serde(default)]
    phase: Option<String>,
}

#[daemon(id = "kinds-ghost")]
async fn kinds_ghost(obj: Arc<Ghost>, stopper: Stopper, journal: Data<Journal>) {
    journal.record(obj.metadata.name.as_deref().unwrap_or_default(), "started");
    stopper.stopped().await;
}

#[daemon(id = "kinds-example")]
async fn kinds_example(obj: Arc<KopfExample>, stopper: Stopper, journal: Data<Journal>) {
    journal.record(obj.metadata.name.as_deref().unwrap_or_default(), "started");
    stopper.stopped().await;
}

#[timer(id = "kinds-cluster", interval = "1s")]
async fn kinds_cluster(
    obj: Arc<KopfCluster>,
    journal: Data<Journal>,
) -> Result<String, std::io::Error> {
    journal.record(obj.metadata.name.as_deref().unwrap_or_default(), "tick");
    Ok("cluster-wide".to_owned())
}

async fn delete_ghost_crd() -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client().await);
    let name = "ghosts.ghost.kopf.dev";
    match crds.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    wait_until("the Ghost CRD to be deleted", PROMPTLY, || async {
        matches!(crds.get(name).await, Err(ref e) if is_not_found(e))
    })
    .await;
    Ok(())
}

#[tokio::test]
async fn a_missing_crd_is_reported_and_served_once_installed() -> anyhow::Result<()> {
    let logs = Logs::installed();
    delete_ghost_crd().await?;
    let (mut ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let op = operator(&ns, &["kinds-ghost", "kinds-example"])
        .await?
        .data(journal.clone())
        .start()
        .await?;

    let ghost_phase = || {
        op.stats()
            .kinds
            .iter()
            .find(|k| k.resource.kind == "Ghost")
            .map(|k| k.phase)
    };
    wait_until(
        "the Ghost kind to be reported unavailable",
        PROMPTLY,
        || async { ghost_phase() == Some(WatchPhase::Unavailable) },
    )
    .await;
    let reported = logs.lines_with("ghosts.v1.ghost.kopf.dev is not installed");
    assert!(!reported.is_empty(), "no error names the missing resource");
    assert!(reported[0].contains("ERROR"), "{reported:?}");

    // The other kind is served meanwhile.
    create(&api, "served", "a").await?;
    journal.wait_for("served", "started", 1).await;

    install_crd(&client().await, &Ghost::crd()).await?;
    ns.strip_finalizers_of::<Ghost>();
    let ghosts: Api<Ghost> = Api::namespaced(client().await, ns.name());
    ghosts
        .create(
            &PostParams::default(),
            &Ghost::new("boo", GhostSpec { size: 1 }),
        )
        .await?;
    journal.wait_for("boo", "started", 1).await;
    assert_eq!(ghost_phase(), Some(WatchPhase::Watching));
    wait_until(
        "a warning that status.kinds-ghost would be pruned",
        PROMPTLY,
        || async {
            logs.lines_with("prune `status.kinds-ghost`")
                .iter()
                .any(|l| l.contains("WARN"))
        },
    )
    .await;
    assert_eq!(
        logs.lines_with("prune `status.kinds-ghost`").len(),
        1,
        "warned once"
    );

    op.shutdown().await;
    ns.cleanup().await?;
    delete_ghost_crd().await?;
    Ok(())
}

#[tokio::test]
async fn a_cluster_scoped_resource_is_served() -> anyhow::Result<()> {
    install_crd(&client().await, &KopfCluster::crd()).await?;
    let (ns, _) = example_namespace().await?;
    let journal = Journal::default();
    let selector = format!("kopf-test={}", ns.name());
    let op = operator(&ns, &["kinds-cluster"])
        .await?
        .label_selector(&selector)
        .data(journal.clone())
        .start()
        .await?;

    let api: Api<KopfCluster> = Api::all(client().await);
    let name = format!("{}-wide", ns.name());
    let mut obj = KopfCluster::new(&name, KopfClusterSpec::default());
    obj.metadata.labels = Some([("kopf-test".to_owned(), ns.name().to_owned())].into());
    api.create(&PostParams::default(), &obj).await?;

    journal.wait_for(&name, "tick", 2).await;
    wait_until("the cluster-wide result in status", PROMPTLY, || async {
        let obj = api.get_opt(&name).await.ok().flatten();
        let status = obj
            .and_then(|o| serde_json::to_value(o.status).ok())
            .unwrap_or_default();
        status.get("kinds-cluster") == Some(&serde_json::json!("cluster-wide"))
    })
    .await;
    let finalizers = api
        .get(&name)
        .await?
        .metadata
        .finalizers
        .unwrap_or_default();
    assert_eq!(finalizers, [FINALIZER]);

    api.delete(&name, &DeleteParams::default()).await?;
    wait_until("the cluster-wide object to be gone", PROMPTLY, || async {
        matches!(api.get(&name).await, Err(ref e) if is_not_found(e))
    })
    .await;
    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

/// Blocking daemons of two kinds, each running on a dedicated thread until stopped.
#[daemon(id = "kinds-blocking-example")]
#[allow(clippy::needless_pass_by_value)] // handler parameters are injected by value
fn kinds_blocking_example(obj: Arc<KopfExample>, stopper: Stopper, journal: Data<Journal>) {
    journal.record(obj.metadata.name.as_deref().unwrap_or_default(), "thread");
    while !stopper.wait(Duration::from_secs(60)) {}
}

#[daemon(id = "kinds-blocking-cluster")]
#[allow(clippy::needless_pass_by_value)] // handler parameters are injected by value
fn kinds_blocking_cluster(obj: Arc<KopfCluster>, stopper: Stopper, journal: Data<Journal>) {
    journal.record(obj.metadata.name.as_deref().unwrap_or_default(), "thread");
    while !stopper.wait(Duration::from_secs(60)) {}
}

#[tokio::test]
async fn every_kind_shares_one_cap_on_blocking_threads() -> anyhow::Result<()> {
    install_crd(&client().await, &KopfCluster::crd()).await?;
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let selector = format!("kopf-test={}", ns.name());
    let op = operator(&ns, &["kinds-blocking-example", "kinds-blocking-cluster"])
        .await?
        .label_selector(&selector)
        .max_blocking_threads(1)
        .data(journal.clone())
        .start()
        .await?;
    let labels = [("kopf-test", ns.name())];
    create_with(&api, "first", &[], &labels).await?;
    journal.wait_for("first", "thread", 1).await;
    let clusters: Api<KopfCluster> = Api::all(client().await);
    let name = format!("{}-second", ns.name());
    let mut obj = KopfCluster::new(&name, KopfClusterSpec::default());
    obj.metadata.labels = Some([("kopf-test".to_owned(), ns.name().to_owned())].into());
    clusters.create(&PostParams::default(), &obj).await?;
    // The other kind's daemon waits for the one thread (it had a pool of its own before).
    let queued = || {
        op.stats()
            .kinds
            .iter()
            .map(|k| k.supervisor.daemons_queued)
            .sum::<usize>()
    };
    wait_until("the second kind's daemon to queue", PROMPTLY, || async {
        queued() == 1
    })
    .await;
    assert!(
        journal.of(&name).is_empty(),
        "two threads under a cap of one"
    );
    // Positive control: once the first one's object is gone, the queued one gets the thread.
    api.delete("first", &DeleteParams::default()).await?;
    journal.wait_for(&name, "thread", 1).await;

    clusters.delete(&name, &DeleteParams::default()).await?;
    wait_until("the cluster-wide object to be gone", PROMPTLY, || async {
        matches!(clusters.get(&name).await, Err(ref e) if is_not_found(e))
    })
    .await;
    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn health_probes_report_liveness_and_the_initial_list() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    create(&api, "listed", "a").await?;
    let proxy = FaultProxy::start(&test_config().await?).await?;
    // Hold the operator's initial list until released.
    let stall = proxy.handle().inject(Rule::new(
        Match::method(http::Method::GET)
            .path("/kopfexamples")
            .watch(false),
        Fault::Stall,
    ));
    let journal = Journal::default();
    let op = operator(&ns, &["kinds-example"])
        .await?
        .kube_config(proxy.config())
        .health_addr(([127, 0, 0, 1], 0).into())
        .data(journal.clone())
        .start()
        .await?;
    let addr = op.health_addr().expect("a probe address was configured");

    assert_eq!(probe(addr, "/healthz").await?, (200, "ok\n".to_owned()));
    let (code, body) = probe(addr, "/readyz").await?;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("kopfexamples.v1.kopf.dev"), "{body}");
    assert!(!op.is_ready());

    proxy.handle().remove(stall);
    proxy.handle().release_stalled();
    journal.wait_for("listed", "started", 1).await;
    wait_until("/readyz to answer 200", PROMPTLY, || async {
        probe(addr, "/readyz")
            .await
            .map(|(c, _)| c)
            .unwrap_or_default()
            == 200
    })
    .await;

    op.shutdown().await;
    wait_until(
        "the probe server to stop",
        Duration::from_secs(10),
        || async { probe(addr, "/healthz").await.is_err() },
    )
    .await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn an_object_leaving_the_label_selector_is_released() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let op = operator(&ns, &["kinds-example"])
        .await?
        .label_selector("managed=yes")
        .data(journal.clone())
        .start()
        .await?;

    create_with(&api, "selected", &[], &[("managed", "yes")]).await?;
    create_with(&api, "ignored", &[], &[("managed", "no")]).await?;
    journal.wait_for("selected", "started", 1).await;
    wait_finalizer(&api, "selected", true).await;
    // The other object is outside the selector: the operator never sees it.
    assert!(journal.of("ignored").is_empty());
    assert!(finalizers(&api, "ignored").await.is_empty());

    set_label(&api, "selected", "managed", Some("no")).await?;
    wait_finalizer(&api, "selected", false).await; // released: it is no longer the operator's
    assert_eq!(op.stats().kinds[0].supervisor.objects, 0);

    // Back in the selector: served again (a daemon and the finalizer), without a restart.
    set_label(&api, "selected", "managed", Some("yes")).await?;
    journal.wait_for("selected", "started", 2).await;
    wait_finalizer(&api, "selected", true).await;
    assert_eq!(op.stats().kinds[0].supervisor.objects, 1);
    // And a real deletion still completes, and nothing starts for it again.
    api.delete("selected", &DeleteParams::default()).await?;
    wait_until("the object to be deleted", PROMPTLY, || async {
        api.get_opt("selected").await.is_ok_and(|o| o.is_none())
    })
    .await;
    create_with(&api, "control", &[], &[("managed", "yes")]).await?;
    journal.wait_for("control", "started", 1).await;
    assert_eq!(
        journal
            .of("selected")
            .iter()
            .filter(|e| *e == "started")
            .count(),
        2
    );

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn several_namespaces_are_watched_and_no_other() -> anyhow::Result<()> {
    let (ns_a, api_a) = example_namespace().await?;
    let (ns_b, api_b) = example_namespace().await?;
    let (ns_c, api_c) = example_namespace().await?;
    let journal = Journal::default();
    let op = operator(&ns_a, &["kinds-example"])
        .await?
        .namespaces([ns_a.name(), ns_b.name()])
        .data(journal.clone())
        .start()
        .await?;

    create(&api_c, "outside", "c").await?;
    create(&api_a, "in-a", "a").await?;
    create(&api_b, "in-b", "b").await?;
    journal.wait_for("in-a", "started", 1).await;
    journal.wait_for("in-b", "started", 1).await;
    wait_finalizer(&api_a, "in-a", true).await;
    wait_finalizer(&api_b, "in-b", true).await;
    assert!(journal.of("outside").is_empty());
    assert!(finalizers(&api_c, "outside").await.is_empty());
    assert_eq!(op.stats().kinds[0].objects, 2);

    op.shutdown().await;
    for ns in [ns_a, ns_b, ns_c] {
        ns.cleanup().await?;
    }
    Ok(())
}
