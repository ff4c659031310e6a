//! Faults between the operator and a real API server, injected by a proxy: throttling with
//! `Retry-After`, conflicts, failed guards and server errors on writes, a write error returned to
//! a daemon's flush, and a watch that goes down while objects are deleted and created.

mod operator_common;

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use kopf_examples::crd::KopfExample;
use kopf_runtime::{Data, Patch, Stopper, daemon};
use kopf_tests::proxy::{Fault, FaultProxy, Match, Rule};
use kopf_tests::{TestNamespace, test_config, wait_until};
use kube::api::PatchParams;
use operator_common::*;
use serde_json::json;

#[daemon(id = "faults-daemon")]
async fn faults_daemon(obj: Arc<KopfExample>, stopper: Stopper, journal: Data<Journal>) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    journal.record(&name, "started");
    stopper.stopped().await;
    journal.record(&name, format!("stopped: {:?}", stopper.reason()));
}

/// Flushes `status.attempt` until one flush succeeds, recording each outcome.
#[daemon(id = "faults-flush")]
async fn faults_flush(
    obj: Arc<KopfExample>,
    stopper: Stopper,
    patch: Patch,
    journal: Data<Journal>,
) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    for attempt in 1..=3 {
        patch.status("attempt", attempt);
        match patch.flush().await {
            Ok(()) => {
                journal.record(&name, format!("flushed #{attempt}"));
                break;
            }
            Err(err) => journal.record(
                &name,
                format!("flush #{attempt} failed: gone={} {}", err.gone, err.message),
            ),
        }
    }
    stopper.stopped().await;
    journal.record(&name, "stopped");
}

async fn proxied(
    ns: &TestNamespace,
    ids: &[&str],
    journal: &Journal,
) -> anyhow::Result<(FaultProxy, kopf_runtime::Operator)> {
    let proxy = FaultProxy::start(&test_config().await?).await?;
    let op = operator(ns, ids)
        .await?
        .kube_config(proxy.config())
        .data(journal.clone())
        .start()
        .await?;
    Ok((proxy, op))
}

/// The requests of `method` whose path contains `needle`, with the fault each got.
fn requests(
    proxy: &FaultProxy,
    method: &Method,
    needle: &str,
) -> Vec<(std::time::Instant, Option<u16>)> {
    let log = proxy.handle().log();
    log.into_iter()
        .filter(|r| r.method == *method && r.path.contains(needle))
        .map(|r| (r.at, r.fault.and_then(|f| f.status_code())))
        .collect()
}

#[tokio::test]
async fn throttled_writes_wait_at_least_the_servers_retry_after() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let (proxy, op) = proxied(&ns, &["faults-flush"], &journal).await?;
    proxy.handle().inject(
        Rule::new(
            Match::method(Method::PATCH).path("/kopfexamples/slow/status"),
            Fault::too_many_requests(2),
        )
        .times(1),
    );

    create(&api, "slow", "a").await?;
    journal.wait_for("slow", "flushed #1", 1).await;
    wait_status(&api, "slow", "attempt", json!(1)).await;
    let patches = requests(&proxy, &Method::PATCH, "/kopfexamples/slow/status");
    // The first is throttled; the retry (and a re-read after a conflict, if the object changed
    // meanwhile) come no earlier than Retry-After.
    assert_eq!(patches[0].1, Some(429), "{patches:?}");
    assert!(
        patches.len() >= 2 && patches[1..].iter().all(|(_, f)| f.is_none()),
        "{patches:?}"
    );
    let waited = patches[1].0 - patches[0].0;
    assert!(
        waited >= Duration::from_secs(2),
        "retried after {waited:?}, before Retry-After: 2"
    );

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn failed_guards_conflicts_and_server_errors_on_finalizer_writes_are_retried()
-> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let (proxy, op) = proxied(&ns, &["faults-daemon"], &journal).await?;
    let finalizer_patch = || Match::method(Method::PATCH).path("/kopfexamples/guarded?");
    for fault in [
        Fault::failed_test_guard(),
        Fault::conflict(),
        Fault::internal_error(),
        Fault::unavailable(),
    ] {
        proxy
            .handle()
            .inject(Rule::new(finalizer_patch(), fault).times(1));
    }

    create(&api, "guarded", "a").await?;
    journal.wait_for("guarded", "started", 1).await;
    wait_finalizer(&api, "guarded", true).await;
    let patches = requests(&proxy, &Method::PATCH, "/kopfexamples/guarded?");
    let faults: Vec<_> = patches.iter().map(|(_, f)| *f).collect();
    assert_eq!(faults, [Some(422), Some(409), Some(500), Some(503), None]);
    assert_eq!(
        journal.of("guarded"),
        ["started"],
        "the daemon was not disturbed"
    );

    // Removal is retried the same way.
    for fault in [Fault::unavailable(), Fault::failed_test_guard()] {
        proxy
            .handle()
            .inject(Rule::new(finalizer_patch(), fault).times(1));
    }
    delete(&api, "guarded").await?;
    wait_gone(&api, "guarded").await;
    assert_eq!(
        journal.of("guarded"),
        ["started", "stopped: StopReason(RESOURCE_DELETED)"]
    );

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn a_flush_that_fails_returns_the_error_to_the_daemon_which_keeps_running()
-> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let (proxy, op) = proxied(&ns, &["faults-flush"], &journal).await?;
    let bad = Rule::new(
        Match::method(Method::PATCH).path("/kopfexamples/refused/status"),
        Fault::status(400, "BadRequest"),
    );
    proxy.handle().inject(bad.times(1));

    create(&api, "refused", "a").await?;
    journal.wait_for("refused", "flushed #2", 1).await;
    let first = &journal.of("refused")[0];
    assert!(first.starts_with("flush #1 failed: gone=false"), "{first}");
    wait_status(&api, "refused", "attempt", json!(2)).await;
    assert_eq!(journal.count("refused", "stopped"), 0, "still running");

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn objects_deleted_and_created_while_the_watch_was_down_are_noticed_on_relist()
-> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let (proxy, op) = proxied(&ns, &["faults-daemon"], &journal).await?;
    for name in ["stays", "vanishes"] {
        create(&api, name, "a").await?;
        journal.wait_for(name, "started", 1).await;
        wait_finalizer(&api, name, true).await;
    }

    // Take the watch down and keep it down.
    let stall = proxy
        .handle()
        .inject(Rule::new(Match::watches(), Fault::Stall));
    proxy.handle().drop_connections();
    // Meanwhile: one object is force-deleted (its finalizer stripped), another is created.
    let strip = json!({"metadata": {"finalizers": null}});
    api.patch(
        "vanishes",
        &PatchParams::default(),
        &kube::api::Patch::Merge(&strip),
    )
    .await?;
    delete(&api, "vanishes").await?;
    wait_gone(&api, "vanishes").await;
    create(&api, "newcomer", "b").await?;
    assert_eq!(
        journal.count("vanishes", "stopped: StopReason(RESOURCE_DELETED)"),
        0
    );
    assert_eq!(journal.count("newcomer", "started"), 0);

    // The watch comes back with 410 Gone: the operator relists and compares by UID.
    proxy.handle().remove(stall);
    proxy
        .handle()
        .inject(Rule::new(Match::watches(), Fault::WatchGone).times(1));
    proxy.handle().drop_connections();
    journal
        .wait_for("vanishes", "stopped: StopReason(RESOURCE_DELETED)", 1)
        .await;
    journal.wait_for("newcomer", "started", 1).await;
    wait_finalizer(&api, "newcomer", true).await;
    assert_eq!(
        journal.of("stays"),
        ["started"],
        "a surviving object's daemon runs on, once"
    );
    assert!(
        proxy
            .handle()
            .log()
            .iter()
            .any(|r| r.fault == Some(Fault::WatchGone)),
        "the relist path was taken"
    );

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

/// A ValidatingAdmissionPolicy (and its binding) that rejects, with 422, every update of the
/// object `name` in `ns` that changes its finalizers: a persistent rejection of the operator's
/// finalizer writes, as a CEL rule of a real cluster would make.
struct FinalizerPolicy {
    name: String,
    client: kube::Client,
}

impl FinalizerPolicy {
    async fn install(ns: &TestNamespace, name: &str) -> anyhow::Result<Self> {
        use kube::api::{Api, DynamicObject, PostParams};
        let client = client().await;
        let policy_name = format!("kopf-test-{}-{name}", ns.name());
        let expression = format!(
            "object.metadata.namespace != '{}' || object.metadata.name != '{name}' || \
             object.metadata.?finalizers.orValue([]) == oldObject.metadata.?finalizers.orValue([])",
            ns.name()
        );
        let policy: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": policy_name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": ["kopf.dev"], "apiVersions": ["*"],
                    "operations": ["UPDATE"], "resources": ["kopfexamples"],
                }]},
                "validations": [{"expression": expression, "message": "finalizers are frozen"}],
            },
        }))?;
        let binding: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": policy_name},
            "spec": {"policyName": policy_name, "validationActions": ["Deny"]},
        }))?;
        for (obj, plural, kind) in [
            (
                policy,
                "validatingadmissionpolicies",
                "ValidatingAdmissionPolicy",
            ),
            (
                binding,
                "validatingadmissionpolicybindings",
                "ValidatingAdmissionPolicyBinding",
            ),
        ] {
            let api: Api<DynamicObject> =
                Api::all_with(client.clone(), &Self::resource(plural, kind));
            api.create(&PostParams::default(), &obj).await?;
        }
        Ok(Self {
            name: policy_name,
            client,
        })
    }

    fn resource(plural: &str, kind: &str) -> kube::api::ApiResource {
        let gvk = kube::core::GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
        kube::api::ApiResource::from_gvk_with_plural(&gvk, plural)
    }

    async fn remove(self) -> anyhow::Result<()> {
        use kube::api::{Api, DeleteParams, DynamicObject};
        for (plural, kind) in [
            (
                "validatingadmissionpolicybindings",
                "ValidatingAdmissionPolicyBinding",
            ),
            ("validatingadmissionpolicies", "ValidatingAdmissionPolicy"),
        ] {
            let api: Api<DynamicObject> =
                Api::all_with(self.client.clone(), &Self::resource(plural, kind));
            api.delete(&self.name, &DeleteParams::default()).await?;
        }
        Ok(())
    }
}

/// Whether the API server rejects a (dry-run) removal of the object's finalizers now.
async fn finalizer_changes_rejected(api: &kube::Api<KopfExample>, name: &str) -> bool {
    let patch = json!({"metadata": {"finalizers": null}});
    let params = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    matches!(
        api.patch(name, &params, &kube::api::Patch::Merge(&patch)).await,
        Err(kube::Error::Api(ref s)) if s.code == 422
    )
}

#[tokio::test]
async fn a_persistent_rejection_of_the_finalizer_removal_backs_off_and_is_resynced()
-> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let (proxy, op) = proxied(&ns, &["faults-daemon"], &journal).await?;
    for name in ["stuck", "control"] {
        create(&api, name, "a").await?;
        wait_finalizer(&api, name, true).await;
    }
    let policy = FinalizerPolicy::install(&ns, "stuck").await?;
    wait_until("the admission policy to take effect", PROMPTLY, || {
        finalizer_changes_rejected(&api, "stuck")
    })
    .await;

    let removals = || requests(&proxy, &Method::PATCH, "/kopfexamples/stuck?").len() - 1;
    delete(&api, "stuck").await?;
    delete(&api, "control").await?;
    wait_gone(&api, "control").await; // positive control: other objects are served
    journal
        .wait_for("stuck", "stopped: StopReason(RESOURCE_DELETED)", 1)
        .await;
    // Every removal is rejected (422). Without a backoff the sync re-read and re-sent at once,
    // hundreds of times a second.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let early = removals();
    assert!(
        (2..=10).contains(&early),
        "{early} removals in the first 5 s"
    );
    // A job tries 9 times (~20-45 s with jitter), then gives up; the re-sync tries again.
    let what = "the removal to be tried again after the job gave up";
    wait_until(what, Duration::from_secs(120), || async { removals() > 9 }).await;
    assert!(!finalizers(&api, "stuck").await.is_empty());

    policy.remove().await?;
    wait_until(
        "the stuck object to be gone once the policy is gone",
        Duration::from_secs(90),
        || async { api.get_opt("stuck").await.is_ok_and(|o| o.is_none()) },
    )
    .await;
    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn a_persistent_503_is_retried_by_one_layer_and_every_attempt_is_counted()
-> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let (proxy, op) = proxied(&ns, &["faults-daemon"], &journal).await?;
    proxy.handle().inject(Rule::new(
        Match::method(Method::PATCH).path("/kopfexamples/sick?"),
        Fault::unavailable(),
    ));
    create(&api, "sick", "a").await?;
    let since = std::time::Instant::now();
    create(&api, "healthy", "a").await?;
    wait_finalizer(&api, "healthy", true).await; // positive control: others are served
    journal.wait_for("healthy", "started", 1).await;
    let attempts = || requests(&proxy, &Method::PATCH, "/kopfexamples/sick?").len();
    wait_until(
        "the first attempts at the sick object",
        PROMPTLY,
        || async { attempts() >= 3 },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(8).saturating_sub(since.elapsed())).await;
    // The job's own retries: 8 attempts over 20-45 s (backoff from 0.2 s, with jitter). With
    // kube's retry underneath, each of them was retried again (~4 HTTP attempts each).
    let seen = attempts();
    assert!(
        (3..=8).contains(&seen),
        "{seen} attempts at the proxy in 8 s"
    );
    // Every HTTP attempt went through the operator's counting layer.
    let counted = op.stats().requests.map_or(0, |r| r.total);
    let received = proxy.handle().counters().requests;
    assert!(
        received <= counted,
        "the proxy saw {received} requests, the operator counted {counted}"
    );
    assert!(finalizers(&api, "sick").await.is_empty());
    assert!(
        journal.of("sick").is_empty(),
        "a daemon started without its finalizer"
    );

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}
